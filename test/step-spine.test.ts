// The step spine's rollout rules (training/step.ts), which every driver applies: a rollout's
// statistics, merging the generate slices' statistics, the failure budget's verdict (train, skip,
// or FailureBudgetExceededError with the message the run fails with), and attaching the reference
// policy's log-probs to the in-flight samples only. No services.
import assert from 'node:assert/strict';
import { parseRunConfig } from '../config/run-config';
import { test } from 'node:test';
import type { ScoredSequence } from '../engines/trainer';
import {
  attachReferenceLogprobs,
  FailureBudgetExceededError,
  scorerOf,
  mergeRolloutStats,
  rolloutStats,
  rolloutStatsFromMetrics,
  rolloutStatsMetrics,
  skipReason,
  stepVerdict,
} from '../training/step';

test('rolloutStats: a sample without a reward failed; the mean is over the scored ones', () => {
  assert.deepEqual(rolloutStats([{ reward: 1 }, { reward: 0.5 }, { reward: null }, {}]), { samples: 4, failed: 2, rewardSum: 1.5, rewardMean: 0.75 });
  assert.deepEqual(rolloutStats([{ reward: null }, { reward: null }]), { samples: 2, failed: 2, rewardSum: 0, rewardMean: 0 });
  assert.deepEqual(rolloutStats([]), { samples: 0, failed: 0, rewardSum: 0, rewardMean: 0 });
  assert.deepEqual(rolloutStats([{ reward: 0 }]), { samples: 1, failed: 0, rewardSum: 0, rewardMean: 0 }, 'a reward of 0 is scored, not failed');
});

test('mergeRolloutStats: the slices add up to the statistics of all their samples', () => {
  const a = [{ reward: 1 }, { reward: null }, { reward: 0.25 }];
  const b = [{ reward: 0.5 }, { reward: null }];
  assert.deepEqual(mergeRolloutStats([rolloutStats(a), rolloutStats(b)]), rolloutStats([...a, ...b]));
  // The generate activities' results carry more fields (their worker): only the counts and the sum are read.
  assert.deepEqual(mergeRolloutStats([{ samples: 4, failed: 1, rewardSum: 3, worker: 'w1' } as never, { samples: 4, failed: 3, rewardSum: 1 }]), { samples: 8, failed: 4, rewardSum: 4, rewardMean: 1 });
  assert.deepEqual(mergeRolloutStats([]), { samples: 0, failed: 0, rewardSum: 0, rewardMean: 0 });
});

test('rolloutStatsMetrics names the statistics as the metrics table does, and rolloutStatsFromMetrics reads them back', () => {
  const stats = rolloutStats([{ reward: 1 }, { reward: 0 }, { reward: null }, { reward: 0.5 }]);
  const metrics = rolloutStatsMetrics(stats);
  assert.deepEqual(metrics, { reward_mean: 0.5, samples: 4, failed_samples: 1 });
  assert.deepEqual(rolloutStatsFromMetrics({ ...metrics, loss: 2 }), stats);
  assert.equal(rolloutStatsFromMetrics({ loss: 2 }), undefined, 'a step that recorded no rollout statistics');
});

test('stepVerdict: train within the budget, skip when every sample failed within it', () => {
  assert.equal(stepVerdict({ samples: 8, failed: 0, rewardSum: 4, rewardMean: 0.5 }, 0.1, 3), 'train');
  assert.equal(stepVerdict({ samples: 10, failed: 1, rewardSum: 4, rewardMean: 4 / 9 }, 0.1, 3), 'train', 'exactly at the budget');
  assert.equal(stepVerdict({ samples: 4, failed: 4, rewardSum: 0, rewardMean: 0 }, 1, 3), 'skip');
  assert.equal(stepVerdict({ samples: 0, failed: 0, rewardSum: 0, rewardMean: 0 }, 0, 3), 'train', 'no samples is not "every sample failed"');
  assert.equal(skipReason({ samples: 4, failed: 4, rewardSum: 0, rewardMean: 0 }, 1, 3), 'every one of the 4 samples of iteration 2 failed (train.failure_budget 1 allows it)');
});

test('stepVerdict: over the budget throws FailureBudgetExceededError naming the step and the budget', () => {
  const over = () => stepVerdict({ samples: 10, failed: 2, rewardSum: 4, rewardMean: 0.5 }, 0.1, 7);
  assert.throws(over, (err: unknown) => {
    assert.ok(err instanceof FailureBudgetExceededError);
    assert.equal(err.message, "step 7: the reward failed on 2 of 10 samples, over train.failure_budget (0.1); every failed sample's error is in the transfer queue (samples with status 'failed')");
    return true;
  });
  // With its cause: the scorer named, the first error quoted (cut at 500 characters).
  const cause = { scorer: scorerOf(parseRunConfig({ reward: { module: './r.js' }, env: { module: './e.js', export: 'Env' } })), first: { key: '6/0/1', error: `TypeError: x is undefined${'!'.repeat(600)}` } };
  assert.equal(cause.scorer, 'reward.module ./r.js (export default), env.module ./e.js (export Env)');
  assert.equal(scorerOf(parseRunConfig({})), 'the built-in reward of task add2');
  assert.throws(
    () => stepVerdict({ samples: 10, failed: 2, rewardSum: 4, rewardMean: 0.5 }, 0.1, 7, cause),
    (err: Error) => err.message.startsWith('step 7: the reward failed on 2 of 10 samples, over train.failure_budget (0.1); scored by reward.module ./r.js (export default), env.module ./e.js (export Env); the first error (sample 6/0/1): TypeError: x is undefined!!') && err.message.includes("!...; every failed sample's error") && err.message.length < 900,
  );
  // Every sample failed and the budget does not allow it: the run fails, it is not skipped.
  assert.throws(() => stepVerdict({ samples: 4, failed: 4, rewardSum: 0, rewardMean: 0 }, 0.5, 1), FailureBudgetExceededError);
  assert.throws(() => stepVerdict({ samples: 4, failed: 1, rewardSum: 0, rewardMean: 0 }, 0, 1), FailureBudgetExceededError);
});

test('attachReferenceLogprobs sets the response tokens\' log-probs on in-flight samples without them, and only those', async () => {
  type Asked = { tokens: ArrayLike<number>; promptLength?: number };
  const asked: Asked[][] = [];
  // A fake reference: log-prob of token t at position p is -(t + p / 100), one per predicted token.
  const reference = {
    logprobs: async (sequences: ReadonlyArray<ScoredSequence>) => {
      const seqs = sequences as ReadonlyArray<Asked>;
      asked.push([...seqs]);
      return seqs.map((s) => Float32Array.from(Array.from(s.tokens).slice(1), (t, p) => -(t + (p + 1) / 100)));
    },
  };
  const row = (status: string | undefined, refLogprobs: number[] | null = null) => ({ status, promptTokens: [1, 2], responseTokens: [3, 4, 5], refLogprobs });
  const rows = [row('scored'), row('failed'), row(undefined), row('consumed'), row('generated', [9, 9, 9]), row('generated')];
  const set = await attachReferenceLogprobs(reference, rows, undefined);
  assert.equal(asked.length, 1);
  assert.equal(asked[0].length, 3, 'scored, no status (a fresh sample) and generated without log-probs');
  assert.deepEqual(Array.from(asked[0][0].tokens), [1, 2, 3, 4, 5]);
  assert.equal(asked[0][0].promptLength, 2);
  assert.deepEqual(set, [rows[0], rows[2], rows[5]], 'the samples it set, in order, as the same objects');
  for (const r of set) assert.deepEqual(r.refLogprobs.map((x) => Math.round(x * 1000) / 1000), [-3.02, -4.03, -5.04]);
  assert.equal(rows[1].refLogprobs, null, 'a failed sample gets none');
  assert.equal(rows[3].refLogprobs, null, 'a consumed sample gets none');
  assert.deepEqual(rows[4].refLogprobs, [9, 9, 9], 'what is set already is kept (a retry)');
  assert.deepEqual(await attachReferenceLogprobs(reference, [row('failed')], undefined), []);
  assert.equal(asked.length, 1, 'nothing to attach: the reference is not called');
});
