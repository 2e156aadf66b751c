// batchAdvantages: the train step's advantages from its own batch (hand-computed numbers).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseRunConfig } from '../config/run-config';
import { batchAdvantages, type BatchSample } from '../training/grpo';

const algo = (a: Record<string, unknown>) => parseRunConfig({ algorithm: a }).algorithm;
const close = (actual: number[], expected: number[]) => actual.forEach((v, i) => assert.ok(Math.abs(v - expected[i]) < 1e-5, `[${i}] ${v} vs ${expected[i]}`));
const sample = (groupKey: string, reward: number, extra: Partial<BatchSample> = {}): BatchSample => ({ groupKey, reward, ...extra });

test('GRPO per prompt group, groups interleaved in the batch; a group shortened by failures uses what is left', () => {
  // group a: [1, 0] -> mean 0.5, sample std 0.7071 -> +-0.7071; group b: [1, 1, 0] -> mean 2/3, std 0.57735
  const out = batchAdvantages(algo({ advantage: 'grpo' }), [sample('a', 1), sample('b', 1), sample('a', 0), sample('b', 1), sample('b', 0)]);
  close(out, [0.70711, 0.57735, -0.70711, 0.57735, -1.1547]);
});

test('a group of one has no baseline: advantage 0', () => {
  assert.deepEqual(batchAdvantages(algo({ advantage: 'grpo' }), [sample('a', 1)]), [0]);
  assert.deepEqual(batchAdvantages(algo({ advantage: 'rloo' }), [sample('a', 1), sample('b', 0)]), [0, 0]);
});

test('Dr.GRPO and RLOO per group; REINFORCE++ normalizes over the whole batch', () => {
  close(batchAdvantages(algo({ advantage: 'dr_grpo' }), [sample('a', 1), sample('a', 0), sample('a', 0), sample('a', 0)]), [0.75, -0.25, -0.25, -0.25]);
  close(batchAdvantages(algo({ advantage: 'rloo' }), [sample('a', 1), sample('a', 0), sample('a', 0)]), [1, -0.5, -0.5]);
  // batch [1, 0, 0, 1] across two groups: mean 0.5, sample std 0.57735 -> +-0.86603
  close(batchAdvantages(algo({ advantage: 'reinforce_pp' }), [sample('a', 1), sample('a', 0), sample('b', 0), sample('b', 1)]), [0.86603, -0.86603, -0.86603, 0.86603]);
});

test('kl_mode "reward" shapes the reward with the KL estimate before the estimator', () => {
  // k1 = logp - ref: sample 1 sums to 0.5, sample 2 to 0 -> shaped rewards 1 - 0.1*0.5 = 0.95 and 0
  const a = algo({ advantage: 'dr_grpo', kl_coef: 0.1, kl_mode: 'reward', kl_estimator: 'k1' });
  const out = batchAdvantages(a, [
    sample('a', 1, { rolloutLogprobs: [-0.5, -0.5], refLogprobs: [-1, -0.5] }),
    sample('a', 0, { rolloutLogprobs: [-1], refLogprobs: [-1] }),
  ]);
  close(out, [0.475, -0.475]);
  // kl_mode "loss" leaves the reward alone
  close(batchAdvantages(algo({ advantage: 'dr_grpo', kl_coef: 0.1 }), [sample('a', 1), sample('a', 0)]), [0.5, -0.5]);
  assert.throws(() => batchAdvantages(a, [sample('a', 1), sample('a', 0)]), /no rollout log-probs, which kl_mode "reward" needs/);
});
