// The durable training loop on real worker processes: rollout -> reference -> advantage -> train
// -> weight sync through the transfer queue, exactly-once train steps, every published version
// registered once with an intact checkpoint, and a trainer killed mid-run replaced by another.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { WorkflowFailedError } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { parseRunConfig, type RunConfigInput } from '../config/run-config';
import { loadTfjsBackend } from '../engines/backends';
import { loadOrTrainWarmStart } from '../training/warm-start';
import { listEvents } from '../store/events';
import { roleTaskQueue, type Role } from '../config/task-queues';
import { listCheckpoints, verifyCheckpoint } from '../store/checkpoint-registry';
import type { TrainingProgress, TrainingResult } from '../workflows/training-run';
import { freshDatabase, sharedTemporalAddress, startWorkerProcess, temporalClient, uniqueId, waitFor, type TestDatabase, type TestProcess } from './helpers';

let db: TestDatabase;
let home: string;
const workers: TestProcess[] = [];
let temporal: Awaited<ReturnType<typeof temporalClient>>;

// The add2 policy after a short SFT (a randomly initialized policy is never rewarded, so GRPO would
// have nothing to train on).
let SMALL_RUN: RunConfigInput = {
  model: { context_length: 16 },
  algorithm: { group_size: 4, kl_coef: 0.01 },
  rollout: { prompts_per_step: 8, max_new_tokens: 4, parallelism: 2 },
  train: { steps: 4, lr: 1e-3, eval_every: 2, keep_consumed_steps: 10 },
};

before(async () => {
  db = await freshDatabase();
  home = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-train-'));
  await loadTfjsBackend({ kind: 'cpu' });
  const warm = await loadOrTrainWarmStart(parseRunConfig(SMALL_RUN), { lr: 3e-3, batchSize: 64, maxSteps: 2000, evalEvery: 10, band: [0.05, 0.6] }, home);
  SMALL_RUN = { ...SMALL_RUN, checkpoint: { init_from: warm.dir } };
  const env = { TEMPORAL_ADDRESS: sharedTemporalAddress(), DATABASE_URL: db.url, RELAX_HOME: home };
  const roles: Role[] = ['control', 'rollout', 'rollout', 'reference', 'train', 'train'];
  workers.push(...(await Promise.all(roles.map((r) => startWorkerProcess(r, env as { TEMPORAL_ADDRESS: string; DATABASE_URL: string })))));
  temporal = await temporalClient();
});

after(async () => {
  await Promise.all(workers.map((w) => w.stop('SIGKILL')));
  await temporal?.close();
  await db?.close();
  fs.rmSync(home, { recursive: true, force: true });
});

async function checkExactlyOnce(runId: string, steps: number): Promise<void> {
  const { rows: trainSteps } = await db.pool.query<{ step: number; status: string; policy_version: number; sample_count: number }>(
    'SELECT step, status, policy_version, sample_count FROM train_steps WHERE run_id = $1 ORDER BY step',
    [runId],
  );
  assert.deepEqual(trainSteps.map((s) => [s.step, s.status, s.policy_version]), Array.from({ length: steps }, (_, i) => [i + 1, 'applied', i + 1]));
  for (const s of trainSteps) {
    const { rows } = await db.pool.query<{ n: string }>('SELECT count(*) AS n FROM train_step_samples WHERE run_id = $1 AND step = $2', [runId, s.step]);
    assert.equal(Number(rows[0].n), s.sample_count, `step ${s.step} consumed exactly its recorded sample set`);
    // In sync mode step s trains on iteration s - 1, all of it.
    const { rows: its } = await db.pool.query<{ iteration: number }>('SELECT DISTINCT iteration FROM train_step_samples WHERE run_id = $1 AND step = $2', [runId, s.step]);
    assert.deepEqual(its.map((r) => r.iteration), [s.step - 1]);
  }
  const checkpoints = await listCheckpoints(db.pool, runId);
  assert.deepEqual(checkpoints.map((c) => c.policyVersion), Array.from({ length: steps + 1 }, (_, i) => i), 'each version published once');
  for (const c of checkpoints) {
    const v = await verifyCheckpoint(db.pool, runId, c.policyVersion);
    assert.ok(v.ok, `checkpoint v${c.policyVersion}: ${v.ok ? '' : v.problem}`);
  }
}

test('a training run goes through every stage and trains each step exactly once', async () => {
  const id = uniqueId('train');
  const result = (await temporal.client.workflow.execute('trainingRun', {
    taskQueue: roleTaskQueue('control'),
    workflowId: id,
    args: [SMALL_RUN],
  })) as TrainingResult;
  assert.equal(result.steps, 4);
  assert.equal(result.policyVersion, 4);
  assert.deepEqual(result.accuracies.map(([s]) => s), [0, 2, 4], 'held-out evaluations at start, every eval_every, and the end');
  await checkExactlyOnce(id, 4);

  const { rows } = await db.pool.query<{ with_ref: string; n: string }>(
    'SELECT count(ref_logprobs) AS with_ref, count(*) AS n FROM samples WHERE run_id = $1',
    [id],
  );
  assert.equal(rows[0].with_ref, rows[0].n, 'the reference stage wrote log-probs for every sample (KL on)');
  assert.equal(Number(rows[0].n), 4 * 8 * 4);
  const metrics = await db.pool.query<{ name: string }>('SELECT DISTINCT name FROM metrics WHERE run_id = $1', [id]);
  const names = metrics.rows.map((r) => r.name);
  for (const m of ['reward_mean', 'loss', 'grad_norm', 'kl', 'eval_accuracy']) assert.ok(names.includes(m), `metric ${m} recorded; have ${names.join(', ')}`);

  const description = await temporal.client.workflow.getHandle(id).describe();
  assert.deepEqual(description.searchAttributes.RelaxRunId, [id]);
  assert.equal((description.memo?.summary as { steps: number }).steps, 4);
});

test('kill -9 of the trainer mid-run: another train worker rebuilds from the last version and the run completes', async () => {
  const id = uniqueId('train-kill');
  const handle = await temporal.client.workflow.start('trainingRun', {
    taskQueue: roleTaskQueue('control'),
    workflowId: id,
    args: [{ ...SMALL_RUN, train: { ...SMALL_RUN.train, steps: 6 } }],
  });
  // Kill the trainer instance while it holds the run's trainer: right after step 2 starts on it.
  const started = await waitFor('train step 2 to start', async () => {
    const events = await listEvents(db.pool, id);
    return events.find((e) => e.kind === 'activity_started' && e.detail.activity === 'trainStep' && e.detail.step === 2);
  });
  const victim = workers.find((w) => w.child.pid === Number(started.detail.pid));
  assert.ok(victim, `step 2 ran in pid ${started.detail.pid}, which is none of the train workers`);
  victim.child.kill('SIGKILL');
  await victim.exited;

  const result = (await handle.result()) as TrainingResult;
  assert.equal(result.steps, 6);
  assert.equal(result.policyVersion, 6);
  await checkExactlyOnce(id, 6);
  const events = await listEvents(db.pool, id);
  const laterSteps = events.filter((e) => e.kind === 'activity_started' && e.detail.activity === 'trainStep' && Number(e.detail.step) >= 3);
  assert.ok(laterSteps.length > 0 && laterSteps.every((e) => Number(e.detail.pid) !== victim.child.pid), 'later steps ran on the surviving trainer');
});

test('an unknown task fails the run at once with a message naming the task', async () => {
  const err = await temporal.client.workflow
    .execute('trainingRun', { taskQueue: roleTaskQueue('control'), workflowId: uniqueId('bad-task'), args: [{ task: 'add3' }] })
    .then(
      () => assert.fail('the run should have failed'),
      (e: unknown) => e,
    );
  assert.ok(err instanceof WorkflowFailedError);
  assert.ok(err.cause instanceof ApplicationFailure);
  assert.equal(err.cause.type, 'InvalidRunConfig');
  assert.match(err.cause.message, /task: unknown task "add3"/);
});
