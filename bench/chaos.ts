// `relax bench chaos [--set kills=N] [--set stops=N] [--json]`: the reliability suite. A real `relax
// dev` stack (2 rollout, 2 train, 1 reference, 1 control worker) as a child process trains two add2
// runs at once (one sync, one async) while the bench kill -9s random worker processes of every role,
// kill -9s the Temporal dev server and kills and restarts `relax dev` itself on the same data
// directory and ports; then, with stops, freezes processes instead (bench/chaos-stops.ts: SIGSTOP of
// workers of every role, of the trainer mid-publish and a rollout worker mid-sync, of an external
// engine; resumed later or never). Then it stops the runs, checks Postgres (bench/chaos-checks.ts:
// exactly-once steps, versions, checkpoints), stops the stack and looks for processes it left
// behind. Every count but kills / stops / restarts / runs is 0 when reliability held, and
// stalled_s_max (the longest a run applied no step while the faults went on) stays under the
// deadline docs/benchmarks.md ("chaos") gives with the numbers.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import { Client, Connection } from '@temporalio/client';
import { Pool } from 'pg';
import type { RunConfigInput } from '../config/run-config';
import { roleTaskQueue, type Role } from '../config/task-queues';
import { seededRandom } from '../config/seeds';
import { freePort } from '../workers/ports';
import type { TrainingProgress, TrainingResult } from '../workflows/training-run';
import { checkRunIntegrity, descendants, processesMentioning, stillAlive, type ProcessInfo, type RunIntegrity } from './chaos-checks';
import { chaosDatabase, DevProcess, killTemporal, schedule, sleep, until, withTimeout, WorkerKiller, type ChaosEvent } from './chaos-faults';
import { ChaosEngine, describeStop, longestStall, stopSchedule, WorkerStopper, type StopEvent } from './chaos-stops';
import { appliedStepTimes } from '../store/step-records';
import { listRolloutEngines } from '../store/rollout-engines';
import { workerLivenessMs } from '../config/environment';
import type { Bench } from './index';

export interface ChaosOptions {
  /** kill -9 of worker processes (roles in seeded random order, every role in each block of four). */
  kills: number;
  /** Kills and restarts of `relax dev` itself, spread over the kills. */
  devRestarts: number;
  /** kill -9 of the Temporal dev server, spread over the kills. */
  temporalRestarts: number;
  /** Mean seconds between two kills (each waits for the killed worker's replacement first). */
  killEverySeconds: number;
  /** Kill only workers whose restart the supervisor's backoff would delay at most this long. */
  maxRestartDelaySeconds: number;
  /** The signal that ends `relax dev` at a dev restart. */
  devSignal: 'SIGKILL' | 'SIGTERM';
  /** SIGSTOPs after the kills: how many (bench/chaos-stops.ts stopSchedule: workers of every role, at the failpoints, the engine), or exactly these. */
  stops: number | StopEvent[];
  /** A resumed stop is held this long, drawn between the two (seconds): past the 10 s heartbeat timeout, under the liveness timeout. */
  stopHoldSeconds: [number, number];
  /** Register an external engine (`relax serve --engine`) before the stops; one stop freezes it for good. */
  engine: boolean;
  /** The stack's RELAX_WORKER_LIVENESS_S (default: its default, 30 s). */
  livenessSeconds?: number;
  /** Keep the stack's data directory (dev.log) even when every check held. */
  keepHome?: boolean;
  seed: number;
  log: (line: string) => void;
}

export interface ChaosReport {
  kills: number;
  stops: number;
  /** Stops never resumed whose worker relax dev's liveness check killed, and the longest it took (s from SIGSTOP). */
  liveness_kills: number;
  liveness_kill_s_max: number;
  /** External engines marked failed (the frozen one must be: its worker probes it while it waits). */
  engines_marked_failed: number;
  /** The longest time one run applied no step (s): from the first stop (or, without stops, the first kill) until the runs had recovered. */
  stalled_s_max: number;
  /** When that longest stall began and ended (s after the first fault), and the faults injected within it (or up to 10 s before). */
  stalled_window_s: [number, number];
  stalled_run: string;
  stalled_during: string[];
  restarts: number;
  dev_restarts: number;
  temporal_restarts: number;
  /** How the Temporal server came back: 'supervisor' (relax dev restarted it) or 'dev-restart' (the bench restarted relax dev). */
  temporal_restart_mode: string;
  runs_started: number;
  runs_completed: number;
  steps_applied: number;
  lost_samples: number;
  double_trained_samples: number;
  duplicate_versions: number;
  missing_versions: number;
  corrupt_checkpoints: number;
  retained_checkpoints: number;
  /** Processes of a killed relax dev still alive 10 s after it died (the bench then kills them). */
  dev_kill_leftovers: number;
  orphan_processes: number;
  database: 'embedded' | 'postgres';
  wall_s: number;
  problems: string[];
}

/** No run may go this long without a step while the faults go on (docs/benchmarks.md, "The stall deadline"). */
export const STALL_DEADLINE_S = 60;
const PROMPTS = 4;
const GROUP = 4;
const WORKERS: Record<Role, number> = { control: 1, rollout: 2, train: 2, reference: 1, judge: 0 };
const RETENTION = { every: 3, keepLast: 2 };

function runConfig(home: string, runId: string, mode: 'sync' | 'async'): RunConfigInput {
  return {
    run_id: runId,
    task: 'add2',
    mode,
    max_staleness: mode === 'async' ? 1 : 0,
    model: { d_model: 32, n_layers: 1, n_heads: 4, d_ff: 64, context_length: 16 },
    algorithm: { group_size: GROUP, kl_coef: 0.01 },
    rollout: { prompts_per_step: PROMPTS, max_new_tokens: 4, parallelism: 2 },
    // Long enough to outlive any chaos: the bench stops the runs once the faults are over.
    train: { steps: 100_000, lr: 1e-3, eval_every: 1_000, keep_consumed_steps: 1_000_000 },
    checkpoint: { every: RETENTION.every, keep_last: RETENTION.keepLast, dir: path.join(home, 'checkpoints', runId) },
  };
}

// Over 80 lines because it is the chaos benchmark's one script, in order (stack, faults, runs,
// integrity checks, report); not yet split (issue 33).
export async function runChaos(o: ChaosOptions): Promise<ChaosReport> {
  const started = Date.now();
  const home = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-chaos-'));
  const temporalPort = await freePort();
  const dbPort = await freePort();
  const address = `127.0.0.1:${temporalPort}`;
  const database = await chaosDatabase();
  const failpointsDir = path.join(home, 'failpoints');
  fs.mkdirSync(failpointsDir, { mode: 0o700 });
  // RELAX_ENGINE_TOKEN: the external engine's, which the rollout worker driving it sends.
  const env = { ...process.env, RELAX_HOME: home, TEMPORAL_ADDRESS: '', DATABASE_URL: database.url ?? '', RELAX_FAILPOINTS_DIR: failpointsDir, RELAX_ENGINE_TOKEN: randomUUID(),
    ...(o.livenessSeconds !== undefined ? { RELAX_WORKER_LIVENESS_S: String(o.livenessSeconds) } : {}) };
  const stopEvents = typeof o.stops === 'number' ? stopSchedule(o.stops, seededRandom(o.seed + 1), o.engine) : o.stops;
  const args = ['dev', '--data-dir', home, '--temporal-port', String(temporalPort), '--ui-port', '0', '--db-port', String(dbPort), '--api-port', '0',
    '--rollout-workers', String(WORKERS.rollout), '--train-workers', String(WORKERS.train), '--reference-workers', String(WORKERS.reference), '--verbose']; // --verbose: the workers' ready lines, which DevProcess counts
  const logFile = path.join(home, 'dev.log');
  const seen = new Map<string, ProcessInfo>();
  const remember = (ps: ProcessInfo[]) => ps.forEach((p) => seen.set(`${p.pid}:${p.startTime}`, p));
  const report: ChaosReport = {
    kills: 0, stops: 0, liveness_kills: 0, liveness_kill_s_max: 0, engines_marked_failed: 0, stalled_s_max: 0, stalled_window_s: [0, 0], stalled_run: '', stalled_during: [], restarts: 0, dev_restarts: 0, temporal_restarts: 0, temporal_restart_mode: 'none',
    runs_started: 0, runs_completed: 0, steps_applied: 0, lost_samples: 0, double_trained_samples: 0, duplicate_versions: 0,
    missing_versions: 0, corrupt_checkpoints: 0, retained_checkpoints: 0, dev_kill_leftovers: 0, orphan_processes: 0,
    database: database.url ? 'postgres' : 'embedded', wall_s: 0, problems: [],
  };
  const rng = seededRandom(o.seed);
  const killer = new WorkerKiller(o.maxRestartDelaySeconds * 1000);
  let dev: DevProcess | undefined;
  let engine: ChaosEngine | undefined;
  let stopper: WorkerStopper | undefined;
  /** Every fault injected, when and what (for the longest stall's report). */
  const faults: Array<{ at: number; what: string }> = [];
  let finished = false;
  let connection: Connection | undefined;
  let client: Client | undefined;

  const startDev = async () => {
    dev = new DevProcess(args, env, logFile);
    await dev.waitUp();
    remember(descendants(dev.pid));
    connection = await Connection.connect({ address });
    client = new Client({ connection });
  };
  /** Both runs' steps, once both answer the progress query (a restarted control worker takes a while). */
  const answered = (ids: string[]) => until('both runs to answer a progress query', async () => {
    const now = await stepsOf(ids);
    return now.every((s) => s >= 0) ? now : undefined;
  }, 120_000, 500);
  const stepsOf = async (ids: string[]): Promise<number[]> =>
    Promise.all(ids.map(async (id) => (await withTimeout(client!.workflow.getHandle(id).query<TrainingProgress>('progress').catch(() => undefined), 10_000))?.step ?? -1));

  /** Kills relax dev (o.devSignal) and starts it again on the same data directory and ports. */
  const restartDev = async (signal: NodeJS.Signals) => {
    const before = descendants(dev!.pid);
    remember(before);
    await connection?.close().catch(() => undefined);
    dev!.child.kill(signal);
    await dev!.exited;
    const leftovers = await withTimeout(until('the stack to die with relax dev', () => (before.some(stillAlive) ? undefined : true), 10_000), 11_000).catch(() => undefined);
    if (!leftovers) {
      const alive = before.filter(stillAlive);
      report.dev_kill_leftovers += alive.length;
      report.problems.push(`${alive.length} processes outlived relax dev (${signal}): ${alive.map((p) => `${p.pid} ${p.cmdline.slice(0, 3).join(' ')}`).join('; ')}`);
      for (const p of alive) killQuietly(p.pid);
      await until('the leftover processes to die', () => (before.some(stillAlive) ? undefined : true), 10_000);
    }
    await startDev();
    killer.reset();
  };

  try {
    await startDev();
    const ids = [`chaos-sync-${randomUUID().slice(0, 6)}`, `chaos-async-${randomUUID().slice(0, 6)}`];
    const modes = ['sync', 'async'] as const;
    for (let i = 0; i < ids.length; i++) {
      await client!.workflow.start('trainingRun', { taskQueue: roleTaskQueue('control'), workflowId: ids[i], args: [runConfig(home, ids[i], modes[i])] });
      report.runs_started += 1;
    }
    await until('both runs to apply their first step', async () => ((await stepsOf(ids)).every((s) => s >= 1) ? true : undefined), 300_000, 500);
    o.log(`[chaos] stack up (pid ${dev!.pid}), runs ${ids.join(', ')} training; ${o.kills} kills, ${o.devRestarts} relax dev restarts, ${o.temporalRestarts} Temporal restarts, ${stopEvents.length} stops`);
    const faultsFrom = Date.now();

    const events = schedule(o.kills, o.devRestarts, o.temporalRestarts, rng);
    let lastSteps = await stepsOf(ids);
    for (let e = 0; e < events.length; e++) {
      const event = events[e];
      const at = Date.now();
      if (event === 'dev') {
        await restartDev(o.devSignal);
        faults.push({ at, what: `relax dev ${o.devSignal} and restart` });
        report.dev_restarts += 1;
        o.log(`[chaos] relax dev ${o.devSignal} and restarted in ${((Date.now() - at) / 1000).toFixed(1)} s`);
      } else if (event === 'temporal') {
        const mode = await killTemporal(dev!, address, remember);
        faults.push({ at, what: 'Temporal kill -9' });
        if (mode === 'dev-restart') await restartDev('SIGTERM');
        report.temporal_restart_mode = report.temporal_restart_mode === 'none' || report.temporal_restart_mode === mode ? mode : 'mixed';
        report.temporal_restarts += 1;
        o.log(`[chaos] Temporal server kill -9, back (${mode}) in ${((Date.now() - at) / 1000).toFixed(1)} s`);
      } else {
        await killOne(dev!, killer, event, events.slice(e + 1), rng, remember);
        faults.push({ at, what: `kill -9 of a worker (${event} or the next role that could be killed)` });
        report.kills += 1;
        if (report.kills % 10 === 0) o.log(`[chaos] ${report.kills} kills in ${((Date.now() - started) / 1000).toFixed(0)} s; steps ${(await stepsOf(ids)).join(', ')}`);
        await sleep(Math.max(0, o.killEverySeconds * 1000 * (0.5 + rng()) - (Date.now() - at)));
      }
      // Pace the faults so the runs still train: every 10 events, wait until some run applied a step.
      if (e % 10 === 9) {
        const need = lastSteps;
        await until('a run to apply a step between faults', async () => {
          const now = await stepsOf(ids);
          return now.some((s, i) => s > need[i]) ? now : undefined;
        }, 300_000, 500).then((now) => (lastSteps = now));
      }
    }

    // stalled_s_max is measured over the stops, which come one at a time, once both runs train again
    // after the kills (which pile up several faults within a step); without stops, over the kills.
    let stallFrom = faultsFrom;
    if (stopEvents.length > 0) {
      if (events.length) {
        const need = await answered(ids);
        await until('both runs to apply a step after the kills', async () => ((await stepsOf(ids)).every((s, i) => s > need[i]) ? true : undefined), 300_000, 500);
      }
      stallFrom = Date.now();
      if (stopEvents.some((e) => e.kind === 'engine')) engine = await ChaosEngine.start(dev!, home, env, o.log);
      stopper = new WorkerStopper({ dev: () => dev!, failpointsDir, livenessMs: workerLivenessMs(env), holdS: o.stopHoldSeconds, rng, engine, log: o.log });
      for (const event of stopEvents) {
        const outcome = await stopper.stop(event);
        faults.push({ at: outcome.at, what: describeStop(outcome) });
        report.stops += 1;
        o.log(`[chaos] ${describeStop(outcome, true)}`);
        if (outcome.killedAfterS !== undefined) {
          report.liveness_kills += 1;
          report.liveness_kill_s_max = Math.max(report.liveness_kill_s_max, outcome.killedAfterS);
        }
        // The next stop waits until every run applied a step since this one ended: a stall is one stop's.
        const need = await answered(ids);
        await until('both runs to apply a step between stops', async () => ((await stepsOf(ids)).every((s, i) => s > need[i]) ? true : undefined), 300_000, 500);
      }
    }

    // The faults are over: each run trains on (two more steps: it recovered), then is stopped.
    const afterChaos = await answered(ids);
    await until('both runs to train two steps after the faults', async () => ((await stepsOf(ids)).every((s, i) => s >= afterChaos[i] + 2) ? true : undefined), 300_000, 500);
    const faultsTo = Date.now();
    const results = await Promise.all(ids.map(async (id) => {
      await client!.workflow.getHandle(id).signal('stop');
      return (await withTimeout(client!.workflow.getHandle(id).result() as Promise<TrainingResult>, 300_000).catch((err) => {
        report.problems.push(`run ${id} failed: ${(err as Error).message}`);
        return undefined;
      }));
    }));
    const stack = JSON.parse(fs.readFileSync(path.join(home, 'stack.json'), 'utf8')) as { databaseUrl: string };
    const pool = new Pool({ connectionString: stack.databaseUrl, max: 2 });
    pool.on('error', () => undefined);
    try {
      for (let i = 0; i < ids.length; i++) {
        const check = await checkRunIntegrity(pool, ids[i], PROMPTS * GROUP, { ...RETENTION, protect: modes[i] === 'async' ? 2 : 1 });
        const result = results[i];
        if (result && result.steps === check.appliedSteps && result.policyVersion === check.appliedSteps) report.runs_completed += 1;
        else if (result) report.problems.push(`run ${ids[i]} returned ${result.steps} steps / version ${result.policyVersion}, the database has ${check.appliedSteps} applied steps`);
        addCounts(report, check);
      }
      const stall = longestStall(await Promise.all(ids.map(async (id) => (await appliedStepTimes(pool, id)).map((t) => t.applied))), stallFrom, faultsTo);
      report.stalled_s_max = stall.seconds;
      report.stalled_during = faults.filter((f) => f.at >= stall.from - 10_000 && f.at <= stall.to).map((f) => `${((f.at - faultsFrom) / 1000).toFixed(1)} s: ${f.what}`);
      report.stalled_window_s = [stall.from, stall.to].map((t) => Math.round((t - faultsFrom) / 100) / 10) as [number, number];
      report.stalled_run = ids[stall.run];
      if (stopEvents.length > 0 && stall.seconds >= STALL_DEADLINE_S) report.problems.push(`run ${report.stalled_run} applied no step for ${stall.seconds} s during the stops (deadline ${STALL_DEADLINE_S} s), from ${report.stalled_window_s[0]} s after the first fault`);
      report.engines_marked_failed = (await listRolloutEngines(pool)).filter((e) => e.url && e.state === 'failed').length;
      if (engine && report.engines_marked_failed !== 1) report.problems.push(`the frozen external engine was not marked failed (${report.engines_marked_failed} engines failed)`);
    } finally {
      await pool.end();
    }
    report.restarts = report.dev_restarts + report.temporal_restarts;

    // The final stop: relax dev ends everything it started (what is still stopped is resumed first:
    // a stopped worker cannot see its supervisor go).
    stopper?.resumeAll();
    engine?.stop();
    remember(descendants(dev!.pid));
    await connection?.close();
    connection = undefined;
    dev!.child.kill('SIGTERM');
    await withTimeout(dev!.exited, 60_000);
    await sleep(2_000);
    const orphans = new Map<number, ProcessInfo>();
    for (const p of seen.values()) if (stillAlive(p)) orphans.set(p.pid, p);
    for (const p of processesMentioning(home)) orphans.set(p.pid, p);
    if (dev!.alive) report.problems.push(`relax dev (pid ${dev!.pid}) did not exit within 60 s of SIGTERM`);
    report.orphan_processes = orphans.size + (dev!.alive ? 1 : 0);
    if (orphans.size) report.problems.push(`left running after relax dev stopped: ${[...orphans.values()].map((p) => `${p.pid} ${p.cmdline.slice(0, 4).join(' ')}`).join('; ')}`);
    finished = true;
  } finally {
    await connection?.close().catch(() => undefined);
    stopper?.resumeAll();
    engine?.stop();
    if (dev?.alive) dev.child.kill('SIGKILL');
    for (const p of [...seen.values(), ...processesMentioning(home)]) if (stillAlive(p)) killQuietly(p.pid);
    await database.drop();
    if (report.problems.length || !finished || o.keepHome) console.error(`[chaos] kept ${home} (dev.log there) for a look`);
    else fs.rmSync(home, { recursive: true, force: true });
  }
  report.wall_s = Math.round((Date.now() - started) / 100) / 10;
  return report;
}

/**
 * kill -9 of one worker: of `role` if one may be killed now (see WorkerKiller), else of the role of
 * the next kill that can; waits while every worker is still in its backoff window.
 */
async function killOne(dev: DevProcess, killer: WorkerKiller, role: Role, next: ChaosEvent[], rng: () => number, remember: (ps: ProcessInfo[]) => void): Promise<void> {
  const order = [role, ...next.filter((e): e is Role => e !== 'dev' && e !== 'temporal'), 'control', 'rollout', 'train', 'reference'] as Role[];
  const victim = await until('a worker the supervisor would restart without a long backoff', () => {
    for (const r of new Set(order)) {
      const p = killer.pick(dev, r, rng);
      if (p) return p;
    }
    return undefined;
  }, 180_000, 1_000);
  await killer.kill(dev, victim, remember);
}

function killQuietly(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // exited meanwhile
  }
}

function addCounts(r: ChaosReport, c: RunIntegrity): void {
  r.steps_applied += c.appliedSteps;
  r.lost_samples += c.lostSamples;
  r.double_trained_samples += c.doubleTrainedSamples;
  r.duplicate_versions += c.duplicateVersions;
  r.missing_versions += c.missingVersions;
  r.corrupt_checkpoints += c.corruptCheckpoints;
  r.retained_checkpoints += c.retainedCheckpoints;
  r.problems.push(...c.problems.map((p) => `${c.runId}: ${p}`));
}

function intOption(options: Record<string, string>, key: string, fallback: number): number {
  if (options[key] === undefined) return fallback;
  const n = Number(options[key]);
  if (!Number.isFinite(n) || n < 0) throw new Error(`relax bench chaos: --set ${key} must be a number >= 0, got "${options[key]}"`);
  return n;
}

export const chaosBench: Bench = async (ctx) => {
  // --set stops=N alone is the stop chaos: no kills or restarts unless they are asked for too.
  const stops = intOption(ctx.options, 'stops', 0);
  const kills = intOption(ctx.options, 'kills', stops > 0 ? 0 : 20);
  const restartsDefault = stops > 0 && ctx.options.kills === undefined ? 0 : 1 + Math.floor(kills / 100);
  const signal = ctx.options.dev_signal ?? 'SIGKILL';
  if (signal !== 'SIGKILL' && signal !== 'SIGTERM') throw new Error(`relax bench chaos: --set dev_signal must be SIGKILL or SIGTERM, got "${signal}"`);
  const report = await runChaos({
    kills,
    devRestarts: intOption(ctx.options, 'dev_restarts', restartsDefault),
    temporalRestarts: intOption(ctx.options, 'temporal_restarts', restartsDefault),
    killEverySeconds: intOption(ctx.options, 'kill_every_s', 1.5),
    maxRestartDelaySeconds: intOption(ctx.options, 'max_restart_delay_s', 4),
    devSignal: signal,
    stops,
    stopHoldSeconds: [intOption(ctx.options, 'stop_hold_min_s', 12), intOption(ctx.options, 'stop_hold_max_s', 20)],
    engine: (ctx.options.engine ?? 'on') !== 'off',
    keepHome: ctx.options.keep_home === 'on',
    seed: intOption(ctx.options, 'seed', 20261201),
    log: ctx.log,
  });
  for (const p of report.problems) ctx.log(`[chaos] problem: ${p}`);
  return { ...report };
};
