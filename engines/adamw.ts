// AdamW with decoupled weight decay over flat buckets of parameters. Each bucket's gradients are
// concatenated into one vector, and the moment updates, bias correction, clipping and the step run
// as ~15 ops on that vector instead of ~15 ops per parameter: on native TensorFlow, where a tfjs op
// costs tens of microseconds whatever its size, the per-parameter form was a third of a small
// model's train step. Buckets are capped (BUCKET_ELEMENTS) so a large model's temporaries stay small:
// the update's ~12 temporaries of one bucket are part of a full fine-tuning step's peak memory.
// Parameter groups (PyTorch's param_groups): a parameter may name an `lrGroup` whose learning rate
// each step's apply() gives apart from the others' (PPO's value head: algorithm.critic.lr); a
// bucket holds one group's parameters only, so its learning rate stays one scalar.
import * as tf from '@tensorflow/tfjs';

export interface AdamWOptions {
  lr: number;
  beta1?: number;
  beta2?: number;
  eps?: number;
  /** Decoupled weight decay (AdamW), applied to matrices only (not to biases, norms). */
  weightDecay?: number;
}

export interface AdamWParameter {
  name: string;
  variable: tf.Variable;
  /** Whether weight decay applies (matrices). */
  decayed: boolean;
  /** The parameter group whose learning rate apply() takes from `groupLr` (default: the step's `lr`). */
  lrGroup?: string;
}

/** Each parameter group's learning rate for one step, by AdamWParameter.lrGroup; a group not named here takes the step's `lr`. */
export type GroupLearningRates = Readonly<Record<string, number>>;

/** The learning rate of a parameter in `group` this step. */
export function groupLearningRate(lr: number, groupLr: GroupLearningRates, group: string | undefined): number {
  return group !== undefined && groupLr[group] !== undefined ? groupLr[group] : lr;
}

/** The largest bucket, in elements (16 MiB of float32): one parameter larger than this is a bucket alone. */
export const BUCKET_ELEMENTS = 1 << 22;

interface Bucket {
  params: AdamWParameter[];
  sizes: number[];
  elements: number;
  /** Whether weight decay applies to the bucket: its parameters are all decayed, or none is. */
  decayed: boolean;
  /** The parameter group of every parameter in the bucket. */
  lrGroup?: string;
  m?: tf.Variable;
  v?: tf.Variable;
}

const elementsOf = (p: AdamWParameter) => p.variable.size;

/**
 * A moment variable holding `initial`, which is disposed: a variable shares its initial tensor's
 * buffer, and once assigned a new value the initial tensor alone would keep the old one alive (a
 * full model's worth per moment).
 */
function variableOf(initial: tf.Tensor): tf.Variable {
  const variable = tf.variable(initial, false);
  initial.dispose();
  return variable;
}

/** Groups parameters, in order, into buckets of at most `limit` elements. */
export function bucketParameters<T extends { size: number }>(params: readonly T[], limit = BUCKET_ELEMENTS): T[][] {
  const buckets: T[][] = [];
  let current: T[] = [];
  let size = 0;
  for (const p of params) {
    if (current.length > 0 && size + p.size > limit) {
      buckets.push(current);
      current = [];
      size = 0;
    }
    current.push(p);
    size += p.size;
  }
  if (current.length > 0) buckets.push(current);
  return buckets;
}

/**
 * What the trainer calls once per step: the step's gradients in (prepare), their sums of squares
 * (global norm, finiteness), one update. BucketedAdamW runs on every backend; FusedAdamW
 * (engines/adamw-fused.ts) on native TensorFlow.
 */
export interface AdamWOptimizer {
  /** The gradients (one per parameter, constructor order), consumed, as this optimizer reads them. */
  prepare(grads: readonly tf.Tensor[]): tf.Tensor[];
  /** Sums of squared gradient entries, one per prepared tensor (one read). */
  sumsOfSquares(prepared: readonly tf.Tensor[]): Promise<Float32Array>;
  /** Names the first parameter of prepared tensor `index` whose gradient is not finite. */
  nonFiniteParameter(prepared: readonly tf.Tensor[], index: number): Promise<string>;
  /**
   * One AdamW step (`step` counts from 1) with gradients scaled by `clipScale`, learning rate `lr`
   * (a parameter group's from `groupLr`); disposes `prepared`.
   */
  apply(prepared: readonly tf.Tensor[], step: number, clipScale: number, lr: number, groupLr?: GroupLearningRates): void;
  exportMoments(): Promise<Array<{ name: string; shape: number[]; m: Float32Array; v: Float32Array }>>;
  importMoments(moments: ReadonlyMap<string, { m: Float32Array; v: Float32Array }>): void;
  dispose(): void;
}

export class BucketedAdamW implements AdamWOptimizer {
  private readonly buckets: Bucket[];
  /** Each parameter's place in the constructor's order (the buckets hold decayed ones first). */
  private readonly order: Map<string, number>;
  private readonly options: Required<AdamWOptions>;

  constructor(params: readonly AdamWParameter[], options: AdamWOptions, limit = BUCKET_ELEMENTS) {
    this.options = { beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0, ...options };
    this.order = new Map(params.map((p, i) => [p.name, i]));
    // The decayed parameters (matrices) and the others (biases, norms) in buckets of their own, and
    // each parameter group's apart, so decay and the learning rate are scalars of a bucket, never
    // per-element masks (a full model's size).
    const groups = [...new Set(params.map((p) => p.lrGroup))];
    const grouped = [true, false].flatMap((decayed) => groups.flatMap((lrGroup) => bucketParameters(params.filter((p) => p.decayed === decayed && p.lrGroup === lrGroup).map((p) => ({ p, size: elementsOf(p) })), limit)));
    this.buckets = grouped.map((group) => {
      const ps = group.map((g) => g.p);
      const sizes = ps.map(elementsOf);
      return { params: ps, sizes, elements: sizes.reduce((a, b) => a + b, 0), decayed: ps[0].decayed, lrGroup: ps[0].lrGroup };
    });
  }

  /**
   * The gradients (one per parameter, in constructor order) as one flat tensor per bucket. With
   * `consume`, each bucket's gradients are disposed once copied, so the gradients are never held
   * twice (a full fine-tuning step's weights' worth).
   */
  flatten(grads: readonly tf.Tensor[], consume = false): tf.Tensor1D[] {
    return this.buckets.map((b) => {
      const parts = b.params.map((p) => grads[this.order.get(p.name)!]);
      const flat = tf.tidy(() => (parts.length === 1 ? tf.reshape(parts[0], [-1]) : tf.concat(parts.map((g) => tf.reshape(g, [-1])))) as tf.Tensor1D);
      if (consume) tf.dispose(parts);
      return flat;
    });
  }

  prepare(grads: readonly tf.Tensor[]): tf.Tensor[] {
    return this.flatten(grads, true);
  }

  /** Each bucket's sum of squared gradient entries (one read for the global norm and finiteness). */
  async sumsOfSquares(flat: readonly tf.Tensor1D[]): Promise<Float32Array> {
    const sums = tf.tidy(() => tf.stack(flat.map((g) => tf.sum(tf.square(g)))));
    const values = (await sums.data()) as Float32Array;
    sums.dispose();
    return values;
  }

  /** Names the first parameter of bucket `index` whose gradient is not finite (the rare failure path). */
  async nonFiniteParameter(flat: readonly tf.Tensor1D[], index: number): Promise<string> {
    const b = this.buckets[index];
    const values = (await flat[index].data()) as Float32Array;
    let offset = 0;
    for (let i = 0; i < b.params.length; i++) {
      for (let k = offset; k < offset + b.sizes[i]; k++) if (!Number.isFinite(values[k])) return b.params[i].name;
      offset += b.sizes[i];
    }
    return b.params[0].name;
  }

  /** One AdamW step (`step` counts from 1) with gradients scaled by `clipScale` and learning rate `lr` (a group's from `groupLr`); disposes `flat`. */
  apply(flat: readonly tf.Tensor1D[], step: number, clipScale: number, stepLr: number, groupLr: GroupLearningRates = {}): void {
    const { beta1, beta2, eps, weightDecay } = this.options;
    const correction1 = 1 - beta1 ** step;
    // lr m_hat / (sqrt(v_hat) + eps) = (lr sqrt(c2) / c1) m / (sqrt(v) + eps sqrt(c2)): the bias
    // corrections folded into two scalars, one op fewer over the bucket.
    const root2 = Math.sqrt(1 - beta2 ** step);
    this.buckets.forEach((b, i) => {
      const lr = groupLearningRate(stepLr, groupLr, b.lrGroup);
      b.m ??= variableOf(tf.zeros([b.elements]));
      b.v ??= variableOf(tf.zeros([b.elements]));
      tf.tidy(() => {
        // The clipping scale folded into the moments' scalars (no pass of its own).
        const g = flat[i];
        const m = tf.add(tf.mul(b.m!, tf.scalar(beta1)), tf.mul(g, tf.scalar((1 - beta1) * clipScale)));
        const v = tf.add(tf.mul(b.v!, tf.scalar(beta2)), tf.mul(tf.square(g), tf.scalar((1 - beta2) * clipScale * clipScale)));
        const update = tf.div(tf.mul(m, tf.scalar((lr * root2) / correction1)), tf.add(tf.sqrt(v), tf.scalar(eps * root2)));
        b.m!.assign(m);
        b.v!.assign(v);
        const params = b.params.length === 1 ? tf.reshape(b.params[0].variable, [-1]) : tf.concat(b.params.map((p) => tf.reshape(p.variable, [-1])));
        // Decoupled decay: p (1 - lr wd) - update.
        const next = b.decayed && weightDecay > 0 ? tf.sub(tf.mul(params, tf.scalar(1 - lr * weightDecay)), update) : tf.sub(params, update);
        const parts = b.params.length === 1 ? [next] : tf.split(next, b.sizes);
        b.params.forEach((p, k) => p.variable.assign(tf.reshape(parts[k], p.variable.shape)));
      });
      // Read once: its memory goes before the next bucket's temporaries come.
      flat[i].dispose();
    });
  }

  /** The moments per parameter (empty before the first step). */
  async exportMoments(): Promise<Array<{ name: string; shape: number[]; m: Float32Array; v: Float32Array }>> {
    const out: Array<{ name: string; shape: number[]; m: Float32Array; v: Float32Array }> = [];
    for (const b of this.buckets) {
      if (!b.m || !b.v) continue;
      const m = (await b.m.data()) as Float32Array;
      const v = (await b.v.data()) as Float32Array;
      let offset = 0;
      b.params.forEach((p, i) => {
        out.push({ name: p.name, shape: p.variable.shape, m: m.slice(offset, offset + b.sizes[i]), v: v.slice(offset, offset + b.sizes[i]) });
        offset += b.sizes[i];
      });
    }
    return out.sort((a, b) => this.order.get(a.name)! - this.order.get(b.name)!);
  }

  /** Replaces the moments; a parameter absent from `moments` starts from zero. */
  importMoments(moments: ReadonlyMap<string, { m: Float32Array; v: Float32Array }>): void {
    for (const b of this.buckets) {
      tf.dispose([b.m, b.v].filter((t): t is tf.Variable => t !== undefined));
      b.m = b.v = undefined;
      if (!b.params.some((p) => moments.has(p.name))) continue;
      const m = new Float32Array(b.elements);
      const v = new Float32Array(b.elements);
      let offset = 0;
      b.params.forEach((p, i) => {
        const s = moments.get(p.name);
        if (s) {
          m.set(s.m, offset);
          v.set(s.v, offset);
        }
        offset += b.sizes[i];
      });
      b.m = variableOf(tf.tensor1d(m));
      b.v = variableOf(tf.tensor1d(v));
    }
  }

  dispose(): void {
    for (const b of this.buckets) {
      tf.dispose([b.m, b.v].filter((t): t is tf.Variable => t !== undefined));
      b.m = b.v = undefined;
    }
  }
}
