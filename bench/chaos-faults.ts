// The faults `relax bench chaos` injects into a `relax dev` child process: kill -9 of a worker of a
// given role (choosing one whose restart the supervisor will not back off long, then waiting for its
// replacement's ready line), kill -9 of the Temporal dev server (waiting for the supervisor to bring
// it back), and the order of them all (every role in each block of four, restarts spread evenly);
// and the stack's own database on a PostgreSQL server when DATABASE_URL names one.
import fs from 'node:fs';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import { spawn, type ChildProcess } from 'node:child_process';
import { Pool } from 'pg';
import { relaxEnvironment } from '../config/environment';
import { createDatabase, dropDatabase } from '../store/db';
import type { Role } from '../config/task-queues';
import { RELAX_BIN } from '../workers/local-stack';
import { DEFAULT_BACKOFF, restartDelayMs } from '../workers/supervisor';
import { forwardLines, waitUntilServing } from '../workers/temporal-server';
import { descendants, isTemporalServer, processTable, stillAlive, workerRole, type ProcessInfo } from './chaos-checks';

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** `p`, or undefined after `ms` (the timer never keeps the process alive). */
export function withTimeout<T>(p: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), ms);
    timer.unref();
  });
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

export async function until<T>(what: string, probe: () => Promise<T | undefined> | T | undefined, timeoutMs: number, everyMs = 250): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`relax bench chaos: timed out after ${timeoutMs / 1000} s waiting for ${what}`);
    await sleep(everyMs);
  }
}

/** One `relax dev` child process: its output is appended to a log file; worker ready lines are counted per role. */
export class DevProcess {
  readonly child: ChildProcess;
  readonly exited: Promise<void>;
  private lines: string[] = [];
  private readyCount = new Map<string, number>();
  /** The control API's URL, from relax dev's summary. */
  apiUrl: string | undefined;

  constructor(args: string[], env: NodeJS.ProcessEnv, logFile: string) {
    this.child = spawn(process.execPath, [RELAX_BIN, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    const out = fs.createWriteStream(logFile, { flags: 'a' });
    forwardLines(this.child, (line) => {
      out.write(`${line}\n`);
      this.lines.push(line);
      if (this.lines.length > 200) this.lines.shift();
      const api = /^\s+API:\s+(http\S+)/.exec(line);
      if (api) this.apiUrl = api[1];
      const ready = /^\[(\w+)#\d+\] relax worker ready/.exec(line);
      if (ready) this.readyCount.set(ready[1], (this.readyCount.get(ready[1]) ?? 0) + 1);
    });
    this.exited = new Promise((resolve) => this.child.once('exit', () => resolve()));
    void this.exited.then(() => out.end());
  }

  get pid(): number {
    return this.child.pid!;
  }

  get alive(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  ready(role: string): number {
    return this.readyCount.get(role) ?? 0;
  }

  async waitUp(timeoutMs = 180_000): Promise<void> {
    await until('relax dev to print "Press Ctrl-C to stop"', () => {
      if (this.lines.some((l) => l.startsWith('Press Ctrl-C to stop'))) return true;
      if (!this.alive) throw new Error(`relax dev exited (${this.child.exitCode ?? this.child.signalCode}) before it was up:\n${this.lines.slice(-20).join('\n')}`);
      return undefined;
    }, timeoutMs);
  }
}

export type ChaosEvent = Role | 'dev' | 'temporal';

/** `n` picks from `kinds` in blocks that each hold every kind once, in seeded random order (Fisher-Yates). */
export function shuffledBlocks<T>(kinds: readonly T[], n: number, rng: () => number): T[] {
  const out: T[] = [];
  while (out.length < n) {
    const block = [...kinds];
    for (let i = block.length - 1; i > 0; i--) {
      const j = Math.floor(rng() * (i + 1));
      [block[i], block[j]] = [block[j], block[i]];
    }
    out.push(...block.slice(0, n - out.length));
  }
  return out;
}

/** The kills in blocks of the four roles (each block in seeded random order), restarts spread evenly among them. */
export function schedule(kills: number, devRestarts: number, temporalRestarts: number, rng: () => number): ChaosEvent[] {
  const out: ChaosEvent[] = shuffledBlocks<Role>(['control', 'rollout', 'train', 'reference'], kills, rng);
  const restarts: ChaosEvent[] = [];
  for (let i = 0; i < Math.max(devRestarts, temporalRestarts); i++) {
    if (i < temporalRestarts) restarts.push('temporal');
    if (i < devRestarts) restarts.push('dev');
  }
  const n = out.length;
  restarts.forEach((r, i) => out.splice(Math.round(((i + 1) * n) / (restarts.length + 1)) + i, 0, r));
  return out;
}

const CLOCK_TICKS_PER_S = 100;

function uptimeMs(p: ProcessInfo): number {
  const bootS = Number(fs.readFileSync('/proc/uptime', 'utf8').split(' ')[0]);
  return (bootS - p.startTime / CLOCK_TICKS_PER_S) * 1000;
}

/**
 * Kills workers the way a pacing operator would: relax dev restarts a slot with exponential backoff
 * (workers/supervisor.ts: 1 s, 2 s, 4 s ..., reset once it stayed up a minute), so this tracks each
 * process's slot history (a replacement inherits its predecessor's failure count) and only kills a
 * process whose restart would wait at most `maxDelayMs`.
 */
export class WorkerKiller {
  /** pid:startTime -> the supervisor's failure count of that process's slot. */
  private failures = new Map<string, number>();

  constructor(private readonly maxDelayMs: number) {}

  private delayIfKilled(p: ProcessInfo): { delayMs: number; failures: number } {
    const before = uptimeMs(p) >= DEFAULT_BACKOFF.resetAfterMs ? 0 : (this.failures.get(`${p.pid}:${p.startTime}`) ?? 0);
    return { delayMs: restartDelayMs(before + 1), failures: before + 1 };
  }

  /** A live worker of `role` that may be killed now (random among them), or undefined. */
  pick(dev: DevProcess, role: Role, rng: () => number): ProcessInfo | undefined {
    const ok = descendants(dev.pid).filter((p) => workerRole(p) === role && this.delayIfKilled(p).delayMs <= this.maxDelayMs);
    return ok.length ? ok[Math.floor(rng() * ok.length)] : undefined;
  }

  /** kill -9 `victim`, then wait for its replacement's ready line (relax dev's supervisor starts it). */
  async kill(dev: DevProcess, victim: ProcessInfo, remember: (ps: ProcessInfo[]) => void): Promise<void> {
    const role = workerRole(victim)!;
    const { failures } = this.delayIfKilled(victim);
    const others = new Set(descendants(dev.pid).filter((p) => workerRole(p) === role).map((p) => p.pid));
    const readyBefore = dev.ready(role);
    process.kill(victim.pid, 'SIGKILL');
    await until(`the supervisor to restart the killed ${role} worker (pid ${victim.pid})`, () => (dev.ready(role) > readyBefore ? true : undefined), 120_000);
    const now = descendants(dev.pid);
    remember(now);
    const replacement = now.find((p) => workerRole(p) === role && !others.has(p.pid));
    if (replacement) this.failures.set(`${replacement.pid}:${replacement.startTime}`, failures);
  }

  /** A new relax dev starts its slots afresh. */
  reset(): void {
    this.failures.clear();
  }
}

/** kill -9 of the Temporal dev server; 'supervisor' if relax dev brought it back by itself within `withinMs`. */
export async function killTemporal(dev: DevProcess, address: string, remember: (ps: ProcessInfo[]) => void, withinMs = 30_000): Promise<'supervisor' | 'dev-restart'> {
  const ps = descendants(dev.pid);
  remember(ps);
  const servers = ps.filter(isTemporalServer);
  // The supervisor runs the binary under a node watchdog (workers/process-watchdog.ts): kill the binary.
  const target = servers.find((p) => !path.basename(p.cmdline[0] ?? '').startsWith('node')) ?? servers[0];
  if (!target) throw new Error(`relax bench chaos: no Temporal server process under relax dev (pid ${dev.pid})`);
  process.kill(target.pid, 'SIGKILL');
  await until('the killed Temporal server to exit', () => (stillAlive(target) ? undefined : true), 10_000);
  const back = await until('the Temporal server to come back', async () => {
    const replacement = descendants(dev.pid, processTable()).find((p) => isTemporalServer(p) && p.pid !== target.pid && !path.basename(p.cmdline[0] ?? '').startsWith('node'));
    if (!replacement) return undefined;
    await waitUntilServing(address, 'default', withinMs);
    return true;
  }, withinMs).catch(() => false);
  remember(descendants(dev.pid));
  return back ? 'supervisor' : 'dev-restart';
}

/** DATABASE_URL set: a fresh database on that server for the stack; else undefined (relax dev serves embedded PGlite). */
export async function chaosDatabase(): Promise<{ url?: string; drop(): Promise<void> }> {
  const server = relaxEnvironment().databaseUrl;
  if (!server) return { drop: async () => undefined };
  const name = `relax_chaos_${randomUUID().replace(/-/g, '').slice(0, 12)}`;
  const admin = new Pool({ connectionString: server, max: 1 });
  await createDatabase(admin, name);
  await admin.end();
  const u = new URL(server);
  u.pathname = `/${name}`;
  return {
    url: u.toString(),
    async drop() {
      const a = new Pool({ connectionString: server, max: 1 });
      await dropDatabase(a, name).finally(() => a.end());
    },
  };
}
