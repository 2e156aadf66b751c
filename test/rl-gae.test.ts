// GAE (engines/rl/gae.ts) against a hand-computed trajectory, and the clipped value loss
// (engines/rl/value-loss.ts) against the formula written out with its numbers.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as tf from '@tensorflow/tfjs';
import { explainedVariance, gaeAdvantages, tokenLevelRewards, whitenAdvantages } from '../engines/rl/gae';
import { clippedValueLoss } from '../engines/rl/value-loss';

function assertClose(actual: ArrayLike<number>, expected: readonly number[], tol = 1e-6): void {
  assert.equal(actual.length, expected.length);
  for (let i = 0; i < expected.length; i++) assert.ok(Math.abs(actual[i] - expected[i]) <= tol, `index ${i}: ${actual[i]} != ${expected[i]}`);
}

test('token-level rewards: -kl_coef * KL_t on every token, the final reward added on the last', () => {
  // kl = [0.1, 0.2, 0.3], kl_coef 0.5: [-0.05, -0.1, -0.15 + 1]
  assertClose(tokenLevelRewards(1, 3, [0.1, 0.2, 0.3], 0.5), [-0.05, -0.1, 0.85]);
  assertClose(tokenLevelRewards(1, 3), [0, 0, 1]);
});

test('GAE over a hand-computed 3-token trajectory (gamma 0.9, lambda 0.8)', () => {
  // r = [-0.05, -0.1, 0.85], V = [0.5, 0.6, 0.7], V past the end = 0
  // delta_2 = 0.85 + 0.9 * 0   - 0.7 =  0.15
  // delta_1 = -0.1 + 0.9 * 0.7 - 0.6 = -0.07
  // delta_0 = -0.05 + 0.9 * 0.6 - 0.5 = -0.01
  // gamma * lambda = 0.72
  // A_2 = 0.15; A_1 = -0.07 + 0.72 * 0.15 = 0.038; A_0 = -0.01 + 0.72 * 0.038 = 0.01736
  // R = A + V = [0.51736, 0.638, 0.85]
  const { advantages, returns } = gaeAdvantages([-0.05, -0.1, 0.85], [0.5, 0.6, 0.7], 0.9, 0.8);
  assertClose(advantages, [0.01736, 0.038, 0.15]);
  assertClose(returns, [0.51736, 0.638, 0.85]);
});

test('GAE with gamma = lambda = 1 is the Monte-Carlo return minus the value', () => {
  // R_t = sum of the rewards from t on: [1, 1, 1] for a final reward of 1
  const { advantages, returns } = gaeAdvantages([0, 0, 1], [0.2, 0.4, 0.6], 1, 1);
  assertClose(returns, [1, 1, 1]);
  assertClose(advantages, [0.8, 0.6, 0.4]);
  assert.throws(() => gaeAdvantages([0, 1], [0.5], 1, 1), /1 values for 2 rewards/);
});

test("whitened advantages: verl's masked_whiten, (A - mean) / sqrt(unbiased var + eps) over the batch's (mask-1) tokens", () => {
  // tokens [1, 3] and [5]: mean 3, unbiased variance ((-2)^2 + 0 + 2^2) / (3 - 1) = 4, std 2
  const [a, b] = whitenAdvantages([[1, 3], [5]], undefined, 0);
  assertClose(a, [-1, 0]);
  assertClose(b, [1]);
  // With masks the statistics skip the mask-0 token (100) and every token is whitened by them.
  const [c, d] = whitenAdvantages([[1, 100, 3], [5]], [[1, 0, 1], [1]], 0);
  assertClose(c, [-1, 48.5, 0]);
  assertClose(d, [1]);
  // One token: centred only (no variance to divide by).
  assertClose(whitenAdvantages([[7]])[0], [0]);
});

test('GAE skips environment tokens (mask 0) as verl does, and the final reward lands on the last action token', () => {
  // Response: action, env, action, env; final reward 1, gamma 0.9, lambda 0.8.
  // Rewards with the mask: the reward on token 2 (the last mask-1 token), KL only on action tokens.
  const mask = [1, 0, 1, 0];
  assertClose(tokenLevelRewards(1, 4, [0.1, 0.2, 0.3, 0.4], 0.5, mask), [-0.05, 0, 0.85, 0]);
  // V = [0.5, 9, 0.7, 9] (the env tokens' values never enter):
  // t=3 env: A_3 = 0 (nothing after); t=2: delta = 0.85 + 0.9 * 0 - 0.7 = 0.15, A_2 = 0.15
  // t=1 env: A_1 = A_2 = 0.15; t=0: delta = -0.05 + 0.9 * 0.7 - 0.5 = 0.08, A_0 = 0.08 + 0.72 * 0.15 = 0.188
  // R = A + V = [0.688, 9.15, 0.85, 9]
  const { advantages, returns } = gaeAdvantages([-0.05, 0, 0.85, 0], [0.5, 9, 0.7, 9], 0.9, 0.8, mask);
  assertClose(advantages, [0.188, 0.15, 0.15, 0]);
  assertClose(returns, [0.688, 9.15, 0.85, 9]);
});

test('explained variance = 1 - Var(R - V) / Var(R)', () => {
  // R = [1, 2, 4]: Var = 14/9; R - V = [0, 0, 1]: Var = 2/9; EV = 1 - 1/7
  assert.ok(Math.abs(explainedVariance([1, 2, 3], [1, 2, 4]) - 6 / 7) < 1e-9);
  assert.equal(explainedVariance([1, 2], [3, 3]), 0);
});

test('clipped value loss: 0.5 * max((V - R)^2, (clip(V, V_old +- eps) - R)^2), token mean, and its gradient', () => {
  // eps 0.2; the third token is masked out.
  // tok 0: V 1.0, V_old 0.5, R 0.6: unclipped 0.16, clipped V 0.7 -> 0.01; max 0.16 -> 0.08
  // tok 1: V 0.45, V_old 0.0, R 0.5: unclipped 0.0025, clipped V 0.2 -> 0.09; max 0.09 -> 0.045 (clipped)
  // loss = (0.08 + 0.045) / 2 = 0.0625; clip fraction 1/2
  // dL/dV: tok 0 (V - R) / 2 tokens = 0.2; tok 1 through the clip (V - V_old past eps) = 0; tok 2 masked = 0
  const oldValues = tf.tensor2d([[0.5, 0.0, 0]]);
  const returns = tf.tensor2d([[0.6, 0.5, 0]]);
  const mask = tf.tensor2d([[1, 1, 0]]);
  const values = tf.tensor2d([[1.0, 0.45, 5]]);
  const out = clippedValueLoss({ values, oldValues, returns, mask, clip: 0.2 });
  assert.ok(Math.abs(out.loss.dataSync()[0] - 0.0625) < 1e-6);
  assert.ok(Math.abs(out.clipFraction.dataSync()[0] - 0.5) < 1e-6);
  const grad = tf.grad((v: tf.Tensor) => clippedValueLoss({ values: v as tf.Tensor2D, oldValues, returns, mask, clip: 0.2 }).loss)(values);
  assertClose(grad.dataSync(), [0.2, 0, 0]);
  // No clipping (Infinity): tok 1 is 0.5 * 0.0025 = 0.00125; loss = (0.08 + 0.00125) / 2 = 0.040625
  const unclipped = clippedValueLoss({ values, oldValues, returns, mask, clip: Infinity });
  assert.ok(Math.abs(unclipped.loss.dataSync()[0] - 0.040625) < 1e-6);
});
