// The whole RL loop in one process over the engine library (no Temporal, no database): the
// reference implementation the durable workflow must match, and the baseline its overhead is
// measured against.
import type { RunConfig } from '../config/run-config';
import type { PolicyWeights } from '../engines/model';
import { RolloutEngine } from '../engines/rollout';
import { Trainer, trainSequenceFromSample, type TrainSequence, type TrainStepMetrics } from '../engines/trainer';
import { loadTask } from '../envs/registry';
import { evaluateGreedy } from './evaluate';
import { advantagesFor, batchAdvantages, informativeGroups, policyLossFor, rolloutGroups, samplingParams } from './grpo';
import { episodeRows } from './rollout-rows';
import { policyModelConfig } from './policy';

export interface StepReport {
  step: number;
  policyVersion: number;
  rewardMean: number;
  /** Held-out greedy accuracy, on evaluation steps. */
  accuracy?: number;
  /** Multi-turn tasks, on evaluation steps: the environments' numeric info averaged (e.g. tool_use). */
  evalMetrics?: Record<string, number>;
  samples: number;
  /** Samples in groups with a learning signal (trained on). */
  trainedSamples: number;
  metrics?: TrainStepMetrics;
  stepMs: number;
}

export interface LocalRunResult {
  initialAccuracy: number;
  finalAccuracy: number;
  curve: StepReport[];
  wallS: number;
  weights: PolicyWeights;
}

export async function runLocalGrpo(
  config: RunConfig,
  init: PolicyWeights,
  hooks: { onStep?: (r: StepReport) => void; evalEvery?: number } = {},
): Promise<LocalRunResult> {
  const started = performance.now();
  const task = await loadTask(config.task);
  const tokenizer = task.tokenizer();
  const model = policyModelConfig(config.model, tokenizer.vocabSize);
  const heldOut = task.heldOut();
  const G = config.algorithm.group_size;
  const trainer = Trainer.create({
    model,
    weights: init,
    optimizer: { lr: config.train.lr, weightDecay: config.train.weight_decay },
    schedule: { kind: config.train.lr_decay, warmupSteps: config.train.warmup_steps, totalSteps: config.train.steps },
    maxGradNorm: config.train.grad_clip,
    microBatchSize: config.train.micro_batch,
  });
  const engine = await RolloutEngine.create(model, { intraOpNumThreads: 1 });
  const loss = policyLossFor(config.algorithm);
  const evalEvery = hooks.evalEvery ?? config.train.eval_every;
  try {
    engine.setWeights(0, init);
    const initialAccuracy = (await evaluateGreedy(engine, task, heldOut, config.rollout.max_new_tokens)).accuracy;
    const curve: StepReport[] = [];
    let finalAccuracy = initialAccuracy;
    for (let step = 1; step <= config.train.steps; step++) {
      const t0 = performance.now();
      const prompts = task.trainPrompts(config.seed * 1_000_003 + step, config.rollout.prompts_per_step);
      const sampling = samplingParams(config.rollout, tokenizer.eosId, config.seed * 7_919 + step);
      let rewards: number[];
      let sequences: TrainSequence[];
      if (task.interaction) {
        // Multi-turn: episodes against the task's environment; failed episodes are left out.
        const rows = await episodeRows({ config, task, engine, sampling, seed: config.seed * 7_919 + step }, prompts);
        rewards = rows.map((r) => r.reward ?? 0);
        const kept = rows.map((r, i) => ({ r, i })).filter(({ r }) => r.reward !== null);
        const advantages = batchAdvantages(config.algorithm, kept.map(({ r, i }) => ({ groupKey: String(Math.floor(i / G)), reward: r.reward as number })));
        sequences = kept
          .map(({ r }, k) => ({ r, advantage: advantages[k] }))
          .filter(({ advantage }) => advantage !== 0)
          .map(({ r, advantage }) => trainSequenceFromSample(r.promptTokens, { tokens: r.responseTokens, logprobs: r.rolloutLogprobs }, { advantage, lossMask: r.lossMask }));
      } else {
        const batch = await rolloutGroups(engine, task, prompts, G, sampling);
        rewards = batch.rewards;
        const advantages = advantagesFor(config.algorithm.advantage, batch.rewards, G);
        sequences = informativeGroups(batch.rewards, G).flatMap((g) =>
          Array.from({ length: G }, (_, j) => g * G + j).map((i) => trainSequenceFromSample(batch.contexts[i], batch.samples[i], { advantage: advantages[i] })),
        );
      }
      const metrics = sequences.length ? await trainer.trainStep(sequences, loss) : undefined;
      engine.setWeights(step, await trainer.exportWeights());
      const report: StepReport = {
        step,
        policyVersion: step,
        rewardMean: rewards.reduce((a, b) => a + b, 0) / rewards.length,
        samples: rewards.length,
        trainedSamples: sequences.length,
        metrics,
        stepMs: performance.now() - t0,
      };
      if (step % evalEvery === 0 || step === config.train.steps) {
        const evaluation = await evaluateGreedy(engine, task, heldOut, config.rollout.max_new_tokens);
        report.accuracy = finalAccuracy = evaluation.accuracy;
        if (evaluation.metrics) report.evalMetrics = evaluation.metrics;
      }
      curve.push(report);
      hooks.onStep?.(report);
    }
    return { initialAccuracy, finalAccuracy, curve, wallS: (performance.now() - started) / 1000, weights: await trainer.exportWeights() };
  } finally {
    trainer.dispose();
    await engine.release();
  }
}
