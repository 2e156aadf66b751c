// An external engine that accepts a request and never answers (a frozen process: the kernel still
// accepts the connection) must not hold a rollout worker for the call's whole timeout
// (rollout/remote-engine.ts): while a call is in flight the engine is probed, and a probe that gets
// no answer ends the call, as EngineUnconfirmedError (the worker then marks the engine failed).
import assert from 'node:assert/strict';
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
