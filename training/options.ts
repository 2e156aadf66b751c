// From a run's config (snake_case JSON) to the engines' options, once: the policy model's
// architecture and the trainer's optimizer, schedule and batching, and whether that trainer fits
// the wasm backend's heap. (Sampling is rollout's:
// rollout/producers.ts samplingParams.)
import { TINY_POLICY_DEFAULTS, runContextLength, type RunConfig } from '../config/run-config';
import { withoutLora } from '../engines/lora';
import { parameterCount, shapeSize, trainableParameterSpec, type ModelConfig, type PolicyWeights } from '../engines/model';
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
    ...(t.micro_batch_tokens !== undefined ? { microBatchTokens: t.micro_batch_tokens } : {}),
    ...(config.lora ? { loraDropout: config.lora.dropout } : {}),
  };
}

/** The frozen reference policy (forward passes only, never stepped: its optimizer is unused). */
export function referenceTrainerOptions(model: ModelConfig, weights: PolicyWeights): TrainerOptions {
  return { model, weights, optimizer: { lr: 1 } };
}

/**
 * The tfjs wasm backend's heap is a 32-bit wasm memory: 4 GiB, measured here (4096 MiB of tensors
 * allocate, the next allocation fails). Native TensorFlow backends have no such cap.
 */
export const WASM_HEAP_LIMIT_BYTES = 4 * 2 ** 30;

export interface TrainerMemoryEstimate {
  bytes: number;
  parts: { weights: number; packedWeights: number; optimizer: number; activations: number };
}

/**
 * What a trainer of `model` needs on the wasm heap at micro-batch `microBatch` of full-context
 * sequences (an upper estimate): the weights, XNNPACK's packed copy of them for its matmuls,
 * gradient + AdamW moments of the trained parameters, and the micro-batch's activations kept for
 * the backward pass.
 */
export function trainerMemoryEstimate(model: ModelConfig, microBatch: number): TrainerMemoryEstimate {
  const all = parameterCount(withoutLora(model)) + trainableParameterSpec(model).filter((p) => p.adapter).reduce((n, p) => n + shapeSize(p.shape), 0);
  const trained = trainableParameterSpec(model).reduce((n, p) => n + shapeSize(p.shape), 0);
  const tokens = microBatch * model.contextLength;
  // tfjs keeps every op's output of the forward for the backward pass: measured ~20 MB per token on
  // SmolLM2-135M (30 layers, d_model 576, d_ff 1536), which this formula reproduces.
  const perToken = model.nLayers * (150 * model.dModel + 40 * model.dFF + 4 * model.nHeads * model.contextLength) + 10 * model.vocabSize;
  const parts = { weights: 4 * all, packedWeights: 4 * all, optimizer: 12 * trained, activations: 4 * tokens * perToken };
  return { bytes: parts.weights + parts.packedWeights + parts.optimizer + parts.activations, parts };
}

/** Throws, with the estimate and what to change, when the run's trainer cannot fit the wasm heap. */
export function checkTrainerFitsWasm(config: RunConfig, model: ModelConfig): void {
  const estimate = trainerMemoryEstimate(model, config.train.micro_batch);
  if (estimate.bytes <= WASM_HEAP_LIMIT_BYTES) return;
  const gib = (b: number) => (b / 2 ** 30).toFixed(2);
  const p = estimate.parts;
  throw new Error(
    `train.micro_batch: the trainer needs about ${gib(estimate.bytes)} GiB (weights ${gib(p.weights)}, their packed copy ${gib(p.packedWeights)}, gradients + AdamW ${gib(p.optimizer)}, activations of ${config.train.micro_batch} x ${model.contextLength} tokens ${gib(p.activations)}) but the tfjs wasm backend's heap holds 4 GiB: lower train.micro_batch or model.context_length, train LoRA adapters (lora), or install a native backend (@tensorflow/tfjs-node)`,
  );
}
