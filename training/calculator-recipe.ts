// The calculator tool-use recipe: a short supervised warm start on demonstrations where only a
// fifth of the episodes call the tool, then GRPO, which has to discover that calling it pays.
import { parseRunConfig, type RunConfig, type RunConfigInput } from '../config/run-config';
import { RolloutEngine } from '../engines/rollout';
import { Trainer } from '../engines/trainer';
import type { PolicyWeights } from '../engines/model';
import { calculatorTask } from '../envs/calculator';
import { evaluateGreedy } from './evaluate';
import { policyModelConfig } from './policy';
import { sftWarmStart } from './sft';

export const CALCULATOR_GRPO: RunConfigInput = {
  task: 'calculator',
  seed: 0,
  model: { d_model: 64, n_layers: 2, n_heads: 8, d_ff: 256, context_length: 32 },
  algorithm: { group_size: 8, entropy_coef: 0.01 },
  rollout: { prompts_per_step: 64, max_new_tokens: 8 },
  train: { steps: 100, lr: 1e-3, warmup_steps: 5, lr_decay: 'cosine', micro_batch: 256, eval_every: 10 },
};

export interface CalculatorWarmStart {
  weights: PolicyWeights;
  accuracy: number;
  toolUse: number;
}

/** `sftSteps` supervised steps on the calculator's demonstrations (no accuracy band: a fixed budget). */
export async function calculatorWarmStart(config: RunConfig, sftSteps: number): Promise<CalculatorWarmStart> {
  const model = policyModelConfig(config.model, calculatorTask.tokenizer().vocabSize);
  const trainer = Trainer.create({ model, seed: config.seed, optimizer: { lr: 3e-3 }, microBatchSize: 64 });
  const engine = await RolloutEngine.create(model, { intraOpNumThreads: 1 });
  try {
    // band [0, 1] with an unreachable target: train all sftSteps, keep the last evaluation's weights.
    const r = await sftWarmStart({ task: calculatorTask, trainer, engine, seed: config.seed, batchSize: 64, maxSteps: sftSteps, evalEvery: sftSteps, band: [0, 1], target: 2, maxNewTokens: config.rollout.max_new_tokens });
    engine.setWeights(0, r.weights);
    const evaluation = await evaluateGreedy(engine, calculatorTask, calculatorTask.heldOut(), config.rollout.max_new_tokens);
    return { weights: r.weights, accuracy: evaluation.accuracy, toolUse: evaluation.metrics?.tool_use ?? 0 };
  } finally {
    trainer.dispose();
    await engine.release();
  }
}

export function calculatorConfig(overrides: { steps?: number; promptsPerStep?: number } = {}): RunConfig {
  return parseRunConfig({
    ...CALCULATOR_GRPO,
    rollout: { ...CALCULATOR_GRPO.rollout, ...(overrides.promptsPerStep ? { prompts_per_step: overrides.promptsPerStep } : {}) },
    train: { ...CALCULATOR_GRPO.train, ...(overrides.steps ? { steps: overrides.steps } : {}) },
  });
}
