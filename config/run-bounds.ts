// The bounds of every size, count, coefficient and string of a run config, in ONE table: the
// schemas (config/run-config.ts, config/data-config.ts) are built from it, docs/configuration.md
// shows it, and the config fuzz test checks accepted configs against it. The table and its zod
// schemas live in config/bounded.ts (Node-free, shared with the workflow's hyperparameter
// validator) and are re-exported here. Plus the memory estimate of a tiny-GPT run (pure arithmetic
// on the config) and the limit it is checked against.
import { runMemoryLimitSource } from './environment-engines';

export {
  boundedNumber,
  boundedString,
  describeBound,
  LR_DECAY_KINDS,
  RUN_CONFIG_ARRAY_BOUNDS,
  RUN_CONFIG_BOUNDS,
  RUN_CONFIG_STRING_BOUNDS,
  withinBound,
  type BoundedPath,
  type NumberBound,
  type StringBoundedPath,
} from './bounded';

// ---------------------------------------------------------------------------------------------
// Memory

// The setting (RELAX_MAX_RUN_MEMORY_GB) and the limit it gives are read in config/environment-engines.ts.
export { RUN_MEMORY_SETTING, runMemoryLimitBytes } from './environment-engines';

/** The tiny GPT's vocabulary is the task's (known only when the task loads): estimated at this many tokens. */
export const TINY_VOCAB_ESTIMATE = 1024;

export interface TinyModelShape {
  dModel: number;
  nLayers: number;
  nHeads: number;
  dFF: number;
  contextLength: number;
}

export interface RunMemoryEstimate {
  parameters: number;
  /** Weights (4 bytes a parameter) + gradient and AdamW moments (12 bytes a parameter). */
  weightBytes: number;
  /** The activations kept for the backward pass of one micro-batch of full-context sequences. */
  activationBytes: number;
  bytes: number;
}

/**
 * The tiny GPT's parameters (embeddings, positions, per layer attention + MLP + norms, the output
 * head) and a trainer's memory at micro-batch `microBatch`: the same per-token activation formula
 * as training/options.ts trainerMemoryEstimate (measured on tfjs).
 */
export function tinyRunMemoryEstimate(m: TinyModelShape, microBatch: number, vocab = TINY_VOCAB_ESTIMATE): RunMemoryEstimate {
  const d = m.dModel;
  const perLayer = 4 * d * d + 2 * d * m.dFF + m.dFF + 9 * d;
  const parameters = 2 * vocab * d + m.contextLength * d + m.nLayers * perLayer + 2 * d;
  const perToken = m.nLayers * (150 * d + 40 * m.dFF + 4 * m.nHeads * m.contextLength) + 10 * vocab;
  const activationBytes = 4 * microBatch * m.contextLength * perToken;
  const weightBytes = 16 * parameters;
  return { parameters, weightBytes, activationBytes, bytes: weightBytes + activationBytes };
}

/** "26 TB", "3.1 GB", "512 MB": bytes in decimal units. */
export function formatBytes(bytes: number): string {
  const units: Array<[number, string]> = [[1e15, 'PB'], [1e12, 'TB'], [1e9, 'GB'], [1e6, 'MB'], [1e3, 'kB']];
  for (const [scale, unit] of units) if (bytes >= scale) return `${(bytes / scale).toPrecision(bytes / scale >= 100 ? 3 : 2)} ${unit}`;
  return `${Math.round(bytes)} B`;
}

/** What a refusal says about the limit: the number and where it comes from. */
export function memoryLimitText(limitBytes: number, env: NodeJS.ProcessEnv = process.env): string {
  return `this worker allows at most ${formatBytes(limitBytes)} (${runMemoryLimitSource(env)})`;
}

/** A tiny GPT run over `limitBytes`: the problem, naming the fields, the estimate and the limit; else undefined. */
export function tinyMemoryProblem(shape: TinyModelShape, microBatch: number, limitBytes: number): string | undefined {
  const e = tinyRunMemoryEstimate(shape, microBatch);
  if (e.bytes <= limitBytes) return undefined;
  return (
    `model.d_model: ${shape.dModel} with n_layers ${shape.nLayers}, d_ff ${shape.dFF}, context_length ${shape.contextLength} and train.micro_batch ${microBatch}: ` +
    `~${e.parameters.toPrecision(2)} parameters (vocabulary estimated at ${TINY_VOCAB_ESTIMATE}), ~${formatBytes(e.weightBytes)} of weights + optimizer state and ~${formatBytes(e.activationBytes)} of activations; ` +
    `${memoryLimitText(limitBytes)}: make the model or train.micro_batch smaller`
  );
}
