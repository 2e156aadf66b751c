// The loss normalizations by TRL's GRPOTrainer loss_type names, against TRL's formulas written out
// here in plain JS on a hand-made batch of 3 sequences of different lengths, one of advantage 0:
//   grpo:    mean over sequences of (sum_t l * m / sum_t m)
//   bnpo:    sum(l * m) / sum(m) over the (local = whole, here) batch
//   dapo:    sum(l * m) / num_items_in_batch (all completion tokens of the batch)
//   dr_grpo: sum(l * m) / (batch size x max_completion_length)
// The zero-advantage sequence counts in every denominator, also when it is left out of the forward
// pass and the rest is split into micro-batches weighted by microBatchShare over the batch totals.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as tf from '@tensorflow/tfjs';
import { aggregateLoss, batchTotals, lossAggregationWeighting, microBatchShare, type BatchTotals, type LossAggregation } from '../engines/rl/losses';
import { policyLoss, zeroAdvantageHasGradient } from '../training/losses';
import type { LossInputs } from '../engines/trainer';
import { parseRunConfig } from '../config/run-config';

test.before(async () => {
  await tf.setBackend('cpu');
});

// Targets [3 sequences, T = 4]: column 0 is the prompt's last target (no loss), then completions of
// 3, 1 and 2 tokens; sequence 2 has advantage 0. PAD marks padding (masked, must never count).
const PAD = 99;
const ADVANTAGES = [1.5, -2, 0];
const MASK = [
  [0, 1, 1, 1],
  [0, 1, 0, 0],
  [0, 1, 1, 0],
];
const LOGPROBS = [
  [-1, -0.9, -1.2, -0.4],
  [-1, -1.5, PAD, PAD],
  [-1, -0.8, -0.3, PAD],
];
const OLD = [
  [-1, -1.0, -1.0, -1.0],
  [-1, -1.0, PAD, PAD],
  [-1, -1.0, -1.0, PAD],
];
const CLIP_LOW = 0.2;
const CLIP_HIGH = 0.28;
const MAX_COMPLETION = 5;

/** PPO's clipped surrogate per token, as TRL writes it: -min(r A, clip(r, 1 - eps_low, 1 + eps_high) A). */
function surrogate(i: number, t: number): number {
  const r = Math.exp(LOGPROBS[i][t] - OLD[i][t]);
  const a = ADVANTAGES[i];
  return -Math.min(r * a, Math.min(Math.max(r, 1 - CLIP_LOW), 1 + CLIP_HIGH) * a);
}

type Rows = number[][];
const rowSums = (l: Rows, m: Rows) => l.map((row, i) => row.reduce((s, x, t) => s + (m[i][t] ? x : 0), 0));
const tokens = (m: Rows) => m.map((row) => row.reduce((s, x) => s + x, 0));
const total = (xs: number[]) => xs.reduce((s, x) => s + x, 0);
/** TRL's four loss_type formulas over a whole batch (every row a completion). */
const TRL: Record<'grpo' | 'bnpo' | 'dapo' | 'dr_grpo', (l: Rows, m: Rows) => number> = {
  grpo: (l, m) => total(rowSums(l, m).map((s, i) => s / Math.max(tokens(m)[i], 1))) / m.length,
  bnpo: (l, m) => total(rowSums(l, m)) / Math.max(total(tokens(m)), 1),
  dapo: (l, m) => total(rowSums(l, m)) / total(tokens(m)),
  dr_grpo: (l, m) => total(rowSums(l, m)) / (m.length * MAX_COMPLETION),
};

// Hand-made per-token losses: the zero-advantage row's are 0 (its surrogate, with no KL term).
const LOSSES = [
  [PAD, 0.5, -1, 2],
  [PAD, 3, PAD, PAD],
  [PAD, 0, 0, PAD],
];

function assertClose(actual: number, expected: number, what: string, tol = 1e-5): void {
  assert.ok(Math.abs(actual - expected) <= tol, `${what}: ${actual} != ${expected}`);
}

const value = (t: tf.Scalar) => t.dataSync()[0];

test('aggregateLoss on 3 sequences (3, 1, 2 tokens; one of advantage 0): grpo, bnpo, dapo, dr_grpo as TRL computes them', () => {
  const l = tf.tensor2d(LOSSES);
  const m = tf.tensor2d(MASK);
  // Sum = 0.5 - 1 + 2 + 3 + 0 + 0 = 4.5 over N = 6 tokens, S = 3 sequences:
  //   grpo = (1.5/3 + 3/1 + 0/2) / 3 = 3.5 / 3; bnpo = dapo = 4.5 / 6 = 0.75; dr_grpo = 4.5 / (3 x 5) = 0.3
  assertClose(TRL.grpo(LOSSES, MASK), 3.5 / 3, 'grpo by hand');
  assertClose(TRL.dapo(LOSSES, MASK), 0.75, 'dapo by hand');
  assertClose(TRL.dr_grpo(LOSSES, MASK), 0.3, 'dr_grpo by hand');
  for (const name of ['grpo', 'bnpo', 'dapo', 'dr_grpo'] as const) {
    assertClose(value(aggregateLoss(l, m, name, { maxCompletionTokens: MAX_COMPLETION })), TRL[name](LOSSES, MASK), name);
  }
  // The earlier names are aliases: token_mean is dapo, sequence_mean is grpo.
  assertClose(value(aggregateLoss(l, m, 'token_mean')), TRL.dapo(LOSSES, MASK), 'token_mean');
  assertClose(value(aggregateLoss(l, m, 'sequence_mean')), TRL.grpo(LOSSES, MASK), 'sequence_mean');
  // sequence_sum_norm keeps its padded divisor: 4.5 / (3 x 4).
  assertClose(value(aggregateLoss(l, m, 'sequence_sum_norm')), 4.5 / 12, 'sequence_sum_norm');
  assert.throws(() => aggregateLoss(l, m, 'dr_grpo'), /dr_grpo divides by the maximum completion length: pass maxCompletionTokens/);
});

test('batchTotals counts every sequence with a loss token and every loss token, zero-advantage ones included', () => {
  assert.deepEqual(batchTotals(MASK, MAX_COMPLETION), { sequences: 3, lossTokens: 6, maxCompletionTokens: MAX_COMPLETION });
  assert.deepEqual(batchTotals([[0, 0], [1, 0]]), { sequences: 1, lossTokens: 1 });
});

test('the zero-advantage sequence left out of the forward pass, the rest in two micro-batches: the shares over the batch totals give TRL\'s formulas', () => {
  const batch: BatchTotals = batchTotals(MASK, MAX_COMPLETION);
  // Only the signal-carrying sequences are run, one per micro-batch (different padded lengths).
  const microBatches = [
    { l: [LOSSES[0]], m: [MASK[0]] },
    { l: [LOSSES[1].slice(0, 2)], m: [MASK[1].slice(0, 2)] },
  ];
  for (const name of ['grpo', 'bnpo', 'dapo', 'dr_grpo', 'token_mean', 'sequence_mean'] as const satisfies readonly LossAggregation[]) {
    let sum = 0;
    let shares = 0;
    for (const mb of microBatches) {
      const share = microBatchShare(lossAggregationWeighting(name), { lossTokens: total(tokens(mb.m)), sequencesWithLoss: tokens(mb.m).filter((n) => n > 0).length }, batch);
      shares += share;
      sum += share * value(aggregateLoss(tf.tensor2d(mb.l), tf.tensor2d(mb.m), name, { maxCompletionTokens: batch.maxCompletionTokens }));
    }
    const trl = name === 'token_mean' ? 'dapo' : name === 'sequence_mean' ? 'grpo' : name;
    assertClose(sum, TRL[trl](LOSSES, MASK), `${name} over micro-batches`);
    assert.ok(shares < 1, `${name}: the shares (${shares}) leave room for the sequence not run`);
  }
  // The totals of the run sequences alone (the trainer's default) divide by the signal-carrying
  // tokens only: dapo would be 4.5 / 4 = 1.125, not TRL's 0.75.
  const runOnly = batchTotals([MASK[0], MASK[1]]);
  const dapoRunOnly = microBatches.reduce((s, mb) => s + microBatchShare('tokens', { lossTokens: total(tokens(mb.m)), sequencesWithLoss: 1 }, runOnly) * value(aggregateLoss(tf.tensor2d(mb.l), tf.tensor2d(mb.m), 'dapo')), 0);
  assertClose(dapoRunOnly, 4.5 / 4, 'dapo without the zero-advantage tokens');
  assert.throws(() => microBatchShare('tokens', { lossTokens: 7, sequencesWithLoss: 3 }, batch), /smaller than one micro-batch's/);
});

/** The LossInputs policyLoss reads, for the 3-sequence batch, with the batch totals the trainer passes. */
function lossInputs(batch?: BatchTotals): LossInputs {
  const unused = () => assert.fail('the built-in policy loss does not read the full logits');
  const inputs = {
    get logits(): tf.Tensor3D {
      return unused();
    },
    get logSoftmax(): tf.Tensor3D {
      return unused();
    },
    targets: tf.zeros([3, 4], 'int32') as tf.Tensor2D,
    logprobs: tf.tensor2d(LOGPROBS),
    entropy: tf.zeros([3, 4]) as tf.Tensor2D,
    mask: tf.tensor2d(MASK),
    oldLogprobs: tf.tensor2d(OLD),
    advantages: tf.tensor2d(ADVANTAGES.map((a) => [a, a, a, a])),
    ...(batch ? { batch } : {}),
  };
  return inputs as LossInputs;
}

test('policyLoss (ppo_clip) with each loss_aggregation equals TRL\'s clipped surrogate and normalization computed here', () => {
  const perToken = MASK.map((row, i) => row.map((m, t) => (m ? surrogate(i, t) : PAD)));
  assert.ok(perToken[2].every((x, t) => !MASK[2][t] || Object.is(x, 0) || Object.is(x, -0)), 'advantage 0: surrogate 0');
  const batch = batchTotals(MASK, MAX_COMPLETION);
  for (const aggregation of ['grpo', 'bnpo', 'dapo', 'dr_grpo'] as const) {
    const loss = policyLoss({ algorithm: 'ppo', clipLow: CLIP_LOW, clipHigh: CLIP_HIGH, aggregation });
    assert.equal(loss.microBatchWeighting, aggregation === 'grpo' || aggregation === 'dr_grpo' ? 'sequences' : 'tokens');
    assert.equal(zeroAdvantageHasGradient(loss), false, 'no KL or entropy term: a zero-advantage sample has no gradient');
    assertClose(value(loss.compute(lossInputs(batch)).loss), TRL[aggregation](perToken, MASK), `ppo ${aggregation}`);
  }
  // dr_grpo's L comes with the step's batch totals, or else from the loss's options.
  assert.throws(() => policyLoss({ algorithm: 'ppo', aggregation: 'dr_grpo' }).compute(lossInputs()), /maxCompletionTokens/);
  const fromOptions = policyLoss({ algorithm: 'ppo', clipLow: CLIP_LOW, clipHigh: CLIP_HIGH, aggregation: 'dr_grpo', maxCompletionTokens: MAX_COMPLETION });
  assertClose(value(fromOptions.compute(lossInputs()).loss), TRL.dr_grpo(perToken, MASK), 'dr_grpo with L from the options');
  // KL in the loss or an entropy bonus: a zero-advantage sample has a gradient and must be trained on.
  assert.equal(zeroAdvantageHasGradient(policyLoss({ algorithm: 'ppo', klCoef: 0.01 })), true);
  assert.equal(zeroAdvantageHasGradient(policyLoss({ algorithm: 'gspo', entropyCoef: 0.001 })), true);
  assert.equal(policyLoss({ algorithm: 'gspo' }).microBatchWeighting, 'sequences', 'gspo defaults to grpo');
  assert.equal(policyLoss({ algorithm: 'ppo' }).microBatchWeighting, 'tokens', 'ppo defaults to dapo');
});

test('algorithm.loss_aggregation takes TRL\'s names (default token_mean: the earlier denominators) and the earlier ones', () => {
  assert.equal(parseRunConfig({}).algorithm.loss_aggregation, 'token_mean');
  for (const name of ['grpo', 'bnpo', 'dapo', 'dr_grpo', 'token_mean', 'sequence_mean', 'sequence_sum_norm']) {
    assert.equal(parseRunConfig({ algorithm: { loss_aggregation: name } }).algorithm.loss_aggregation, name);
  }
  assert.throws(() => parseRunConfig({ algorithm: { loss_aggregation: 'seq_mean' } }), /algorithm\.loss_aggregation/);
});
