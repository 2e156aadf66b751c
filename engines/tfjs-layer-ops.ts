// The layer-level ops of the tfjs model ops (engines/model-tfjs.ts), each with a custom gradient so
// tfjs keeps less for the backward pass: the attention core and a frozen projection with its LoRA
// terms (gradients written out), and gradient checkpointing of a whole decoder layer
// (docs/architecture.md#engines).
import * as tf from '@tensorflow/tfjs';
import type { LoraPart } from './model';

/**
 * softmax(q kT + bias) v with its gradient written out (P the probabilities):
 * dv = P^T dO, dP = dO v^T, dS = P (dP - rowsum(dP P)), dq = dS k, dkT = q^T dS.
 * Only P is kept for the backward pass: autodiff keeps the scores, the biased scores and P, and
 * then a gradient of each, every one [B, H, M, S].
 */
export function attentionFused(q: tf.Tensor, kT: tf.Tensor, v: tf.Tensor, bias: tf.Tensor | undefined): tf.Tensor {
  return (
    tf.customGrad((qi, ki, vi, save) => {
      const scores = tf.matMul(qi as tf.Tensor, ki as tf.Tensor);
      const p = tf.softmax(bias ? tf.add(scores, bias) : scores);
      (save as tf.GradSaveFunc)([qi as tf.Tensor, ki as tf.Tensor, vi as tf.Tensor, p]);
      return {
        value: tf.matMul(p, vi as tf.Tensor),
        gradFunc: (dO: tf.Tensor, [qs, ks, vs, ps]: tf.Tensor[]) => {
          const dP = tf.matMul(dO, vs, false, true);
          const dS = tf.mul(ps, tf.sub(dP, tf.sum(tf.mul(dP, ps), -1, true)));
          return [tf.matMul(dS, ks, false, true), tf.matMul(qs, dS, true, false), tf.matMul(ps, dO, true, false)];
        },
      };
    }) as (q: tf.Tensor, kT: tf.Tensor, v: tf.Tensor) => tf.Tensor
  )(q, kT, v);
}

/**
 * A frozen projection x W (+ b) with LoRA adapters on column blocks of its output (TensorOps.loraLinear),
 * x and xl [N, in] (xl: the adapters' input, x itself without dropout). With u = scale (xl a) per
 * adapter, its block adds u b; the gradient written out: g = scale dy_part b^T, da = xl^T g,
 * db = u^T dy_part, dx = dy W^T (+ sum g a^T, into xl). Kept for the backward pass: xl and each u
 * (rank wide); autodiff keeps each adapter's output and its gradient, the projection's width.
 */
export function loraLinearFused(x: tf.Tensor, weight: tf.Tensor, bias: tf.Tensor | undefined, xl: tf.Tensor, parts: ReadonlyArray<LoraPart<tf.Tensor>>, scale: number): tf.Tensor {
  // The base is read as a constant: a trained one (a variable) would get no gradient here.
  if (isTrained(weight) || (bias && isTrained(bias))) throw new Error('loraLinear: the base weight and bias must be frozen (LoRA), not variables');
  const shared = xl === x;
  const adapters = parts.flatMap((p) => (p.a && p.b ? [p.a, p.b] : []));
  const sizes = parts.length === 1 ? [weight.shape[1] as number] : parts.map((p) => p.size as number);
  const fused = tf.customGrad((...args) => {
    const save = args.pop() as tf.GradSaveFunc;
    const inputs = args as tf.Tensor[];
    const xin = inputs[0];
    const lx = shared ? xin : inputs[1];
    const ab = inputs.slice(shared ? 1 : 2);
    const us: tf.Tensor[] = [];
    const blocks: tf.Tensor[] = [];
    const base = tf.matMul(xin, weight);
    const y = bias ? tf.add(base, bias) : base;
    const ys = parts.length === 1 ? [y] : tf.split(y, sizes, 1);
    let k = 0;
    parts.forEach((p, i) => {
      if (!p.a) return void blocks.push(ys[i]);
      const u = tf.mul(tf.matMul(lx, ab[k]), scale);
      us.push(u);
      blocks.push(tf.add(ys[i], tf.matMul(u, ab[k + 1])));
      k += 2;
    });
    save([lx, ...us, ...ab]);
    return {
      value: blocks.length === 1 ? blocks[0] : tf.concat(blocks, 1),
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const [sxl, ...rest] = saved;
        const su = rest.slice(0, us.length);
        const sab = rest.slice(us.length);
        const dys = parts.length === 1 ? [dy] : tf.split(dy, sizes, 1);
        const dx = tf.matMul(dy, weight, false, true);
        const grads: tf.Tensor[] = [];
        let dxl: tf.Tensor | undefined;
        let j = 0;
        parts.forEach((p, i) => {
          if (!p.a) return;
          const [a, b] = [sab[2 * j], sab[2 * j + 1]];
          const g = tf.mul(tf.matMul(dys[i], b, false, true), scale);
          grads.push(tf.matMul(sxl, g, true, false), tf.matMul(su[j], dys[i], true, false));
          const part = tf.matMul(g, a, false, true);
          dxl = dxl ? tf.add(dxl, part) : part;
          j += 1;
        });
        if (shared) return [dxl ? tf.add(dx, dxl) : dx, ...grads];
        return [dx, dxl ?? tf.zerosLike(sxl), ...grads];
      },
    };
  }) as (...inputs: tf.Tensor[]) => tf.Tensor;
  return shared ? fused(x, ...adapters) : fused(x, xl, ...adapters);
}

/** The copies of trained weights a checkpointed layer is computed again with (checkpointLayer): trained, like the variables. */
const recomputedParameters = new WeakSet<tf.Tensor>();

/** Whether the ops differentiate with respect to `t`: a variable, or the copy of one in a recomputed layer. */
export function isTrained(t: tf.Tensor): boolean {
  return t instanceof tf.Variable || recomputedParameters.has(t);
}

/**
 * Gradient checkpointing (TensorOps.checkpoint): layer(x, w) keeps only x and the trained weights
 * of `w` (its variables) for the backward pass, where it runs again under its own tape to give their
 * gradients. Everything the layer computes in between is freed when it returns: the cost is its
 * forward pass computed twice.
 */
export function checkpointLayer(layer: (x: tf.Tensor, w: Record<string, tf.Tensor>) => tf.Tensor, x: tf.Tensor, w: Record<string, tf.Tensor>): tf.Tensor {
  const trained = Object.keys(w).filter((name) => isTrained(w[name]));
  // The rest is kept too (the pass's own tensors, such as the attention bias, are freed with the
  // forward scope before the backward pass runs; a kept frozen weight shares its buffer).
  const constants = Object.keys(w).filter((name) => !isTrained(w[name]));
  const run = (xin: tf.Tensor, params: tf.Tensor[], consts: tf.Tensor[]) =>
    layer(xin, { ...Object.fromEntries(constants.map((name, i) => [name, consts[i]])), ...Object.fromEntries(trained.map((name, i) => [name, params[i]])) });
  const f = tf.customGrad((...args) => {
    const save = args.pop() as tf.GradSaveFunc;
    const [xin, ...params] = args as tf.Tensor[];
    const consts = constants.map((name) => w[name]);
    save([xin, ...params, ...consts]);
    return {
      value: run(xin, params, consts),
      gradFunc: (dy: tf.Tensor, [xs, ...rest]: tf.Tensor[]) => {
        const ps = rest.slice(0, trained.length);
        const cs = rest.slice(trained.length);
        for (const p of ps) recomputedParameters.add(p);
        // tfjs keeps one active tape: a gradient computed inside the backward pass starts its own
        // and, done, drops it. The outer one is put back, for the outer pass to free what it saved.
        const state = (tf.engine() as unknown as { state: { activeTape: unknown } }).state;
        const outer = state.activeTape;
        try {
          return tf.grads((xx: tf.Tensor, ...pp: tf.Tensor[]) => run(xx, pp, cs))([xs, ...ps], dy);
        } finally {
          state.activeTape = outer;
        }
      },
    };
  }) as (...inputs: tf.Tensor[]) => tf.Tensor;
  return f(x, ...trained.map((name) => w[name]));
}
