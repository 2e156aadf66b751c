// The fused, chunked vocabulary head (engines/vocab-head.ts) against the unfused one it replaces on
// native backends (logits, log-softmax, one-hot): the same log-probs and entropies, and the same
// gradients for the hidden states and, when the head trains, for the head in either layout; over
// more rows than one chunk and a vocabulary that is not a multiple of the exp-sum block.
import assert from 'node:assert/strict';
import { before, test } from 'node:test';
import * as tf from '@tensorflow/tfjs';
import { loadTfjsBackend } from '../engines/backends';
import { entropyFromLogSoftmax, targetLogprobs, vocabLogSoftmax } from '../engines/rl/losses';
import { headLogprobsAndEntropy } from '../engines/vocab-head';

before(async () => {
  await loadTfjsBackend({ kind: 'cpu' });
});

const N = 600; // > one 512-row chunk
const D = 24;
const V = 1100; // > the large-vocabulary threshold, not a multiple of 128

function inputs(seed: number) {
  const h = tf.randomNormal([N, D], 0, 1, 'float32', seed) as tf.Tensor2D;
  const dv = tf.randomNormal([D, V], 0, 0.5, 'float32', seed + 1) as tf.Tensor2D;
  const targets = tf.randomUniform([N], 0, V, 'int32', seed + 2) as tf.Tensor1D;
  // Upstream gradients of the log-probs and the entropies, as a loss would give them.
  const gl = tf.randomNormal([N], 0, 1, 'float32', seed + 3);
  const ge = tf.randomNormal([N], 0, 1, 'float32', seed + 4);
  return { h, dv, targets, gl, ge };
}

function unfused(h: tf.Tensor2D, dv: tf.Tensor2D, targets: tf.Tensor1D): { logprobs: tf.Tensor; entropy: tf.Tensor } {
  const logSoftmax = vocabLogSoftmax(tf.reshape(tf.matMul(h, dv), [1, N, V]));
  return { logprobs: tf.reshape(targetLogprobs(logSoftmax, tf.reshape(targets, [1, N])), [N]), entropy: tf.reshape(entropyFromLogSoftmax(logSoftmax), [N]) };
}

const maxDiff = (a: tf.Tensor, b: tf.Tensor) => tf.max(tf.abs(tf.sub(a, b))).dataSync()[0];

test('fused head: log-probs and entropies equal the unfused head', () => {
  const { h, dv, targets } = inputs(1);
  const fused = headLogprobsAndEntropy(h, { dv }, targets);
  const ref = unfused(h, dv, targets);
  assert.deepEqual(fused.shape, [N, 2]);
  assert.ok(maxDiff(tf.slice(fused, [0, 0], [N, 1]).reshape([N]), ref.logprobs) < 1e-4);
  assert.ok(maxDiff(tf.slice(fused, [0, 1], [N, 1]).reshape([N]), ref.entropy) < 1e-4);
  // The tied layout ([V, D], multiplied transposed) gives the same numbers.
  const tied = headLogprobsAndEntropy(h, { vd: tf.transpose(dv) as tf.Tensor2D }, targets);
  assert.ok(maxDiff(tied, fused) < 1e-4);
});

test('fused head: gradients for the hidden states (frozen head) and the head in either layout (trained)', () => {
  const { h, dv, targets, gl, ge } = inputs(2);
  const objective = (lp: tf.Tensor, ent: tf.Tensor) => tf.add(tf.sum(tf.mul(lp, gl)), tf.sum(tf.mul(ent, ge))) as tf.Scalar;
  const fusedObjective = (out: tf.Tensor2D) => objective(tf.slice(out, [0, 0], [N, 1]).reshape([N]), tf.slice(out, [0, 1], [N, 1]).reshape([N]));
  const [refDh, refDw] = tf.grads((hh: tf.Tensor, ww: tf.Tensor) => {
    const r = unfused(hh as tf.Tensor2D, ww as tf.Tensor2D, targets);
    return objective(r.logprobs, r.entropy);
  })([h, dv]);
  const scale = tf.max(tf.abs(refDh)).dataSync()[0];

  const vd = tf.transpose(dv) as tf.Tensor2D;
  const frozenDh = tf.grad((hh: tf.Tensor) => fusedObjective(headLogprobsAndEntropy(hh as tf.Tensor2D, { dv, vd }, targets)))(h);
  assert.ok(maxDiff(frozenDh, refDh) < 1e-4 * Math.max(1, scale), 'dh with a frozen head');

  const [dhDv, dwDv] = tf.grads((hh: tf.Tensor, ww: tf.Tensor) => fusedObjective(headLogprobsAndEntropy(hh as tf.Tensor2D, { dv: ww as tf.Tensor2D }, targets, 'dv')))([h, dv]);
  assert.ok(maxDiff(dhDv, refDh) < 1e-4 * Math.max(1, scale));
  assert.ok(maxDiff(dwDv, refDw) < 1e-4 * Math.max(1, tf.max(tf.abs(refDw)).dataSync()[0]), 'dW in the [D, V] layout');

  const [, dwVd] = tf.grads((hh: tf.Tensor, ww: tf.Tensor) => fusedObjective(headLogprobsAndEntropy(hh as tf.Tensor2D, { vd: ww as tf.Tensor2D }, targets, 'vd')))([h, vd]);
  assert.ok(maxDiff(dwVd, tf.transpose(refDw)) < 1e-4 * Math.max(1, tf.max(tf.abs(refDw)).dataSync()[0]), 'dW in the tied [V, D] layout');
});
