// The external engine client (rollout/remote-engine.ts) against engines made up here. One that
// accepts a request and never answers (a frozen process: the kernel still accepts the connection)
// must not hold a rollout worker for the call's whole timeout: while a call is in flight the engine
// is probed, and a probe that gets no answer ends the call, as EngineUnconfirmedError (the worker
// then marks the engine failed). And an engine holds one version of a run: callers at two versions
// at once take turns, so none is answered by (or confirms) the other's version.
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { after, before, test } from 'node:test';
import { TINY_MODEL } from '../engines/model';
import { EngineUnconfirmedError, RemoteRolloutEngine } from '../rollout/remote-engine';
import { registerCheckpoint } from '../store/checkpoint-registry';
import { freshDatabase, uniqueId, type TestDatabase } from './helpers';

let db: TestDatabase;
let frozen: net.Server;
const held: net.Socket[] = [];

before(async () => {
  db = await freshDatabase();
  // Accepts every connection, reads the request, never writes a byte.
  frozen = net.createServer((socket) => void held.push(socket.on('error', () => undefined)));
  await new Promise<void>((resolve) => frozen.listen(0, '127.0.0.1', resolve));
});

after(async () => {
  for (const s of held) s.destroy();
  await new Promise((resolve) => frozen.close(resolve));
  await db?.close();
});

test('a call to an engine that accepted it and never answers ends when its probe gets no answer, long before the call timeout', async () => {
  const runId = uniqueId('frozen-engine');
  await db.pool.query(`INSERT INTO runs (run_id, workflow_id, kind, config) VALUES ($1, $1, 'test', '{}')`, [runId]);
  await registerCheckpoint(db.pool, { runId, policyVersion: 0, path: '/tmp/none', sha256: '0'.repeat(64), step: 0 });
  const { port } = frozen.address() as net.AddressInfo;
  const engine = new RemoteRolloutEngine(db.pool, runId, TINY_MODEL, {}, {
    url: `http://127.0.0.1:${port}`,
    checkpoints: { offer: () => 'http://127.0.0.1:1/none' },
    timeoutMs: 60_000,
    probeEveryMs: 500,
    probeTimeoutMs: 500,
  });
  const started = Date.now();
  await assert.rejects(engine.atVersion(0), (err: Error) => {
    assert.ok(err instanceof EngineUnconfirmedError, `${err.name}: ${err.message}`);
    assert.match(err.message, /stopped answering its probe while \/v1\/relax\/load_version was in flight/);
    return true;
  });
  const took = Date.now() - started;
  assert.ok(took < 10_000, `ended after ${took} ms, not at the 60 s call timeout`);
  assert.ok(held.length >= 2, 'the engine accepted the call and at least one probe');
});

test('generate calls at two versions at once take turns on an engine that holds one version: each is answered at its own version', async () => {
  const runId = uniqueId('two-versions');
  await db.pool.query(`INSERT INTO runs (run_id, workflow_id, kind, config) VALUES ($1, $1, 'test', '{}')`, [runId]);
  const sha = (v: number) => String(v).repeat(64).slice(0, 64);
  for (const v of [1, 2]) await registerCheckpoint(db.pool, { runId, policyVersion: v, path: `/tmp/none-${v}`, sha256: sha(v), step: v });
  // One version held; a completion takes 100 ms and fails (404) if the version changed under it.
  let held: { v: number; sha: string } | undefined;
  let switches = 0;
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      const json = body ? JSON.parse(body) : {};
      const send = (status: number, out: unknown) => res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(out));
      if (req.url === '/v1/relax/load_version') {
        held = { v: json.policy_version, sha: json.sha256 };
        switches++;
        return send(200, {});
      }
      if (req.url === `/v1/models/${runId}`) return send(200, { relax_policy_version: held?.v, relax_sha256: held?.sha });
      if (req.url === '/v1/models') return send(200, { data: [] });
      const asked = json.model as string;
      if (asked !== `${runId}@${held?.v}`) return send(404, { error: { message: `not holding ${asked}` } });
      setTimeout(() => {
        if (asked !== `${runId}@${held?.v}`) return send(404, { error: { message: `switched away from ${asked} mid-request` } });
        send(200, { model: asked, choices: [{ index: 0, finish_reason: 'length', logprobs: { tokens: ['token_id:5'], token_logprobs: [-0.5] } }] });
      }, 100);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const { port } = server.address() as net.AddressInfo;
    const engine = new RemoteRolloutEngine(db.pool, runId, TINY_MODEL, {}, { url: `http://127.0.0.1:${port}`, checkpoints: { offer: () => 'http://127.0.0.1:1/none' } });
    const params = { maxNewTokens: 1 };
    const calls = [1, 2, 1, 2, 1, 2].map((v, i) => engine.at(v).generate([[1, 2, i]], params));
    const out = await Promise.all(calls);
    assert.deepEqual(out.map((o) => o[0].policyVersion), [1, 2, 1, 2, 1, 2]);
    assert.ok(switches >= 2 && switches <= 6, `${switches} version loads`);
    // atVersion (the scale-out's weight sync) waits its turn too and leaves the engine at its version.
    const sync = engine.atVersion(1);
    const gen = engine.at(2).generate([[3]], params);
    await Promise.all([sync, gen]);
  } finally {
    await new Promise((resolve) => server.close(resolve));
  }
});
