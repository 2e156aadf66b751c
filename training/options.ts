// From a run's config (snake_case JSON) to the engines' options, once: the policy model's
// architecture and the trainer's optimizer, schedule and batching, and whether that trainer fits
// the wasm backend's heap and this machine's memory (RELAX_MAX_RUN_MEMORY_GB). (Sampling is rollout's:
// rollout/producers.ts samplingParams.)
import { formatBytes, memoryLimitText, runMemoryLimitBytes } from '../config/run-bounds';
import { TINY_POLICY_DEFAULTS, criticLearningRate, runContextLength, type RunConfig } from '../config/run-config';
import { nativeTfjsAvailable } from '../engines/backends';
import { withoutLora } from '../engines/lora';
import { parameterCount, shapeSize, trainableParameterSpec, type AudioConfig, type ModelConfig, type PolicyWeights } from '../engines/model';
import type { TrainerOptions } from '../engines/trainer';
import { singleTokenId } from '../engines/tokenizers/tokenizer';
import type { Task } from '../envs/task';

/** The tiny GPT a run config sizes (a pretrained model's config comes from training/policy-model.ts). */
export function policyModelConfig(model: RunConfig['model'], vocabSize: number, task?: Pick<Task, 'name' | 'tokenizer' | 'encoders' | 'contextLength'>): ModelConfig {
  const config: ModelConfig = {
    vocabSize,
    dModel: model.d_model ?? TINY_POLICY_DEFAULTS.d_model,
    nLayers: model.n_layers ?? TINY_POLICY_DEFAULTS.n_layers,
    nHeads: model.n_heads ?? TINY_POLICY_DEFAULTS.n_heads,
    dFF: model.d_ff ?? TINY_POLICY_DEFAULTS.d_ff,
    contextLength: model.context_length ?? task?.contextLength ?? runContextLength(model),
  };
  return { ...config, ...encoderConfigs(model, task) };
}

/** model.audio's window in log-mel frames (100 a second): window_s, else max_frames, else undefined (the task's default). */
export function audioWindowFrames(audio: RunConfig['model']['audio']): number | undefined {
  return audio?.window_s !== undefined ? Math.round(audio.window_s * 100) : audio?.max_frames;
}

/** A pretrained audio encoder's shape (engines/whisper.ts encoder.json), for model.audio.from. */
export type PretrainedAudioShape = Pick<AudioConfig, 'nMels' | 'dModel' | 'nLayers' | 'nHeads' | 'dFF' | 'gelu'>;

/**
 * The encoders of a run's model: the task's defaults overridden by model.vision / model.audio, with
 * the tokenizer's placeholder ids; with model.audio.from, the pretrained encoder's own shape (`pretrainedAudio`).
 */
export function encoderConfigs(model: RunConfig['model'], task?: Pick<Task, 'name' | 'tokenizer' | 'encoders'>, pretrainedAudio?: PretrainedAudioShape): Pick<ModelConfig, 'vision' | 'audio'> {
  const out: Pick<ModelConfig, 'vision' | 'audio'> = {};
  const placeholder = (text: string, section: string): number => {
    const id = task ? singleTokenId(task.tokenizer(), text) : undefined;
    if (id === undefined) throw new Error(`model.${section}: the task${task ? ` ${task.name}` : ''} has no single ${text} token to place its embeddings at: use a media task (e.g. vision-colour, audio-tone) or a tokenizer with ${text}`);
    return id;
  };
  const v = task?.encoders?.vision;
  if (v || model.vision) {
    const o = model.vision ?? {};
    const base = v ?? { patchSize: 8, maxPatches: 16, dModel: 32, nLayers: 1, nHeads: 4, dFF: 64 };
    out.vision = { patchSize: o.patch_size ?? base.patchSize, maxPatches: o.max_patches ?? base.maxPatches, dModel: o.d_model ?? base.dModel, nLayers: o.n_layers ?? base.nLayers, nHeads: o.n_heads ?? base.nHeads, dFF: o.d_ff ?? base.dFF, tokenId: placeholder('<image>', 'vision') };
  }
  const a = task?.encoders?.audio;
  if (a || model.audio) {
    const o = model.audio ?? {};
    const base = a ?? { nMels: 80, maxFrames: 200, dModel: 32, nLayers: 1, nHeads: 4, dFF: 64 };
    const maxFrames = audioWindowFrames(o) ?? base.maxFrames;
    const shape = pretrainedAudio ?? { nMels: o.n_mels ?? base.nMels, dModel: o.d_model ?? base.dModel, nLayers: o.n_layers ?? base.nLayers, nHeads: o.n_heads ?? base.nHeads, dFF: o.d_ff ?? base.dFF };
    out.audio = {
      ...shape,
      maxFrames,
      tokenId: placeholder('<audio>', 'audio'),
      ...(o.stack !== undefined ? { stack: o.stack } : {}),
      ...(o.projector_hidden !== undefined ? { projectorHidden: o.projector_hidden } : {}),
      ...(pretrainedAudio && o.train_encoder !== true ? { freeze: true } : {}),
    };
  }
  return out;
}

/** The trainer a run trains with, starting from `weights`. */
export function trainerOptions(config: RunConfig, model: ModelConfig, weights: PolicyWeights): TrainerOptions {
  const t = config.train;
  const valueHeadLr = criticLearningRate(config);
  return {
    model,
    weights,
    optimizer: { lr: t.lr, weightDecay: t.weight_decay },
    ...(valueHeadLr !== undefined ? { valueHeadLr } : {}),
    schedule: { kind: t.lr_decay, warmupSteps: t.warmup_steps, totalSteps: t.steps },
    maxGradNorm: t.grad_clip,
    microBatchSize: t.micro_batch,
    ...(t.micro_batch_tokens !== undefined ? { microBatchTokens: t.micro_batch_tokens } : {}),
    sharePrompts: t.share_prompts,
    gradientCheckpointing: t.gradient_checkpointing,
    ...(t.trainable ? { trainable: t.trainable } : {}),
    ...(config.lora ? { loraDropout: config.lora.dropout } : {}),
  };
}

/** The frozen reference policy (forward passes only, never stepped: its optimizer is unused). */
export function referenceTrainerOptions(model: ModelConfig, weights: PolicyWeights, sharePrompts = true): TrainerOptions {
  return { model, weights, optimizer: { lr: 1 }, sharePrompts };
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
export function trainerMemoryEstimate(model: ModelConfig, microBatch: number, backend: 'native' | 'wasm' = 'wasm'): TrainerMemoryEstimate {
  const all = parameterCount(withoutLora(model)) + trainableParameterSpec(model).filter((p) => p.adapter).reduce((n, p) => n + shapeSize(p.shape), 0);
  const trained = trainableParameterSpec(model).reduce((n, p) => n + shapeSize(p.shape), 0);
  const tokens = microBatch * model.contextLength;
  // tfjs keeps the forward's tensors for the backward pass. Measured on SmolLM2-135M (30 layers,
  // d_model 576, d_ff 1536, vocabulary 49,152): ~20 MB per token with the unfused vocabulary head
  // (wasm), ~7 MB (peak RSS) with the native backends' fused, chunked head (engines/vocab-head.ts);
  // these formulas reproduce both.
  const perToken =
    backend === 'wasm'
      ? model.nLayers * (150 * model.dModel + 40 * model.dFF + 4 * model.nHeads * model.contextLength) + 10 * model.vocabSize
      : model.nLayers * (50 * model.dModel + 14 * model.dFF + 4 * model.nHeads * model.contextLength) + model.vocabSize;
  const parts = { weights: 4 * all, packedWeights: 4 * all, optimizer: 12 * trained, activations: 4 * tokens * perToken };
  return { bytes: parts.weights + parts.packedWeights + parts.optimizer + parts.activations, parts };
}

/**
 * The most full-context sequences one micro-batch may hold: train.micro_batch, or fewer under a
 * train.micro_batch_tokens budget (a sequence longer than the budget still goes alone).
 */
export function microBatchSequences(config: RunConfig, model: ModelConfig): number {
  const budget = config.train.micro_batch_tokens;
  if (budget === undefined) return config.train.micro_batch;
  return Math.min(config.train.micro_batch, Math.max(1, Math.floor(budget / model.contextLength)));
}

/** Throws, with the estimate and what to change, when the run's trainer cannot fit the wasm heap. */
export function checkTrainerFitsWasm(config: RunConfig, model: ModelConfig): void {
  const estimate = trainerMemoryEstimate(model, microBatchSequences(config, model));
  if (estimate.bytes <= WASM_HEAP_LIMIT_BYTES) return;
  const gib = (b: number) => (b / 2 ** 30).toFixed(2);
  const p = estimate.parts;
  throw new Error(
    `train.micro_batch: the trainer needs about ${gib(estimate.bytes)} GiB (weights ${gib(p.weights)}, their packed copy ${gib(p.packedWeights)}, gradients + AdamW ${gib(p.optimizer)}, activations of ${microBatchSequences(config, model)} x ${model.contextLength} tokens ${gib(p.activations)}) but the tfjs wasm backend's heap holds 4 GiB: lower train.micro_batch or model.context_length, train LoRA adapters (lora), or install a native backend (@tensorflow/tfjs-node)`,
  );
}

/**
 * Throws, with the estimate and the limit, when the run's trainer (weights, gradients + AdamW
 * moments of what it trains, one micro-batch's activations) needs more than this worker allows:
 * RELAX_MAX_RUN_MEMORY_GB, default 75% of the machine's memory (config/run-bounds.ts). Called at
 * run start with the loaded model (a pretrained model's size is known only then). The message
 * starts with the field to change, like checkTrainerFitsWasm's.
 */
export function checkTrainerFitsMemory(config: RunConfig, model: ModelConfig, limitBytes = runMemoryLimitBytes()): void {
  const { parts } = trainerMemoryEstimate(model, microBatchSequences(config, model), nativeTfjsAvailable() ? 'native' : 'wasm');
  const bytes = parts.weights + parts.optimizer + parts.activations;
  if (bytes <= limitBytes) return;
  const what = config.model.from === undefined ? 'the tiny GPT' : `model.from ${JSON.stringify(config.model.from.slice(0, 80))}`;
  throw new Error(
    `train.micro_batch: ${what} has ~${(parameterCount(withoutLora(model)) as number).toPrecision(2)} parameters; its trainer needs ~${formatBytes(bytes)} ` +
      `(weights ${formatBytes(parts.weights)}, gradients + AdamW ${formatBytes(parts.optimizer)}, activations of ${microBatchSequences(config, model)} x ${model.contextLength} tokens ${formatBytes(parts.activations)}); ` +
      `${memoryLimitText(limitBytes)}: lower train.micro_batch (or train.micro_batch_tokens) or model.context_length, or train LoRA adapters (lora)`,
  );
}
