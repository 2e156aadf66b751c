// kill -9 of the rollout worker running an activity: the activity's heartbeats stop, Temporal
// retries it on the other rollout worker, and the workflow completes.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { roleTaskQueue, type Role } from '../config/task-queues';
import { listEvents } from '../store/events';
import { freshDatabase, sharedTemporalAddress, startWorkerProcess, temporalClient, uniqueId, waitFor, type TestDatabase, type TestProcess } from './helpers';

let db: TestDatabase;
const workers: TestProcess[] = [];
let temporal: Awaited<ReturnType<typeof temporalClient>>;

before(async () => {
  db = await freshDatabase();
  const env = { TEMPORAL_ADDRESS: sharedTemporalAddress(), DATABASE_URL: db.url };
  const roles: Role[] = ['control', 'rollout', 'rollout', 'reference', 'train'];
  workers.push(...(await Promise.all(roles.map((r) => startWorkerProcess(r, env)))));
  temporal = await temporalClient();
});

after(async () => {
  await Promise.all(workers.map((w) => w.stop('SIGKILL')));
  await temporal?.close();
  await db?.close();
});

test('a rollout activity survives kill -9 of its worker by moving to another rollout worker', async () => {
  const id = uniqueId('failover');
  const handle = await temporal.client.workflow.start('smokeWorkflow', {
    taskQueue: roleTaskQueue('control'),
    workflowId: id,
    args: [{ smoke: { samples: 8, rollout_delay_ms: 6_000, heartbeat_timeout_s: 2 } }],
  });

  const first = await waitFor('the rollout activity to start', async () => {
    const events = await listEvents(db.pool, id);
    return events.find((e) => e.kind === 'activity_started' && e.detail.activity === 'smokeRollout');
  });
  const victimPid = Number(first.detail.pid);
  const victim = workers.find((w) => w.child.pid === victimPid);
  assert.ok(victim, `the activity ran in pid ${victimPid}, which is none of the rollout workers`);
  victim.child.kill('SIGKILL');
  await victim.exited;

  const result = await handle.result();
  assert.equal(result.samples, 8);
  assert.notEqual(result.rolloutWorker, first.worker, 'the retry ran on the surviving worker');

  const events = await listEvents(db.pool, id);
  const rolloutStarts = events.filter((e) => e.kind === 'activity_started' && e.detail.activity === 'smokeRollout');
  assert.deepEqual(rolloutStarts.map((e) => e.detail.attempt), [1, 2]);
  assert.notEqual(rolloutStarts[1].detail.pid, victimPid);
  const completions = events.filter((e) => e.kind === 'activity_completed' && e.role === 'rollout');
  assert.equal(completions.length, 1, 'the killed attempt never completed');
  const { rows } = await db.pool.query<{ n: string }>('SELECT count(*) AS n FROM samples WHERE run_id = $1', [id]);
  assert.equal(rows[0].n, '8', 'no sample lost or duplicated');
});
