// Deterministic resume (`relax bench resume` at CI size, bench/resume.ts): a sync run on a real
// `relax dev` stack, interrupted once a step (kill -9 of the train, rollout and control workers, of
// the Temporal server, and of relax dev itself, then a new one on the same data directory), ends
// with weights bitwise equal to an uninterrupted run of the same config and seed (the in-process
// loop over the same RL core, training/in-process.ts: no worker, no workflow), every step's loss
// equal too. Each retry recomputes what it lost from what was recorded: the rollout from the version
// and its seed, the update from the last published weights and AdamW moments (CPU, one backend,
// the tiny model).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runResumeCheck } from '../bench/resume';

test('a sync run interrupted 5 times (train, rollout and control workers, the Temporal server and relax dev kill -9ed) ends bitwise equal to an uninterrupted one', async (t) => {
  const report = await runResumeCheck({ steps: 6, interruptions: ['train', 'temporal', 'rollout', 'dev', 'control'], seed: 11, log: (line) => t.diagnostic(line) });
  t.diagnostic(JSON.stringify(report));
  assert.deepEqual(report.interrupted, ['train@1', 'temporal@2', 'rollout@3', 'dev@4', 'control@5']);
  assert.equal(report.losses_equal, true, 'every step computed the same loss');
  assert.ok(report.compared_weights > 100_000, `${report.compared_weights} weights compared`);
  assert.equal(report.differing_weights, 0, 'every weight bitwise equal');
  assert.equal(report.bitwise_equal, true);
});
