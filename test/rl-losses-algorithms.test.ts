// CISPO, SAPO and the rollout corrections MIS and OPSM (engines/rl/cispo-sapo.ts,
// engines/rl/rollout-correction.ts) against their formulas written out here with hand-computed
// numbers, their gradients (tf.grad) where the point of the loss is its gradient, and the run config
// reaching them: `algorithm.policy_loss: "cispo" | "sapo"` and `algorithm.rollout_correction` parse,
// resolve through the registry (training/losses.ts) and compute the same numbers.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as tf from '@tensorflow/tfjs';
import { parseRunConfig, RunConfigError } from '../config/run-config';
import { seededRandom } from '../config/seeds';
import { loadTfjsBackend } from '../engines/backends';
import { TINY_MODEL } from '../engines/model';
import { cispoLoss, sapoGate, sapoLoss } from '../engines/rl/cispo-sapo';
import { ppoClipLoss } from '../engines/rl/losses';
import { maskedImportanceSampling, offPolicySequenceMask, rolloutCorrectionMask } from '../engines/rl/rollout-correction';
import { Trainer, type LossInputs, type TrainSequence } from '../engines/trainer';
import { AlgorithmConfigError } from '../training/advantages';
import { resolvePolicyLoss } from '../training/losses';

const near = (actual: number, expected: number, what: string, tol = 1e-5) => assert.ok(Math.abs(actual - expected) < tol, `${what}: ${actual} vs ${expected}`);
const nearAll = (actual: ArrayLike<number>, expected: number[], what: string, tol = 1e-5) => expected.forEach((e, i) => near(actual[i], e, `${what}[${i}]`, tol));
const ln = Math.log;

// Two sequences: ratios r = pi / pi_old of [1.5, 0.5, 1.1] with advantage 2, and [0.7, 1.0] (+ one
// padding token) with advantage -1. pi_old's log-probs are all -1, so log pi = -1 + ln r.
const RATIOS = [[1.5, 0.5, 1.1], [0.7, 1.0, 1]];
const LOGPROBS = RATIOS.map((row) => row.map((r) => -1 + ln(r)));
const batch = () => ({
  logprobs: tf.tensor2d(LOGPROBS),
  oldLogprobs: tf.tensor2d([[-1, -1, -1], [-1, -1, -1]]),
  advantages: tf.tensor1d([2, -1]),
  mask: tf.tensor2d([[1, 1, 1], [1, 1, 0]]),
});
/** The loss as a function of the log-probs, for tf.grad. */
const gradOf = (loss: (logprobs: tf.Tensor2D) => tf.Scalar) => Array.from(tf.grad((x) => loss(x as tf.Tensor2D))(batch().logprobs).dataSync());

test('CISPO: -sg(clip(r, 1 - eps_low, 1 + eps_high)) * A * log pi, token mean; no lower bound unless given', () => {
  const b = batch();
  // No lower bound, eps_high 0.28: clipped weights [1.28, 0.5, 1.1] and [0.7, 1.0]; 5 loss tokens.
  const tokens = [-1.28 * 2 * LOGPROBS[0][0], -0.5 * 2 * LOGPROBS[0][1], -1.1 * 2 * LOGPROBS[0][2], -0.7 * -1 * LOGPROBS[1][0], -1.0 * -1 * LOGPROBS[1][1]];
  const out = cispoLoss({ ...b, clipHigh: 0.28 });
  near(out.loss.dataSync()[0], tokens.reduce((a, x) => a + x) / 5, 'loss');
  near(out.loss.dataSync()[0], 0.65116033, 'loss (hand-computed)');
  near(out.clipFraction.dataSync()[0], 1 / 5, 'clipFraction: only r = 1.5 is clipped');
  // eps_low 0.2 lifts 0.5 and 0.7 to 0.8.
  near(cispoLoss({ ...b, clipLow: 0.2, clipHigh: 0.28 }).loss.dataSync()[0], 0.82720449, 'loss with a lower bound');
  assert.throws(() => cispoLoss({ ...b, clipLow: 1.5, clipHigh: 0.28 }), /clipLow in \[0, 1\]/);
});

test('CISPO keeps the gradient of a clipped token (through log pi only), where PPO-clip drops it', () => {
  const b = batch();
  // d/d log pi_t = -sg(r^_t) * A_t / N: the weight is a constant, so no d r / d log pi term.
  const cispo = gradOf((logprobs) => cispoLoss({ ...b, logprobs, clipHigh: 0.28 }).loss);
  nearAll(cispo, [-1.28 * 2 / 5, -0.5 * 2 / 5, -1.1 * 2 / 5, 0.7 / 5, 1 / 5, 0], 'CISPO gradient');
  // PPO-clip with the same range: r = 1.5 > 1.28 with A > 0 is clipped, gradient 0.
  const ppo = gradOf((logprobs) => ppoClipLoss({ ...b, logprobs, clipLow: 0.2, clipHigh: 0.28 }).loss);
  near(ppo[0], 0, 'PPO-clip gradient of the clipped token');
  near(ppo[2], (-1.1 * 2) / 5, 'PPO-clip gradient of an unclipped token (-r A / N): the same as CISPO there');
});

test('SAPO: -f(r; tau) * A with f = sigmoid(tau (r - 1)) * 4 / tau, tau_pos for A > 0, tau_neg otherwise; sequence mean', () => {
  const b = batch();
  const sigmoid = (x: number) => 1 / (1 + Math.exp(-x));
  const f = (r: number, tau: number) => (sigmoid(tau * (r - 1)) * 4) / tau;
  nearAll(sapoGate(tf.tensor1d([1.5, 0.5, 1]), tf.tensor1d([1, 1, 1.05])).dataSync(), [2.48983732, 1.51016268, 4 / 2 / 1.05], 'gate');
  // grpo: mean over each sequence's tokens, then over the sequences.
  const first = (-2 * (f(1.5, 1) + f(0.5, 1) + f(1.1, 1))) / 3;
  const second = (f(0.7, 1.05) + f(1.0, 1.05)) / 2;
  const out = sapoLoss({ ...b, tauPos: 1, tauNeg: 1.05 });
  near(out.loss.dataSync()[0], (first + second) / 2, 'loss');
  near(out.loss.dataSync()[0], -1.15531057, 'loss (hand-computed)');
  assert.equal(out.clipFraction.dataSync()[0], 0);
  assert.throws(() => sapoLoss({ ...b, tauPos: 0, tauNeg: 1.05 }), /both must be > 0/);
});

test('SAPO gradient: -A * 4 s (1 - s) * r per token (s = sigmoid(tau (r - 1))), exactly the unclipped -A at r = 1', () => {
  const b = batch();
  const grad = gradOf((logprobs) => sapoLoss({ ...b, logprobs, tauPos: 1, tauNeg: 1.05 }).loss);
  const sigmoid = (x: number) => 1 / (1 + Math.exp(-x));
  const weight = (r: number, tau: number) => 4 * sigmoid(tau * (r - 1)) * (1 - sigmoid(tau * (r - 1))) * r;
  // Sequence 1: 3 tokens of 2 sequences (1 / 6 each); sequence 2: 2 tokens (1 / 4 each).
  const expected = [(-2 * weight(1.5, 1)) / 6, (-2 * weight(0.5, 1)) / 6, (-2 * weight(1.1, 1)) / 6, weight(0.7, 1.05) / 4, weight(1, 1.05) / 4, 0];
  nearAll(grad, expected, 'SAPO gradient');
  nearAll(grad, [-0.47000742, -0.15666914, -0.36575153, 0.1707297, 0.25, 0], 'SAPO gradient (hand-computed)');
  // Off-policy the soft gate decays the update smoothly: r = 1.5 gets less than the on-policy weight 1.5.
  assert.ok(weight(1.5, 1) < 1.5 && weight(1.5, 1) > 0);
});

test('MIS: tokens whose ratio leaves [lower, upper], or sequences by the geometric mean of their ratios', () => {
  // Token: ratios [2.5, 1.0, 0.4] in [0.5, 2] -> keep [0, 1, 0].
  const logRatio = tf.tensor2d([[ln(2.5), 0, ln(0.4)]]);
  assert.deepEqual(Array.from(maskedImportanceSampling(logRatio, tf.tensor2d([[1, 1, 1]]), 'token', 0.5, 2).dataSync()), [0, 1, 0]);
  // Sequence, band [1/1.001, 1.001]: geometric means sqrt(1.0015 * 1) = 1.00075 (kept), sqrt(1.003) = 1.0015
  // (masked, every token); the padding tokens do not count (ratio 5 would mask the first).
  const seq = tf.tensor2d([[ln(1.0015), 0, ln(5)], [ln(1.003), 0, 0]]);
  const keep = maskedImportanceSampling(seq, tf.tensor2d([[1, 1, 0], [1, 1, 0]]), 'sequence', 1 / 1.001, 1.001);
  assert.deepEqual(Array.from(keep.dataSync()), [1, 1, 1, 0, 0, 0]);
  assert.throws(() => maskedImportanceSampling(logRatio, tf.tensor2d([[1, 1, 1]]), 'token', 2, 1), /0 < lower <= upper/);
});

test('OPSM: negative-advantage sequences whose mean log(pi_rollout / pi_trainer) exceeds delta are masked', () => {
  // Drifts (mean over valid tokens of -logRatio): 0.02, 0.02, 0.005 (a padding token's 3 is left out).
  const logRatio = tf.tensor2d([[-0.01, -0.03], [-0.02, -0.02], [-0.005, -3]]);
  const mask = tf.tensor2d([[1, 1], [1, 1], [1, 0]]);
  const keep = offPolicySequenceMask(logRatio, tf.tensor1d([-1, 1, -1]), mask, 0.01);
  // Dropped: the first only (the second has a positive advantage, the third drifted 0.005 <= 0.01).
  assert.deepEqual(Array.from(keep.dataSync()), [0, 0, 1, 1, 1, 1]);
  assert.throws(() => offPolicySequenceMask(logRatio, tf.tensor1d([-1, 1, -1]), mask, -1), /delta is -1/);
});

test('MIS and OPSM compose: keep = keep_MIS * keep_OPSM, with the fraction of loss tokens each masked', () => {
  const rollout = tf.tensor2d([[-1, -1], [-1, -1]]);
  // Trainer: row 1 ratios [3, 1] (MIS masks token 1), row 2 drift 0.5 with A < 0 (OPSM masks it).
  const trainer = tf.tensor2d([[-1 + ln(3), -1], [-1.5, -1.5]]);
  const out = rolloutCorrectionMask(trainer, rollout, tf.tensor1d([1, -1]), tf.tensor2d([[1, 1], [1, 1]]), { mask: 'token', opsmDelta: 0.1 });
  assert.deepEqual(Array.from(out.keep.dataSync()), [0, 1, 0, 0]);
  near(out.misMaskedFraction!.dataSync()[0], 1 / 4, 'MIS: 1 token of 4 (the default band [0.5, 2] keeps ratio e^-0.5 = 0.61)');
  near(out.opsmMaskedFraction!.dataSync()[0], 2 / 4, 'OPSM');
  near(out.maskedFraction.dataSync()[0], 3 / 4, 'either');
});

/** A micro-batch as the trainer hands it to a policy loss (what these losses read). */
function lossInputs(b: ReturnType<typeof batch>): LossInputs {
  const advantages = tf.tile(tf.expandDims(b.advantages, 1), [1, 3]) as tf.Tensor2D;
  return { logprobs: b.logprobs, oldLogprobs: b.oldLogprobs, advantages, mask: b.mask, entropy: tf.zerosLike(b.mask) } as unknown as LossInputs;
}

test('policy_loss "cispo" and "sapo" with their options and rollout_correction reach the loss through the run config', async () => {
  const algorithm = (a: Record<string, unknown>) => parseRunConfig({ algorithm: a }).algorithm;
  // cispo: clip_high from its options (0.28 is also the run's clip_high default).
  const cispo = await resolvePolicyLoss(algorithm({ policy_loss: 'cispo', policy_loss_options: { clip_high: 0.28 } }));
  assert.equal(cispo.name, 'cispo');
  near(cispo.compute(lossInputs(batch())).loss.dataSync()[0], 0.65116033, 'cispo loss through the registry');
  // sapo with grpo aggregation (the paper's), the paper's temperatures by default.
  const sapo = await resolvePolicyLoss(algorithm({ policy_loss: 'sapo', loss_aggregation: 'grpo' }));
  near(sapo.compute(lossInputs(batch())).loss.dataSync()[0], -1.15531057, 'sapo loss through the registry');
  // MIS token band [0.6, 1.2] masks r = 1.5 and 0.5: the CISPO tokens left are 1.1 (A = 2) and 0.7, 1.0 (A = -1).
  const masked = await resolvePolicyLoss(algorithm({ policy_loss: 'cispo', rollout_correction: { mask: 'token', lower: 0.6, upper: 1.2 } }));
  const out = masked.compute(lossInputs(batch()));
  near(out.loss.dataSync()[0], (-1.1 * 2 * LOGPROBS[0][2] + 0.7 * LOGPROBS[1][0] + LOGPROBS[1][1]) / 5, 'masked tokens add 0, the denominator stays 5');
  near(out.metrics!.rolloutMaskedFraction.dataSync()[0], 2 / 5, 'rolloutMaskedFraction');
  // OPSM on ppo_clip: sequence 2 (A = -1) drifted mean(-ln 0.7, 0) = 0.178 > 0.1 -> masked.
  const opsm = await resolvePolicyLoss(algorithm({ policy_loss: 'ppo_clip', rollout_correction: { opsm_delta: 0.1 } }));
  near(opsm.compute(lossInputs(batch())).metrics!.opsmMaskedFraction.dataSync()[0], 2 / 5, 'opsmMaskedFraction');
});

test('bad options and correction fields are errors naming the field', async () => {
  const algorithm = (a: Record<string, unknown>) => parseRunConfig({ algorithm: a }).algorithm;
  await assert.rejects(resolvePolicyLoss(algorithm({ policy_loss: 'sapo', policy_loss_options: { tau_pos: 0 } })), (err: unknown) => {
    assert.ok(err instanceof AlgorithmConfigError);
    assert.match(err.message, /^algorithm\.policy_loss_options: not valid for policy loss "sapo": tau_pos: must be > 0/);
    return true;
  });
  await assert.rejects(resolvePolicyLoss(algorithm({ policy_loss: 'cispo', policy_loss_options: { clip_low: 2 } })), /policy loss "cispo": clip_low: must be <= 1/);
  assert.throws(() => parseRunConfig({ algorithm: { rollout_correction: { lower: 0.5 } } }), (err: unknown) => {
    assert.ok(err instanceof RunConfigError);
    assert.match(err.message, /algorithm\.rollout_correction\.lower: bounds the importance ratio of mask "token" or "sequence": set mask/);
    return true;
  });
  assert.throws(() => parseRunConfig({ algorithm: { rollout_correction: { mask: 'sequence', lower: 0.9, upper: 0.95 } } }), /algorithm\.rollout_correction\.upper: .*1/);
  assert.throws(() => parseRunConfig({ algorithm: { rollout_correction: { mask: 'geometric' } } }), /algorithm\.rollout_correction\.mask/);
  // Absent, the config is what it was: no rollout_correction key.
  assert.equal('rollout_correction' in parseRunConfig({}).algorithm, false);
});

test('a Trainer step under cispo and sapo with MIS and OPSM: finite, the weights move, the masked fractions reported', async () => {
  await loadTfjsBackend({ kind: 'cpu' });
  const model = { ...TINY_MODEL, contextLength: 16 };
  const rand = seededRandom(5);
  const tokens = Array.from({ length: 6 }, () => Array.from({ length: 8 }, () => Math.floor(rand() * model.vocabSize)));
  for (const policy of [{ policy_loss: 'cispo' }, { policy_loss: 'sapo', policy_loss_options: { tau_pos: 1, tau_neg: 2 } }]) {
    const algorithm = parseRunConfig({ algorithm: { ...policy, rollout_correction: { mask: 'sequence', lower: 0.5, upper: 2, opsm_delta: 0.1 } } }).algorithm;
    const trainer = Trainer.create({ model, seed: 1, optimizer: { lr: 1e-2 }, microBatchSize: 4 });
    try {
      // Sequences 0-2 carry the trainer's own log-probs (ratio 1: kept); 3-5 rollout log-probs of -0.5,
      // far above the fresh model's (about -ln V): MIS masks them, and OPSM the one of them with A < 0 (4).
      const own = await trainer.logprobs(tokens);
      const sequences: TrainSequence[] = tokens.map((t, i) => ({
        tokens: t,
        lossMask: t.slice(1).map((_, k) => (k >= 2 ? 1 : 0)),
        advantages: i % 2 ? 1 : -1,
        oldLogprobs: i < 3 ? Float32Array.from(own[i]) : new Float32Array(7).fill(-0.5),
      }));
      const before = await trainer.exportWeights();
      const m = await trainer.trainStep(sequences, await resolvePolicyLoss(algorithm));
      assert.ok(Number.isFinite(m.loss) && m.gradNorm > 0, `${policy.policy_loss}: loss ${m.loss}, grad norm ${m.gradNorm}`);
      near(m.lossMetrics.misMaskedFraction, 3 / 6, `${policy.policy_loss}: MIS masks sequences 3-5`);
      near(m.lossMetrics.opsmMaskedFraction, 1 / 6, `${policy.policy_loss}: OPSM masks sequence 4`);
      near(m.lossMetrics.rolloutMaskedFraction, 3 / 6, `${policy.policy_loss}: either`);
      const after = await trainer.exportWeights();
      assert.ok(Object.keys(after).some((k) => after[k].some((v, i) => v !== before[k][i])), 'an optimizer step was taken');
    } finally {
      trainer.dispose();
    }
  }
});
