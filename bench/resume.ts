// `relax bench resume [--set interruptions=N] [--set steps=M] [--json]`: deterministic resume as a
// figure. A real `relax dev` stack (one worker per role) trains one sync add2 run from the
// quickstart's SFT warm start while the bench interrupts it once per step: kill -9 of the train,
// rollout or control worker, kill -9 of the Temporal server, or kill -9 of `relax dev` itself and a
// new one on the same data directory (in seeded order). Meanwhile this process trains the same
// config and seed from the same weights with the in-process loop (training/in-process.ts: no worker,
// no workflow). `bitwise_equal`: the final weights of the two are equal bit for bit, and
// `losses_equal`: so is every step's loss. docs/benchmarks.md ("resume") has the figure.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import { Client, Connection } from '@temporalio/client';
import { Pool } from 'pg';
import { relaxEnvironment } from '../config/environment';
import { ADD2_GRPO } from '../config/recipes';
import { parseRunConfig, type RunConfigInput } from '../config/run-config';
import { seededRandom } from '../config/seeds';
import { roleTaskQueue, type Role } from '../config/task-queues';
import { loadTfjsBackend } from '../engines/backends';
import { loadCheckpoint } from '../engines/checkpoint';
import { getCheckpoint } from '../store/checkpoint-registry';
import { runInProcess } from '../training/in-process';
import { ADD2_SFT, loadOrTrainWarmStart } from '../training/warm-start';
import { freePort } from '../workers/ports';
import type { TrainingProgress, TrainingResult } from '../workflows/training-run';
import { descendants, stillAlive, workerRole } from './chaos-checks';
import { DevProcess, killTemporal, until, withTimeout } from './chaos-faults';
import type { Bench } from './index';

export type Interruption = 'train' | 'rollout' | 'control' | 'temporal' | 'dev';
const KINDS: Interruption[] = ['train', 'rollout', 'control', 'temporal', 'dev'];

export interface ResumeReport {
  steps: number;
  interruptions: number;
  /** What was interrupted at which step, in order ("train@1"). */
  interrupted: string[];
  bitwise_equal: boolean;
  /** Weights (elements) that differ between the interrupted and the uninterrupted run. */
  differing_weights: number;
  compared_weights: number;
  losses_equal: boolean;
  wall_s: number;
}

/** The kinds in blocks of all five (each block in seeded random order). */
export function interruptionOrder(n: number, rng: () => number): Interruption[] {
  const out: Interruption[] = [];
  while (out.length < n) {
    const block = [...KINDS];
    for (let i = block.length - 1; i > 0; i--) {
      const j = Math.floor(rng() * (i + 1));
      [block[i], block[j]] = [block[j], block[i]];
    }
    out.push(...block.slice(0, n - out.length));
  }
  return out;
}

// Over 80 lines because it is the benchmark's one script, in order (warm start, stack, run and its
// calm twin, interruptions, comparison); the stack handling is chaos-faults'.
export async function runResumeCheck(o: { steps: number; interruptions: Interruption[]; seed: number; log: (line: string) => void }): Promise<ResumeReport> {
  const started = Date.now();
  if (o.interruptions.length >= o.steps) throw new Error(`relax bench resume: ${o.interruptions.length} interruptions need more than ${o.steps} steps (one per step, after step 1)`);
  await loadTfjsBackend({ kind: 'cpu' });
  const warm = await loadOrTrainWarmStart(parseRunConfig(ADD2_GRPO), ADD2_SFT, relaxEnvironment().warmStartCache);
  const home = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-resume-'));
  const temporalPort = await freePort();
  const address = `127.0.0.1:${temporalPort}`;
  const env = { ...process.env, RELAX_HOME: home, TEMPORAL_ADDRESS: '', DATABASE_URL: '' };
  const args = ['dev', '--data-dir', home, '--temporal-port', String(temporalPort), '--ui-port', '0', '--db-port', String(await freePort()), '--api-port', '0', '--reference-workers', '0', '--judge-workers', '0', '--verbose'];
  const runId = `resume-${randomUUID().slice(0, 6)}`;
  const config: RunConfigInput = {
    ...ADD2_GRPO,
    run_id: runId,
    seed: o.seed,
    rollout: { ...ADD2_GRPO.rollout, prompts_per_step: 8 },
    train: { ...ADD2_GRPO.train, steps: o.steps, warmup_steps: 2, eval_every: 1_000, keep_consumed_steps: 1_000 },
    checkpoint: { init_from: warm.dir, every: 1, keep_last: o.steps + 1, dir: path.join(home, 'checkpoints', runId) },
  };
  let dev: DevProcess | undefined;
  let connection: Connection | undefined;
  let client: Client | undefined;
  const up = async () => {
    dev = new DevProcess(args, env, path.join(home, 'dev.log'));
    await dev.waitUp();
    connection = await Connection.connect({ address });
    client = new Client({ connection });
  };
  const step = async () => (await withTimeout(client!.workflow.getHandle(runId).query<TrainingProgress>('progress').catch(() => undefined), 5_000))?.step ?? 0;
  try {
    await up();
    await client!.workflow.start('trainingRun', { taskQueue: roleTaskQueue('control'), workflowId: runId, args: [config] });
    const calmRun = runInProcess(parseRunConfig(config), warm.weights, { evalEvery: 1_000 });
    const interrupted: string[] = [];
    for (let i = 0; i < o.interruptions.length; i++) {
      const what = o.interruptions[i];
      const atStep = i + 1;
      await until(`step ${atStep}`, async () => ((await step()) >= atStep ? true : undefined), 300_000, 100);
      if (what === 'temporal') {
        if ((await killTemporal(dev!, address, () => undefined)) === 'dev-restart') throw new Error('relax bench resume: relax dev did not restart the Temporal server');
      } else if (what === 'dev') {
        const before = descendants(dev!.pid);
        await connection?.close();
        dev!.child.kill('SIGKILL');
        await dev!.exited;
        await until('the stack to die with relax dev', () => (before.some(stillAlive) ? undefined : true), 15_000);
        await up();
      } else {
        const victim = descendants(dev!.pid).find((p) => workerRole(p) === what);
        if (!victim) throw new Error(`relax bench resume: no ${what} worker under relax dev`);
        const ready = dev!.ready(what as Role);
        process.kill(victim.pid, 'SIGKILL');
        await until(`the supervisor to restart the ${what} worker`, () => (dev!.ready(what as Role) > ready ? true : undefined), 120_000);
      }
      interrupted.push(`${what}@${atStep}`);
      o.log(`[resume] ${what} interrupted at step ${atStep}`);
    }
    const result = (await client!.workflow.getHandle(runId).result()) as TrainingResult;
    if (result.steps !== o.steps) throw new Error(`relax bench resume: the run ended after ${result.steps} steps, not ${o.steps}`);
    const calm = await calmRun;
    const stack = JSON.parse(fs.readFileSync(path.join(home, 'stack.json'), 'utf8')) as { databaseUrl: string };
    const pool = new Pool({ connectionString: stack.databaseUrl, max: 1 });
    try {
      const checkpoint = await getCheckpoint(pool, runId, o.steps);
      if (!checkpoint) throw new Error(`relax bench resume: version ${o.steps} is not registered`);
      const { weights } = await loadCheckpoint(checkpoint.path);
      const { rows } = await pool.query<{ value: number }>(`SELECT value FROM metrics WHERE run_id = $1 AND name = 'loss' ORDER BY step`, [runId]);
      const losses = rows.map((r) => Number(r.value));
      const calmLosses = calm.curve.map((r) => r.metrics.loss);
      let differing = 0;
      let compared = 0;
      for (const [name, expected] of Object.entries(calm.weights)) {
        const got = weights[name];
        compared += expected.length;
        differing += got && got.length === expected.length ? expected.reduce((n, x, i) => n + (Object.is(x, got[i]) ? 0 : 1), 0) : expected.length;
      }
      const sameNames = Object.keys(weights).sort().join() === Object.keys(calm.weights).sort().join();
      return {
        steps: o.steps,
        interruptions: interrupted.length,
        interrupted,
        bitwise_equal: sameNames && differing === 0,
        differing_weights: differing,
        compared_weights: compared,
        losses_equal: losses.length === calmLosses.length && losses.every((l, i) => Object.is(l, calmLosses[i])),
        wall_s: Math.round((Date.now() - started) / 100) / 10,
      };
    } finally {
      await pool.end();
    }
  } finally {
    await connection?.close().catch(() => undefined);
    if (dev?.alive) {
      dev.child.kill('SIGTERM');
      await withTimeout(dev.exited, 60_000);
    }
    fs.rmSync(home, { recursive: true, force: true });
  }
}

export const resumeBench: Bench = async (ctx) => {
  const n = Number(ctx.options.interruptions ?? 5);
  const steps = Number(ctx.options.steps ?? n + 2);
  const seed = Number(ctx.options.seed ?? 11);
  if (!Number.isInteger(n) || n < 1 || !Number.isInteger(steps) || !Number.isInteger(seed)) throw new Error('relax bench resume: --set interruptions, steps and seed must be integers (interruptions >= 1)');
  return { ...(await runResumeCheck({ steps, interruptions: interruptionOrder(n, seededRandom(seed)), seed, log: ctx.log })) };
};
