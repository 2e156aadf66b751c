// Data-parallel training, simulated on the CPU (docs/scaling.md): one train step's batch split across
// R ranks, each rank a Trainer (engines/trainer.ts) with the same weights and optimizer state, in this
// process (localRank) or in a worker thread of its own (training/data-parallel-thread.ts). A step:
//   1. shard: every rank computes the same split from the step's batch in its recorded order
//      (shardBounds: whole prompt groups, contiguous, balanced by tokens), a pure function of the
//      batch and (rank, R), so a retried rank computes its shard, and its gradient, again;
//   2. local gradients: each rank runs its shard's micro-batches (Trainer.gradients), each weighted
//      by its share of the WHOLE batch's totals (BatchTotals: loss tokens for token-mean losses,
//      sequences for sequence-mean ones), so rank r's gradient is (N_r / N) x its shard's own mean
//      gradient: the all-reduce is then a plain sum, and the sum is the full batch's gradient;
//   3. all-reduce: ringAllReduce (reduce-scatter, then all-gather, over R - 1 hops each: every rank
//      sends 2 (R - 1) / R of the gradient's bytes), here over arrays in memory;
//   4. update: every rank applies the same reduced gradient (Trainer.applyGradients: global-norm
//      clipping, AdamW), so the ranks' weights stay identical without any broadcast.
// On GPUs step 3 would be NCCL's all-reduce on device memory (docs/scaling.md says what exists for a
// Node process); the arithmetic and the bookkeeping are the same.
import { batchTotals, type BatchTotals } from '../engines/rl/losses';
import type { PolicyWeights } from '../engines/model';
import type { Trainer, TrainingLoss, TrainSequence, TrainStepOptions } from '../engines/trainer';

/** A rank's part of a step's gradient (Trainer.gradients): `loss` is its share of the batch loss. */
export interface ShardGradients {
  gradients: PolicyWeights;
  loss: number;
  lossTokens: number;
}

/** What a data-parallel step needs of a rank: its shard's gradient, the reduced gradient's update, its weights. */
export interface DataParallelRank {
  gradients(sequences: readonly TrainSequence[], options: TrainStepOptions): Promise<ShardGradients>;
  applyGradients(gradients: PolicyWeights): Promise<{ gradNorm: number; lr: number; step: number }>;
  exportWeights(): Promise<PolicyWeights>;
}

/** A rank in this process: a Trainer and the step's loss. */
export function localRank(trainer: Trainer, loss: TrainingLoss): DataParallelRank {
  return {
    gradients: (sequences, options) => trainer.gradients(sequences, loss, options),
    applyGradients: (gradients) => trainer.applyGradients(gradients, loss.name),
    exportWeights: () => trainer.exportWeights(),
  };
}

/** [start, end) of each rank's shard, in rank order. */
export type ShardBounds = Array<{ start: number; end: number }>;

/**
 * Splits items of `weights` (in order) into `parts` contiguous runs of near-equal weight: run k is
 * [bounds[k], bounds[k + 1]), each bound the prefix closest to k/parts of the total (the first on a
 * tie), never before the previous one. Runs may be empty (fewer items than parts).
 */
export function contiguousPartition(weights: readonly number[], parts: number): number[] {
  if (!(Number.isInteger(parts) && parts >= 1)) throw new Error(`parts must be an integer >= 1, got ${parts}`);
  const prefix = [0];
  for (const w of weights) {
    if (!(w >= 0)) throw new Error(`weights must be >= 0, got ${w}`);
    prefix.push(prefix[prefix.length - 1] + w);
  }
  const total = prefix[prefix.length - 1];
  const bounds = [0];
  for (let k = 1; k < parts; k++) {
    const target = (total * k) / parts;
    let best = bounds[k - 1];
    for (let i = best + 1; i <= weights.length; i++) if (Math.abs(prefix[i] - target) < Math.abs(prefix[best] - target)) best = i;
    bounds.push(best);
  }
  bounds.push(weights.length);
  return bounds;
}

/**
 * Each rank's shard of a step's batch, in the batch's recorded order (the transfer queue returns a
 * step's samples ordered by iteration, group, index, the same on every read): whole groups
 * (consecutive sequences with the same `groups` key, a GRPO prompt's samples, whose prompt a
 * micro-batch computes once), contiguous, balanced by tokens. A pure function of its arguments.
 */
export function shardBounds(sequences: ReadonlyArray<Pick<TrainSequence, 'tokens'>>, worldSize: number, groups?: ReadonlyArray<string | number>): ShardBounds {
  const starts: number[] = [];
  sequences.forEach((_, i) => {
    if (i === 0 || !groups || groups[i] !== groups[i - 1]) starts.push(i);
  });
  const weights = starts.map((s, g) => {
    let tokens = 0;
    for (let i = s; i < (starts[g + 1] ?? sequences.length); i++) tokens += sequences[i].tokens.length;
    return tokens;
  });
  const bounds = contiguousPartition(weights, worldSize).map((g) => starts[g] ?? sequences.length);
  return bounds.slice(0, -1).map((start, r) => ({ start, end: bounds[r + 1] }));
}

/** The gradients as one vector, parameters in `names` order (what a collective reduces). */
export function flattenGradients(gradients: PolicyWeights, names: readonly string[]): Float32Array {
  const out = new Float32Array(names.reduce((n, name) => n + gradients[name].length, 0));
  let offset = 0;
  for (const name of names) {
    out.set(gradients[name], offset);
    offset += gradients[name].length;
  }
  return out;
}

/** flattenGradients' inverse, `sizes` each parameter's length. */
export function unflattenGradients(flat: Float32Array, names: readonly string[], sizes: readonly number[]): PolicyWeights {
  const out: PolicyWeights = {};
  let offset = 0;
  names.forEach((name, i) => {
    out[name] = flat.slice(offset, offset + sizes[i]);
    offset += sizes[i];
  });
  return out;
}

/**
 * The ring all-reduce (sum) of one equal-length vector per rank, as R ranks on a ring run it: the
 * vector cut in R chunks; reduce-scatter, R - 1 hops in which every rank sends one chunk to the next
 * rank, which adds it to its own (after them rank r holds chunk r + 1 summed over all ranks); then
 * all-gather, R - 1 hops passing the summed chunks on. Returns every rank's result (equal, since each
 * chunk is summed once and copied) and the bytes each rank sent: 2 (R - 1) / R x the vector's bytes.
 */
export function ringAllReduce(vectors: readonly Float32Array[]): { reduced: Float32Array[]; bytesSent: number[] } {
  const R = vectors.length;
  const n = vectors[0]?.length ?? 0;
  if (vectors.some((v) => v.length !== n)) throw new Error('ringAllReduce: every rank must give a vector of the same length');
  const buffers = vectors.map((v) => Float32Array.from(v));
  const bytesSent = new Array<number>(R).fill(0);
  const chunk = (c: number) => [Math.floor((c * n) / R), Math.floor(((c + 1) * n) / R)] as const;
  const hop = (chunkOf: (rank: number) => number, combine: (into: Float32Array, from: Float32Array) => void) => {
    // All ranks send at once: what each sends is read before any receiver changes its buffer.
    const messages = buffers.map((b, r) => {
      const [from, to] = chunk(chunkOf(r));
      bytesSent[r] += (to - from) * 4;
      return { c: chunkOf(r), data: b.slice(from, to) };
    });
    messages.forEach(({ c, data }, r) => combine(buffers[(r + 1) % R].subarray(...chunk(c)), data));
  };
  const mod = (x: number) => ((x % R) + R) % R;
  for (let s = 0; s < R - 1; s++) {
    hop((r) => mod(r - s), (into, from) => {
      for (let i = 0; i < into.length; i++) into[i] += from[i];
    });
  }
  for (let s = 0; s < R - 1; s++) hop((r) => mod(r + 1 - s), (into, from) => into.set(from));
  return { reduced: buffers, bytesSent };
}

export interface DataParallelStepOptions {
  /** The whole batch's totals (TrainStepOptions.batch); default the sequences' own. */
  batch?: BatchTotals;
  /** Each rank's shard; default shardBounds(sequences, ranks.length, groups). */
  shards?: ShardBounds;
  /** Each sequence's prompt group, for the default shards. */
  groups?: ReadonlyArray<string | number>;
}

export interface DataParallelStepResult {
  /** The batch loss: the sum of the ranks' shares. */
  loss: number;
  /** The reduced gradient's global norm (before clipping), as rank 0 computed it; equal on every rank. */
  gradNorm: number;
  lr: number;
  step: number;
  shards: Array<{ start: number; end: number; lossTokens: number }>;
  /** Bytes each rank sent in the all-reduce. */
  bytesSent: number[];
}

/** One optimizer step of `sequences` on every rank: shard, local gradients, ring all-reduce, the same update everywhere. */
export async function dataParallelStep(ranks: readonly DataParallelRank[], sequences: readonly TrainSequence[], options: DataParallelStepOptions = {}): Promise<DataParallelStepResult> {
  const R = ranks.length;
  if (R < 1) throw new Error('dataParallelStep needs at least one rank');
  const shards = options.shards ?? shardBounds(sequences, R, options.groups);
  if (shards.length !== R || shards.some((s, r) => s.start > s.end || s.start !== (r === 0 ? 0 : shards[r - 1].end)) || shards[R - 1].end !== sequences.length) {
    throw new Error(`shards must cover the ${sequences.length} sequences in ${R} contiguous runs, got ${JSON.stringify(shards)}`);
  }
  const batch = options.batch ?? batchTotals(sequences.map((s) => s.lossMask));
  const parts = shards.map(({ start, end }) => sequences.slice(start, end));
  // A shard without a loss token (or without sequences) has a zero gradient; its rank still updates.
  const hasLoss = parts.map((part) => batchTotals(part.map((s) => s.lossMask)).lossTokens > 0);
  const computed = await Promise.all(ranks.map((rank, r) => (hasLoss[r] ? rank.gradients(parts[r], { batch }) : undefined)));
  const first = computed.find((c) => c !== undefined);
  if (!first) throw new Error('dataParallelStep: no sequence has a loss token (every lossMask is all 0)');
  const names = Object.keys(first.gradients).sort();
  const sizes = names.map((name) => first.gradients[name].length);
  const length = sizes.reduce((a, b) => a + b, 0);
  const { reduced, bytesSent } = ringAllReduce(computed.map((c) => (c ? flattenGradients(c.gradients, names) : new Float32Array(length))));
  const applied = await Promise.all(ranks.map((rank, r) => rank.applyGradients(unflattenGradients(reduced[r], names, sizes))));
  return {
    loss: computed.reduce((sum, c) => sum + (c?.loss ?? 0), 0),
    gradNorm: applied[0].gradNorm,
    lr: applied[0].lr,
    step: applied[0].step,
    shards: shards.map((s, r) => ({ ...s, lossTokens: computed[r]?.lossTokens ?? 0 })),
    bytesSent,
  };
}
