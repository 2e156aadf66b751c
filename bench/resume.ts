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
import { roleTaskQueue } from '../config/task-queues';
import { loadTfjsBackend } from '../engines/backends';
import { loadCheckpoint } from '../engines/checkpoint';
import type { PolicyWeights } from '../engines/model';
import { getCheckpoint } from '../store/checkpoint-registry';
import { readMetrics } from '../store/metrics';
import { runInProcess } from '../training/in-process';
import { ADD2_SFT, loadOrTrainWarmStart } from '../training/warm-start';
import { freePort } from '../workers/ports';
import type { TrainingProgress, TrainingResult } from '../workflows/training-run';
import { descendants, stillAlive, workerRole } from './chaos-checks';
import { DevProcess, killTemporal, shuffledBlocks, until, withTimeout } from './chaos-faults';
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
export const interruptionOrder = (n: number, rng: () => number): Interruption[] => shuffledBlocks(KINDS, n, rng);

/** The bench's relax dev stack: started, queried, interrupted and stopped. */
class ResumeStack {
  readonly home = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-resume-'));
  dev: DevProcess | undefined;
  private connection: Connection | undefined;
  client: Client | undefined;

  private constructor(
    private readonly address: string,
    private readonly args: string[],
  ) {}

  static async start(): Promise<ResumeStack> {
    const temporalPort = await freePort();
    const args = ['--temporal-port', String(temporalPort), '--ui-port', '0', '--db-port', String(await freePort()), '--api-port', '0', '--reference-workers', '0', '--judge-workers', '0', '--verbose'];
    const stack = new ResumeStack(`127.0.0.1:${temporalPort}`, args);
    await stack.up();
    return stack;
  }

  private async up(): Promise<void> {
    const env = { ...process.env, RELAX_HOME: this.home, TEMPORAL_ADDRESS: '', DATABASE_URL: '' };
    this.dev = new DevProcess(['dev', '--data-dir', this.home, ...this.args], env, path.join(this.home, 'dev.log'));
    await this.dev.waitUp();
    this.connection = await Connection.connect({ address: this.address });
    this.client = new Client({ connection: this.connection });
  }

  async step(runId: string): Promise<number> {
    return (await withTimeout(this.client!.workflow.getHandle(runId).query<TrainingProgress>('progress').catch(() => undefined), 5_000))?.step ?? 0;
  }

  /** One interruption; resolves when what was killed is back. */
  async interrupt(what: Interruption): Promise<void> {
    const dev = this.dev!;
    if (what === 'temporal') {
      if ((await killTemporal(dev, this.address, () => undefined)) === 'dev-restart') throw new Error('relax bench resume: relax dev did not restart the Temporal server');
    } else if (what === 'dev') {
      const before = descendants(dev.pid);
      await this.connection?.close();
      dev.child.kill('SIGKILL');
      await dev.exited;
      await until('the stack to die with relax dev', () => (before.some(stillAlive) ? undefined : true), 15_000);
      await this.up();
    } else {
      const victim = descendants(dev.pid).find((p) => workerRole(p) === what);
      if (!victim) throw new Error(`relax bench resume: no ${what} worker under relax dev`);
      const ready = dev.ready(what);
      process.kill(victim.pid, 'SIGKILL');
      await until(`the supervisor to restart the ${what} worker`, () => (dev.ready(what) > ready ? true : undefined), 120_000);
    }
  }

  async stop(): Promise<void> {
    await this.connection?.close().catch(() => undefined);
    if (this.dev?.alive) {
      this.dev.child.kill('SIGTERM');
      await withTimeout(this.dev.exited, 60_000);
    }
    fs.rmSync(this.home, { recursive: true, force: true });
  }
}

/** The run's final version and losses (from the stack's database) against its uninterrupted twin's. */
async function compareWithCalm(stack: ResumeStack, runId: string, steps: number, calm: { weights: PolicyWeights; losses: number[] }) {
  const { databaseUrl } = JSON.parse(fs.readFileSync(path.join(stack.home, 'stack.json'), 'utf8')) as { databaseUrl: string };
  const pool = new Pool({ connectionString: databaseUrl, max: 1 });
  try {
    const checkpoint = await getCheckpoint(pool, runId, steps);
    if (!checkpoint) throw new Error(`relax bench resume: version ${steps} is not registered`);
    const { weights } = await loadCheckpoint(checkpoint.path);
    const losses = ((await readMetrics(pool, runId)).loss ?? []).map(([, value]) => Number(value));
    let differing = 0;
    let compared = 0;
    for (const [name, expected] of Object.entries(calm.weights)) {
      const got = weights[name];
      compared += expected.length;
      differing += got && got.length === expected.length ? expected.reduce((n, x, i) => n + (Object.is(x, got[i]) ? 0 : 1), 0) : expected.length;
    }
    const sameNames = Object.keys(weights).sort().join() === Object.keys(calm.weights).sort().join();
    return {
      bitwise_equal: sameNames && differing === 0,
      differing_weights: differing,
      compared_weights: compared,
      losses_equal: losses.length === calm.losses.length && losses.every((l, i) => Object.is(l, calm.losses[i])),
    };
  } finally {
    await pool.end();
  }
}

export async function runResumeCheck(o: { steps: number; interruptions: Interruption[]; seed: number; log: (line: string) => void }): Promise<ResumeReport> {
  const started = Date.now();
  if (o.interruptions.length >= o.steps) throw new Error(`relax bench resume: ${o.interruptions.length} interruptions need more than ${o.steps} steps (one per step, after step 1)`);
  await loadTfjsBackend({ kind: 'cpu' });
  const warm = await loadOrTrainWarmStart(parseRunConfig(ADD2_GRPO), ADD2_SFT, relaxEnvironment().warmStartCache);
  const stack = await ResumeStack.start();
  const runId = `resume-${randomUUID().slice(0, 6)}`;
  const config: RunConfigInput = {
    ...ADD2_GRPO,
    run_id: runId,
    seed: o.seed,
    rollout: { ...ADD2_GRPO.rollout, prompts_per_step: 8 },
    train: { ...ADD2_GRPO.train, steps: o.steps, warmup_steps: 2, eval_every: 1_000, keep_consumed_steps: 1_000 },
    checkpoint: { init_from: warm.dir, every: 1, keep_last: o.steps + 1, dir: path.join(stack.home, 'checkpoints', runId) },
  };
  try {
    await stack.client!.workflow.start('trainingRun', { taskQueue: roleTaskQueue('control'), workflowId: runId, args: [config] });
    const calmRun = runInProcess(parseRunConfig(config), warm.weights, { evalEvery: 1_000 });
    const interrupted: string[] = [];
    for (const [i, what] of o.interruptions.entries()) {
      await until(`step ${i + 1}`, async () => ((await stack.step(runId)) >= i + 1 ? true : undefined), 300_000, 100);
      await stack.interrupt(what);
      interrupted.push(`${what}@${i + 1}`);
      o.log(`[resume] ${what} interrupted at step ${i + 1}`);
    }
    const result = (await stack.client!.workflow.getHandle(runId).result()) as TrainingResult;
    if (result.steps !== o.steps) throw new Error(`relax bench resume: the run ended after ${result.steps} steps, not ${o.steps}`);
    const calm = await calmRun;
    const compared = await compareWithCalm(stack, runId, o.steps, { weights: calm.weights, losses: calm.curve.map((r) => r.metrics.loss) });
    return { steps: o.steps, interruptions: interrupted.length, interrupted, ...compared, wall_s: Math.round((Date.now() - started) / 100) / 10 };
  } finally {
    await stack.stop();
  }
}

export const resumeBench: Bench = async (ctx) => {
  const n = Number(ctx.options.interruptions ?? 5);
  const steps = Number(ctx.options.steps ?? n + 2);
  const seed = Number(ctx.options.seed ?? 11);
  if (!Number.isInteger(n) || n < 1 || !Number.isInteger(steps) || !Number.isInteger(seed)) throw new Error('relax bench resume: --set interruptions, steps and seed must be integers (interruptions >= 1)');
  return { ...(await runResumeCheck({ steps, interruptions: interruptionOrder(n, seededRandom(seed)), seed, log: ctx.log })) };
};
