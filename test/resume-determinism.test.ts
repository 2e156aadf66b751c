// Deterministic resume: a sync run interrupted again and again (kill -9 of the train worker mid-run,
// of the rollout worker, of the control worker, and the Temporal server stopped and restarted on its
// persisted state) ends with weights bitwise equal to an uninterrupted run of the same config and
// seed (the in-process loop over the same RL core, training/in-process.ts: no worker, no workflow),
// every step's loss equal too. Each retry recomputes what it lost from what was recorded: the
// rollout from the version and its seed, the update from the last published weights and AdamW
// moments (CPU, one backend, the tiny model). Real worker processes, replaced like `relax dev` would.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { Client, Connection } from '@temporalio/client';
import { relaxEnvironment } from '../config/environment';
import { parseRunConfig, type RunConfigInput } from '../config/run-config';
import { roleTaskQueue, type Role } from '../config/task-queues';
import { loadTfjsBackend } from '../engines/backends';
import { loadCheckpoint } from '../engines/checkpoint';
import type { PolicyWeights } from '../engines/model';
import { runInProcess } from '../training/in-process';
import { getCheckpoint } from '../store/checkpoint-registry';
import { ADD2_SFT, loadOrTrainWarmStart } from '../training/warm-start';
import { ADD2_GRPO } from '../config/recipes';
import { freePort } from '../workers/ports';
import { startTemporalServer, type TemporalServer } from '../workers/temporal-server';
import type { TrainingProgress, TrainingResult } from '../workflows/training-run';
import { freshDatabase, SupervisedWorkers, uniqueId, waitFor, type TestDatabase } from './helpers';

const STEPS = 6;
let db: TestDatabase;
let home: string;
let temporalPort: number;
let temporal: TemporalServer;
let config: RunConfigInput;
let warmWeights: PolicyWeights;
let workers: SupervisedWorkers;

const startTemporal = () => startTemporalServer({ port: temporalPort, dbFilename: path.join(home, 'temporal.db') });

async function connect(): Promise<{ client: Client; close(): Promise<void> }> {
  const connection = await Connection.connect({ address: `127.0.0.1:${temporalPort}` });
  return { client: new Client({ connection }), close: () => connection.close() };
}

before(async () => {
  db = await freshDatabase();
  home = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-resume-'));
  temporalPort = await freePort();
  temporal = await startTemporal();
  await loadTfjsBackend({ kind: 'cpu' });
  // The quickstart's recipe and warm start (56%, grpo-learning's cache key): most groups carry signal.
  const base: RunConfigInput = {
    ...ADD2_GRPO,
    seed: 11,
    rollout: { ...ADD2_GRPO.rollout, prompts_per_step: 8 },
    train: { ...ADD2_GRPO.train, steps: STEPS, warmup_steps: 2, eval_every: 100, keep_consumed_steps: 100 },
  };
  const warm = await loadOrTrainWarmStart(parseRunConfig(ADD2_GRPO), ADD2_SFT, relaxEnvironment().warmStartCache);
  config = { ...base, checkpoint: { init_from: warm.dir, every: 1, keep_last: STEPS + 1 } };
  warmWeights = warm.weights;
  workers = new SupervisedWorkers(() => ({ TEMPORAL_ADDRESS: `127.0.0.1:${temporalPort}`, DATABASE_URL: db.url, RELAX_HOME: home }));
  await Promise.all((['control', 'rollout', 'train'] as Role[]).map((r) => workers.start(r)));
});

after(async () => {
  await workers?.stopAll();
  await temporal?.stop();
  await db?.close();
  fs.rmSync(home, { recursive: true, force: true });
});

/** The final version's weights and every step's loss of a finished run. */
async function outcome(runId: string): Promise<{ weights: PolicyWeights; losses: number[] }> {
  const cp = await getCheckpoint(db.pool, runId, STEPS);
  assert.ok(cp, `${runId} published version ${STEPS}`);
  const { weights } = await loadCheckpoint(cp.path);
  const { rows } = await db.pool.query<{ value: number }>(`SELECT value FROM metrics WHERE run_id = $1 AND name = 'loss' ORDER BY step`, [runId]);
  return { weights, losses: rows.map((r) => Number(r.value)) };
}

test(`a sync run interrupted 4 times (train, rollout and control workers kill -9ed, the Temporal server restarted) ends bitwise equal to an uninterrupted one`, async (t) => {
  let c = await connect();
  const id = uniqueId('resume-chaos');
  await c.client.workflow.start('trainingRun', { taskQueue: roleTaskQueue('control'), workflowId: id, args: [{ ...config, checkpoint: { ...config.checkpoint, dir: path.join(home, 'checkpoints', id) } }] });
  // Meanwhile, in this process, the same config and seed from the same weights, uninterrupted.
  const calmRun = runInProcess(parseRunConfig(config), warmWeights, { evalEvery: 1_000 });
  const step = async () => (await c.client.withDeadline(Date.now() + 5_000, () => c.client.workflow.getHandle(id).query<TrainingProgress>('progress')).catch(() => undefined))?.step ?? 0;
  const killOne = async (role: Role) => {
    const [victim] = await workers.one(role);
    victim.child.kill('SIGKILL');
    await victim.exited;
  };
  const interruptions: string[] = [];
  for (const [atStep, what] of [[1, 'train'], [2, 'rollout'], [3, 'temporal'], [4, 'control']] as const) {
    await waitFor(`step ${atStep}`, async () => ((await step()) >= atStep ? true : undefined), 120_000, 100);
    if (what === 'temporal') {
      await c.close();
      await temporal.stop();
      temporal = await startTemporal();
      c = await connect();
    } else await killOne(what);
    interruptions.push(`${what}@step${atStep}`);
  }
  const result = (await c.client.workflow.getHandle(id).result()) as TrainingResult;
  await c.close();
  assert.equal(result.steps, STEPS);

  const calm = await calmRun;
  const a = { weights: calm.weights, losses: calm.curve.map((r) => r.metrics.loss) };
  const b = await outcome(id);
  assert.equal(a.losses.length, STEPS, 'every step trained (a loss recorded)');
  assert.deepEqual(b.losses, a.losses, 'every step computed the same loss');
  const names = Object.keys(a.weights).sort();
  assert.deepEqual(Object.keys(b.weights).sort(), names);
  let differing = 0;
  for (const name of names) differing += a.weights[name].reduce((n, x, i) => n + (Object.is(x, b.weights[name][i]) ? 0 : 1), 0);
  t.diagnostic(`interruptions: ${interruptions.join(', ')}; ${names.length} tensors compared; losses ${a.losses.map((l) => l.toFixed(4)).join(' ')}`);
  assert.equal(differing, 0, 'every weight bitwise equal');
});
