// The advantage-estimator and policy-loss registries, and a train batch's advantages from its own
// samples (hand-computed numbers): built-ins by name, options validated by each one's schema, user
// estimators and losses by module path, and a new estimator as one registration.
import assert from 'node:assert/strict';
import path from 'node:path';
import { test } from 'node:test';
import * as tf from '@tensorflow/tfjs';
import { parseRunConfig } from '../config/run-config';
import { AlgorithmConfigError, batchAdvantages, perGroup, registerAdvantageEstimator, resolveAdvantageEstimator, type BatchSample } from '../training/advantages';
import { resolvePolicyLoss } from '../training/losses';
import { z } from 'zod';

const FIXTURES = path.resolve(__dirname, '..', '..', 'test', 'fixtures');
const algo = (a: Record<string, unknown>) => parseRunConfig({ algorithm: a }).algorithm;
const advantages = async (a: Record<string, unknown>, samples: BatchSample[]) => {
  const algorithm = algo(a);
  return batchAdvantages(await resolveAdvantageEstimator(algorithm), algorithm, samples);
};
const close = (actual: number[], expected: number[]) => actual.forEach((v, i) => assert.ok(Math.abs(v - expected[i]) < 1e-5, `[${i}] ${v} vs ${expected[i]}`));
const sample = (groupKey: string, reward: number, extra: Partial<BatchSample> = {}): BatchSample => ({ groupKey, reward, ...extra });

test('GRPO per prompt group, groups interleaved in the batch; a group shortened by failures uses what is left', async () => {
  // group a: [1, 0] -> mean 0.5, sample std 0.7071 -> +-0.7071; group b: [1, 1, 0] -> mean 2/3, std 0.57735
  close(await advantages({ advantage: 'grpo' }, [sample('a', 1), sample('b', 1), sample('a', 0), sample('b', 1), sample('b', 0)]), [0.70711, 0.57735, -0.70711, 0.57735, -1.1547]);
  // advantage_options reach the estimator: population std of [1, 0] is 0.5 -> +-1
  close(await advantages({ advantage: 'grpo', advantage_options: { std: 'population' } }, [sample('a', 1), sample('a', 0)]), [1, -1]);
});

test('a group of one has no baseline: advantage 0', async () => {
  assert.deepEqual(await advantages({ advantage: 'grpo' }, [sample('a', 1)]), [0]);
  assert.deepEqual(await advantages({ advantage: 'rloo' }, [sample('a', 1), sample('b', 0)]), [0, 0]);
});

test('Dr.GRPO and RLOO per group; REINFORCE++ normalizes over the whole batch', async () => {
  close(await advantages({ advantage: 'dr_grpo' }, [sample('a', 1), sample('a', 0), sample('a', 0), sample('a', 0)]), [0.75, -0.25, -0.25, -0.25]);
  close(await advantages({ advantage: 'rloo' }, [sample('a', 1), sample('a', 0), sample('a', 0)]), [1, -0.5, -0.5]);
  // batch [1, 0, 0, 1] across two groups: mean 0.5, sample std 0.57735 -> +-0.86603
  close(await advantages({ advantage: 'reinforce_pp' }, [sample('a', 1), sample('a', 0), sample('b', 0), sample('b', 1)]), [0.86603, -0.86603, -0.86603, 0.86603]);
  // REINFORCE++-baseline: centred per group [0.5, -0.5, 0, 0], then batch-normalized (sample std 0.40825)
  close(await advantages({ advantage: 'reinforce_pp_baseline' }, [sample('a', 1), sample('a', 0), sample('b', 3), sample('b', 3)]), [1.22474, -1.22474, 0, 0]);
});

test('kl_mode "reward" shapes the reward with the KL estimate before the estimator', async () => {
  // k1 = logp - ref: sample 1 sums to 0.5, sample 2 to 0 -> shaped rewards 1 - 0.1*0.5 = 0.95 and 0
  const a = { advantage: 'dr_grpo', kl_coef: 0.1, kl_mode: 'reward', kl_estimator: 'k1' };
  close(await advantages(a, [sample('a', 1, { rolloutLogprobs: [-0.5, -0.5], refLogprobs: [-1, -0.5] }), sample('a', 0, { rolloutLogprobs: [-1], refLogprobs: [-1] })]), [0.475, -0.475]);
  // kl_mode "loss" leaves the reward alone
  close(await advantages({ advantage: 'dr_grpo', kl_coef: 0.1 }, [sample('a', 1), sample('a', 0)]), [0.5, -0.5]);
  await assert.rejects(advantages(a, [sample('a', 1), sample('a', 0)]), /no rollout log-probs, which kl_mode "reward" needs/);
});

test('unknown names and options are errors naming the field and the choices', async () => {
  await assert.rejects(resolveAdvantageEstimator(algo({ advantage: 'grpoo' })), (err: unknown) => {
    assert.ok(err instanceof AlgorithmConfigError);
    assert.equal(err.field, 'algorithm.advantage');
    assert.match(err.message, /unknown estimator "grpoo": use one of grpo, dr_grpo, rloo, reinforce_pp, reinforce_pp_baseline/);
    return true;
  });
  await assert.rejects(resolveAdvantageEstimator(algo({ advantage: 'rloo', advantage_options: { eps: 1 } })), /algorithm\.advantage_options: not valid for estimator "rloo": \(options\): Unrecognized key/);
  await assert.rejects(resolvePolicyLoss(algo({ policy_loss: 'ppo' })), /algorithm\.policy_loss: unknown policy loss "ppo": use one of ppo_clip, gspo/);
});

test('a new estimator is one registration, and is then chosen by name', async () => {
  registerAdvantageEstimator({ name: 'test_max_baseline', options: z.object({}).strict(), compute: perGroup((r) => r.map((x) => x - Math.max(...r))) });
  close(await advantages({ advantage: 'test_max_baseline' }, [sample('a', 1), sample('a', 0.25), sample('b', 3)]), [0, -0.75, 0]);
  assert.throws(() => registerAdvantageEstimator({ name: 'grpo', options: z.object({}), compute: () => [] }), /already registered/);
});

test('user estimators and losses by module path', async () => {
  const user = { advantage: { module: path.join(FIXTURES, 'median-baseline-advantage.cjs') }, advantage_options: { scale: 2 } };
  close(await advantages(user, [sample('a', 1), sample('a', 0), sample('a', 0)]), [2, 0, 0]);
  await assert.rejects(resolveAdvantageEstimator(algo({ advantage: { module: './no/such/estimator.js' } })), /algorithm\.advantage\.module "\.\/no\/such\/estimator\.js" not found/);

  const loss = await resolvePolicyLoss(algo({ policy_loss: { module: path.join(FIXTURES, 'reinforce-loss.cjs') } }));
  assert.equal(loss.name, 'reinforce');
  const value = tf.tidy(() =>
    loss.compute({
      logits: tf.zeros([1, 2, 3]) as tf.Tensor3D,
      logSoftmax: tf.zeros([1, 2, 3]) as tf.Tensor3D,
      entropy: tf.zeros([1, 2]) as tf.Tensor2D,
      targets: tf.zeros([1, 2], 'int32') as tf.Tensor2D,
      logprobs: tf.tensor2d([[-1, -2]]),
      mask: tf.tensor2d([[1, 1]]),
      advantages: tf.tensor2d([[1, 1]]),
    }).loss.dataSync()[0],
  );
  assert.equal(value, 1.5, '-mean(A * logp) = -(-1 - 2) / 2');
  await assert.rejects(resolvePolicyLoss(algo({ policy_loss: { module: path.join(FIXTURES, 'reinforce-loss.cjs'), export: 'notAFactory' } })), /algorithm\.policy_loss\.module .* export "notAFactory" is 42/);
});
