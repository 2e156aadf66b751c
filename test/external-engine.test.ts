// External engines registered by URL, end to end on real processes: a `relax serve --engine` (its
// own process and data directory, no database: an engine of "another stack") registered through
// POST /rollout/scale_out {engine_urls} of a real `relax dev` takes rollout work for a training run
// through a rollout worker that drives it (rollout/remote-engine.ts): it is told each policy version
// to load (a checkpoint URL + sha256) and confirms it, and its samples record the engine. An engine
// that cannot confirm a version it is told to load (a `relax serve --run`, which has no version-load
// call; then the engine above, killed mid-run) is marked failed and gets no work: no sample from it
// afterwards, its worker no longer polls, the run goes on on the local engine.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { Client, Connection } from '@temporalio/client';
import { roleTaskQueue } from '../config/task-queues';
import { freePort } from '../workers/ports';
import { spawnRelax, startDevStack, uniqueId, waitFor, type DevStack, type TestProcess } from './helpers';

const ENGINE_TOKEN = randomBytes(24).toString('hex');
let stack: DevStack;
let temporal: { client: Client; close(): Promise<void> };
let engine: TestProcess;
let engineUrl: string;
const engineHome = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-engine-'));
const call = (method: string, url: string, body?: unknown, auth = true) => stack.call(method, url, body, auth);

async function startEngine(port: number): Promise<TestProcess> {
  const p = spawnRelax(['serve', '--engine', '--port', String(port)], { RELAX_HOME: engineHome, RELAX_ENGINE_TOKEN: ENGINE_TOKEN, DATABASE_URL: '', TEMPORAL_ADDRESS: '' });
  await p.waitForLine(/^relax engine serving at http/, 60_000);
  return p;
}

before(async () => {
  // The stack's rollout workers that drive external engines take the token from its environment.
  stack = await startDevStack(['--train-workers', '1'], { RELAX_ENGINE_TOKEN: ENGINE_TOKEN });
  const connection = await Connection.connect({ address: stack.temporalAddress });
  temporal = { client: new Client({ connection }), close: () => connection.close() };
  const port = await freePort();
  engine = await startEngine(port);
  engineUrl = `http://127.0.0.1:${port}`;
});

after(async () => {
  await engine?.stop('SIGTERM').catch(() => undefined);
  await temporal?.close();
  await stack?.close();
  fs.rmSync(engineHome, { recursive: true, force: true });
});

async function settle(requestId: string): Promise<any> {
  return waitFor(`scale_out ${requestId}`, async () => {
    const r = await call('GET', `/rollout/scale_out/${requestId}`);
    assert.equal(r.status, 200, JSON.stringify(r.json));
    return r.json.execution === 'RUNNING' ? undefined : r.json;
  }, 240_000, 250);
}

async function appliedSteps(runId: string): Promise<number> {
  const { rows } = await stack.db.pool.query<{ n: string }>(`SELECT count(*) AS n FROM train_steps WHERE run_id = $1 AND status = 'applied'`, [runId]);
  return Number(rows[0].n);
}

async function samplesFrom(runId: string, identity: string, after?: Date): Promise<number> {
  const { rows } = await stack.db.pool.query<{ n: string }>('SELECT count(*) AS n FROM samples WHERE run_id = $1 AND engine = $2 AND ($3::timestamptz IS NULL OR created_at > $3)', [runId, identity, after ?? null]);
  return Number(rows[0].n);
}

async function rolloutPollers(): Promise<string[]> {
  const { pollers } = await temporal.client.workflowService.describeTaskQueue({ namespace: 'default', taskQueue: { name: roleTaskQueue('rollout') }, taskQueueType: 2 });
  return (pollers ?? []).map((p) => p.identity ?? '');
}

type Engine = { engine_id: string; kind: string; url: string | null; identity: string; state: string; pid: number; detail: Record<string, string> };
const engines = async (): Promise<Engine[]> => (await call('GET', '/rollout/engines')).json.engines;

test('the engine refuses a version load without its token, and the API refuses bad engine URLs', async () => {
  const res = await fetch(`${engineUrl}/v1/relax/load_version`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
  assert.equal(res.status, 401);
  assert.match(((await res.json()) as { error: { message: string } }).error.message, /RELAX_ENGINE_TOKEN/);
  const models = (await (await fetch(`${engineUrl}/v1/models`)).json()) as { data: unknown[] };
  assert.deepEqual(models.data, [], 'it holds nothing before a stack tells it what to load');
  for (const [body, pattern] of [
    [{ engine_urls: ['ftp://x:1'] }, /engine_urls/],
    [{ engine_urls: [`${engineUrl}/v1`] }, /no path/],
    [{ engine_urls: [engineUrl], num_replicas: 2 }, /one of the two/],
    [{ engine_urls: [engineUrl, engineUrl] }, /twice/],
  ] as const) {
    const r = await call('POST', '/rollout/scale_out', body);
    assert.equal(r.status, 400, JSON.stringify(r.json));
    assert.match(r.json.error.message, pattern);
  }
});

test('an external engine registered by URL produces samples for a run; one that cannot confirm a version is marked failed and gets no work', async () => {
  const runId = uniqueId('external');
  const started = await call('POST', '/runs', {
    run_id: runId,
    task: 'add2',
    model: { context_length: 16 },
    algorithm: { group_size: 4 },
    rollout: { prompts_per_step: 8, max_new_tokens: 4, parallelism: 4 },
    // Far more steps than the test lets it take (it stops the run): the run must still be going when the engine dies.
    train: { steps: 100_000, lr: 1e-3, eval_every: 100_000 },
  });
  assert.equal(started.status, 201, JSON.stringify(started.json));
  await waitFor('step 1', async () => ((await appliedSteps(runId)) >= 1 ? true : undefined), 120_000);

  // Register the engine: it reaches ACTIVE having loaded and confirmed the run's newest version.
  const out = await call('POST', '/rollout/scale_out', { engine_urls: [engineUrl], timeout_secs: 120 });
  assert.equal(out.status, 202, JSON.stringify(out.json));
  const op = await settle(out.json.request_id);
  assert.equal(op.status, 'ACTIVE', JSON.stringify(op));
  assert.equal(op.engines.length, 1);
  const loaded = op.weights[op.engines[0]] as Array<{ runId: string; policyVersion: number; sha256?: string }>;
  const mine = loaded.find((w) => w.runId === runId);
  assert.ok(mine?.sha256, `weight sync loaded the run's newest version: ${JSON.stringify(op.weights)}`);
  const ext = (await engines()).find((e) => e.engine_id === op.engines[0])!;
  assert.deepEqual([ext.kind, ext.url, ext.state], ['external', engineUrl, 'active']);

  // It produces samples for the run, scored, with a log-prob per response token.
  await waitFor('samples from the external engine', async () => ((await samplesFrom(runId, ext.identity)) >= 8 ? true : undefined), 120_000);
  const { rows } = await stack.db.pool.query<{ reward: number | null; status: string; response_tokens: number[]; rollout_logprobs: number[]; policy_version: number }>(
    'SELECT reward, status, response_tokens, rollout_logprobs, policy_version FROM samples WHERE run_id = $1 AND engine = $2 LIMIT 8',
    [runId, ext.identity],
  );
  for (const s of rows) {
    assert.notEqual(s.status, 'failed');
    assert.equal(typeof s.reward, 'number');
    assert.ok(s.response_tokens.length > 0 && s.response_tokens.length === s.rollout_logprobs.length, JSON.stringify(s));
    assert.ok(s.rollout_logprobs.every((l) => Number.isFinite(l) && l <= 0));
  }
  // The engine says which version it holds, with the registry's sha256 for it.
  const held = (await (await fetch(`${engineUrl}/v1/models/${runId}`)).json()) as { relax_policy_version: number; relax_sha256: string };
  const { rows: registered } = await stack.db.pool.query<{ sha256: string }>('SELECT sha256 FROM checkpoints WHERE run_id = $1 AND policy_version = $2', [runId, held.relax_policy_version]);
  assert.equal(held.relax_sha256, registered[0].sha256);

  // An OpenAI-compatible server without the version-load call cannot confirm: FAILED, marked failed, no work.
  const plainPort = await freePort();
  const plain = spawnRelax(['serve', '--run', runId, '--port', String(plainPort)], { DATABASE_URL: stack.db.url, TEMPORAL_ADDRESS: '' });
  try {
    await plain.waitForLine(/^serving run /, 60_000);
    const plainUrl = `http://127.0.0.1:${plainPort}`;
    const bad = await settle((await call('POST', '/rollout/scale_out', { engine_urls: [plainUrl], timeout_secs: 120 })).json.request_id);
    assert.equal(bad.status, 'FAILED', JSON.stringify(bad));
    assert.match(bad.message, /cannot confirm .*version-load call \/v1\/relax\/load_version answered HTTP 404/);
    const failed = (await engines()).find((e) => e.url === plainUrl)!;
    assert.equal(failed.state, 'failed');
    assert.match(failed.detail.failed_because, /cannot confirm/);
    assert.equal(await samplesFrom(runId, failed.identity), 0, 'no sample from an engine that never confirmed a version');
    assert.ok(!(await rolloutPollers()).includes(failed.identity), 'its worker does not poll');
    assert.throws(() => process.kill(failed.pid, 0), 'the failed scale-out drained its worker');
  } finally {
    await plain.stop('SIGTERM');
  }

  // The engine dies mid-run: the next version it is told to load cannot be confirmed.
  await engine.stop('SIGKILL');
  const marked = await waitFor('the dead engine marked failed', async () => {
    const e = (await engines()).find((x) => x.engine_id === ext.engine_id);
    return e?.state === 'failed' ? e : undefined;
  }, 120_000);
  // Either its in-flight request failed and the probe found it down, or the next version's load failed.
  assert.match(marked.detail.failed_because, new RegExp(`engine ${engineUrl} (cannot confirm ${runId}@\\d+|no longer answers .* while serving ${runId}@\\d+)`));
  await waitFor('its worker stops polling', async () => (!(await rolloutPollers()).includes(ext.identity) ? true : undefined), 30_000);
  const failedAt = new Date(marked.detail.failed_at);
  const steps = await appliedSteps(runId);
  await waitFor('steps on the local engine', async () => ((await appliedSteps(runId)) >= steps + 2 ? true : undefined), 120_000);
  assert.equal(await samplesFrom(runId, ext.identity, failedAt), 0, 'no sample from it after it was marked failed');
  assert.equal((await call('POST', `/runs/${runId}/stop`)).status, 202);
  await temporal.client.workflow.getHandle(runId).result();
  const { rows: failedSamples } = await stack.db.pool.query<{ n: string }>(`SELECT count(*) AS n FROM samples WHERE run_id = $1 AND status = 'failed'`, [runId]);
  assert.equal(Number(failedSamples[0].n), 0, 'the failures were retried elsewhere, not recorded as failed samples');

  // Scale-in by URL removes it: its idle worker exits, and the engine is no longer listed.
  const inOp = await call('POST', '/rollout/scale_in', { engine_urls: [engineUrl] });
  assert.equal(inOp.status, 202, JSON.stringify(inOp.json));
  const removed = await waitFor('scale_in settles', async () => {
    const r = await call('GET', `/rollout/scale_in/${inOp.json.request_id}`);
    return r.json.execution === 'RUNNING' ? undefined : r.json;
  }, 120_000, 250);
  assert.equal(removed.status, 'COMPLETED', JSON.stringify(removed));
  assert.deepEqual(removed.engines, [ext.engine_id]);
  assert.throws(() => process.kill(ext.pid, 0), 'its worker process has exited');
  assert.ok(!(await engines()).some((e) => e.engine_id === ext.engine_id));
});
