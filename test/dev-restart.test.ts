// `relax dev` end to end: the real temporal CLI starts a training run (trainingRun) with a JSON
// input, the Web UI shows it, and stopping and restarting the stack while the run is mid-way (a slow
// reward fixture keeps each iteration's rollout going for seconds) loses nothing: the run finishes
// every step after the restart, on the same persisted Temporal and database state.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, test } from 'node:test';
import { Client, Connection } from '@temporalio/client';
import { findTemporalBinary } from '../config/environment';
import { freePort } from '../workers/ports';
import { createPool } from '../store/db';
import type { TrainingProgress, TrainingResult } from '../workflows/training-run';
import { freshDatabase, spawnRelax, uniqueId, waitFor, type TestDatabase, type TestProcess } from './helpers';

const run = promisify(execFile);
const SLOW_REWARD = path.resolve(__dirname, '../../test/fixtures/slow-reward.cjs');
const STEPS = 4;
const PROMPTS = 2;
const GROUP = 3;

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
  args = ['dev', '--data-dir', home, '--temporal-port', String(temporalPort), '--ui-port', String(uiPort), '--api-port', '0', '--quiet'];
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

  const id = uniqueId('cli-run');
  const temporalCli = findTemporalBinary();
  assert.ok(temporalCli, 'the temporal CLI is installed');
  // Each iteration's generate waits on the slow reward, so the run is still going after its first step.
  const config = {
    model: { context_length: 16 },
    algorithm: { group_size: GROUP },
    rollout: { prompts_per_step: PROMPTS },
    train: { steps: STEPS, eval_every: STEPS, keep_consumed_steps: 10 },
    reward: { module: SLOW_REWARD, timeout_ms: 30_000 },
  };
  await run(temporalCli.path, [
    'workflow', 'start',
    '--address', stack.temporalAddress,
    '--task-queue', 'relax-control',
    '--type', 'trainingRun',
    '--workflow-id', id,
    '--input', JSON.stringify(config),
  ]);

  let connection = await Connection.connect({ address: stack.temporalAddress });
  let client = new Client({ connection });
  const handle = client.workflow.getHandle(id);
  const midway = await waitFor('the run to finish its first step', async () => {
    const p = await handle.query<TrainingProgress>('progress').catch(() => undefined);
    return p && p.step >= 1 ? p : undefined;
  });
  assert.ok(midway.step < STEPS, `the run is mid-way (step ${midway.step} of ${STEPS})`);

  // The Web UI serves the workflow (its HTTP API is what the UI's pages read).
  const ui = await fetch(`http://127.0.0.1:${uiPort}/api/v1/namespaces/default/workflows/${id}`);
  assert.equal(ui.status, 200);
  const page = await ui.text();
  assert.ok(page.includes(id) && page.includes('trainingRun'), 'the Web UI API describes the workflow');

  assert.equal((await handle.describe()).status.name, 'RUNNING');
  await connection.close();

  const stoppedAt = Date.now();
  assert.equal(await dev.stop('SIGTERM'), 0, 'relax dev exits cleanly on SIGTERM');
  assert.equal(await portAcceptsConnections(temporalPort), false, 'the Temporal server stopped with it');
  assert.equal(fs.existsSync(path.join(home, 'stack.json')), false);

  const restartedAt = Date.now();
  dev = await startDev();
  const restarted = JSON.parse(fs.readFileSync(path.join(home, 'stack.json'), 'utf8'));
  connection = await Connection.connect({ address: restarted.temporalAddress });
  client = new Client({ connection });
  try {
    const result = (await client.workflow.getHandle(id).result()) as TrainingResult;
    assert.equal(result.runId, id);
    assert.equal(result.steps, STEPS);
    assert.equal(result.policyVersion, STEPS);
  } finally {
    await connection.close();
  }

  // The data written before the restart is still there, and the run finished after it.
  const pool = createPool({ url: restarted.databaseUrl, maxConnections: 1 });
  try {
    const { rows } = await pool.query<{ status: string; consumed: string; steps: string }>(
      `SELECT r.status,
              (SELECT count(*) FROM samples s WHERE s.run_id = r.run_id AND s.consumed_by_step = s.iteration + 1) AS consumed,
              (SELECT count(*) FROM train_steps t WHERE t.run_id = r.run_id AND t.status = 'applied') AS steps
         FROM runs r WHERE r.run_id = $1`,
      [id],
    );
    assert.deepEqual(rows[0], { status: 'completed', consumed: String(STEPS * PROMPTS * GROUP), steps: String(STEPS) });
    // The restart fell inside the run: its first step was applied before the stop, its last after the restart.
    const applied = await pool.query<{ step: number; applied_at: Date }>('SELECT step, applied_at FROM train_steps WHERE run_id = $1 ORDER BY step', [id]);
    assert.ok(applied.rows[0].applied_at.getTime() < stoppedAt, 'step 1 was applied before the stop');
    assert.ok((applied.rows.at(-1) as { applied_at: Date }).applied_at.getTime() > restartedAt, `step ${STEPS} was applied after the restart`);
  } finally {
    await pool.end();
  }
  assert.equal(await dev.stop('SIGTERM'), 0);
});
