// The model's ops on tfjs eager tensors: what the trainer differentiates. Works on every tfjs
// backend; on wasm it avoids the slow paths measured there (docs/architecture.md#engines): matmul gradients
// use explicit transposes instead of BatchMatMul's transpose flags, no transpose exceeds rank 4, and
// the embedding gradient needs the UnsortedSegmentSum kernel from engines/wasm-kernels.ts.
import * as tf from '@tensorflow/tfjs';
import type { TensorOps } from './model';
import { attentionFused, checkpointLayer, isTrained, loraLinearFused } from './tfjs-layer-ops';

function swapLastTwo(x: tf.Tensor): tf.Tensor {
  const perm = x.shape.map((_, i) => i);
  const r = perm.length;
  [perm[r - 2], perm[r - 1]] = [perm[r - 1], perm[r - 2]];
  return tf.transpose(x, perm);
}

/** a @ b whose gradient uses explicit transposes + plain matmuls (10x faster than transpose flags on wasm). */
const matmulExplicitGrad = tf.customGrad((a, b, save) => {
  (save as tf.GradSaveFunc)([a as tf.Tensor, b as tf.Tensor]);
  return {
    value: tf.matMul(a as tf.Tensor, b as tf.Tensor),
    gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => [tf.matMul(dy, swapLastTwo(saved[1])), tf.matMul(swapLastTwo(saved[0]), dy)],
  };
}) as (a: tf.Tensor, b: tf.Tensor) => tf.Tensor;

/**
 * Frozen weights split into row blocks of BLOCK_ROWS (blockFrozenWeight). The wasm backend's matmul
 * sums along the inner dimension in one running float32 sum: over 1,536 terms that is ~7x less
 * precise than tfjs's blocked pure-JS kernel, enough to move a 30-layer model's logits by ~1e-4.
 * Summing the products of 128-row blocks instead brings it to the pure-JS kernel's precision.
 */
const BLOCK_ROWS = 128;
const frozenBlocks = new WeakMap<tf.Tensor, tf.Tensor[]>();

/**
 * Keeps a frozen weight [in, out] (never trained: a LoRA base) as row blocks for frozenLinear2d and
 * returns the blocks (the caller owns them; `w` itself is no longer read and may be disposed).
 * Weights with in <= 2 x BLOCK_ROWS are left whole.
 */
export function blockFrozenWeight(w: tf.Tensor): tf.Tensor[] {
  const rows = w.shape[0] as number;
  if (w.rank !== 2 || rows <= 2 * BLOCK_ROWS) return [];
  const blocks: tf.Tensor[] = [];
  for (let r = 0; r < rows; r += BLOCK_ROWS) blocks.push(tf.slice(w, [r, 0], [Math.min(BLOCK_ROWS, rows - r), -1]));
  frozenBlocks.set(w, blocks);
  return blocks;
}

/**
 * x [N, in] @ w [in, out] where w is NOT trained (a frozen LoRA base, a reference policy): only x
 * gets a gradient, dx = (w @ dy^T)^T. w is the left operand there, so no transposed copy of the
 * weight is made, and no weight gradient is computed only to be thrown away. A blocked weight is
 * multiplied block by block (see BLOCK_ROWS).
 */
function frozenLinear2d(x: tf.Tensor, w: tf.Tensor): tf.Tensor {
  const blocks = frozenBlocks.get(w);
  return (
    tf.customGrad((input, save) => {
      (save as tf.GradSaveFunc)([]);
      const xin = input as tf.Tensor;
      if (!blocks) return { value: tf.matMul(xin, w), gradFunc: (dy: tf.Tensor) => tf.transpose(tf.matMul(w, tf.transpose(dy))) };
      let offset = 0;
      const parts = blocks.map((b) => {
        const rows = b.shape[0] as number;
        const part = tf.matMul(tf.slice(xin, [0, offset], [-1, rows]), b);
        offset += rows;
        return part;
      });
      return {
        value: tf.addN(parts),
        gradFunc: (dy: tf.Tensor) => {
          const dyT = tf.transpose(dy);
          return tf.concat(blocks.map((b) => tf.transpose(tf.matMul(b, dyT))), 1);
        },
      };
    }) as (x: tf.Tensor) => tf.Tensor
  )(x);
}

/** x [N, in] @ w [in, out] for a trained w: dx = (w @ dy^T)^T and dw = x^T @ dy, plain matmuls only (no transposed weight copy). */
const trainedLinear2d = tf.customGrad((x, w, save) => {
  (save as tf.GradSaveFunc)([x as tf.Tensor, w as tf.Tensor]);
  return {
    value: tf.matMul(x as tf.Tensor, w as tf.Tensor),
    gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => [tf.transpose(tf.matMul(saved[1], tf.transpose(dy))), tf.matMul(tf.transpose(saved[0]), dy)],
  };
}) as (x: tf.Tensor, w: tf.Tensor) => tf.Tensor;

/**
 * x [N, in] @ w [in, out] (+ b) with the gradient written out: dx = dy w^T, dw = x^T dy, db = sum(dy).
 * On native TensorFlow the transpose flags are the fast path, and the hand-written gradient skips
 * the tape's bookkeeping around matMul and the bias add (saved-tensor copies, broadcast reductions).
 */
const linearNative = tf.customGrad((x, w, b, save) => {
  (save as tf.GradSaveFunc)([x as tf.Tensor, w as tf.Tensor]);
  return {
    value: tf.add(tf.matMul(x as tf.Tensor, w as tf.Tensor), b as tf.Tensor),
    gradFunc: (dy: tf.Tensor, [xs, ws]: tf.Tensor[]) => [tf.matMul(dy, ws, false, true), tf.matMul(xs, dy, true, false), tf.sum(dy, 0)],
  };
}) as (x: tf.Tensor, w: tf.Tensor, b: tf.Tensor) => tf.Tensor;

/** Sums a [..., D] tensor over every axis but the last: the gradient of a per-feature parameter. */
const sumToLastAxis = (t: tf.Tensor) => tf.sum(tf.reshape(t, [-1, t.shape[t.rank - 1] as number]), 0);

/**
 * LayerNorm with its gradient written out (xhat = (x - mean) rstd):
 * dx = rstd (g dy - mean(g dy) - xhat mean(g dy xhat)), dgamma = sum(dy xhat), dbeta = sum(dy).
 * Thirteen ops backward, where autodiff of the forward's nine takes about thirty.
 */
const layerNormFused = memoByEps((eps) =>
  tf.customGrad((x, gamma, beta, save) => {
    const xt = x as tf.Tensor;
    const centered = tf.sub(xt, tf.mean(xt, -1, true));
    const rstd = tf.rsqrt(tf.add(tf.mean(tf.square(centered), -1, true), tf.scalar(eps)));
    const xhat = tf.mul(centered, rstd);
    (save as tf.GradSaveFunc)([xhat, rstd, gamma as tf.Tensor]);
    return {
      value: tf.add(tf.mul(xhat, gamma as tf.Tensor), beta as tf.Tensor),
      gradFunc: (dy: tf.Tensor, [xh, r, g]: tf.Tensor[]) => {
        const dxhat = tf.mul(dy, g);
        const dx = tf.mul(r, tf.sub(tf.sub(dxhat, tf.mean(dxhat, -1, true)), tf.mul(xh, tf.mean(tf.mul(dxhat, xh), -1, true))));
        return [dx, sumToLastAxis(tf.mul(dy, xh)), sumToLastAxis(dy)];
      },
    };
  }) as (x: tf.Tensor, gamma: tf.Tensor, beta: tf.Tensor) => tf.Tensor,
);

/** RMSNorm with its gradient written out (xhat = x rstd): dx = rstd (g dy - xhat mean(g dy xhat)), dgamma = sum(dy xhat). */
const rmsNormFused = memoByEps((eps) =>
  tf.customGrad((x, gamma, save) => {
    const xt = x as tf.Tensor;
    const rstd = tf.rsqrt(tf.add(tf.mean(tf.square(xt), -1, true), tf.scalar(eps)));
    const xhat = tf.mul(xt, rstd);
    (save as tf.GradSaveFunc)([xhat, rstd, gamma as tf.Tensor]);
    return {
      value: tf.mul(xhat, gamma as tf.Tensor),
      gradFunc: (dy: tf.Tensor, [xh, r, g]: tf.Tensor[]) => {
        const dxhat = tf.mul(dy, g);
        return [tf.mul(r, tf.sub(dxhat, tf.mul(xh, tf.mean(tf.mul(dxhat, xh), -1, true)))), sumToLastAxis(tf.mul(dy, xh))];
      },
    };
  }) as (x: tf.Tensor, gamma: tf.Tensor) => tf.Tensor,
);

function memoByEps<F>(make: (eps: number) => F): (eps: number) => F {
  const made = new Map<number, F>();
  return (eps) => {
    let f = made.get(eps);
    if (!f) made.set(eps, (f = make(eps)));
    return f;
  };
}

const GELU_K = Math.sqrt(2 / Math.PI);
const GELU_A = 0.044715;

/**
 * GELU, tanh approximation (the forward is geluTanh's op sequence, so ONNX Runtime computes the same
 * numbers), with the derivative written out: with t = tanh(k (x + a x^3)),
 * d/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 a x^2).
 */
const geluFused = tf.customGrad((x, save) => {
  const xt = x as tf.Tensor;
  const t = tf.tanh(tf.mul(tf.add(xt, tf.mul(tf.mul(tf.mul(xt, xt), xt), tf.scalar(GELU_A))), tf.scalar(GELU_K)));
  (save as tf.GradSaveFunc)([xt, t]);
  return {
    value: tf.mul(tf.mul(xt, tf.scalar(0.5)), tf.add(t, tf.scalar(1))),
    gradFunc: (dy: tf.Tensor, [xs, ts]: tf.Tensor[]) => {
      const x2 = tf.square(xs);
      const slope = tf.mul(tf.mul(xs, tf.sub(tf.scalar(1), tf.square(ts))), tf.add(tf.mul(x2, tf.scalar(1.5 * GELU_K * GELU_A)), tf.scalar(0.5 * GELU_K)));
      return tf.mul(dy, tf.add(tf.mul(tf.add(ts, tf.scalar(1)), tf.scalar(0.5)), slope));
    },
  };
}) as (x: tf.Tensor) => tf.Tensor;

/**
 * SwiGLU gate sigmoid(gate) up with its gradient written out (s = sigmoid(gate)):
 * d up = dy gate s, d gate = dy up s (1 + gate (1 - s)). Only gate and up are kept for the
 * backward pass (autodiff of the three ops keeps their three [N, dFF] outputs too).
 */
function swigluFused(sigmoid: (x: tf.Tensor) => tf.Tensor): (gate: tf.Tensor, up: tf.Tensor) => tf.Tensor {
  return tf.customGrad((gate, up, save) => {
    (save as tf.GradSaveFunc)([gate as tf.Tensor, up as tf.Tensor]);
    return {
      value: tf.mul(tf.mul(gate as tf.Tensor, sigmoid(gate as tf.Tensor)), up as tf.Tensor),
      gradFunc: (dy: tf.Tensor, [g, u]: tf.Tensor[]) => {
        const s = sigmoid(g);
        const silu = tf.mul(g, s);
        const dGate = tf.mul(tf.mul(dy, u), tf.mul(s, tf.add(tf.scalar(1), tf.sub(g, silu))));
        return [dGate, tf.mul(dy, silu)];
      },
    };
  }) as (gate: tf.Tensor, up: tf.Tensor) => tf.Tensor;
}

/** rotateHalf([x1, x2]) = [-x2, x1] along the last axis. */
function rotateHalf(x: tf.Tensor): tf.Tensor {
  const [x1, x2] = tf.split(x, 2, -1);
  return tf.concat([tf.neg(x2), x1], -1);
}

/**
 * Rotary embedding x cos + rotateHalf(x) sin with its gradient written out: the map is linear in x,
 * so dx = dy cos + rotateHalf^T(dy sin), rotateHalf^T([z1, z2]) = [z2, -z1]. Nothing is kept for
 * the backward pass but the tables (autodiff keeps five intermediates of x's size).
 */
const rotaryFused = tf.customGrad((x, cos, sin, save) => {
  (save as tf.GradSaveFunc)([cos as tf.Tensor, sin as tf.Tensor]);
  return {
    value: tf.add(tf.mul(x as tf.Tensor, cos as tf.Tensor), tf.mul(rotateHalf(x as tf.Tensor), sin as tf.Tensor)),
    gradFunc: (dy: tf.Tensor, [c, s]: tf.Tensor[]) => {
      const [z1, z2] = tf.split(tf.mul(dy, s), 2, -1);
      return [tf.add(tf.mul(dy, c), tf.concat([z2, tf.neg(z1)], -1)), tf.zerosLike(c), tf.zerosLike(s)];
    },
  };
}) as (x: tf.Tensor, cos: tf.Tensor, sin: tf.Tensor) => tf.Tensor;

/**
 * tf.reshape whose backward pass keeps nothing. tfjs's Reshape keeps its input for its gradient (to
 * read its shape), and so holds alive until the backward pass whatever it reshapes: a fused
 * projection's whole output (LoRA's [N, 3 * 576] q/k/v and [N, 2 * 1536] gate/up blocks, which are
 * split at once) and the attention's output before its transpose. This is the backend's own Reshape
 * kernel under another name, whose registered gradient reads the input's shape from its attributes.
 * (A tf.customGrad wrapper did the same at several times the cost of a reshape per call.)
 */
const RESHAPE_FREE = 'RelaxReshapeFree';
const reshapeFreeBackends = new Set<string>();
let reshapeFreeGradient = false;

function reshapeFree(x: tf.Tensor, shape: number[]): tf.Tensor {
  const backendName = tf.getBackend();
  if (!reshapeFreeBackends.has(backendName)) {
    const reshape = tf.getKernel('Reshape', backendName);
    if (!reshape) throw new Error(`the ${backendName} tfjs backend has no Reshape kernel`);
    tf.registerKernel({ kernelName: RESHAPE_FREE, backendName, kernelFunc: ({ inputs, backend, attrs }) => reshape.kernelFunc({ inputs, backend, attrs: { shape: (attrs as { shape: number[] }).shape } }) });
    if (!reshapeFreeGradient) {
      tf.registerGradient({ kernelName: RESHAPE_FREE, inputsToSave: [], gradFunc: (dy, _saved, attrs) => ({ x: () => tf.reshape(dy as tf.Tensor, (attrs as unknown as { inputShape: number[] }).inputShape) }) });
      reshapeFreeGradient = true;
    }
    reshapeFreeBackends.add(backendName);
  }
  return tf.engine().runKernel(RESHAPE_FREE, { x }, { shape, inputShape: x.shape }) as tf.Tensor;
}

function resolveShape(x: tf.Tensor, shape: number[]): number[] {
  return shape.map((d, i) => (d === 0 ? x.shape[i] : d));
}

export interface TfjsOpsOptions {
  /** Differentiate matmuls through explicit transposes (faster on wasm, slower on native TensorFlow). */
  explicitTransposeGrad: boolean;
}

export function createTfjsOps(options: TfjsOpsOptions): TensorOps<tf.Tensor> {
  const matmul = options.explicitTransposeGrad ? matmulExplicitGrad : (a: tf.Tensor, b: tf.Tensor) => tf.matMul(a, b);
  // wasm's Sigmoid kernel is an approximation: 1 / (1 + exp(-x)) brought SmolLM2's logits ~20%
  // closer to the float64 reference (1.2e-4 -> 9e-5 max error).
  const sigmoid = options.explicitTransposeGrad ? (x: tf.Tensor) => tf.div(tf.scalar(1), tf.add(tf.scalar(1), tf.exp(tf.neg(x)))) : (x: tf.Tensor) => tf.sigmoid(x);
  const swiglu = swigluFused(sigmoid);
  const to2d = (x: tf.Tensor) => reshapeFree(x, [-1, x.shape[x.rank - 1] as number]);
  // The fused attention and LoRA projection use BatchMatMul's transpose flags, the fast path on
  // native TensorFlow (the slow one on wasm, which keeps the compositions).
  const native: Pick<TensorOps<tf.Tensor>, 'attention' | 'loraLinear'> = options.explicitTransposeGrad
    ? {}
    : {
        attention: (q, kT, v, bias) => attentionFused(q, kT, v, bias),
        loraLinear(x, weight, bias, loraX, parts, scale) {
          const x2d = to2d(x);
          const y = loraLinearFused(x2d, weight, bias, loraX === x ? x2d : to2d(loraX), parts, scale);
          return reshapeFree(y, [...x.shape.slice(0, -1), y.shape[1] as number]);
        },
      };
  return {
    ...native,
    checkpoint: checkpointLayer,
    scope: <R>(f: () => R): R => tf.tidy(f as () => tf.TensorContainer) as R,
    embed: (table, ids) => tf.gather(table, ids),
    linear(x, weight, bias) {
      const lead = x.shape.slice(0, -1);
      const x2d = to2d(x);
      let y: tf.Tensor;
      if (!options.explicitTransposeGrad) y = bias ? linearNative(x2d, weight, bias) : tf.matMul(x2d, weight);
      else {
        y = isTrained(weight) ? trainedLinear2d(x2d, weight) : frozenLinear2d(x2d, weight);
        if (bias) y = tf.add(y, bias);
      }
      return reshapeFree(y, [...lead, weight.shape[1] as number]);
    },
    matmul,
    add: (a, b) => tf.add(a, b),
    mul: (a, b) => tf.mul(a, b),
    scale: (x, s) => tf.mul(x, tf.scalar(s)),
    shift: (x, s) => tf.add(x, tf.scalar(s)),
    tanh: (x) => tf.tanh(x),
    erf: (x) => tf.erf(x),
    gelu: (x) => geluFused(x),
    softmax: (x) => tf.softmax(x),
    layerNorm: (x, gamma, beta, eps) => layerNormFused(eps)(x, gamma, beta),
    rmsNorm: (x, gamma, eps) => rmsNormFused(eps)(x, gamma),
    sigmoid,
    swiglu,
    rotary: (x, cos, sin) => rotaryFused(x, cos, sin),
    linearTransposed(x, weight) {
      const lead = x.shape.slice(0, -1);
      // An explicit transpose + plain matmul: BatchMatMul's transpose flags are the slow path on wasm.
      const x2d = to2d(x);
      const y = isTrained(weight) ? matmul(x2d, tf.transpose(weight)) : options.explicitTransposeGrad ? frozenLinear2d(x2d, tf.transpose(weight)) : tf.matMul(x2d, weight, false, true);
      return reshapeFree(y, [...lead, weight.shape[0] as number]);
    },
    split: (x, parts) => tf.split(x, parts, -1),
    splitSizes: (x, sizes) => tf.split(x, sizes, -1),
    reshape: (x, shape) => reshapeFree(x, resolveShape(x, shape)),
    transpose: (x, perm) => tf.transpose(x, perm),
    concat: (xs, axis) => tf.concat(xs, axis),
    lastPosition: (x) => tf.slice(x, [0, x.shape[1]! - 1, 0], [-1, 1, -1]),
    positionsFrom: (x, start) => tf.slice(x, [0, start, 0], [-1, -1, -1]),
    leadingRows: (table, x) => tf.slice(table, [0, 0], [x.shape[1] as number, -1]),
    conv1d: (x, weight, bias, stride, padding) => conv1dIm2col(x, weight, bias, stride, padding, matmul),
  };
}

/**
 * conv1d as im2col + one matmul: pad the time axis, take the k shifted (and, for stride s, every
 * s-th) windows with slice + reshape, concatenate them along channels ([B, T', k Cin], tap-major like
 * the weight [k, Cin, Cout] read as [k Cin, Cout]) and multiply. Pad, slice, reshape, concat and
 * matmul differentiate on every backend; tf.conv1d's filter gradient (Conv2DBackpropFilter) does
 * not exist on wasm.
 */
function conv1dIm2col(x: tf.Tensor, weight: tf.Tensor, bias: tf.Tensor, stride: number, padding: number, matmul: (a: tf.Tensor, b: tf.Tensor) => tf.Tensor): tf.Tensor {
  const [B, T, C] = x.shape as number[];
  const [k, cin, cout] = weight.shape as number[];
  if (cin !== C) throw new Error(`conv1d: input has ${C} channels, the weight expects ${cin}`);
  const outT = Math.floor((T + 2 * padding - k) / stride) + 1;
  // Enough zeros on the right that every tap's window of stride * outT positions fits.
  const extra = Math.max(0, k - 1 + stride * outT - (T + 2 * padding));
  const padded = tf.pad(x, [[0, 0], [padding, padding + extra], [0, 0]]);
  const taps: tf.Tensor[] = [];
  for (let j = 0; j < k; j++) {
    const window = tf.slice(padded, [0, j, 0], [B, stride * outT, C]);
    taps.push(stride === 1 ? window : tf.reshape(tf.slice(tf.reshape(window, [B, outT, stride, C]), [0, 0, 0, 0], [B, outT, 1, C]), [B, outT, C]));
  }
  const cols = tf.reshape(tf.concat(taps, 2), [B * outT, k * C]);
  const y = tf.add(matmul(cols, tf.reshape(weight, [k * C, cout])), bias);
  return tf.reshape(y, [B, outT, cout]);
}
