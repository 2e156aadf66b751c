// Elastic rollout through the control API of a real `relax dev` (its own Temporal dev server, real
// worker processes, the test's database): while a run trains, in sync and in async mode,
// POST /rollout/scale_out to 3 reaches ACTIVE and the next steps' samples come from all three
// engines; scale_in to 1 drains two with no sample lost or duplicated and no activity retried.
// Also: every mutation without the token is 401, a run config naming a missing task or data file is a 400 naming the fields (preflight) with no workflow, the OpenAPI document validates (and Swagger UI at /docs shows it), a second operation
// while one runs is 409, an absolute target already met is a no-op, initial capacity is protected,
// and a rollout worker of "another host" (its own process and data directory, the same Temporal and
// database) takes rollout work without any registration.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import SwaggerParser from '@apidevtools/swagger-parser';
import { Client, Connection } from '@temporalio/client';
import { chooseScaleInVictims } from '../workflows/rollout-scaling';
import type { EngineSummary } from '../activities/capacity';
import { spawnRelax, startDevStack, uniqueId, waitFor, type DevStack, type TestDatabase } from './helpers';

let stack: DevStack;
let db: TestDatabase;
let api: string;
let temporal: { client: Client; close(): Promise<void> };
let temporalAddress: string;
const call = (method: string, url: string, body?: unknown, auth = true) => stack.call(method, url, body, auth);

before(async () => {
  stack = await startDevStack(['--train-workers', '1']);
  ({ db, api, temporalAddress } = stack);
  assert.equal(fs.statSync(path.join(stack.home, 'api-token')).mode & 0o777, 0o600);
  const connection = await Connection.connect({ address: temporalAddress });
  temporal = { client: new Client({ connection }), close: () => connection.close() };
});

after(async () => {
  await temporal?.close();
  await stack?.close();
});

const engine = (id: string, initial: boolean, createdAt: string): EngineSummary => ({ engineId: id, kind: 'local', url: null, pid: 1, identity: `rollout/${id}`, state: 'active', initial, createdAt });

test('scale-in picks the newest engines first and protects the initial ones unless forced', () => {
  const engines = [engine('a', true, '2026-01-01T00:00:00Z'), engine('b', false, '2026-01-01T00:01:00Z'), engine('c', false, '2026-01-01T00:02:00Z')];
  assert.deepEqual(chooseScaleInVictims(engines, { num_replicas: 2 }).map((e) => e.engineId), ['c']);
  assert.deepEqual(chooseScaleInVictims(engines, { num_replicas: 1 }).map((e) => e.engineId), ['c', 'b']);
  assert.deepEqual(chooseScaleInVictims(engines, { num_replicas: 3 }), []);
  assert.throws(() => chooseScaleInVictims(engines, { num_replicas: 0 }), /initial capacity 1.*force: true/);
  assert.deepEqual(chooseScaleInVictims(engines, { num_replicas: 0, force: true }).map((e) => e.engineId), ['c', 'b', 'a']);
  assert.deepEqual(chooseScaleInVictims(engines, { engine_ids: ['b'] }).map((e) => e.engineId), ['b']);
  assert.throws(() => chooseScaleInVictims(engines, { engine_ids: ['a'] }), /started with the stack/);
  assert.throws(() => chooseScaleInVictims(engines, { engine_ids: ['zz'] }), /no such engine zz/);
});

test('the OpenAPI document validates, and every mutation without the bearer token is 401', async () => {
  const res = await fetch(`${api}/openapi.json`);
  assert.equal(res.status, 200);
  const doc = (await res.json()) as { openapi: string; paths: Record<string, Record<string, unknown>> };
  assert.match(doc.openapi, /^3\./);
  await SwaggerParser.validate(structuredClone(doc) as never);
  // Swagger UI at /docs: an HTML page whose initializer loads /docs/json, the same document, with "Try it out" for GETs only.
  const docs = await fetch(`${api}/docs`);
  assert.equal(docs.status, 200);
  assert.match(docs.headers.get('content-type') ?? '', /^text\/html/);
  assert.match(await docs.text(), /<div id="swagger-ui">[\s\S]*\/docs\/static\/swagger-initializer\.js/);
  const initializer = await (await fetch(`${api}/docs/static/swagger-initializer.js`)).text();
  assert.match(initializer, /url: resolveUrl\('\.\/json'\)/, 'the UI loads the document next to it, /docs/json');
  assert.match(initializer, /"supportedSubmitMethods":\["get"\]/, 'read-only: Try it out sends GETs only');
  assert.deepEqual(await (await fetch(`${api}/docs/json`)).json(), doc, '/docs/json is /openapi.json');
  const mutations = Object.entries(doc.paths).flatMap(([p, ops]) => Object.keys(ops).filter((m) => !['get', 'head', 'options'].includes(m)).map((m) => [m.toUpperCase(), p.replace(/\{[^}]+\}/g, 'x')] as const));
  for (const route of ['POST /runs', 'POST /rollout/scale_out', 'POST /rollout/scale_in', 'POST /runs/x/hyperparameters', 'POST /runs/x/cancel', 'POST /rollout/scale_out/x/cancel']) {
    assert.ok(mutations.some(([m, p]) => `${m} ${p}` === route), `${route} is documented`);
  }
  for (const [method, p] of mutations) {
    const r = await call(method, p, {}, false);
    assert.equal(r.status, 401, `${method} ${p} without a token`);
    assert.equal(r.json.error.type, 'unauthorized');
    const wrong = await fetch(`${api}${p}`, { method, headers: { authorization: 'Bearer not-the-token', 'content-type': 'application/json' }, body: '{}' });
    assert.equal(wrong.status, 401, `${method} ${p} with a wrong token`);
  }
  assert.equal((await call('GET', '/rollout/engines', undefined, false)).status, 200, 'reads need no token');
  const bad = await call('POST', '/rollout/scale_out', { num_replicas: 0 });
  assert.equal(bad.status, 400);
  assert.match(bad.json.error.message, /num_replicas/);
  const invalid = await call('POST', '/runs', { train: { steps: -1 } });
  assert.equal(invalid.status, 400);
  assert.equal(invalid.json.error.type, 'invalid_run_config');
  assert.match(invalid.json.error.message, /train\.steps/);
  // POST /runs runs `relax train`'s preflight: what the config names and this machine lacks is a 400 naming each field, with no workflow.
  const refusedId = uniqueId('api-preflight');
  const refused = await call('POST', '/runs', { run_id: refusedId, task: 'add3', model: { from: 'smollm2-135m-instruct' }, data: { train: '/nonexistent/relax-train.jsonl' }, train: { steps: 2 } });
  assert.equal(refused.status, 400, JSON.stringify(refused.json));
  assert.equal(refused.json.error.type, 'preflight_failed');
  assert.deepEqual(refused.json.error.problems.map((p: { field: string }) => p.field), ['task', 'data.train']);
  assert.match(refused.json.error.problems[0].message, /unknown task "add3": known tasks are add2/);
  assert.match(refused.json.error.message, /no workflow was started/);
  await assert.rejects(temporal.client.workflow.getHandle(refusedId).describe(), /not found/i, 'no workflow was created');
  assert.equal((await call('POST', '/runs/no-such-run/hyperparameters', { train: { lr: 1e-3 } })).status, 404);
  assert.equal((await call('GET', '/rollout/scale_out/no-such-request')).status, 404);
});

/** Waits for an operation to leave its in-progress states; returns its final body. */
async function settle(kind: 'scale_out' | 'scale_in', requestId: string): Promise<any> {
  return waitFor(`${kind} ${requestId}`, async () => {
    const r = await call('GET', `/rollout/${kind}/${requestId}`);
    assert.equal(r.status, 200, JSON.stringify(r.json));
    return r.json.execution === 'RUNNING' ? undefined : r.json;
  }, 240_000, 250);
}

async function appliedSteps(runId: string): Promise<number> {
  const { rows } = await db.pool.query<{ n: string }>(`SELECT count(*) AS n FROM train_steps WHERE run_id = $1 AND status = 'applied'`, [runId]);
  return Number(rows[0].n);
}

async function enginesOf(runId: string, fromIteration: number): Promise<string[]> {
  const { rows } = await db.pool.query<{ engine: string }>('SELECT DISTINCT engine FROM samples WHERE run_id = $1 AND iteration >= $2', [runId, fromIteration]);
  return rows.map((r) => r.engine).sort();
}

/** A run on the tiny GPT that takes a while: 12 prompts x 4 samples per step in 6 rollout slices. */
function runConfig(runId: string, mode: 'sync' | 'async') {
  return {
    run_id: runId,
    task: 'add2',
    ...(mode === 'async' ? { mode, max_staleness: 1 } : {}),
    model: { context_length: 16 },
    algorithm: { group_size: 4 },
    rollout: { prompts_per_step: 12, max_new_tokens: 4, parallelism: 6 },
    train: { steps: 400, lr: 1e-3, eval_every: 1000, keep_consumed_steps: 1000 },
  };
}

async function scaleDuringRun(mode: 'sync' | 'async'): Promise<void> {
  const runId = uniqueId(`scale-${mode}`);
  const started = await call('POST', '/runs', runConfig(runId, mode));
  assert.equal(started.status, 201, JSON.stringify(started.json));
  await waitFor('step 2', async () => ((await appliedSteps(runId)) >= 2 ? true : undefined), 120_000);

  const out = await call('POST', '/rollout/scale_out', { num_replicas: 3, timeout_secs: 120 });
  assert.equal(out.status, 202, JSON.stringify(out.json));
  assert.equal(out.json.status, 'PENDING');
  const conflict = await call('POST', '/rollout/scale_in', { num_replicas: 1 });
  assert.equal(conflict.status, 409, 'a second operation while one runs');
  const scaledOut = await settle('scale_out', out.json.request_id);
  assert.equal(scaledOut.status, 'ACTIVE', JSON.stringify(scaledOut));
  assert.deepEqual(scaledOut.transitions.map((t: { status: string }) => t.status), ['PENDING', 'CREATING', 'HEALTH_CHECKING', 'WEIGHT_SYNCING', 'READY', 'ACTIVE']);
  assert.equal(scaledOut.engines.length, 2);
  for (const id of scaledOut.engines) assert.ok(scaledOut.weights[id].some((w: { runId: string; sha256?: string }) => w.runId === runId && w.sha256), `${id} loaded the run's newest version: ${JSON.stringify(scaledOut.weights)}`);
  const engines = (await call('GET', '/rollout/engines')).json.engines as Array<{ engine_id: string; identity: string; state: string; initial: boolean; pid: number }>;
  assert.deepEqual(engines.map((e) => e.state), ['active', 'active', 'active']);
  assert.deepEqual(engines.map((e) => e.initial), [true, false, false]);

  const same = await settle('scale_out', (await call('POST', '/rollout/scale_out', { num_replicas: 3 })).json.request_id);
  assert.equal(same.status, 'ACTIVE');
  assert.deepEqual(same.engines, [], 'an absolute target already met starts nothing');

  // The next steps' samples come from all three engines.
  const fromIteration = await appliedSteps(runId);
  const identities = engines.map((e) => e.identity).sort();
  await waitFor('samples from all three engines', async () => ((await enginesOf(runId, fromIteration)).length === 3 ? true : undefined), 120_000);
  assert.deepEqual(await enginesOf(runId, fromIteration), identities);

  const protectedOp = await settle('scale_in', (await call('POST', '/rollout/scale_in', { num_replicas: 0 })).json.request_id);
  assert.equal(protectedOp.status, 'FAILED');
  assert.match(protectedOp.message, /initial capacity 1.*force: true/);
  const dry = await settle('scale_in', (await call('POST', '/rollout/scale_in', { num_replicas: 1, dry_run: true })).json.request_id);
  assert.equal(dry.status, 'COMPLETED');
  assert.equal(dry.dry_run, true);
  assert.deepEqual([...dry.engines].sort(), [...scaledOut.engines].sort());

  const inOp = await call('POST', '/rollout/scale_in', { num_replicas: 1 });
  assert.equal(inOp.status, 202);
  const scaledIn = await settle('scale_in', inOp.json.request_id);
  assert.equal(scaledIn.status, 'COMPLETED', JSON.stringify(scaledIn));
  assert.deepEqual(scaledIn.transitions.map((t: { status: string }) => t.status), ['PENDING', 'DRAINING', 'REMOVING', 'COMPLETED']);
  assert.deepEqual([...scaledIn.engines].sort(), [...scaledOut.engines].sort(), 'LIFO: the two added engines are drained');
  const left = (await call('GET', '/rollout/engines')).json.engines as Array<{ engine_id: string; initial: boolean }>;
  assert.deepEqual(left.map((e) => e.initial), [true]);
  for (const e of engines.filter((x) => !x.initial)) assert.throws(() => process.kill(e.pid, 0), 'a drained worker process has exited');

  // Train on one engine again for a few steps, then stop the run.
  const afterDrain = await appliedSteps(runId);
  await waitFor('steps after the drain', async () => ((await appliedSteps(runId)) >= afterDrain + 3 ? true : undefined), 120_000);
  assert.equal((await call('POST', `/runs/${runId}/stop`)).status, 202);
  await temporal.client.workflow.getHandle(runId).result();
  const at = (status: string) => Date.parse(scaledIn.transitions.find((t: { status: string }) => t.status === status).at) / 1000;
  await checkNothingLostOrRetried(runId, mode, { from: at('DRAINING'), to: at('REMOVING'), engines: scaledIn.engines.length });
}

/** Every applied step trained on a full batch recorded once, no sample failed or was lost, no train step retried. */
async function checkNothingLostOrRetried(runId: string, mode: 'sync' | 'async', drainWindow: { from: number; to: number; engines: number }): Promise<void> {
  const { rows: steps } = await db.pool.query<{ step: number; status: string; sample_count: number }>('SELECT step, status, sample_count FROM train_steps WHERE run_id = $1 ORDER BY step', [runId]);
  assert.ok(steps.length > 5);
  for (const s of steps) {
    assert.equal(s.status, 'applied');
    assert.equal(s.sample_count, 48, `step ${s.step} trained on a full batch`);
    const { rows } = await db.pool.query<{ n: string; keys: string }>(
      `SELECT count(*) AS n, count(DISTINCT (iteration, group_index, sample_index)) AS keys FROM train_step_samples WHERE run_id = $1 AND step = $2`,
      [runId, s.step],
    );
    assert.equal(Number(rows[0].n), 48);
    assert.equal(Number(rows[0].keys), 48, `step ${s.step}: no sample twice`);
  }
  const { rows: consumedTwice } = await db.pool.query<{ n: string }>(
    'SELECT count(*) AS n FROM (SELECT iteration, group_index, sample_index FROM train_step_samples WHERE run_id = $1 GROUP BY 1, 2, 3 HAVING count(*) > 1) d',
    [runId],
  );
  assert.equal(Number(consumedTwice[0].n), 0, 'no sample trained on by two steps');
  const { rows: byIteration } = await db.pool.query<{ iteration: number; n: string; failed: string; no_engine: string }>(
    `SELECT iteration, count(*) AS n, count(*) FILTER (WHERE status = 'failed') AS failed, count(*) FILTER (WHERE engine IS NULL) AS no_engine FROM samples
      WHERE run_id = $1 AND iteration IN (SELECT DISTINCT iteration FROM train_step_samples WHERE run_id = $1)
      GROUP BY iteration ORDER BY iteration`,
    [runId],
  );
  for (const it of byIteration) {
    assert.equal(Number(it.n), 48, `iteration ${it.iteration}: every sample written once (${mode})`);
    assert.equal(Number(it.failed), 0);
    assert.equal(Number(it.no_engine), 0, 'each sample records its engine');
  }
  const history = await temporal.client.workflow.getHandle(runId).fetchHistory();
  const events = history.events ?? [];
  const scheduledAt = new Map(events.filter((e) => e.activityTaskScheduledEventAttributes).map((e) => [String(e.eventId), { type: e.activityTaskScheduledEventAttributes!.activityType?.name, at: Number(e.eventTime?.seconds ?? 0) }]));
  const retried = events
    .map((e) => e.activityTaskStartedEventAttributes)
    .filter((a) => (a?.attempt ?? 1) > 1)
    .map((a) => ({ ...scheduledAt.get(String(a!.scheduledEventId))!, attempt: a!.attempt!, after: a!.lastFailure?.message ?? '' }));
  assert.equal(events.filter((e) => e.activityTaskFailedEventAttributes || e.activityTaskTimedOutEventAttributes).length, 0, 'no activity failed or timed out for good');
  // No train step was retried. A rollout task the server hands a worker at the instant it shuts
  // down can be dropped by the SDK and comes back on another worker after its heartbeat timeout
  // (rare with one poll per rollout worker, workers/worker.ts ROLLOUT_POLLER): at most one per
  // drained worker, scheduled while the drain ran. Its samples are rewritten under the same keys.
  assert.deepEqual(retried.filter((r) => r.type !== 'generate'), [], 'only a rollout task may come back, never a train step');
  assert.ok(retried.length <= drainWindow.engines, `at most one rollout task per drained worker came back: ${JSON.stringify(retried)}`);
  for (const r of retried) {
    assert.match(r.after, /Heartbeat timeout/);
    assert.ok(r.at >= drainWindow.from - 1 && r.at <= drainWindow.to + 1, `a task that came back was scheduled during the drain: ${JSON.stringify({ r, drainWindow })}`);
  }
}

test('sync mode: scale out to 3 during a run, samples from all three, scale in to 1 loses and repeats nothing', async () => {
  await scaleDuringRun('sync');
});

test('async mode: the same scale-out and drain while rollout runs ahead of training', async () => {
  await scaleDuringRun('async');
});

test('a rollout worker started outside the stack, with its own data directory, takes rollout work for a run', async () => {
  const otherHome = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-other-host-'));
  const outside = spawnRelax(['worker', '--role', 'rollout', '--device', 'cpu'], { RELAX_HOME: otherHome, TEMPORAL_ADDRESS: temporalAddress, DATABASE_URL: db.url });
  try {
    const identity = (await outside.waitForLine(/^relax worker ready: /, 60_000)).split(/\s+/)[3];
    assert.match(identity, /^rollout\//);
    const runId = uniqueId('outside');
    const started = await call('POST', '/runs', { ...runConfig(runId, 'sync'), train: { steps: 6, eval_every: 1000, keep_consumed_steps: 1000 } });
    assert.equal(started.status, 201);
    await temporal.client.workflow.getHandle(runId).result();
    const engines = await enginesOf(runId, 0);
    assert.ok(engines.includes(identity), `the outside worker produced samples: ${engines.join(', ')}`);
    assert.ok(!((await call('GET', '/rollout/engines')).json.engines as Array<{ identity: string }>).some((e) => e.identity === identity), 'it is not an engine the local capacity provider manages');
  } finally {
    await outside.stop('SIGTERM');
    fs.rmSync(otherHome, { recursive: true, force: true });
  }
});
