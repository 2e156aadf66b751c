// `relax dev`: the whole stack on one machine, in the foreground. A Temporal dev server persisted
// under the data directory, the database (DATABASE_URL, else embedded PGlite persisted there too, in
// this process), and one worker process per role. It refuses ports other processes hold, restarts a
// dead worker or Temporal server with backoff (workers/supervisor.ts), and its children exit when it
// does, even by SIGKILL (an IPC channel to each worker; a watchdog for the temporal binary).
// Stopping it stops everything; starting it again resumes the workflows that were running.
import { withoutTemporalConnectionEnv } from '../config/temporal-connection';
import fs from 'node:fs';
import path from 'node:path';
import { spawn, type ChildProcess } from 'node:child_process';
import type { Role } from '../config/task-queues';
import { openStore } from '../store/db';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../store/embedded';
import { PACKAGE_ROOT, relaxEnvironment } from '../config/environment';
import { freePort } from './ports';
import { describePortOwner, portIsFree } from './port-owner';
import { formatDelay, RestartBackoff, SUPERVISED_ENV } from './supervisor';
import { forwardLines, startTemporalServer, type TemporalServer, type TemporalServerOptions } from './temporal-server';

export const RELAX_BIN = path.join(PACKAGE_ROOT, 'bin', 'relax.js');

export interface LocalStackOptions {
  home: string;
  temporalPort: number;
  /** 0 = headless */
  uiPort: number;
  /** The Temporal server's Prometheus endpoint; 0 or absent: a free port (LocalStack.temporalMetricsUrl says which). */
  temporalMetricsPort?: number;
  /** Used when databaseUrl is not set; 0 picks a free port. */
  dbPort: number;
  databaseUrl?: string;
  workers: Record<Role, number>;
  device: string;
  log: (line: string) => void;
  /** The supervisor's own lines (a child died, restarts and their delay); default: log. */
  notice?: (line: string) => void;
  /** Called whenever a child process starts or is replaced (relax dev rewrites stack.json). */
  onChildrenChanged?: (pids: StackPids) => void;
  /**
   * CPU list per role (taskset's syntax, e.g. "0" or "0-1"): pins that role's worker processes, e.g.
   * rollout and trainer on different cores. Needs `taskset` (util-linux) on PATH.
   */
  cpuAffinity?: Partial<Record<Role, string>>;
}

/** The processes a stack runs now (they change when the supervisor replaces one). */
export interface StackPids {
  temporal?: number;
  temporalWatchdog?: number;
  workers: Partial<Record<Role, number[]>>;
}

/** One worker process of the stack, as scaling sees it. */
export interface StackWorker {
  role: Role;
  index: number;
  pid: number;
  /** Its Temporal identity, from its ready line. */
  identity?: string;
  /** Started with the stack (not by addWorkers). */
  initial: boolean;
  startedAt: Date;
  /** An external engine's URL this worker drives (RELAX_ENGINE_URL), if any. */
  engineUrl?: string;
  /** Its Prometheus endpoints (its own, and the Temporal SDK's), from its ready line. */
  metricsUrls?: string[];
}

export interface LocalStack {
  temporalAddress: string;
  uiUrl: string | undefined;
  temporalMetricsUrl: string | undefined;
  databaseUrl: string;
  embeddedDatabase: boolean;
  workerPids(role?: Role): number[];
  /** The pid of the running temporal binary (undefined while it is being restarted). */
  temporalPid(): number | undefined;
  childPids(): StackPids;
  /** The live worker processes (of one role), oldest first. */
  workers(role?: Role): StackWorker[];
  /** Every worker slot of a role that is not draining, alive or not (the health manager's view). */
  slots(role: Role): WorkerSlot[];
  home: string;
  /**
   * Starts `count` more supervised workers of a role; resolves when each says it is ready.
   * `engineUrls`: rollout workers that drive these external engines instead (one each, in order).
   */
  addWorkers(role: Role, count: number, options?: { engineUrls?: string[] }): Promise<StackWorker[]>;
  /**
   * Drains one worker: SIGTERM, so it stops polling, finishes its running activities (rollout
   * workers have ROLLOUT_DRAIN_GRACE_MS for that) and exits; it is not restarted. SIGKILL after
   * `timeoutMs`. Resolves when it has exited.
   */
  drainWorker(pid: number, timeoutMs: number): Promise<void>;
  /** The health manager's restart of a role: gone slots relaunched now (not after the backoff), hung `notPolling` ones (ready > graceMs) killed. */
  restartWorkers(role: Role, notPolling: string[], graceMs?: number): Promise<WorkerRestart>;
  stop(): Promise<void>;
}

/** One worker slot: its process now, whether that is alive and ready (said its ready line). */
export interface WorkerSlot {
  index: number;
  pid: number;
  alive: boolean;
  identity?: string;
  startedAt: Date;
}

/** What restartWorkers did, by pid. */
export interface WorkerRestart {
  relaunched: number[];
  killed: number[];
  /** Already starting again (the supervisor relaunched them; not ready yet). */
  starting: number[];
}

/** How long a stopping rollout worker lets its running activities finish (shutdownGraceTime): a drained engine's in-flight rollout completes, not retried elsewhere. */
export const ROLLOUT_DRAIN_GRACE_MS = 120_000;

interface ManagedWorker {
  role: Role;
  index: number;
  child: ChildProcess;
  ready: Promise<void>;
  identity?: string;
  initial: boolean;
  startedAt: Date;
  engineUrl?: string;
  metricsUrls?: string[];
  /** Asked to drain: its exit is expected, not restarted. */
  draining?: boolean;
}

const asStackWorker = (w: ManagedWorker): StackWorker => ({ role: w.role, index: w.index, pid: w.child.pid!, initial: w.initial, startedAt: w.startedAt, ...(w.identity ? { identity: w.identity } : {}), ...(w.engineUrl ? { engineUrl: w.engineUrl } : {}), ...(w.metricsUrls ? { metricsUrls: w.metricsUrls } : {}) });

/** Thrown before anything starts when a port the stack needs is held by another process. */
export class PortInUseError extends Error {}

/** Refuses ports another process holds, naming it: the stack would otherwise half-start. */
export async function checkPortsFree(ports: Array<{ port: number; flag: string }>): Promise<void> {
  for (const { port, flag } of ports) {
    if (port > 0 && !(await portIsFree(port))) {
      throw new PortInUseError(`${flag} ${port}: ${describePortOwner(port)}. fix: stop that process, or pass another ${flag}`);
    }
  }
}

export async function startLocalStack(opts: LocalStackOptions): Promise<LocalStack> {
  fs.mkdirSync(opts.home, { recursive: true });
  const notice = opts.notice ?? opts.log;
  await checkPortsFree([
    { port: opts.temporalPort, flag: '--temporal-port' },
    { port: opts.uiPort, flag: '--ui-port' },
    { port: opts.databaseUrl ? 0 : opts.dbPort, flag: '--db-port' },
  ]);
  const cleanups: Array<() => Promise<void>> = [];
  let stopping = false;
  const stopAll = async () => {
    stopping = true;
    while (cleanups.length) await cleanups.pop()!().catch((err) => opts.log(`[relax] stop: ${(err as Error).message}`));
  };
  const workers: ManagedWorker[] = [];
  let temporal: TemporalServer | undefined;
  const childPids = (): StackPids => {
    const byRole: Partial<Record<Role, number[]>> = {};
    for (const w of workers) if (w.child.pid && w.child.exitCode === null && w.child.signalCode === null) (byRole[w.role] ??= []).push(w.child.pid);
    return { temporal: temporal?.pid, temporalWatchdog: temporal?.watchdogPid, workers: byRole };
  };
  const changed = () => opts.onChildrenChanged?.(childPids());

  try {
    const temporalOptions: TemporalServerOptions = {
      dbFilename: path.join(opts.home, 'temporal.db'),
      port: opts.temporalPort,
      uiPort: opts.uiPort || undefined,
      metricsPort: opts.temporalMetricsPort || (await freePort()),
      onOutput: (line) => opts.log(`[temporal] ${line}`),
    };
    temporal = await startTemporalServer(temporalOptions);
    const superviseTemporal = supervisor(notice, () => stopping, async () => {
      const port = temporalOptions.port;
      if (!(await portIsFree(port))) throw new Error(describePortOwner(port));
      const server = await startTemporalServer(temporalOptions);
      if (stopping) return void (await server.stop());
      temporal = server;
      changed();
      notice(`[relax] Temporal dev server restarted on ${temporal.address} (pid ${temporal.pid})`);
      watchTemporal(temporal);
    });
    const watchTemporal = (server: TemporalServer) => {
      const startedAt = Date.now();
      void server.exited.then(({ code, signal, tail }) => {
        if (stopping) return;
        if (temporal === server) temporal = undefined;
        changed();
        const crashed = signal === null && code !== 0 && tail.length > 0;
        notice(`[relax] Temporal dev server (pid ${server.pid}) exited (${signal ?? `code ${code}`})${crashed ? `; last output:\n${tail.slice(-5).join('\n')}` : ''}`);
        superviseTemporal(Date.now() - startedAt, `Temporal dev server on ${server.address}`);
      });
    };
    watchTemporal(temporal);
    cleanups.push(() => temporal?.stop() ?? Promise.resolve());

    let databaseUrl = opts.databaseUrl;
    let embedded: EmbeddedPostgres | undefined;
    if (!databaseUrl) {
      embedded = await startEmbeddedPostgres({ dataDir: path.join(opts.home, 'pglite'), port: opts.dbPort || (await freePort()) });
      cleanups.push(() => embedded!.stop());
      databaseUrl = embedded.url;
    }
    const pool = await openStore({ url: databaseUrl, maxConnections: 1 });
    await pool.end();

    const env = { ...withoutTemporalConnectionEnv(process.env), TEMPORAL_ADDRESS: temporal.address, DATABASE_URL: databaseUrl, [SUPERVISED_ENV]: '1' };
    const backoffs = new Map<string, ReturnType<typeof supervisor>>();

    const launch = (role: Role, index: number, initial: boolean, engineUrl?: string): ManagedWorker => {
      const args = [RELAX_BIN, 'worker', '--role', role];
      if (role !== 'control') args.push('--device', opts.device);
      const cpus = opts.cpuAffinity?.[role];
      // An IPC channel: the worker exits when it closes (this process died). taskset execs node in
      // place, so the child's pid is the worker's and the channel reaches it.
      const stdio: Array<'ignore' | 'pipe' | 'ipc'> = ['ignore', 'pipe', 'pipe', 'ipc'];
      const roleEnv = role === 'rollout' ? { ...env, RELAX_WORKER_SHUTDOWN_GRACE_MS: String(ROLLOUT_DRAIN_GRACE_MS), ...(engineUrl ? { RELAX_ENGINE_URL: engineUrl } : {}) } : env;
      const child = cpus
        ? spawn('taskset', ['-c', cpus, process.execPath, ...args], { env: roleEnv, stdio })
        : spawn(process.execPath, args, { env: roleEnv, stdio });
      const startedAt = Date.now();
      const tag = `[${role}#${index}]`;
      let markReady: () => void;
      let markFailed: (e: Error) => void;
      const ready = new Promise<void>((resolve, reject) => {
        markReady = resolve;
        markFailed = reject;
      });
      const managed: ManagedWorker = { role, index, child, ready, initial, startedAt: new Date(), ...(engineUrl ? { engineUrl } : {}) };
      forwardLines(child, (line) => {
        const readyLine = /^relax worker ready: (\S+)/.exec(line);
        if (readyLine) {
          managed.identity = readyLine[1];
          const urls = [...line.matchAll(/\b(?:metrics|sdk-metrics) (http:\/\/\S+)/g)].map((m) => m[1]);
          if (urls.length) managed.metricsUrls = urls;
          markReady();
        }
        opts.log(`${tag} ${line}`);
      });
      child.once('exit', (code, signal) => {
        markFailed(new Error(`${tag} exited (${signal ?? code}) before it was ready`));
        if (stopping || managed.draining) return;
        notice(`[relax] ${tag} (pid ${child.pid}) exited (${signal ?? `code ${code}`})`);
        changed();
        let restart = backoffs.get(tag);
        if (!restart) {
          restart = supervisor(notice, () => stopping, async () => {
            const slot = workers.findIndex((w) => w.role === role && w.index === index);
            // Gone, draining, or already running again (the health manager's restartWorkers relaunched it).
            const current = workers[slot];
            if (slot < 0 || current.draining || (current.child.exitCode === null && current.child.signalCode === null)) return;
            const replacement = launch(role, index, initial, engineUrl);
            if (slot >= 0) workers[slot] = replacement;
            changed();
            // Not awaiting ready: a replacement that dies early comes back through its own exit.
            replacement.ready.catch(() => undefined);
          });
          backoffs.set(tag, restart);
        }
        restart(Date.now() - startedAt, tag);
      });
      return managed;
    };

    cleanups.push(async () => {
      await Promise.all(workers.map((w) => stopChild(w.child)));
    });
    for (const [role, count] of Object.entries(opts.workers) as Array<[Role, number]>) {
      for (let i = 0; i < count; i++) workers.push(launch(role, i, true));
    }
    changed();
    await Promise.all(workers.map((w) => w.ready));
    const address = temporal.address;

    return {
      temporalAddress: address,
      uiUrl: temporal.uiUrl,
      temporalMetricsUrl: temporal.metricsUrl,
      databaseUrl,
      embeddedDatabase: embedded !== undefined,
      workerPids: (role) => workers.filter((w) => !role || w.role === role).map((w) => w.child.pid!),
      temporalPid: () => temporal?.pid,
      childPids,
      workers: (role) =>
        workers.filter((w) => (!role || w.role === role) && !w.draining && w.child.exitCode === null && w.child.signalCode === null && w.child.pid).map(asStackWorker),
      addWorkers: async (role, count, options = {}) => {
        if (stopping) throw new Error('the stack is stopping');
        const next = Math.max(-1, ...workers.filter((w) => w.role === role).map((w) => w.index)) + 1;
        const added = Array.from({ length: count }, (_, k) => launch(role, next + k, false, options.engineUrls?.[k]));
        workers.push(...added);
        changed();
        try {
          await Promise.all(added.map((w) => w.ready));
        } catch (err) {
          // All or none: a worker that died before it was ready takes the others of the batch down
          // too, so a retried scale-out does not leave extra workers behind.
          for (const w of added) w.draining = true;
          await Promise.all(added.map((w) => stopChild(w.child, 5_000)));
          workers.splice(0, workers.length, ...workers.filter((w) => !added.includes(w)));
          changed();
          throw err;
        }
        return added.map(asStackWorker);
      },
      drainWorker: async (pid, timeoutMs) => {
        const w = workers.find((x) => x.child.pid === pid);
        if (!w) return;
        w.draining = true;
        await stopChild(w.child, timeoutMs);
        const slot = workers.indexOf(w);
        if (slot >= 0) workers.splice(slot, 1);
        changed();
      },
      home: opts.home,
      slots: (role) =>
        workers
          .filter((w) => w.role === role && !w.draining)
          .map((w) => ({ index: w.index, pid: w.child.pid!, alive: w.child.exitCode === null && w.child.signalCode === null, ...(w.identity ? { identity: w.identity } : {}), startedAt: w.startedAt })),
      restartWorkers: async (role, notPolling, graceMs = 30_000) => {
        const done: WorkerRestart = { relaunched: [], killed: [], starting: [] };
        for (const [slot, w] of workers.entries()) {
          if (w.role !== role || w.draining || stopping) continue;
          const exited = w.child.exitCode !== null || w.child.signalCode !== null;
          if (exited) {
            const replacement = launch(role, w.index, w.initial, w.engineUrl);
            workers[slot] = replacement;
            replacement.ready.catch(() => undefined);
            done.relaunched.push(replacement.child.pid!);
          } else if (!w.identity) done.starting.push(w.child.pid!);
          else if (notPolling.includes(w.identity) && Date.now() - w.startedAt.getTime() > graceMs) {
            w.child.kill('SIGKILL');
            done.killed.push(w.child.pid!);
          }
        }
        if (done.relaunched.length) changed();
        return done;
      },
      stop: stopAll,
    };
  } catch (err) {
    await stopAll();
    throw err;
  }
}

async function stopChild(child: ChildProcess, graceMs = 15_000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  const killer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await exited;
  clearTimeout(killer);
}

/**
 * One supervised slot: restart(upForMs, what) waits the backoff delay (logged) and runs `start`; a
 * start that throws is retried with the next delay. A process that dies later calls restart again.
 */
function supervisor(notice: (line: string) => void, stopping: () => boolean, start: () => Promise<void>) {
  const backoff = new RestartBackoff();
  const restart = (upForMs: number, what: string): void => {
    const { delayMs, restart: n } = backoff.next(upForMs);
    notice(`[relax] restarting ${what} in ${formatDelay(delayMs)} (restart ${n})`);
    setTimeout(() => {
      if (stopping()) return;
      start().catch((err) => {
        if (stopping()) return;
        notice(`[relax] ${what} failed to start: ${(err as Error).message.split('\n')[0]}`);
        restart(0, what);
      });
    }, delayMs);
  };
  return restart;
}

/**
 * A throwaway stack for one job (quickstart, benchmarks, recording histories): free ports, headless,
 * one worker per role unless `extra.workers` says otherwise, quiet; the database is DATABASE_URL when set, else embedded PGlite in `home`.
 */
export async function startEphemeralStack(home: string, extra: Partial<Pick<LocalStackOptions, 'cpuAffinity' | 'workers' | 'notice'>> = {}): Promise<LocalStack> {
  return startLocalStack({
    home,
    temporalPort: await freePort(),
    uiPort: 0,
    dbPort: 0,
    databaseUrl: relaxEnvironment().databaseUrl,
    workers: { control: 1, rollout: 1, train: 1, reference: 1 },
    device: 'cpu',
    log: () => undefined,
    ...extra,
  });
}
