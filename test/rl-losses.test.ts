// The policy-gradient losses (engines/rl/losses.ts) as tfjs tensors, against hand-computed values.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as tf from '@tensorflow/tfjs';
import {
  aggregateLoss,
  entropyBonus,
  entropyFromLogits,
  gspoLoss,
  klLoss,
  ppoClipLoss,
  sftCrossEntropy,
  tokenEntropy,
  tokenLogprobs,
} from '../engines/rl/losses';
import { klTensor } from '../engines/rl/kl';

function assertClose(actual: tf.Tensor | number, expected: number | readonly number[], tol = 1e-5): void {
  const got = typeof actual === 'number' ? [actual] : Array.from(actual.dataSync());
  const want = typeof expected === 'number' ? [expected] : expected;
  assert.equal(got.length, want.length, `length ${got.length} != ${want.length}`);
  for (let i = 0; i < want.length; i++) {
    assert.ok(Math.abs(got[i] - want[i]) <= tol, `index ${i}: ${got[i]} != ${want[i]} (tol ${tol})`);
  }
}

test.before(async () => {
  await tf.setBackend('cpu');
});

test('aggregateLoss: token_mean, sequence_mean, sequence_sum_norm', () => {
  const perToken = tf.tensor2d([
    [1, 2, 3],
    [4, 9, 9],
  ]);
  const mask = tf.tensor2d([
    [1, 1, 1],
    [1, 0, 0],
  ]);
  // token_mean: (1+2+3+4) / 4 valid tokens = 2.5 (the masked 9s never count)
  assertClose(aggregateLoss(perToken, mask, 'token_mean'), 2.5);
  // sequence_mean: mean(6/3, 4/1) = mean(2, 4) = 3
  assertClose(aggregateLoss(perToken, mask, 'sequence_mean'), 3);
  // sequence_sum_norm: 10 / (B*T = 2*3) = 1.6666667
  assertClose(aggregateLoss(perToken, mask, 'sequence_sum_norm'), 10 / 6);
  // a sequence with no valid token is left out of sequence_mean: mean over row 0 only = (1+1)/2 = 1
  const empty = aggregateLoss(tf.tensor2d([[1, 1], [5, 5]]), tf.tensor2d([[1, 1], [0, 0]]), 'sequence_mean');
  assertClose(empty, 1);
});

// Six tokens in two rows, oldLogprobs all -1, clip range [1 - 0.2, 1 + 0.28] = [0.8, 1.28]:
//   t0: A=+1, log-ratio +0.1, ratio 1.1051709, inside       -> loss -1.1051709, not clipped
//   t1: A=+1, log-ratio +0.5, ratio 1.6487213 > 1.28         -> max(-1.6487213, -1.28) = -1.28, clipped (high side)
//   t2: A=-1, log-ratio -0.5, ratio 0.6065307 < 0.8          -> max(0.6065307, 0.8) = 0.8, clipped (low side)
//   t3: A=-1, log-ratio +0.5, ratio 1.6487213 (high, but A<0) -> max(1.6487213, 1.28) = 1.6487213, not clipped
//   t4: A=+1, log-ratio -0.5, ratio 0.6065307 (low, but A>0)  -> max(-0.6065307, -0.8) = -0.6065307, not clipped
//   t5: masked out (log-ratio +3 would otherwise be clipped)
const OLD = [
  [-1, -1, -1],
  [-1, -1, -1],
];
const DELTA = [
  [0.1, 0.5, -0.5],
  [0.5, -0.5, 3],
];
const ADV = [
  [1, 1, -1],
  [-1, 1, 1],
];
const MASK = [
  [1, 1, 1],
  [1, 1, 0],
];
function ppoInputs() {
  return {
    logprobs: tf.tensor2d(DELTA.map((row, i) => row.map((d, t) => OLD[i][t] + d))),
    oldLogprobs: tf.tensor2d(OLD),
    advantages: tf.tensor2d(ADV),
    mask: tf.tensor2d(MASK),
  };
}

test('ppoClipLoss with clip-higher: both clip sides, clip fraction, ratio stats', () => {
  const out = ppoClipLoss({ ...ppoInputs(), clipLow: 0.2, clipHigh: 0.28 });
  // token_mean: (-1.1051709 - 1.28 + 0.8 + 1.6487213 - 0.6065307) / 5 = -0.5429803 / 5 = -0.1085961
  assertClose(out.loss, -0.1085961);
  // t1 and t2 of 5 valid tokens are clipped
  assertClose(out.clipFraction, 0.4);
  assertClose(out.ratio, [1.1051709, 1.6487213, 0.6065307, 1.6487213, 0.6065307, Math.exp(3)], 1e-4);
  // (1.1051709 + 1.6487213 + 0.6065307 + 1.6487213 + 0.6065307) / 5 = 1.1231350
  assertClose(out.ratioMean, 1.123135);
  // mean of old - new over valid tokens: -(0.1 + 0.5 - 0.5 + 0.5 - 0.5) / 5 = -0.02
  assertClose(out.approxKl, -0.02);
});

test('ppoClipLoss sequence_mean aggregation', () => {
  const out = ppoClipLoss({ ...ppoInputs(), clipLow: 0.2, clipHigh: 0.28, aggregation: 'sequence_mean' });
  // row 0: (-1.1051709 - 1.28 + 0.8) / 3 = -0.5283903; row 1: (1.6487213 - 0.6065307) / 2 = 0.5210953
  // mean: (-0.5283903 + 0.5210953) / 2 = -0.0036475
  assertClose(out.loss, -0.0036475);
});

test('ppoClipLoss with clipHigh = clipLow = 0.2 clips the high side at 1.2', () => {
  const out = ppoClipLoss({ ...ppoInputs(), clipLow: 0.2, clipHigh: 0.2 });
  // only t1 changes: -1.28 -> -1.2; (-1.1051709 - 1.2 + 0.8 + 1.6487213 - 0.6065307) / 5 = -0.0925961
  assertClose(out.loss, -0.0925961);
  assertClose(out.clipFraction, 0.4);
});

test('ppoClipLoss with a wide clip range is the plain policy gradient surrogate', () => {
  const out = ppoClipLoss({ ...ppoInputs(), clipLow: 0.9, clipHigh: 10 });
  // nothing clipped: (-1.1051709 - 1.6487213 + 0.6065307 + 1.6487213 - 0.6065307) / 5 = -0.2210342
  assertClose(out.loss, -0.2210342);
  assertClose(out.clipFraction, 0);
});

test('gradient of ppoClipLoss is zero on clipped and masked tokens', () => {
  const { oldLogprobs, advantages, mask, logprobs } = ppoInputs();
  const grad = tf.grad((lp: tf.Tensor) =>
    ppoClipLoss({ logprobs: lp as tf.Tensor2D, oldLogprobs, advantages, mask, clipLow: 0.2, clipHigh: 0.28 }).loss,
  )(logprobs);
  // d/dlogp of -A * ratio / N = -A * ratio / 5 on unclipped tokens:
  //   t0: -1.1051709/5 = -0.2210342; t1, t2 clipped: 0; t3: +1.6487213/5 = 0.3297443; t4: -0.6065307/5 = -0.1213061; t5 masked: 0
  assertClose(grad, [-0.2210342, 0, 0, 0.3297443, -0.1213061, 0]);
});

test('ppoClipLoss accepts one advantage per sequence', () => {
  const { logprobs, oldLogprobs, mask } = ppoInputs();
  const perSequence = ppoClipLoss({ logprobs, oldLogprobs, mask, advantages: tf.tensor1d([1, -1]), clipLow: 0.2, clipHigh: 0.28 });
  const perToken = ppoClipLoss({ logprobs, oldLogprobs, mask, advantages: tf.tensor2d([[1, 1, 1], [-1, -1, -1]]), clipLow: 0.2, clipHigh: 0.28 });
  assertClose(perSequence.loss, perToken.loss.dataSync()[0]);
  assert.throws(() => ppoClipLoss({ ...ppoInputs(), clipLow: 1.5, clipHigh: 0.2 }), /clipLow must be in \[0, 1\]/);
});

// GSPO: row 0 log-ratios [0.1, 0.3, (masked 5)] -> mean 0.2, s0 = e^0.2 = 1.2214028
//       row 1 log-ratios [-0.2, -0.4, 0.0]      -> mean -0.2, s1 = e^-0.2 = 0.8187308
// advantages per sequence [+1, -1]
function gspoInputs() {
  return {
    logprobs: tf.tensor2d([
      [-0.9, -0.7, 4],
      [-1.2, -1.4, -1],
    ]),
    oldLogprobs: tf.tensor2d([
      [-1, -1, -1],
      [-1, -1, -1],
    ]),
    advantages: tf.tensor1d([1, -1]),
    mask: tf.tensor2d([
      [1, 1, 0],
      [1, 1, 1],
    ]),
  };
}

test('gspoLoss clips the sequence ratio', () => {
  const out = gspoLoss({ ...gspoInputs(), clipLow: 0.1, clipHigh: 0.15 });
  // range [0.9, 1.15]: s0 = 1.2214 > 1.15 with A=+1 -> -1.15; s1 = 0.8187 < 0.9 with A=-1 -> 0.9
  // sequence_mean: (-1.15 + 0.9) / 2 = -0.125; every valid token clipped
  assertClose(out.loss, -0.125);
  assertClose(out.clipFraction, 1);
  // the token-level ratio is the sequence ratio at every token (masked ones included)
  assertClose(out.ratio, [1.2214028, 1.2214028, 1.2214028, 0.8187308, 0.8187308, 0.8187308]);
});

test('gspoLoss value and gradient equal the sequence-level GSPO objective', () => {
  const inputs = gspoInputs();
  const loss = (lp: tf.Tensor) => gspoLoss({ ...inputs, logprobs: lp as tf.Tensor2D, clipLow: 0.3, clipHigh: 0.3 }).loss;
  // range [0.7, 1.3], nothing clipped: (-1.2214028 + 0.8187308) / 2 = -0.201336
  assertClose(loss(inputs.logprobs), -0.201336);
  // d/dlogp_t of (1/B) * -A_i * exp(mean_t logratio) = -A_i * s_i / (B * |y_i|):
  //   row 0: -1.2214028 / (2*2) = -0.3053507 on its 2 valid tokens, 0 on the masked one
  //   row 1: +0.8187308 / (2*3) = 0.1364551 on each of its 3 tokens
  assertClose(tf.grad(loss)(inputs.logprobs), [-0.3053507, -0.3053507, 0, 0.1364551, 0.1364551, 0.1364551]);
});

test('klTensor k1, k2, k3 match the hand values; k3 >= 0', () => {
  const logp = tf.tensor1d([Math.log(0.5), Math.log(0.25), -2]);
  const ref = tf.tensor1d([Math.log(0.25), Math.log(0.5), -2]);
  // d = ref - logp = [-ln2, +ln2, 0]
  // k1 = logp - ref = [0.6931472, -0.6931472, 0]; k2 = d^2/2 = [0.2402265, 0.2402265, 0]
  // k3 = e^d - d - 1 = [0.5 + 0.6931472 - 1, 2 - 0.6931472 - 1, 0] = [0.1931472, 0.3068528, 0]
  assertClose(klTensor(logp, ref, 'k1'), [0.6931472, -0.6931472, 0]);
  assertClose(klTensor(logp, ref, 'k2'), [0.2402265, 0.2402265, 0]);
  assertClose(klTensor(logp, ref, 'k3'), [0.1931472, 0.3068528, 0]);
  const grid = tf.linspace(-30, 30, 241);
  assert.ok(tf.min(klTensor(tf.zerosLike(grid), grid, 'k3')).dataSync()[0] >= 0);
  // as a loss term: token_mean of k3 over the first two tokens = (0.1931472 + 0.3068528) / 2 = 0.25
  const mask = tf.tensor2d([[1, 1, 0]]);
  assertClose(klLoss(logp.reshape([1, 3]) as tf.Tensor2D, ref.reshape([1, 3]) as tf.Tensor2D, mask, 'k3'), 0.25);
});

test('entropy: uniform logits give log V; a two-way split gives the hand value', () => {
  // 5 equal logits: H = ln 5 = 1.6094379 at every position
  assertClose(entropyFromLogits(tf.zeros([2, 3, 5]) as tf.Tensor3D, tf.ones([2, 3]) as tf.Tensor2D), Math.log(5));
  // logits [0, ln 3] -> p = [0.25, 0.75]; H = 0.25 ln 4 + 0.75 ln(4/3) = 0.3465736 + 0.2157616 = 0.5623351
  const logits = tf.tensor3d([[[0, Math.log(3)], [0, 0]]]);
  assertClose(tokenEntropy(logits), [0.5623351, Math.log(2)]);
  const onlyFirst = tf.tensor2d([[1, 0]]);
  assertClose(entropyFromLogits(logits, onlyFirst), 0.5623351);
  // the bonus is a loss term: -coef * H = -0.01 * 0.5623351
  assertClose(entropyBonus(logits, onlyFirst, 0.01), -0.005623351);
});

// logits for 3 positions over V = 2: [0, ln 3] (p = .25/.75), [0, 0] (p = .5/.5), [5, -5] (masked)
const SFT_LOGITS = [[[0, Math.log(3)], [0, 0], [5, -5]]];
const SFT_TARGETS = [[1, 0, 1]];

test('tokenLogprobs picks the target log-prob; sftCrossEntropy is the masked mean NLL', () => {
  const logits = tf.tensor3d(SFT_LOGITS);
  const targets = tf.tensor2d(SFT_TARGETS, undefined, 'int32');
  // ln 0.75 = -0.2876821, ln 0.5 = -0.6931472, log-softmax of -5 vs 5 = -10 - ln(1 + e^-10) = -10.0000454
  assertClose(tokenLogprobs(logits, targets), [-0.2876821, -0.6931472, -10.0000454]);
  // (0.2876821 + 0.6931472) / 2 = 0.4904146
  assertClose(sftCrossEntropy(logits, targets, tf.tensor2d([[1, 1, 0]])), 0.4904146);
});

test('sftCrossEntropy gradient is (softmax - onehot) / N on valid tokens', () => {
  const targets = tf.tensor2d(SFT_TARGETS, undefined, 'int32');
  const mask = tf.tensor2d([[1, 1, 0]]);
  const grad = tf.grad((l: tf.Tensor) => sftCrossEntropy(l as tf.Tensor3D, targets, mask))(tf.tensor3d(SFT_LOGITS));
  // position 0: ([.25, .75] - [0, 1]) / 2 = [0.125, -0.125]; position 1: ([.5, .5] - [1, 0]) / 2 = [-0.25, 0.25]; masked: 0
  assertClose(grad, [0.125, -0.125, -0.25, 0.25, 0, 0]);
});

test('the losses are differentiable on the wasm backend too (no gatherND)', async () => {
  await import('@tensorflow/tfjs-backend-wasm');
  assert.ok(await tf.setBackend('wasm'));
  try {
    const targets = tf.tensor2d(SFT_TARGETS, undefined, 'int32');
    const mask = tf.tensor2d([[1, 1, 0]]);
    const grad = tf.grad((l: tf.Tensor) => sftCrossEntropy(l as tf.Tensor3D, targets, mask))(tf.tensor3d(SFT_LOGITS));
    assertClose(grad, [0.125, -0.125, -0.25, 0.25, 0, 0]);
    const { oldLogprobs, advantages, logprobs } = ppoInputs();
    const ppoGrad = tf.grad((lp: tf.Tensor) =>
      ppoClipLoss({ logprobs: lp as tf.Tensor2D, oldLogprobs, advantages, mask: tf.tensor2d(MASK), clipLow: 0.2, clipHigh: 0.28 }).loss,
    )(logprobs);
    assertClose(ppoGrad, [-0.2210342, 0, 0, 0.3297443, -0.1213061, 0]);
  } finally {
    await tf.setBackend('cpu');
  }
});
