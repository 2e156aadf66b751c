// `relax dev`: the whole stack on one machine, in the foreground. A Temporal dev server persisted
// under the data directory, the database (DATABASE_URL, else embedded PGlite persisted there too, in
// this process), and one worker process per role. It refuses ports other processes hold, restarts a
// dead worker or Temporal server with backoff (workers/supervisor.ts), and its children exit when it
// does, even by SIGKILL (an IPC channel to each worker; a watchdog for the temporal binary).
// Stopping it stops everything; starting it again resumes the workflows that were running. With
// `storage: 's3'` (relax dev --storage s3) it also starts SeaweedFS's S3 gateway with its data under
// the data directory, and every worker keeps checkpoints and media there (RELAX_STORAGE).
import { withoutTemporalConnectionEnv } from '../security/temporal-connection';
import fs from 'node:fs';
import path from 'node:path';
import type { OptionalRole, Role } from '../config/task-queues';
import { openStore } from '../store/db';
import { currentUmask, startEmbeddedPostgres, type EmbeddedPostgres } from '../store/embedded';
import { relaxEnvironment } from '../config/environment';
import { freePort } from './ports';
import { describePortOwner, portIsFree } from './port-owner';
import { SUPERVISED_ENV } from './supervisor';
import { startObjectStoreServer } from './object-store-server';
import { launchWorker, stopChild, supervisor, workerMethods, type ManagedWorker, type WorkerFleet } from './stack-workers';
import { startTemporalServer, type TemporalServer, type TemporalServerOptions } from './temporal-server';

export { RELAX_BIN, ROLLOUT_DRAIN_GRACE_MS } from './stack-workers';

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
  /** Worker processes per role; an optional role (OPTIONAL_ROLES: judge) absent runs none. */
  workers: Omit<Record<Role, number>, OptionalRole> & Partial<Record<OptionalRole, number>>;
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
  /** 's3': checkpoints and media in an S3 object store the stack starts (SeaweedFS); default: files under home. */
  storage?: 'file' | 's3';
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

/**
 * Starts the Temporal dev server and supervises it: one that exits is restarted with backoff (when its
 * port is free again); `slot` holds the one running now (undefined while it is being restarted).
 */
async function startSupervisedTemporal(
  opts: LocalStackOptions,
  notice: (line: string) => void,
  stopping: () => boolean,
  changed: () => void,
  slot: { get: () => TemporalServer | undefined; set: (server: TemporalServer | undefined) => void },
): Promise<TemporalServer> {
  const temporalOptions: TemporalServerOptions = {
    dbFilename: path.join(opts.home, 'temporal.db'),
    port: opts.temporalPort,
    uiPort: opts.uiPort || undefined,
    metricsPort: opts.temporalMetricsPort || (await freePort()),
    onOutput: (line) => opts.log(`[temporal] ${line}`),
  };
  const first = await startTemporalServer(temporalOptions);
  slot.set(first);
  const superviseTemporal = supervisor(notice, stopping, async () => {
    const port = temporalOptions.port;
    if (!(await portIsFree(port))) throw new Error(describePortOwner(port));
    const server = await startTemporalServer(temporalOptions);
    if (stopping()) return void (await server.stop());
    slot.set(server);
    changed();
    notice(`[relax] Temporal dev server restarted on ${server.address} (pid ${server.pid})`);
    watchTemporal(server);
  });
  const watchTemporal = (server: TemporalServer) => {
    const startedAt = Date.now();
    void server.exited.then(({ code, signal, tail }) => {
      if (stopping()) return;
      if (slot.get() === server) slot.set(undefined);
      changed();
      const crashed = signal === null && code !== 0 && tail.length > 0;
      notice(`[relax] Temporal dev server (pid ${server.pid}) exited (${signal ?? `code ${code}`})${crashed ? `; last output:\n${tail.slice(-5).join('\n')}` : ''}`);
      superviseTemporal(Date.now() - startedAt, `Temporal dev server on ${server.address}`);
    });
  };
  watchTemporal(first);
  return first;
}

/** The stack's database: DATABASE_URL, else embedded PGlite under the data directory (stopped by `cleanups`); checked by opening it once. */
async function openStackDatabase(opts: LocalStackOptions, cleanups: Array<() => Promise<void>>): Promise<{ databaseUrl: string; embedded: boolean }> {
  let databaseUrl = opts.databaseUrl;
  let embedded: EmbeddedPostgres | undefined;
  if (!databaseUrl) {
    embedded = await startEmbeddedPostgres({ dataDir: path.join(opts.home, 'pglite'), port: opts.dbPort || (await freePort()) });
    cleanups.push(() => embedded!.stop());
    databaseUrl = embedded.url;
  }
  const pool = await openStore({ url: databaseUrl, maxConnections: 1 });
  await pool.end();
  return { databaseUrl, embedded: embedded !== undefined };
}

/** The stack's S3 object store (SeaweedFS under <home>/seaweedfs): the environment that points every Relax process at it, this one included. */
async function startStackObjectStore(opts: LocalStackOptions, cleanups: Array<() => Promise<void>>, notice: (line: string) => void): Promise<Record<string, string>> {
  const server = await startObjectStoreServer({ dir: path.join(opts.home, 'seaweedfs'), onOutput: (line) => opts.log(`[seaweedfs] ${line}`) });
  cleanups.push(() => server.stop());
  // This process (the control API, export) reads checkpoints too.
  Object.assign(process.env, server.env);
  notice(`[relax] checkpoints and media in ${server.env.RELAX_STORAGE} at ${server.endpoint} (SeaweedFS; keys in ${path.join(opts.home, 'seaweedfs', 'relax-s3-keys.json')})`);
  return server.env;
}

/**
 * Takes away, under `dir`, the permission bits this process's umask withholds from what it creates:
 * a data directory written by an older version (PGlite's 0666 files, a 0644 temporal.db) becomes as
 * private as a new one. Symlinks are not followed; what is not ours is left as it is.
 */
export function tightenModes(dir: string, mask = currentUmask()): number {
  let changed = 0;
  const visit = (p: string) => {
    const st = fs.lstatSync(p);
    if (st.isSymbolicLink()) return;
    if ((st.mode & mask) !== 0 && st.uid === process.getuid?.()) {
      fs.chmodSync(p, st.mode & 0o7777 & ~mask);
      changed++;
    }
    if (st.isDirectory()) for (const name of fs.readdirSync(p)) visit(path.join(p, name));
  };
  if (fs.existsSync(dir)) visit(dir);
  return changed;
}

export async function startLocalStack(opts: LocalStackOptions): Promise<LocalStack> {
  fs.mkdirSync(opts.home, { recursive: true });
  const tightened = tightenModes(opts.home);
  if (tightened) (opts.notice ?? opts.log)(`[relax] ${tightened} files and directories under ${opts.home} were readable or writable by others: made private (RELAX_UMASK)`);
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
    temporal = await startSupervisedTemporal(opts, notice, () => stopping, changed, { get: () => temporal, set: (server) => { temporal = server; } });
    cleanups.push(() => temporal?.stop() ?? Promise.resolve());

    const { databaseUrl, embedded } = await openStackDatabase(opts, cleanups);

    const storageEnv = opts.storage === 's3' ? await startStackObjectStore(opts, cleanups, notice) : {};
    const env = { ...withoutTemporalConnectionEnv(process.env), TEMPORAL_ADDRESS: temporal.address, DATABASE_URL: databaseUrl, ...storageEnv, [SUPERVISED_ENV]: '1' };
    const fleet: WorkerFleet = { opts, notice, env, workers, stopping: () => stopping, changed, backoffs: new Map() };
    cleanups.push(async () => {
      await Promise.all(workers.map((w) => stopChild(w.child)));
    });
    for (const [role, count] of Object.entries(opts.workers) as Array<[Role, number]>) {
      for (let i = 0; i < count; i++) workers.push(launchWorker(fleet, role, i, true));
    }
    changed();
    await Promise.all(workers.map((w) => w.ready));
    const address = temporal.address;

    return {
      temporalAddress: address,
      uiUrl: temporal.uiUrl,
      temporalMetricsUrl: temporal.metricsUrl,
      databaseUrl,
      embeddedDatabase: embedded,
      temporalPid: () => temporal?.pid,
      childPids,
      home: opts.home,
      ...workerMethods(fleet),
      stop: stopAll,
    };
  } catch (err) {
    await stopAll();
    throw err;
  }
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
