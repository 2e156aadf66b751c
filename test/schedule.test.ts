// Scheduled retraining (docs/schedules.md): the run_id derivation and {date} patterns (unit), the
// schedule options' errors, startRun on schedule-named workflow ids and fixed run_ids (real
// database, the real activity), `schedule:<name>@latest` resolution, and a real Temporal Schedule
// driven through three ticks on real workers, each run starting from the previous run's newest version.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { ApplicationFailure } from '@temporalio/common';
import { MockActivityEnvironment } from '@temporalio/testing';
import type { Client } from '@temporalio/client';
import type { WorkerContext } from '../activities/context';
import { createControlActivities } from '../activities/control';
import { withDatePatterns } from '../activities/run-registration';
import { createSchedule, deleteSchedule, describeSchedule, listSchedules, pauseSchedule, ScheduleOptionError } from '../client/schedules';
import { parseRunConfig, RunConfigError, type RunConfig, type RunConfigInput } from '../config/run-config';
import { fillDatePatterns, hashedRunIdFromWorkflowId, RUN_ID_PATTERN, runIdFromWorkflowId, scheduledRunId, scheduleInitFromProblem } from '../config/scheduled-runs';
import { listCheckpoints, registerCheckpoint } from '../store/checkpoint-registry';
import { resolveInitFrom } from '../training/policy-versions';
import { startWorkerStack, uniqueId, waitFor, type WorkerStack } from './helpers';

let stack: WorkerStack;

// Two steps of a tiny add2 run. The fixture reward (a hash of the response) varies within a group
// even for a random init, so every step changes the weights: "started from the previous run's
// newest version" is told apart from "started fresh".
const HASH_REWARD = path.resolve(__dirname, '../../test/fixtures/hash-reward.cjs');
const TINY: RunConfigInput = {
  model: { context_length: 16 },
  algorithm: { group_size: 4 },
  rollout: { prompts_per_step: 2, max_new_tokens: 4 },
  train: { steps: 2, eval_every: 100, lr: 1e-2 },
  reward: { module: HASH_REWARD },
};

before(async () => {
  stack = await startWorkerStack(['control', 'rollout', 'train'], {}, 'relax-schedule-');
});

after(() => stack?.close());

test('run_id derivation: a schedule-named workflow id becomes a valid, unique run_id of at most 64 characters', () => {
  assert.equal(runIdFromWorkflowId('retrain-2026-12-01T06:35:35Z'), 'retrain-2026-12-01T06-35-35Z');
  assert.equal(runIdFromWorkflowId('plain-id_1.x'), 'plain-id_1.x', 'a valid id is kept as it is');
  assert.equal(runIdFromWorkflowId(':odd/id'), 'odd-id', 'no leading separator');
  assert.match(runIdFromWorkflowId('::'), /^run-[0-9a-f]{8}$/);
  const long = `${'nightly-retraining-of-the-support-model'.repeat(2)}-2026-12-01T06:35:35Z`;
  const a = runIdFromWorkflowId(long);
  const b = runIdFromWorkflowId(long.replace('06:35:35', '06:35:36'));
  for (const id of [a, b]) assert.ok(id.length <= 64 && RUN_ID_PATTERN.test(id), id);
  assert.notEqual(a, b, 'two long ids that share their prefix get different hashes');
  assert.notEqual(hashedRunIdFromWorkflowId('a:b'), hashedRunIdFromWorkflowId('a/b'), 'the hashed form tells replaced characters apart');
  assert.equal(scheduledRunId('nightly', new Date('2026-12-01T06:35:35.120Z'), 7), 'nightly-20261201T063535Z');
  assert.equal(scheduledRunId('nightly', undefined, 7), 'nightly-7');
  const cut = scheduledRunId('x'.repeat(64), new Date('2026-12-01T06:35:35Z'), 1);
  assert.ok(cut.length <= 64 && cut.endsWith('-20261201T063535Z') && RUN_ID_PATTERN.test(cut), cut);
});

test('{date} and {scheduled_at} in dataset paths; schedule:<name>@latest is the only schedule form', () => {
  const at = new Date('2026-12-01T06:35:35.500Z');
  assert.equal(fillDatePatterns('data/{date}.jsonl', at), 'data/2026-12-01.jsonl');
  assert.equal(fillDatePatterns('d/{scheduled_at}/{date}', at), 'd/2026-12-01T06:35:35Z/2026-12-01');
  const config = { data: { train: 'in/{date}.jsonl', eval: 'ev/{date}.jsonl' } } as unknown as RunConfig;
  assert.deepEqual(withDatePatterns(config, at).data, { train: 'in/2026-12-01.jsonl', eval: 'ev/2026-12-01.jsonl' });
  assert.equal(scheduleInitFromProblem('schedule:nightly@latest'), undefined);
  assert.equal(scheduleInitFromProblem('/ckpt/dir'), undefined);
  assert.match(scheduleInitFromProblem('schedule:nightly@3') ?? '', /write schedule:<name>@latest/);
  assert.equal(parseRunConfig({ checkpoint: { init_from: 'schedule:nightly@latest' } }).checkpoint.init_from, 'schedule:nightly@latest');
});

test('schedule create refuses bad options and an invalid config before sending anything', async () => {
  const noServer = {} as Client; // nothing may reach the server
  const base = { name: 'nightly', config: TINY, every: '6h' };
  const refused = async (options: Parameters<typeof createSchedule>[1], pattern: RegExp, type: new (...a: never[]) => Error = ScheduleOptionError) =>
    assert.rejects(createSchedule(noServer, options), (err: Error) => err instanceof type && pattern.test(err.message));
  await refused({ ...base, name: 'bad name:1' }, /^name: must be 1-64 characters/);
  await refused({ ...base, every: undefined }, /give exactly one of --cron/);
  await refused({ ...base, cron: '0 6 * * *' }, /give exactly one of --cron/);
  await refused({ ...base, every: 'soon' }, /^every: must be a duration/);
  await refused({ ...base, overlap: 'sometimes' as never }, /^overlap: must be one of skip, buffer_one, buffer_all/);
  await refused({ ...base, catchupWindow: '-1' }, /^catch-up-window: must be a duration|^catchup-window: must be a duration/);
  await refused({ ...base, config: { train: { steps: -2 } } }, /train\.steps/, RunConfigError);
});

const sha = (text: string) => createHash('sha256').update(text).digest('hex');
const ctx = (): WorkerContext => ({ pool: stack.db.pool, role: 'control', device: 'cpu', identity: 'test-control', instanceQueue: 'test-control-instance' });
const activityEnv = new MockActivityEnvironment();

test('startRun: a workflow id with ":" gets a derived run_id; a fixed run_id gets one run per tick; a bad schedule reference fails at once', async () => {
  const control = createControlActivities(ctx());
  const workflowId = `${uniqueId('retrain')}-2026-12-01T06:35:35Z`;
  const started: RunConfig = await activityEnv.run(control.startRun, { input: TINY, workflowId });
  assert.equal(started.run_id, workflowId.replaceAll(':', '-'));
  const again: RunConfig = await activityEnv.run(control.startRun, { input: TINY, workflowId });
  assert.equal(again.run_id, started.run_id, 'a retried start gets the same run');

  const name = uniqueId('nightly');
  const ticks = ['2026-12-01T06:00:00Z', '2026-12-02T06:00:00Z'];
  const runIds: string[] = [];
  for (const at of ticks) {
    const config: RunConfig = await activityEnv.run(control.startRun, { input: { ...TINY, run_id: 'fixed' }, workflowId: `${name}-${at}`, schedule: { id: name, scheduledAt: at } });
    runIds.push(config.run_id as string);
  }
  assert.deepEqual(runIds, ['fixed-20261201T060000Z', 'fixed-20261202T060000Z']);
  const { rows } = await stack.db.pool.query('SELECT run_id, schedule_id, scheduled_at FROM runs WHERE schedule_id = $1 ORDER BY scheduled_at', [name]);
  assert.deepEqual(rows.map((r) => [r.run_id, r.schedule_id, r.scheduled_at.toISOString()]), [
    ['fixed-20261201T060000Z', name, '2026-12-01T06:00:00.000Z'],
    ['fixed-20261202T060000Z', name, '2026-12-02T06:00:00.000Z'],
  ]);

  const bad = await activityEnv.run(control.startRun, { input: { ...TINY, checkpoint: { init_from: 'schedule:nightly@7' } }, workflowId: uniqueId('wf') }).catch((e) => e);
  assert.ok(bad instanceof ApplicationFailure && bad.type === 'InvalidRunConfig' && bad.nonRetryable, String(bad));
  assert.match(bad.message, /checkpoint\.init_from: .*write schedule:<name>@latest/);
});

test('resolveInitFrom schedule:<name>@latest: undefined before a completed run, then the newest completed run\'s newest version', async () => {
  const db = stack.db.pool;
  const name = uniqueId('sched');
  assert.equal(await resolveInitFrom(db, `schedule:${name}@latest`), undefined, 'no run yet');
  const run = async (runId: string, at: string, status: string, versions: number) => {
    await db.query(`INSERT INTO runs (run_id, workflow_id, kind, config, status, schedule_id, scheduled_at) VALUES ($1, $1, 'training', '{}', $2, $3, $4)`, [runId, status, name, at]);
    for (let v = 0; v < versions; v++) await registerCheckpoint(db, { runId, policyVersion: v, path: `/nowhere/${runId}/v${v}`, sha256: sha(`${runId}-${v}`), step: v });
  };
  await run(`${name}-a`, '2026-12-01T06:00:00Z', 'running', 2);
  assert.equal(await resolveInitFrom(db, `schedule:${name}@latest`), undefined, 'a run that has not completed does not count');
  await run(`${name}-b`, '2026-12-02T06:00:00Z', 'completed', 3);
  await run(`${name}-c`, '2026-12-03T06:00:00Z', 'completed', 2);
  await run(`${name}-d`, '2026-12-04T06:00:00Z', 'running', 1);
  assert.deepEqual(await resolveInitFrom(db, `schedule:${name}@latest`, { runId: `${name}-d` }), { path: `/nowhere/${name}-c/v1`, sha256: sha(`${name}-c-1`), runId: `${name}-c`, policyVersion: 1 });
  assert.equal((await resolveInitFrom(db, `schedule:${name}@latest`, { runId: `${name}-c` }))?.runId, `${name}-b`, 'never the run itself');
  await assert.rejects(resolveInitFrom(db, `schedule:${name}@2`), /write schedule:<name>@latest/);
});

test('a real schedule, three ticks: three runs, each starting from the previous run\'s newest version', async () => {
  const client = stack.temporal.client;
  const name = uniqueId('retrain');
  const config = { ...TINY, checkpoint: { init_from: `schedule:${name}@latest` } };
  await createSchedule(client, { name, config, every: '2s', overlap: 'buffer_all', catchupWindow: '1m' });
  let paused = false;
  try {
    const runs = await waitFor(
      'three completed scheduled runs',
      async () => {
        const { rows } = await stack.db.pool.query<{ run_id: string; workflow_id: string; status: string }>(
          'SELECT run_id, workflow_id, status FROM runs WHERE schedule_id = $1 ORDER BY scheduled_at LIMIT 3',
          [name],
        );
        // Ticks buffer while a run trains (buffer_all): once the third run started, no fourth is needed.
        if (rows.length === 3 && !paused) paused = await pauseSchedule(client, name, 'test: three runs started').then(() => true, () => false);
        return rows.length === 3 && rows.every((r) => r.status === 'completed') ? rows : undefined;
      },
      150_000,
      500,
    );
    for (const r of runs) {
      assert.match(r.workflow_id, new RegExp(`^${name}-\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\dZ$`), 'Temporal named the workflow with the scheduled time');
      assert.equal(r.run_id, r.workflow_id.replaceAll(':', '-'), 'its run_id was derived from the workflow id and validated');
    }
    const versions = await Promise.all(runs.map((r) => listCheckpoints(stack.db.pool, r.run_id)));
    for (let i = 0; i < 3; i++) {
      const v0 = versions[i][0];
      const last = versions[i][versions[i].length - 1];
      assert.equal(last.policyVersion, 2, `run ${i + 1} trained two steps`);
      assert.notEqual(last.sha256, v0.sha256, `run ${i + 1}'s steps changed the weights`);
      if (i > 0) assert.equal(v0.sha256, versions[i - 1][versions[i - 1].length - 1].sha256, `run ${i + 1} started from run ${i}'s newest version`);
    }
    const described = await describeSchedule(client, name);
    assert.ok(described.actionsTaken >= 3 && described.overlap === 'buffer_all' && described.paused, JSON.stringify(described));
    assert.equal((await listSchedules(client)).find((s) => s.name === name)?.workflowType, 'trainingRun');
    // The Web UI's Summary panel: the schedule's action carries the run's static summary, and so does each run it started.
    const action = (await client.schedule.getHandle(name).describe()).action;
    assert.equal(action.type === 'startWorkflow' ? action.staticSummary : undefined, 'add2 · tiny GPT · grpo / ppo_clip · 2 steps · sync');
    assert.equal(await (await client.workflow.getHandle(runs[0].workflow_id).describe()).staticSummary(), 'add2 · tiny GPT · grpo / ppo_clip · 2 steps · sync');
  } finally {
    await pauseSchedule(client, name).catch(() => undefined);
    const left = await describeSchedule(client, name).catch(() => undefined);
    await deleteSchedule(client, name);
    // A tick buffered before the pause must not outlive this test's workers on the shared server.
    for (const id of left?.running ?? []) await client.workflow.getHandle(id).terminate('schedule test over').catch(() => undefined);
  }
  await assert.rejects(describeSchedule(client, name), /no schedule named/);
});
