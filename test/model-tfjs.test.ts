// The tfjs ops with hand-written gradients (engines/model-tfjs.ts: linear with bias, LayerNorm,
// RMSNorm, GELU) give the same values and gradients as tfjs's autodiff of the plain formulas, on the
// backend the trainer uses here and on the pure-JS reference backend.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as tf from '@tensorflow/tfjs';
import { loadTfjsBackend } from '../engines/backends';
import { createTfjsOps } from '../engines/model-tfjs';

function seeded(shape: number[], seed: number): tf.Tensor {
  const n = shape.reduce((a, b) => a * b, 1);
  return tf.tensor(Float32Array.from({ length: n }, (_, i) => Math.sin(seed * 12.9898 + i * 78.233) * 1.5), shape);
}

const reference = {
  linear: (x: tf.Tensor, w: tf.Tensor, b: tf.Tensor) => tf.add(tf.reshape(tf.matMul(tf.reshape(x, [-1, x.shape[2]!]), w), [x.shape[0]!, x.shape[1]!, w.shape[1]!]), b),
  layerNorm(x: tf.Tensor, g: tf.Tensor, b: tf.Tensor, eps: number) {
    const c = tf.sub(x, tf.mean(x, -1, true));
    return tf.add(tf.mul(tf.mul(c, tf.rsqrt(tf.add(tf.mean(tf.square(c), -1, true), eps))), g), b);
  },
  rmsNorm: (x: tf.Tensor, g: tf.Tensor, eps: number) => tf.mul(tf.mul(x, tf.rsqrt(tf.add(tf.mean(tf.square(x), -1, true), eps))), g),
  gelu: (x: tf.Tensor) => tf.mul(tf.mul(x, 0.5), tf.add(tf.tanh(tf.mul(tf.add(x, tf.mul(tf.pow(x, 3), 0.044715)), Math.sqrt(2 / Math.PI))), 1)),
};

async function maxDiff(a: tf.Tensor, b: tf.Tensor): Promise<number> {
  return (await tf.max(tf.abs(tf.sub(a, b))).data())[0];
}

async function compareOnCurrentBackend(label: string): Promise<void> {
  const ops = createTfjsOps({ explicitTransposeGrad: tf.getBackend() === 'wasm' });
  const x = seeded([3, 5, 8], 1);
  // A variable: on wasm a plain tensor is a frozen weight, which by design gets no gradient.
  const w = tf.variable(seeded([8, 6], 2), true, `model-tfjs-test-w-${label}`);
  const bias = seeded([6], 3);
  const g = seeded([8], 4);
  const beta = seeded([8], 5);
  const upstream = seeded([3, 5, 8], 6);
  const upstream6 = seeded([3, 5, 6], 7);
  const cases: Array<[string, (...t: tf.Tensor[]) => tf.Tensor, (...t: tf.Tensor[]) => tf.Tensor, tf.Tensor[], tf.Tensor]> = [
    ['linear + bias', (a, b, c) => ops.linear(a, b, c), reference.linear, [x, w, bias], upstream6],
    ['layerNorm', (a, b, c) => ops.layerNorm(a, b, c, 1e-5), (a, b, c) => reference.layerNorm(a, b, c, 1e-5), [x, g, beta], upstream],
    ['rmsNorm', (a, b) => ops.rmsNorm(a, b, 1e-5), (a, b) => reference.rmsNorm(a, b, 1e-5), [x, g], upstream],
    ['gelu', (a) => ops.gelu(a), reference.gelu, [x], upstream],
  ];
  for (const [name, fused, plain, inputs, dy] of cases) {
    const f = tf.grads((...t: tf.Tensor[]) => fused(...t));
    const r = tf.grads((...t: tf.Tensor[]) => plain(...t));
    assert.ok((await maxDiff(fused(...inputs), plain(...inputs))) < 1e-5, `${label} ${name}: value`);
    const gf = f(inputs, dy);
    const gr = r(inputs, dy);
    for (let i = 0; i < inputs.length; i++) {
      const d = await maxDiff(gf[i], gr[i]);
      assert.ok(d < 1e-4, `${label} ${name}: gradient of input ${i} differs by ${d}`);
    }
  }
}

test('hand-written gradients match autodiff of the plain formulas, on the trainer backend and on pure-JS cpu', async () => {
  const info = await loadTfjsBackend({ kind: 'cpu' });
  await compareOnCurrentBackend(info.backend);
  await tf.setBackend('cpu');
  await compareOnCurrentBackend('cpu');
});
