// From a run's config (snake_case JSON) to the engines' options, once: the policy model's
// architecture and the trainer's optimizer, schedule and batching. (Sampling is rollout's:
// rollout/producers.ts samplingParams.)
import { TINY_POLICY_DEFAULTS, runContextLength, type RunConfig } from '../config/run-config';
import type { ModelConfig, PolicyWeights } from '../engines/model';
import type { TrainerOptions } from '../engines/trainer';

/** The tiny GPT a run config sizes (a pretrained model's config comes from training/policy-model.ts). */
export function policyModelConfig(model: RunConfig['model'], vocabSize: number): ModelConfig {
  return {
    vocabSize,
    dModel: model.d_model ?? TINY_POLICY_DEFAULTS.d_model,
    nLayers: model.n_layers ?? TINY_POLICY_DEFAULTS.n_layers,
    nHeads: model.n_heads ?? TINY_POLICY_DEFAULTS.n_heads,
    dFF: model.d_ff ?? TINY_POLICY_DEFAULTS.d_ff,
    contextLength: runContextLength(model),
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
    ...(config.lora ? { loraDropout: config.lora.dropout } : {}),
  };
}

/** The frozen reference policy (forward passes only, never stepped: its optimizer is unused). */
export function referenceTrainerOptions(model: ModelConfig, weights: PolicyWeights): TrainerOptions {
  return { model, weights, optimizer: { lr: 1 } };
}
