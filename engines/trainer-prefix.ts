// The common prefix of a train micro-batch's rows (engines/trainer.ts): tokens every row reads
// first, at the same positions (a chat template's system prompt before every question). The trainer
// computes it once, as one row, and the rows' remaining columns attend to its keys and values; the
// prefix's gradient is then the sum over the rows, as in the computation that repeats it. This is the
// batch-wide sibling of packGroups (engines/trainer-batch.ts), which computes a group's whole prompt
// once per group, and of the rollout engine's shared prefix (engines/rollout.ts).
//
// Pure functions of the rows' arrays; the trainer makes the tensors.

/** Below this many tokens a prefix is not worth a second forward call. */
export const MIN_TRAIN_SHARED_PREFIX = 8;

/** Rows [U, L] split at column C: the prefix once, and every row's columns C..L-1. */
export interface PrefixSplit {
  /** C, the shared columns. */
  length: number;
  /** U and L of the rows split. */
  rows: number;
  columns: number;
  /** [1, C] tokens and positions (0..C-1), [1, 1, C, C] causal bias. */
  prefix: { tokens: Int32Array; positions: Int32Array; bias: Float32Array };
  /**
   * [U, L - C] tokens and positions; `bias` [biasRows, 1, L - C, L]: queries C..L-1 of the rows'
   * bias, over every key (the prefix's C, then the rows' own).
   */
  rest: { tokens: Int32Array; positions: Int32Array; bias: Float32Array; biasRows: number };
}

/**
 * The columns 0..C-1 that hold the same token in every row of `tokens` ([U, L], row-major) at
 * position c in column c, with C <= `limit` (the first column whose hidden state a loss reads).
 */
export function commonPrefixLength(tokens: ArrayLike<number>, positions: ArrayLike<number>, rows: number, columns: number, limit: number): number {
  const end = Math.min(limit, columns - 1);
  let c = 0;
  for (; c < end; c++) {
    const token = tokens[c];
    let same = positions[c] === c;
    for (let r = 1; r < rows && same; r++) same = tokens[r * columns + c] === token && positions[r * columns + c] === c;
    if (!same) break;
  }
  return c;
}

/**
 * Splits rows [U, L] (tokens, positions, and their additive attention bias [biasRows, 1, L, L],
 * biasRows 1 or U, causal over the prefix) at their common prefix, or undefined when fewer than two
 * rows share at least `minLength` columns before `limit`.
 */
export function splitCommonPrefix(
  rowsIn: { tokens: Int32Array; positions: Int32Array; bias: Float32Array; biasRows: number },
  rows: number,
  columns: number,
  limit: number,
  minLength = MIN_TRAIN_SHARED_PREFIX,
): PrefixSplit | undefined {
  if (rows < 2) return undefined;
  const L = columns;
  const C = commonPrefixLength(rowsIn.tokens, rowsIn.positions, rows, L, limit);
  if (C < minLength) return undefined;
  const R = L - C;
  const prefixBias = new Float32Array(C * C);
  for (let q = 0; q < C; q++) prefixBias.set(rowsIn.bias.subarray(q * L, q * L + C), q * C);
  const tokens = new Int32Array(rows * R);
  const positions = new Int32Array(rows * R);
  for (let r = 0; r < rows; r++) {
    tokens.set(rowsIn.tokens.subarray(r * L + C, (r + 1) * L), r * R);
    positions.set(rowsIn.positions.subarray(r * L + C, (r + 1) * L), r * R);
  }
  const bias = new Float32Array(rowsIn.biasRows * R * L);
  for (let r = 0; r < rowsIn.biasRows; r++) bias.set(rowsIn.bias.subarray((r * L + C) * L, (r + 1) * L * L), r * R * L);
  return {
    length: C,
    rows,
    columns: L,
    prefix: { tokens: rowsIn.tokens.slice(0, C), positions: rowsIn.positions.slice(0, C), bias: prefixBias },
    rest: { tokens, positions, bias, biasRows: rowsIn.biasRows },
  };
}
