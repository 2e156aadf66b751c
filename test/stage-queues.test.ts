// A tiny training run (KL on) on real worker processes, one per role: each stage activity is
// scheduled on its role's queue (the train step on the trainer's own instance queue) and runs on a
// worker of that role, as Temporal's history and the stage_spans / run_events tables both show;
// and the stages hand their data to each other through Postgres (every sample gets reference
// log-probs, each step consumes its iteration's samples and its update computes the KL term from
// them, every published version is registered with intact files). Also: an invalid config fails the
// workflow at once, naming its fields, with no workflow-task retries.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { WorkflowFailedError, type WorkflowHandle } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import type { RunConfigInput } from '../config/run-config';
import { roleTaskQueue, type Role } from '../config/task-queues';
import { listEvents } from '../store/events';
import { listSpans } from '../store/spans';
import type { TrainingResult } from '../workflows/training-run';
import { checkCheckpointRegistry, freshDatabase, sharedTemporalAddress, startWorkerProcess, temporalClient, uniqueId, type TestDatabase, type TestProcess } from './helpers';

// Rewards that vary within each group (without a warm start the add2 reward is 0 everywhere), so
// every step has a learning signal and its update reads the reference log-probs.
const HASH_REWARD = path.resolve(__dirname, '../../test/fixtures/hash-reward.cjs');
const STEPS = 3;
const PROMPTS = 4;
const GROUP = 4;
const RUN: RunConfigInput = {
  model: { context_length: 16 },
  algorithm: { group_size: GROUP, kl_coef: 0.01 },
  rollout: { prompts_per_step: PROMPTS, parallelism: 2 },
  train: { steps: STEPS, eval_every: 2, keep_consumed_steps: 10 },
  reward: { module: HASH_REWARD },
  checkpoint: { every: 1 },
};

let db: TestDatabase;
let home: string;
let temporal: Awaited<ReturnType<typeof temporalClient>>;
/** Each worker process with the identity and task queues its ready line reported. */
const workers: Array<{ role: Role; process: TestProcess; identity: string; queues: string[] }> = [];

before(async () => {
  db = await freshDatabase();
  home = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-stage-queues-'));
  const env = { TEMPORAL_ADDRESS: sharedTemporalAddress(), DATABASE_URL: db.url, RELAX_HOME: home };
  const roles: Role[] = ['control', 'rollout', 'rollout', 'reference', 'train'];
  const started = await Promise.all(roles.map((r) => startWorkerProcess(r, env)));
  for (const [i, p] of started.entries()) {
    const ready = await p.waitForLine(/^relax worker ready/);
    const m = /^relax worker ready: (\S+) polling (\S+)(?: and (\S+))?/.exec(ready);
    assert.ok(m, `unexpected ready line: ${ready}`);
    workers.push({ role: roles[i], process: p, identity: m[1], queues: [m[2], ...(m[3] ? [m[3]] : [])] });
  }
  temporal = await temporalClient();
});

after(async () => {
  await Promise.all(workers.map((w) => w.process.stop()));
  await temporal?.close();
  await db?.close();
  if (home) fs.rmSync(home, { recursive: true, force: true });
});

const identitiesOf = (role: Role) => workers.filter((w) => w.role === role).map((w) => w.identity);

interface ActivityRun {
  type: string;
  taskQueue: string;
  /** The worker that ran the attempt that closed it (history records only that one). */
  identity: string;
  attempt: number;
}

/** Every activity the workflow scheduled, from its history: where it was scheduled and who ran it. */
async function activityRuns(handle: WorkflowHandle): Promise<ActivityRun[]> {
  const events = (await handle.fetchHistory()).events ?? [];
  const started = new Map(events.filter((e) => e.activityTaskStartedEventAttributes).map((e) => [String(e.activityTaskStartedEventAttributes?.scheduledEventId), e.activityTaskStartedEventAttributes]));
  return events
    .filter((e) => e.activityTaskScheduledEventAttributes)
    .map((e) => {
      const a = e.activityTaskScheduledEventAttributes;
      const s = started.get(String(e.eventId));
      return { type: a?.activityType?.name ?? '', taskQueue: a?.taskQueue?.name ?? '', identity: s?.identity ?? '', attempt: s?.attempt ?? 0 };
    });
}

test('each stage runs on its role queue and passes data through Postgres', async () => {
  const id = uniqueId('stages');
  const handle = await temporal.client.workflow.start('trainingRun', { taskQueue: roleTaskQueue('control'), workflowId: id, args: [RUN] });
  const result = (await handle.result()) as TrainingResult;
  assert.equal(result.runId, id);
  assert.equal(result.steps, STEPS);
  assert.equal(result.policyVersion, STEPS);

  // Temporal's side: where each activity was scheduled, and which worker ran it.
  const runs = await activityRuns(handle);
  const byType = (type: string) => runs.filter((r) => r.type === type);
  const [trainer] = workers.filter((w) => w.role === 'train');
  const instanceQueue = trainer.queues.find((q) => q !== roleTaskQueue('train'));
  assert.match(instanceQueue ?? '', /^relax-train@/, 'the train worker polls an instance queue of its own');
  const expected: Array<[string, string, Role, number]> = [
    ['startRun', roleTaskQueue('control'), 'control', 1],
    ['finishRun', roleTaskQueue('control'), 'control', 1],
    ['initPolicy', roleTaskQueue('train'), 'train', 1],
    ['workerInfo', roleTaskQueue('train'), 'train', 1],
    ['generate', roleTaskQueue('rollout'), 'rollout', STEPS * 2],
    ['evaluate', roleTaskQueue('rollout'), 'rollout', 3],
    ['referenceLogprobs', roleTaskQueue('reference'), 'reference', STEPS],
    ['trainStep', instanceQueue as string, 'train', STEPS],
  ];
  for (const [type, queue, role, count] of expected) {
    const list = byType(type);
    assert.equal(list.length, count, `${type} scheduled ${count} times`);
    for (const r of list) {
      assert.equal(r.taskQueue, queue, `${type} scheduled on ${queue}`);
      assert.ok(identitiesOf(role).includes(r.identity), `${type} ran on a ${role} worker, not ${r.identity}`);
    }
  }
  assert.deepEqual(
    [...new Set(runs.map((r) => r.type))].sort(),
    expected.map(([t]) => t).sort(),
    'no other activity ran',
  );

  // The workers' side: each stage's span names the worker (of that role) that ran it.
  const spans = await listSpans(db.pool, id);
  const spansOf = (stage: string) => spans.filter((s) => s.stage === stage);
  for (const [stage, role] of [['generate', 'rollout'], ['evaluate', 'rollout'], ['reference', 'reference'], ['train', 'train']] as Array<[string, Role]>) {
    assert.ok(spansOf(stage).length > 0, `${stage} recorded spans`);
    for (const s of spansOf(stage)) {
      assert.equal(s.role, role, `${stage} span role`);
      assert.ok(identitiesOf(role).includes(s.worker), `${stage} span on ${s.worker}, a ${role} worker`);
    }
  }
  const iterations = Array.from({ length: STEPS }, (_, i) => i);
  // Sync mode: iteration i is generated by version i (two slices each), its reference log-probs
  // come after, and step i + 1 trains it into version i + 1, all on the one pinned trainer.
  assert.deepEqual(spansOf('generate').map((s) => [s.iteration, s.policyVersion]).sort(), iterations.flatMap((i) => [[i, i], [i, i]]));
  assert.deepEqual(spansOf('reference').map((s) => s.iteration), iterations);
  assert.deepEqual(spansOf('train').map((s) => [s.step, s.iteration, s.policyVersion, s.worker]), iterations.map((i) => [i + 1, i, i + 1, trainer.identity]));
  for (const i of iterations) {
    const generated = Math.max(...spansOf('generate').filter((s) => s.iteration === i).map((s) => s.endedAt.getTime()));
    const ref = spansOf('reference').find((s) => s.iteration === i);
    assert.ok(ref && ref.startedAt.getTime() >= generated, `iteration ${i}: reference started after its generation ended`);
  }

  // run_events: the control activities recorded the run's start and end on the control queue, and
  // every event a stage recorded names the queue and the worker (of its role) it ran on.
  const events = await listEvents(db.pool, id);
  const [controlWorker] = identitiesOf('control');
  const lifecycle = events.filter((e) => e.kind === 'run_started' || e.kind === 'run_finished');
  assert.deepEqual(
    lifecycle.map((e) => [e.kind, e.role, e.task_queue, e.worker, e.detail.activity]),
    [
      ['run_started', 'control', 'relax-control', controlWorker, 'startRun'],
      ['run_finished', 'control', 'relax-control', controlWorker, 'finishRun'],
    ],
  );
  assert.equal(lifecycle[1].detail.status, 'completed');
  for (const e of events) {
    const role = e.role as Role;
    assert.ok(identitiesOf(role).includes(e.worker ?? ''), `${e.kind} of ${String(e.detail.activity)} recorded by ${e.worker}, a ${role} worker`);
    assert.equal(e.task_queue, e.detail.activity === 'trainStep' ? instanceQueue : roleTaskQueue(role), `${e.kind} of ${String(e.detail.activity)}: its task queue`);
  }

  // Postgres carried the data between the stages: every sample got its reference log-probs (one per
  // response token) and was consumed by the step after its iteration; the steps saw the KL term.
  const { rows } = await db.pool.query<{ iteration: number; n: string; with_ref: string; ref_len_ok: string; consumed_ok: string }>(
    `SELECT iteration, count(*) AS n, count(ref_logprobs) AS with_ref,
            count(*) FILTER (WHERE cardinality(ref_logprobs) = cardinality(response_tokens)) AS ref_len_ok,
            count(*) FILTER (WHERE consumed_by_step = iteration + 1) AS consumed_ok
       FROM samples WHERE run_id = $1 GROUP BY iteration ORDER BY iteration`,
    [id],
  );
  const perIteration = String(PROMPTS * GROUP);
  assert.deepEqual(rows, iterations.map((i) => ({ iteration: i, n: perIteration, with_ref: perIteration, ref_len_ok: perIteration, consumed_ok: perIteration })));
  const steps = await db.pool.query<{ step: number; status: string; sample_count: number }>('SELECT step, status, sample_count FROM train_steps WHERE run_id = $1 ORDER BY step', [id]);
  assert.deepEqual(steps.rows.map((s) => [s.step, s.status, s.sample_count]), iterations.map((i) => [i + 1, 'applied', PROMPTS * GROUP]));
  const trainedOn = await db.pool.query<{ step: number; value: number }>(`SELECT step, value FROM metrics WHERE run_id = $1 AND name = 'trained_samples' ORDER BY step`, [id]);
  assert.ok(trainedOn.rows.length === STEPS && trainedOn.rows.every((r) => r.value > 0), `every step updated on some samples: ${JSON.stringify(trainedOn.rows)}`);
  const kl = await db.pool.query<{ step: number }>(`SELECT step FROM metrics WHERE run_id = $1 AND name = 'kl' ORDER BY step`, [id]);
  assert.deepEqual(kl.rows.map((r) => r.step), iterations.map((i) => i + 1), 'each step computed the KL term from the reference log-probs');
  // Every version 0..STEPS registered once, with files that verify (checkpoint.every 1 keeps them all).
  const { retained } = await checkCheckpointRegistry(db.pool, id, STEPS, { every: 1, keepLast: 5, protect: 1 });
  assert.deepEqual(retained, [0, 1, 2, 3]);
  const run = await db.pool.query('SELECT status, kind FROM runs WHERE run_id = $1', [id]);
  assert.deepEqual(run.rows[0], { status: 'completed', kind: 'training' });
});

test('an invalid config fails the workflow at once, naming the field, with no workflow-task retries', async () => {
  const id = uniqueId('bad-config');
  // Started with a raw client, as the Web UI or the temporal CLI would: no client-side validation.
  const handle = await temporal.client.workflow.start('trainingRun', {
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
  const runs = await activityRuns(handle);
  assert.deepEqual(runs.map((r) => [r.type, r.attempt]), [['startRun', 1]], 'only the validation activity ran, once, without retries');
  const run = await db.pool.query('SELECT 1 FROM runs WHERE run_id = $1', [id]);
  assert.equal(run.rowCount, 0, 'an invalid run is not registered');
});

test('an unknown advantage estimator fails the run at its start, naming the field and the registered ones', async () => {
  const handle = await temporal.client.workflow.start('trainingRun', { taskQueue: roleTaskQueue('control'), workflowId: uniqueId('bad-estimator'), args: [{ algorithm: { advantage: 'gae2' } }] });
  const err = await handle.result().then(
    () => assert.fail('the workflow should have failed'),
    (e: unknown) => e,
  );
  assert.ok(err instanceof WorkflowFailedError && err.cause instanceof ApplicationFailure);
  assert.equal(err.cause.type, 'InvalidRunConfig');
  assert.equal(err.cause.nonRetryable, true);
  assert.match(err.cause.message, /^invalid run config: algorithm\.advantage: unknown estimator "gae2": use one of grpo, dr_grpo, rloo, reinforce_pp, reinforce_pp_baseline/);
  assert.deepEqual((await activityRuns(handle)).map((r) => [r.type, r.attempt]), [['startRun', 1]]);
});
