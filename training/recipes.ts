// Tuned starting points, as plain run configs: the quickstart, the benchmarks and the tests start
// from these and override what they need. The calculator recipe has its own short warm start on
// demonstrations where only a fifth of the episodes call the tool; GRPO then has to discover that
// calling it pays.
import { parseRunConfig, type RunConfig, type RunConfigInput } from '../config/run-config';
import type { PolicyWeights } from '../engines/model';
import { RolloutEngine } from '../engines/rollout';
import { Trainer } from '../engines/trainer';
import { calculatorTask } from '../envs/calculator';
import { evaluateGreedy } from '../rollout/evaluate';
import { policyModelConfig } from './options';
import { sftWarmStart } from './sft';
import type { SftRecipe } from './warm-start';

/** GRPO on add2 from an SFT warm start (tuned on the 2-core CPU machines, wasm backend). */
export const ADD2_GRPO: RunConfigInput = {
  task: 'add2',
  seed: 0,
  model: { d_model: 64, n_layers: 2, n_heads: 8, d_ff: 256, context_length: 16 },
  algorithm: { advantage: 'grpo', policy_loss: 'ppo_clip', group_size: 8, clip_low: 0.2, clip_high: 0.28, entropy_coef: 0.01 },
  rollout: { prompts_per_step: 128, max_new_tokens: 4, temperature: 1 },
  train: { steps: 500, lr: 1e-3, warmup_steps: 10, lr_decay: 'cosine', grad_clip: 1, micro_batch: 256, eval_every: 20 },
  checkpoint: { every: 20 },
};

/** The SFT warm start for ADD2_GRPO: lands inside the 20-60% held-out band the RL run starts from. */
export const ADD2_SFT: SftRecipe = { lr: 3e-3, batchSize: 64, maxSteps: 4000, evalEvery: 10, band: [0.2, 0.6], target: 0.55 };

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
