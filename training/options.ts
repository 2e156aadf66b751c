// From a run's config (snake_case JSON) to the engines' options, once: the policy model's
// architecture and the trainer's optimizer, schedule and batching. (Sampling is rollout's:
// rollout/producers.ts samplingParams.)
import type { RunConfig } from '../config/run-config';
import type { ModelConfig, PolicyWeights } from '../engines/model';
import type { TrainerOptions } from '../engines/trainer';

export function policyModelConfig(model: RunConfig['model'], vocabSize: number): ModelConfig {
  return {
    vocabSize,
    dModel: model.d_model,
    nLayers: model.n_layers,
    nHeads: model.n_heads,
    dFF: model.d_ff,
    contextLength: model.context_length,
  };
}

/** The trainer a run trains with, starting from `weights`. */
export function trainerOptions(config: RunConfig, model: ModelConfig, weights: PolicyWeights): TrainerOptions {
  const t = config.train;
  return {
    model,
    weights,
    optimizer: { lr: t.lr, weightDecay: t.weight_decay },
    schedule: { kind: t.lr_decay, warmupSteps: t.warmup_steps, totalSteps: t.steps },
    maxGradNorm: t.grad_clip,
    microBatchSize: t.micro_batch,
  };
}

/** The frozen reference policy (forward passes only, never stepped: its optimizer is unused). */
export function referenceTrainerOptions(model: ModelConfig, weights: PolicyWeights): TrainerOptions {
  return { model, weights, optimizer: { lr: 1 } };
}
