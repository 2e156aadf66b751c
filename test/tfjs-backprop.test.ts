// variableGradsReleasing (engines/tfjs-backprop.ts): tfjs's gradients, from a backward pass that
// frees each tape node's tensors once done with them.
import assert from 'node:assert/strict';
import { before, test } from 'node:test';
import * as tf from '@tensorflow/tfjs';
import { loadTfjsBackend } from '../engines/backends';
import { variableGradsReleasing } from '../engines/tfjs-backprop';

before(async () => {
  await loadTfjsBackend({ kind: 'cpu' });
});

/** tanh with its gradient written out (a custom gradient whose temporaries tfjs keeps to the end). */
const customTanh = tf.customGrad((x, save) => {
  (save as tf.GradSaveFunc)([x as tf.Tensor]);
  return { value: tf.tanh(x as tf.Tensor), gradFunc: (dy: tf.Tensor, [xs]: tf.Tensor[]) => tf.mul(dy, tf.sub(tf.scalar(1), tf.square(tf.tanh(xs)))) };
}) as (x: tf.Tensor) => tf.Tensor;

test('variableGradsReleasing: the gradients of tf.variableGrads, nothing left behind, and a lower peak on a deep chain', async () => {
  const w = tf.variable(tf.randomNormal([64, 64], 0, 0.2, 'float32', 1), true, 'backprop-w');
  const w2 = tf.variable(tf.randomNormal([64, 64], 0, 0.2, 'float32', 2), true, 'backprop-w2');
  const unused = tf.variable(tf.zeros([3]), true, 'backprop-unused');
  const frozen = tf.randomNormal([64, 64], 0, 0.2, 'float32', 3);
  const x0 = tf.randomNormal([256, 64], 0, 1, 'float32', 4);
  // Twelve layers of splits, a custom gradient, an identity, tensors read twice, a constant read too.
  const f = () => {
    let h: tf.Tensor = x0;
    for (let l = 0; l < 12; l++) {
      const [p, q] = tf.split(tf.matMul(h, w), 2, 1);
      const g = customTanh(tf.concat([tf.mul(p, q), tf.clone(p)], 1));
      h = tf.add(g, tf.matMul(tf.matMul(g, w2), frozen));
    }
    return tf.mean(tf.square(h)) as tf.Scalar;
  };
  const reference = tf.variableGrads(f, [w, w2, unused]);
  const before = tf.memory().numTensors;
  const released = variableGradsReleasing(f, [w, w2, unused]);
  assert.equal(tf.memory().numTensors - before, 3, 'the value and two gradients remain, nothing else');
  assert.deepEqual(Object.keys(released.grads).sort(), Object.keys(reference.grads).sort(), 'a variable f does not read gets no gradient, as with tf.variableGrads');
  assert.ok(Math.abs(released.value.dataSync()[0] - reference.value.dataSync()[0]) < 1e-6);
  for (const name of Object.keys(reference.grads)) {
    const [a, b] = [reference.grads[name].dataSync(), released.grads[name].dataSync()];
    let worst = 0;
    for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i] - b[i]) / (Math.abs(a[i]) + 1e-6));
    assert.ok(worst < 1e-5, `${name}: relative difference ${worst}`);
  }
  tf.dispose([reference.value, released.value, ...Object.values(reference.grads), ...Object.values(released.grads)]);
  // The peak: tfjs holds every saved tensor and every gradient to the end of its backward pass.
  const peak = async (grads: () => { value: tf.Scalar; grads: tf.NamedTensorMap }) => {
    const info = await tf.profile(() => {
      const r = grads();
      tf.dispose([r.value, ...Object.values(r.grads)]);
    });
    return info.peakBytes;
  };
  const [tfPeak, releasedPeak] = [await peak(() => tf.variableGrads(f, [w, w2])), await peak(() => variableGradsReleasing(f, [w, w2]))];
  assert.ok(releasedPeak < 0.85 * tfPeak, `peak bytes ${releasedPeak} vs tf.variableGrads ${tfPeak}`);
  const held = tf.memory().numTensors;
  assert.throws(() => variableGradsReleasing(() => tf.matMul(x0, w) as unknown as tf.Scalar, [w]), /f must return a scalar/);
  assert.equal(tf.memory().numTensors, held, 'a refused call leaves nothing behind either');
  tf.dispose([w, w2, unused, frozen, x0]);
});
