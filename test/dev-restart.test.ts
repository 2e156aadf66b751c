// `relax dev` end to end: the real temporal CLI starts the smoke workflow with a JSON input, the
// Web UI shows it, and stopping and restarting the stack while the workflow waits loses nothing.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, test } from 'node:test';
import { Client, Connection } from '@temporalio/client';
import { findTemporalBinary } from '../workers/environment';
import { freePort } from '../workers/ports';
import { createPool } from '../store/db';
import { freshDatabase, spawnRelax, uniqueId, waitFor, type TestDatabase, type TestProcess } from './helpers';

const run = promisify(execFile);

let home: string;
let db: TestDatabase | undefined;
let env: NodeJS.ProcessEnv;
let args: string[];
let temporalPort: number;
let uiPort: number;
const started: TestProcess[] = [];

before(async () => {
  home = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-dev-'));
  temporalPort = await freePort();
  uiPort = await freePort();
  args = ['dev', '--data-dir', home, '--temporal-port', String(temporalPort), '--ui-port', String(uiPort), '--quiet'];
  // With a PostgreSQL server configured, use a database of our own on it; otherwise the stack
  // serves (and must persist across the restart) its embedded PGlite under the data directory.
  if (process.env.DATABASE_URL) db = await freshDatabase();
  env = { TEMPORAL_ADDRESS: '', DATABASE_URL: db?.url ?? '' };
});

after(async () => {
  await Promise.all(started.map((p) => p.stop('SIGKILL')));
  await db?.close();
  fs.rmSync(home, { recursive: true, force: true });
});

async function startDev(): Promise<TestProcess> {
  const dev = spawnRelax(args, env);
  started.push(dev);
  await dev.waitForLine(/^Press Ctrl-C to stop/, 120_000);
  return dev;
}

function portAcceptsConnections(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

test('a workflow started by the temporal CLI survives a stop and restart of relax dev', async () => {
  let dev = await startDev();
  const stack = JSON.parse(fs.readFileSync(path.join(home, 'stack.json'), 'utf8'));
  assert.equal(stack.temporalAddress, `127.0.0.1:${temporalPort}`);

  const id = uniqueId('cli-smoke');
  const temporalCli = findTemporalBinary();
  assert.ok(temporalCli, 'the temporal CLI is installed');
  await run(temporalCli.path, [
    'workflow', 'start',
    '--address', stack.temporalAddress,
    '--task-queue', 'relax-control',
    '--type', 'smokeWorkflow',
    '--workflow-id', id,
    '--input', JSON.stringify({ smoke: { samples: 6, hold_seconds: 6 }, algorithm: { group_size: 3 } }),
  ]);

  let connection = await Connection.connect({ address: stack.temporalAddress });
  let client = new Client({ connection });
  const handle = client.workflow.getHandle(id);
  await waitFor('the workflow to reach its hold', async () => {
    const p = await handle.query<{ stage: string }>('progress').catch(() => undefined);
    return p?.stage === 'holding' ? p : undefined;
  });

  // The Web UI serves the workflow (its HTTP API is what the UI's pages read).
  const ui = await fetch(`http://127.0.0.1:${uiPort}/api/v1/namespaces/default/workflows/${id}`);
  assert.equal(ui.status, 200);
  const page = await ui.text();
  assert.ok(page.includes(id) && page.includes('smokeWorkflow'), 'the Web UI API describes the workflow');

  assert.equal((await handle.describe()).status.name, 'RUNNING');
  await connection.close();

  assert.equal(await dev.stop('SIGTERM'), 0, 'relax dev exits cleanly on SIGTERM');
  assert.equal(await portAcceptsConnections(temporalPort), false, 'the Temporal server stopped with it');
  assert.equal(fs.existsSync(path.join(home, 'stack.json')), false);

  dev = await startDev();
  const restarted = JSON.parse(fs.readFileSync(path.join(home, 'stack.json'), 'utf8'));
  connection = await Connection.connect({ address: restarted.temporalAddress });
  client = new Client({ connection });
  try {
    const result = await client.workflow.getHandle(id).result();
    assert.equal(result.runId, id);
    assert.equal(result.samples, 6);
  } finally {
    await connection.close();
  }

  // The data written before the restart is still there, and the run finished after it.
  const pool = createPool({ url: restarted.databaseUrl, maxConnections: 1 });
  try {
    const { rows } = await pool.query<{ status: string; consumed: string }>(
      `SELECT r.status, (SELECT count(*) FROM samples s WHERE s.run_id = r.run_id AND s.consumed_by_step = 0) AS consumed
         FROM runs r WHERE r.run_id = $1`,
      [id],
    );
    assert.deepEqual(rows[0], { status: 'completed', consumed: '6' });
  } finally {
    await pool.end();
  }
  assert.equal(await dev.stop('SIGTERM'), 0);
});
