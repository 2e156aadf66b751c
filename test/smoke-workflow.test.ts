// The smoke workflow on real worker processes: each stage lands on its role's queue (the train step
// on one trainer's own instance queue), and every stage reads and writes the transfer queue.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { WorkflowFailedError } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { roleTaskQueue, type Role } from '../config/task-queues';
import { listEvents } from '../store/events';
import { freshDatabase, sharedTemporalAddress, startWorkerProcess, temporalClient, uniqueId, type TestDatabase, type TestProcess } from './helpers';

let db: TestDatabase;
const workers: TestProcess[] = [];
let temporal: Awaited<ReturnType<typeof temporalClient>>;

before(async () => {
  db = await freshDatabase();
  const env = { TEMPORAL_ADDRESS: sharedTemporalAddress(), DATABASE_URL: db.url };
  const roles: Role[] = ['control', 'rollout', 'reference', 'train'];
  workers.push(...(await Promise.all(roles.map((r) => startWorkerProcess(r, env)))));
  temporal = await temporalClient();
});

after(async () => {
  await Promise.all(workers.map((w) => w.stop()));
  await temporal?.close();
  await db?.close();
});

test('each stage runs on its role queue and passes data through Postgres', async () => {
  const id = uniqueId('smoke');
  const result = await temporal.client.workflow.execute('smokeWorkflow', {
    taskQueue: roleTaskQueue('control'),
    workflowId: id,
    args: [{ smoke: { samples: 12 }, algorithm: { group_size: 4 } }],
  });
  assert.equal(result.runId, id);
  assert.equal(result.samples, 12);

  const events = await listEvents(db.pool, id);
  const started = events.filter((e) => e.kind === 'activity_started');
  const queueOf = (activity: string) => started.filter((e) => e.detail.activity === activity).map((e) => e.task_queue);
  assert.deepEqual(queueOf('smokeRollout'), ['relax-rollout']);
  assert.deepEqual(queueOf('smokeReference'), ['relax-reference']);
  assert.deepEqual(queueOf('smokeAdvantage'), ['relax-control']);
  const trainQueues = queueOf('smokeTrain');
  assert.equal(trainQueues.length, 1);
  assert.match(trainQueues[0] ?? '', /^relax-train@/, 'the train step is pinned to one trainer instance');
  const trainEvent = started.find((e) => e.detail.activity === 'smokeTrain');
  assert.equal(trainEvent?.worker, result.trainWorker);
  assert.equal(trainEvent?.role, 'train');

  // Data went through every stage: reference log-probs, advantages, consumption by step 0.
  const { rows } = await db.pool.query<{ n: string; with_ref: string; with_adv: string; consumed: string; groups: string }>(
    `SELECT count(*) AS n, count(ref_logprobs) AS with_ref, count(advantage) AS with_adv,
            count(*) FILTER (WHERE consumed_by_step = 0) AS consumed, count(DISTINCT group_index) AS groups
       FROM samples WHERE run_id = $1`,
    [id],
  );
  assert.deepEqual(rows[0], { n: '12', with_ref: '12', with_adv: '12', consumed: '12', groups: '3' });
  // Group-relative advantages sum to zero within each group.
  const sums = await db.pool.query<{ s: number }>('SELECT abs(sum(advantage)) AS s FROM samples WHERE run_id = $1 GROUP BY group_index', [id]);
  for (const r of sums.rows) assert.ok(r.s < 1e-5, `group advantage sum ${r.s}`);
  const run = await db.pool.query('SELECT status, kind FROM runs WHERE run_id = $1', [id]);
  assert.deepEqual(run.rows[0], { status: 'completed', kind: 'smoke' });
});

test('an invalid config fails the workflow at once, naming the field, with no workflow-task retries', async () => {
  const id = uniqueId('bad-config');
  // Started with a raw client, as the Web UI or the temporal CLI would: no client-side validation.
  const handle = await temporal.client.workflow.start('smokeWorkflow', {
    taskQueue: roleTaskQueue('control'),
    workflowId: id,
    args: [{ train: { lr: -1 }, rollout: { top_p: 3 } }],
  });
  const err = await handle.result().then(
    () => assert.fail('the workflow should have failed'),
    (e: unknown) => e,
  );
  assert.ok(err instanceof WorkflowFailedError);
  assert.ok(err.cause instanceof ApplicationFailure);
  assert.equal(err.cause.type, 'InvalidRunConfig');
  assert.equal(err.cause.nonRetryable, true);
  assert.match(err.cause.message, /train\.lr: .*got -1/);
  assert.match(err.cause.message, /rollout\.top_p: .*got 3/);

  const history = await handle.fetchHistory();
  const taskFailures = (history.events ?? []).filter((e) => e.workflowTaskFailedEventAttributes);
  assert.equal(taskFailures.length, 0, 'no workflow task failed (so no retry loop)');
  assert.ok((history.events ?? []).some((e) => e.workflowExecutionFailedEventAttributes), 'the workflow itself failed');
  const attempts = (history.events ?? []).filter((e) => e.activityTaskStartedEventAttributes).map((e) => e.activityTaskStartedEventAttributes?.attempt);
  assert.deepEqual(attempts, [1], 'the validation activity ran once, without retries');
  const run = await db.pool.query('SELECT 1 FROM runs WHERE run_id = $1', [id]);
  assert.equal(run.rowCount, 0, 'an invalid run is not registered');
});
