// The rollout engine's key/value cache: one buffer per layer for keys [rows, Hkv, Dh, capacity] and
// one for values [rows, Hkv, capacity, Dh], fed to the generation graph as its past as they are
// (no copy: ONNX Runtime reads the arrays), with the graph's present outputs (the new positions'
// keys and values only) written into the next free slots. Slots past `length` are unused and must
// be masked by the attention bias. The buffers grow by doubling and shrink to the rows still
// generating; before this, every decode step's graph concatenated the whole cache and returned it
// (~106 MB a step for SmolLM2 at batch 32, copied twice and then collected). Also the row helpers
// for the logits outputs (concatRows, selectRows).
import * as ort from 'onnxruntime-node';
import { GRAPH_NAMES } from './model-onnx';

export class KvCache {
  private keys: Float32Array[];
  private values: Float32Array[];
  /** Slots filled, the same for every row (rows are padded to a common width). */
  length = 0;

  constructor(
    private readonly layers: number,
    private rows: number,
    private readonly heads: number,
    private readonly headDim: number,
    private capacity: number,
  ) {
    const size = rows * heads * headDim * capacity;
    this.keys = Array.from({ length: layers }, () => new Float32Array(size));
    this.values = Array.from({ length: layers }, () => new Float32Array(size));
  }

  /** The slots the buffers hold (filled or not): the past length the graph sees. */
  get slots(): number {
    return this.capacity;
  }

  /** Makes room for `more` slots past `length`, doubling the capacity when it must grow. */
  reserve(more: number): void {
    const needed = this.length + more;
    if (needed <= this.capacity) return;
    const capacity = Math.max(needed, 2 * this.capacity);
    const { rows, heads: H, headDim: Dh } = this;
    for (let l = 0; l < this.layers; l++) {
      const k = new Float32Array(rows * H * Dh * capacity);
      const v = new Float32Array(rows * H * capacity * Dh);
      for (let rh = 0; rh < rows * H; rh++) {
        for (let d = 0; d < Dh; d++) k.set(this.keys[l].subarray((rh * Dh + d) * this.capacity, (rh * Dh + d) * this.capacity + this.length), (rh * Dh + d) * capacity);
        v.set(this.values[l].subarray(rh * this.capacity * Dh, (rh * this.capacity + this.length) * Dh), rh * capacity * Dh);
      }
      this.keys[l] = k;
      this.values[l] = v;
    }
    this.capacity = capacity;
  }

  /**
   * Writes a run's present outputs (`T` new positions of `outRows` rows) at slot `at` (`length` by
   * default; the shared prefix's run writes at 0): output row i goes to every cache row in
   * `targets[i]`. Does not move `length` (advance() does, once every part of a run is written).
   */
  write(out: Record<string, ort.Tensor>, T: number, targets: ReadonlyArray<readonly number[]>, at = this.length): void {
    const { heads: H, headDim: Dh, capacity: S } = this;
    if (at + T > S) throw new Error(`internal error: ${at + T} cache slots needed, ${S} reserved`);
    for (let l = 0; l < this.layers; l++) {
      const k = out[GRAPH_NAMES.presentKey(l)].data as Float32Array; // [outRows, H, Dh, T]
      const v = out[GRAPH_NAMES.presentValue(l)].data as Float32Array; // [outRows, H, T, Dh]
      const K = this.keys[l];
      const V = this.values[l];
      targets.forEach((rows, i) => {
        for (const r of rows) {
          for (let h = 0; h < H; h++) {
            const src = i * H + h;
            const dst = r * H + h;
            for (let d = 0; d < Dh; d++) {
              const from = (src * Dh + d) * T;
              const to = (dst * Dh + d) * S + at;
              for (let t = 0; t < T; t++) K[to + t] = k[from + t];
            }
            V.set(v.subarray(src * T * Dh, (src + 1) * T * Dh), (dst * S + at) * Dh);
          }
        }
      });
    }
  }

  /** Marks `T` more slots filled. */
  advance(T: number): void {
    this.length += T;
  }

  /** Keeps only `keep` (row indices, in their new order). */
  keepRows(keep: readonly number[]): void {
    if (keep.length === this.rows && keep.every((r, i) => r === i)) return;
    const rowSize = this.heads * this.headDim * this.capacity;
    const select = (src: Float32Array) => {
      const out = new Float32Array(keep.length * rowSize);
      keep.forEach((r, i) => out.set(src.subarray(r * rowSize, (r + 1) * rowSize), i * rowSize));
      return out;
    };
    this.keys = this.keys.map(select);
    this.values = this.values.map(select);
    this.rows = keep.length;
  }

  /** The graph's past inputs: every layer's buffers, all `slots` of them. */
  feeds(): Record<string, ort.Tensor> {
    const { rows, heads: H, headDim: Dh, capacity: S } = this;
    const feeds: Record<string, ort.Tensor> = {};
    for (let l = 0; l < this.layers; l++) {
      feeds[GRAPH_NAMES.pastKey(l)] = new ort.Tensor('float32', this.keys[l], [rows, H, Dh, S]);
      feeds[GRAPH_NAMES.pastValue(l)] = new ort.Tensor('float32', this.values[l], [rows, H, S, Dh]);
    }
    return feeds;
  }
}

/** [B1, ...], [B2, ...], ... float tensors stacked along their first axis. */
export function concatRows(parts: ort.Tensor[]): ort.Tensor {
  const dims = parts[0].dims as number[];
  const out = new Float32Array(parts.reduce((n, t) => n + (t.data as Float32Array).length, 0));
  let offset = 0;
  for (const t of parts) {
    out.set(t.data as Float32Array, offset);
    offset += (t.data as Float32Array).length;
  }
  return new ort.Tensor('float32', out, [parts.reduce((n, t) => n + (t.dims[0] as number), 0), ...dims.slice(1)]);
}

/** The rows `keep` (indices into the batch, repeats allowed) of a [B, ...] float tensor. */
export function selectRows(t: ort.Tensor, keep: readonly number[]): ort.Tensor {
  const dims = t.dims as number[];
  const rowSize = dims.slice(1).reduce((a, b) => a * b, 1);
  const src = t.data as Float32Array;
  const out = new Float32Array(keep.length * rowSize);
  keep.forEach((r, i) => out.set(src.subarray(r * rowSize, (r + 1) * rowSize), i * rowSize));
  return new ort.Tensor('float32', out, [keep.length, ...dims.slice(1)]);
}
