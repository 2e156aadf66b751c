// The trainer's micro-batches as arrays (engines/trainer.ts): sequences right-padded to one length
// with their targets, loss mask and per-token inputs, the media inputs of the batch
// (engines/media/model-inputs.ts), and the column cut that skips the prompt's logits. Pure
// functions of the model config and the sequences; the tensors are made by the trainer.
import * as tf from '@tensorflow/tfjs';
import { batchMediaInputs, placeholderIds, sequenceMediaLayout, type BatchMedia, type SequenceMedia } from './media/model-inputs';
import { MediaError } from './media/sources';
import { MASKED_BIAS, type MediaInputs, type ModelConfig } from './model';
import type { TrainSequence } from './trainer';

export interface PaddedBatch {
  B: number;
  /** Padded input length = targets per row. */
  T: number;
  inputs: Int32Array;
  targets: Int32Array;
  mask: Float32Array;
  oldLogprobs?: Float32Array;
  refLogprobs?: Float32Array;
  advantages?: Float32Array;
  /** PPO's critic: values before the update and GAE returns, per target (TrainSequence.oldValues / returns). */
  oldValues?: Float32Array;
  returns?: Float32Array;
  /** The images and clips of the batch and where their embeddings go; absent when no sequence has media. */
  media?: BatchMedia;
  lossTokens: number;
  sequencesWithLoss: number;
}

const NO_MEDIA: SequenceMedia = { images: [], audio: [] };

/**
 * Checks the sequences (length, vocabulary, per-token arrays, media against their placeholders) and
 * right-pads them: inputs tokens[0..n-2], targets tokens[1..n-1], T the longest n - 1. Without
 * `withLoss` only tokens and media are read (log-probs); without `withMedia` the media are checked
 * but not stacked (a whole step's counts).
 */
export function padBatch(cfg: ModelConfig, sequences: readonly TrainSequence[], withLoss: boolean, withMedia = true): PaddedBatch {
  const C = cfg.contextLength;
  const placeholders = Object.keys(placeholderIds(cfg)).length > 0;
  sequences.forEach((s, i) => {
    if (s.tokens.length < 2) throw new Error(`sequence ${i} has ${s.tokens.length} tokens: it needs at least 2 (one input, one target)`);
    if (s.tokens.length > C) throw new Error(`sequence ${i} has ${s.tokens.length} tokens, more than the model's context of ${C}`);
    for (let j = 0; j < s.tokens.length; j++) {
      const t = s.tokens[j];
      if (!Number.isInteger(t) || t < 0 || t >= cfg.vocabSize) throw new Error(`sequence ${i} token ${j} is ${t}, outside the vocabulary [0, ${cfg.vocabSize})`);
    }
    // Every sequence's placeholder runs must match its media, whatever else is in the batch (a
    // placeholder without its medium would otherwise be text alone and an error next to an image).
    if (s.media || placeholders) {
      try {
        sequenceMediaLayout(s.tokens, cfg, s.media ?? NO_MEDIA);
      } catch (err) {
        if (err instanceof MediaError) throw new MediaError(err.code, `sequence ${i}: ${err.message}`);
        throw err;
      }
    }
    if (!withLoss) return;
    const n = s.tokens.length - 1;
    const fields: Array<[string, ArrayLike<number> | number | undefined]> = [['lossMask', s.lossMask], ['oldLogprobs', s.oldLogprobs], ['refLogprobs', s.refLogprobs], ['advantages', s.advantages], ['oldValues', s.oldValues], ['returns', s.returns]];
    for (const [field, arr] of fields) {
      if (arr !== undefined && typeof arr !== 'number' && arr.length !== n) {
        throw new Error(`sequence ${i}: ${field} has ${arr.length} entries, expected ${n} (one per target = tokens.length - 1)`);
      }
    }
    for (const field of ['oldLogprobs', 'refLogprobs', 'advantages', 'oldValues', 'returns'] as const) {
      if ((s[field] === undefined) !== (sequences[0][field] === undefined)) {
        throw new Error(`sequence ${i}: ${field} is ${s[field] === undefined ? 'missing' : 'present'} but sequence 0 ${sequences[0][field] === undefined ? 'lacks it' : 'has it'}; give it for all sequences or none`);
      }
    }
  });
  const B = sequences.length;
  const T = Math.max(...sequences.map((s) => s.tokens.length)) - 1;
  const first = sequences[0];
  const batch: PaddedBatch = {
    B,
    T,
    inputs: new Int32Array(B * T),
    targets: new Int32Array(B * T),
    mask: new Float32Array(B * T),
    oldLogprobs: withLoss && first.oldLogprobs ? new Float32Array(B * T) : undefined,
    refLogprobs: withLoss && first.refLogprobs ? new Float32Array(B * T) : undefined,
    advantages: withLoss && first.advantages !== undefined ? new Float32Array(B * T) : undefined,
    oldValues: withLoss && first.oldValues ? new Float32Array(B * T) : undefined,
    returns: withLoss && first.returns ? new Float32Array(B * T) : undefined,
    // Right-padded: every row starts at position 0; a medium at the final token is not an input.
    media: withMedia ? batchMediaInputs(cfg, sequences, T) : undefined,
    lossTokens: 0,
    sequencesWithLoss: 0,
  };
  sequences.forEach((s, b) => {
    const n = s.tokens.length - 1;
    let tokensWithLoss = 0;
    for (let t = 0; t < n; t++) {
      const k = b * T + t;
      batch.inputs[k] = s.tokens[t];
      batch.targets[k] = s.tokens[t + 1];
      if (!withLoss) continue;
      const m = s.lossMask[t];
      if (m !== 0 && m !== 1) throw new Error(`sequence ${b}: lossMask[${t}] is ${m}; the loss mask holds only 0 and 1`);
      batch.mask[k] = m;
      tokensWithLoss += m;
      if (batch.oldLogprobs) batch.oldLogprobs[k] = s.oldLogprobs![t];
      if (batch.refLogprobs) batch.refLogprobs[k] = s.refLogprobs![t];
      if (batch.advantages) batch.advantages[k] = typeof s.advantages === 'number' ? s.advantages : s.advantages![t];
      if (batch.oldValues) batch.oldValues[k] = s.oldValues![t];
      if (batch.returns) batch.returns[k] = s.returns![t];
    }
    batch.lossTokens += tokensWithLoss;
    if (tokensWithLoss > 0) batch.sequencesWithLoss += 1;
  });
  return batch;
}

/** The forward pass's MediaInputs of a padded batch, as tensors (the caller disposes them, or makes them in a tidy). */
export function mediaTensors(batch: PaddedBatch): MediaInputs<tf.Tensor> | undefined {
  const media = batch.media;
  if (!media) return undefined;
  return {
    ...(media.images ? { images: tf.tensor3d(media.images.data, media.images.dims) } : {}),
    ...(media.audio ? { audio: tf.tensor3d(media.audio.data, media.audio.dims) } : {}),
    embeddingIndex: tf.tensor2d(media.embeddingIndex, [batch.B, batch.T], 'int32'),
  };
}

/** The first target column with a loss token in any row of the batch (0 when none). */
export function firstLossColumn(batch: PaddedBatch): number {
  let first = batch.T;
  for (let b = 0; b < batch.B; b++) {
    for (let t = 0; t < first; t++) {
      if (batch.mask[b * batch.T + t] !== 0) {
        first = t;
        break;
      }
    }
  }
  return first === batch.T ? 0 : first;
}

/** Columns from..T-1 of a row-major [B, T] array. */
export function columnsFrom<A extends Float32Array | Int32Array>(values: A, B: number, T: number, from: number): A {
  if (from === 0) return values;
  const out = new (values.constructor as new (n: number) => A)(B * (T - from));
  for (let b = 0; b < B; b++) out.set(values.subarray(b * T + from, (b + 1) * T), b * (T - from));
  return out;
}

/** The distinct prompts of a micro-batch: what its rows read before column `from`, computed once each. */
export interface SharedPrefixes {
  /** Distinct prefixes U. */
  count: number;
  /** Their tokens, row-major [U, from]. */
  tokens: Int32Array;
  /** Per row of the batch, its prefix (0..U-1). */
  rowToPrefix: Int32Array;
}

/**
 * The rows of a padded batch that read the same inputs in columns 0..from-1 (a GRPO group's samples
 * of one prompt: `from` is the batch's first loss column), or undefined when every row is distinct
 * (nothing to share) or `from` is 0.
 */
export function sharedPrefixes(batch: PaddedBatch, from: number): SharedPrefixes | undefined {
  if (from <= 0) return undefined;
  const index = new Map<string, number>();
  const rowToPrefix = new Int32Array(batch.B);
  const firstRows: number[] = [];
  for (let b = 0; b < batch.B; b++) {
    const key = batch.inputs.subarray(b * batch.T, b * batch.T + from).join(',');
    let u = index.get(key);
    if (u === undefined) {
      u = firstRows.length;
      index.set(key, u);
      firstRows.push(b);
    }
    rowToPrefix[b] = u;
  }
  if (firstRows.length === batch.B) return undefined;
  const tokens = new Int32Array(firstRows.length * from);
  firstRows.forEach((b, u) => tokens.set(batch.inputs.subarray(b * batch.T, b * batch.T + from), u * from));
  return { count: firstRows.length, tokens, rowToPrefix };
}

/**
 * Each sequence's prompt for micro-batch planning: its tokens before the first target with loss
 * (`length`, the column a micro-batch's shared prefix can reach) and a key equal for sequences with
 * the same such tokens.
 */
export function promptPrefix(tokens: ArrayLike<number>, lossMask: ArrayLike<number>): { key: string; length: number } {
  let first = 0;
  while (first < lossMask.length && lossMask[first] === 0) first++;
  return { key: Array.prototype.slice.call(tokens, 0, first).join(','), length: first };
}

/** A micro-batch packed one row per prompt: the prompt once, then each of its sequences' remaining inputs. */
export interface PackedGroups {
  /** Rows (distinct prompts) and their common length (the longest; shorter rows end in padding). */
  rows: number;
  length: number;
  /** [rows, length] token ids and position ids. */
  tokens: Int32Array;
  positions: Int32Array;
  /** [rows, 1, length, length] additive attention bias: 0 where a query may attend a key. */
  bias: Float32Array;
  /** Per (sequence, column gatherFrom..T-1) of the padded batch, its position in the packed rows (row * length + offset). */
  gather: Int32Array;
}

/**
 * Packs a padded batch whose rows share prompts (sharedPrefixes) into one row per prompt: the
 * prompt's `from` tokens, then each of its sequences' inputs from..n-1 (n = `inputLengths[b]`) at
 * their own positions, each attending to the prompt and causally to itself (no padding between
 * them). The rows' hidden states, gathered by `gather`, are the padded batch's columns
 * gatherFrom..T-1 (from..T-1 by default: the training losses; 0 for every target's log-prob, the
 * prompt's columns read from its one copy); columns past a sequence's end read its first packed
 * position.
 */
export function packGroups(batch: PaddedBatch, from: number, inputLengths: readonly number[], shared: SharedPrefixes, gatherFrom = from): PackedGroups {
  if (gatherFrom > from) throw new Error(`packGroups: gatherFrom ${gatherFrom} is past the shared prompt (${from})`);
  const { B, T } = batch;
  const U = shared.count;
  const members: number[][] = Array.from({ length: U }, () => []);
  for (let b = 0; b < B; b++) members[shared.rowToPrefix[b]].push(b);
  const L = Math.max(...members.map((rows) => rows.reduce((n, b) => n + Math.max(0, inputLengths[b] - from), from)));
  const tokens = new Int32Array(U * L);
  const positions = new Int32Array(U * L);
  const bias = new Float32Array(U * L * L).fill(MASKED_BIAS);
  const S = T - gatherFrom;
  const gather = new Int32Array(B * S);
  for (let u = 0; u < U; u++) {
    const base = u * L;
    tokens.set(shared.tokens.subarray(u * from, (u + 1) * from), base);
    for (let p = 0; p < from; p++) positions[base + p] = p;
    // The prompt attends causally to itself.
    for (let q = 0; q < from; q++) bias.fill(0, (base + q) * L, (base + q) * L + q + 1);
    let offset = from;
    for (const b of members[u]) {
      const n = Math.max(0, inputLengths[b] - from);
      for (let t = 0; t < n; t++) {
        const q = offset + t;
        tokens[base + q] = batch.inputs[b * T + from + t];
        positions[base + q] = from + t;
        const row = (base + q) * L;
        bias.fill(0, row, row + from); // the prompt
        bias.fill(0, row + offset, row + q + 1); // its own earlier inputs
      }
      for (let c = gatherFrom; c < T; c++) {
        const t = c - from;
        gather[b * S + c - gatherFrom] = base + (t < 0 ? c : n > 0 ? offset + (t < n ? t : 0) : 0);
      }
      offset += n;
    }
    // Padding at the row's end attends to itself only (a softmax over no key would be NaN-free but meaningless).
    for (let q = offset; q < L; q++) bias[(base + q) * L + q] = 0;
  }
  return { rows: U, length: L, tokens, positions, bias, gather };
}
