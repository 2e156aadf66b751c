// `relax dev`: the whole stack on one machine, in the foreground. A Temporal dev server persisted
// under the data directory, the database (DATABASE_URL, else embedded PGlite persisted there too),
// and one worker process per role. Stopping it stops everything; starting it again resumes the
// workflows that were running.
import fs from 'node:fs';
import path from 'node:path';
import { spawn, type ChildProcess } from 'node:child_process';
import type { Role } from '../config/task-queues';
import { openStore } from '../store/db';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../store/embedded';
import { PACKAGE_ROOT } from '../config/environment';
import { freePort } from './ports';
import { forwardLines, startTemporalServer, type TemporalServer } from './temporal-server';

export const RELAX_BIN = path.join(PACKAGE_ROOT, 'bin', 'relax.js');

export interface LocalStackOptions {
  home: string;
  temporalPort: number;
  /** 0 = headless */
  uiPort: number;
  /** Used when databaseUrl is not set; 0 picks a free port. */
  dbPort: number;
  databaseUrl?: string;
  workers: Record<Role, number>;
  device: string;
  log: (line: string) => void;
  /**
   * CPU list per role (taskset's syntax, e.g. "0" or "0-1"): pins that role's worker processes, e.g.
   * rollout and trainer on different cores. Needs `taskset` (util-linux) on PATH.
   */
  cpuAffinity?: Partial<Record<Role, string>>;
}

export interface LocalStack {
  temporalAddress: string;
  uiUrl: string | undefined;
  databaseUrl: string;
  embeddedDatabase: boolean;
  workerPids(role?: Role): number[];
  stop(): Promise<void>;
}

interface ManagedWorker {
  role: Role;
  index: number;
  child: ChildProcess;
  ready: Promise<void>;
}

export async function startLocalStack(opts: LocalStackOptions): Promise<LocalStack> {
  fs.mkdirSync(opts.home, { recursive: true });
  const cleanups: Array<() => Promise<void>> = [];
  const stopAll = async () => {
    while (cleanups.length) await cleanups.pop()!().catch((err) => opts.log(`[relax] stop: ${(err as Error).message}`));
  };

  try {
    const temporal: TemporalServer = await startTemporalServer({
      dbFilename: path.join(opts.home, 'temporal.db'),
      port: opts.temporalPort,
      uiPort: opts.uiPort || undefined,
      onOutput: (line) => opts.log(`[temporal] ${line}`),
    });
    cleanups.push(() => temporal.stop());

    let databaseUrl = opts.databaseUrl;
    let embedded: EmbeddedPostgres | undefined;
    if (!databaseUrl) {
      embedded = await startEmbeddedPostgres({ dataDir: path.join(opts.home, 'pglite'), port: opts.dbPort || (await freePort()) });
      cleanups.push(() => embedded!.stop());
      databaseUrl = embedded.url;
    }
    const pool = await openStore({ url: databaseUrl, maxConnections: 1 });
    await pool.end();

    const workers: ManagedWorker[] = [];
    let stopping = false;
    const env = { ...process.env, TEMPORAL_ADDRESS: temporal.address, DATABASE_URL: databaseUrl };

    const launch = (role: Role, index: number): ManagedWorker => {
      const args = [RELAX_BIN, 'worker', '--role', role];
      if (role !== 'control') args.push('--device', opts.device);
      const cpus = opts.cpuAffinity?.[role];
      // taskset execs node in place: the child's pid is the worker's.
      const child = cpus
        ? spawn('taskset', ['-c', cpus, process.execPath, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] })
        : spawn(process.execPath, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
      const tag = `[${role}#${index}]`;
      let markReady: () => void;
      let markFailed: (e: Error) => void;
      const ready = new Promise<void>((resolve, reject) => {
        markReady = resolve;
        markFailed = reject;
      });
      forwardLines(child, (line) => {
        if (line.startsWith('relax worker ready')) markReady();
        opts.log(`${tag} ${line}`);
      });
      child.once('exit', (code, signal) => {
        markFailed(new Error(`${tag} exited (${signal ?? code}) before it was ready`));
        if (stopping) return;
        opts.log(`[relax] ${tag} exited (${signal ?? `code ${code}`}); restarting it in 1 s`);
        setTimeout(() => {
          if (stopping) return;
          const slot = workers.findIndex((w) => w.child === child);
          const replacement = launch(role, index);
          replacement.ready.catch(() => undefined);
          if (slot >= 0) workers[slot] = replacement;
        }, 1_000);
      });
      return { role, index, child, ready };
    };

    cleanups.push(async () => {
      stopping = true;
      await Promise.all(workers.map((w) => stopChild(w.child)));
    });
    for (const [role, count] of Object.entries(opts.workers) as Array<[Role, number]>) {
      for (let i = 0; i < count; i++) workers.push(launch(role, i));
    }
    await Promise.all(workers.map((w) => w.ready));

    return {
      temporalAddress: temporal.address,
      uiUrl: temporal.uiUrl,
      databaseUrl,
      embeddedDatabase: embedded !== undefined,
      workerPids: (role) => workers.filter((w) => !role || w.role === role).map((w) => w.child.pid!),
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
 * A throwaway stack for one job (quickstart, benchmarks, recording histories): free ports, headless,
 * one worker per role, quiet; the database is DATABASE_URL when set, else embedded PGlite in `home`.
 */
export async function startEphemeralStack(home: string, extra: Pick<LocalStackOptions, 'cpuAffinity'> = {}): Promise<LocalStack> {
  return startLocalStack({
    ...extra,
    home,
    temporalPort: await freePort(),
    uiPort: 0,
    dbPort: 0,
    databaseUrl: process.env.DATABASE_URL || undefined,
    workers: { control: 1, rollout: 1, train: 1, reference: 1 },
    device: 'cpu',
    log: () => undefined,
  });
}
