// kill -9 of the rollout worker running a training run's generate activity (kept busy for seconds by
// a slow reward fixture): its heartbeats stop, Temporal retries the activity on the other rollout
// worker once the 10 s heartbeat timeout passes, and the run completes with that iteration's
// samples written once, by the survivor.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import type { RunConfigInput } from '../config/run-config';
import { roleTaskQueue, type Role } from '../config/task-queues';
import { listSpans } from '../store/spans';
import type { TrainingResult } from '../workflows/training-run';
import { freshDatabase, sharedTemporalAddress, startWorkerProcess, temporalClient, uniqueId, waitFor, type TestDatabase, type TestProcess } from './helpers';

const SLOW_REWARD = path.resolve(__dirname, '../../test/fixtures/slow-reward.cjs');
const PROMPTS = 2;
const GROUP = 2;

let db: TestDatabase;
let home: string;
const workers: Array<{ role: Role; process: TestProcess; identity: string }> = [];
let temporal: Awaited<ReturnType<typeof temporalClient>>;

before(async () => {
  db = await freshDatabase();
  home = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-failover-'));
  const env = { TEMPORAL_ADDRESS: sharedTemporalAddress(), DATABASE_URL: db.url, RELAX_HOME: home };
  const roles: Role[] = ['control', 'rollout', 'rollout', 'train'];
  const started = await Promise.all(roles.map((r) => startWorkerProcess(r, env)));
  for (const [i, p] of started.entries()) {
    const ready = await p.waitForLine(/^relax worker ready/);
    const m = /^relax worker ready: (\S+) /.exec(ready);
    assert.ok(m, `unexpected ready line: ${ready}`);
    workers.push({ role: roles[i], process: p, identity: m[1] });
  }
  temporal = await temporalClient();
});

after(async () => {
  await Promise.all(workers.map((w) => w.process.stop('SIGKILL')));
  await temporal?.close();
  await db?.close();
  if (home) fs.rmSync(home, { recursive: true, force: true });
});

test('a generate activity survives kill -9 of its worker by moving to the other rollout worker', async () => {
  const id = uniqueId('failover');
  const config: RunConfigInput = {
    model: { context_length: 16 },
    algorithm: { group_size: GROUP },
    rollout: { prompts_per_step: PROMPTS, parallelism: 1 },
    train: { steps: 1, keep_consumed_steps: 10 },
    reward: { module: SLOW_REWARD, timeout_ms: 30_000 },
  };
  const handle = await temporal.client.workflow.start('trainingRun', { taskQueue: roleTaskQueue('control'), workflowId: id, args: [config] });

  // Temporal's pending activity info names the worker that picked up iteration 0's generate.
  const pending = await waitFor('the generate activity to start on a worker', async () => {
    const { raw } = await handle.describe();
    return (raw.pendingActivities ?? []).find((a) => a.activityType?.name === 'generate' && a.lastWorkerIdentity && a.lastStartedTime);
  });
  assert.equal(pending.attempt, 1);
  const victim = workers.find((w) => w.identity === pending.lastWorkerIdentity);
  assert.ok(victim && victim.role === 'rollout', `generate started on ${pending.lastWorkerIdentity}, which is none of the rollout workers`);
  const survivor = workers.find((w) => w.role === 'rollout' && w !== victim);
  assert.ok(survivor);
  // Still mid-flight: the slow reward keeps the activity going for seconds, so no span is written yet.
  assert.equal((await listSpans(db.pool, id)).filter((s) => s.stage === 'generate').length, 0, 'killed before the generate completed');
  victim.process.child.kill('SIGKILL');
  await victim.process.exited;

  const result = (await handle.result()) as TrainingResult;
  assert.equal(result.steps, 1);
  assert.equal(result.policyVersion, 1);

  // History records the attempt that closed the activity: the second, on the survivor.
  const events = (await handle.fetchHistory()).events ?? [];
  const generateScheduled = events.filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'generate').map((e) => String(e.eventId));
  assert.equal(generateScheduled.length, 1, 'one generate for the one iteration (parallelism 1)');
  const started = events.find((e) => String(e.activityTaskStartedEventAttributes?.scheduledEventId ?? '') === generateScheduled[0])?.activityTaskStartedEventAttributes;
  assert.equal(started?.attempt, 2, 'the generate was retried once');
  assert.equal(started?.identity, survivor.identity, 'the retry ran on the surviving rollout worker');
  assert.ok(events.some((e) => String(e.activityTaskCompletedEventAttributes?.scheduledEventId ?? '') === generateScheduled[0]), 'the retry completed');

  // The stage spans agree: iteration 0 was generated once, by the survivor; the killed attempt never completed.
  const generated = (await listSpans(db.pool, id)).filter((s) => s.stage === 'generate');
  assert.deepEqual(generated.map((s) => [s.iteration, s.worker]), [[0, survivor.identity]]);
  const { rows } = await db.pool.query<{ n: string; distinct_keys: string; consumed: string }>(
    `SELECT count(*) AS n, count(DISTINCT (group_index, sample_index)) AS distinct_keys, count(*) FILTER (WHERE consumed_by_step = 1) AS consumed
       FROM samples WHERE run_id = $1 AND iteration = 0`,
    [id],
  );
  assert.deepEqual(rows[0], { n: String(PROMPTS * GROUP), distinct_keys: String(PROMPTS * GROUP), consumed: String(PROMPTS * GROUP) }, 'no sample lost or duplicated');
});
