// Shared by the tests: real processes, a real Temporal server (started once per test run by
// scripts/test.js) and a fresh real database per test (embedded PGlite, or a new database on the
// PostgreSQL server named by DATABASE_URL).
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { Pool } from 'pg';
import type { Role } from '../config/task-queues';
import { listCheckpoints } from '../store/checkpoint-registry';
import { versionsToKeep } from '../store/checkpoint-retention';
import { openStore } from '../store/db';
import { verifyPolicyVersion } from '../training/policy-versions';
import { startEmbeddedPostgres } from '../store/embedded';
import { RELAX_BIN } from '../workers/local-stack';
import { freePort } from '../workers/ports';
import { forwardLines } from '../workers/temporal-server';

export function sharedTemporalAddress(): string {
  const address = process.env.TEMPORAL_ADDRESS;
  if (!address) throw new Error('TEMPORAL_ADDRESS is not set: run the tests with `npm test` (it starts one Temporal server)');
  return address;
}

export interface TestDatabase {
  url: string;
  pool: Pool;
  close(): Promise<void>;
}

/** A new, migrated, empty database. */
export async function freshDatabase(): Promise<TestDatabase> {
  const server = process.env.DATABASE_URL;
  if (server) {
    const name = `relax_test_${randomUUID().replace(/-/g, '').slice(0, 12)}`;
    const admin = new Pool({ connectionString: server, max: 1 });
    await admin.query(`CREATE DATABASE ${name}`);
    await admin.end();
    const u = new URL(server);
    u.pathname = `/${name}`;
    const url = u.toString();
    const pool = await openStore({ url });
    return {
      url,
      pool,
      async close() {
        await pool.end();
        const a = new Pool({ connectionString: server, max: 1 });
        await a.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
        await a.end();
      },
    };
  }
  const embedded = await startEmbeddedPostgres();
  const pool = await openStore({ url: embedded.url, maxConnections: 2 });
  return {
    url: embedded.url,
    pool,
    async close() {
      await pool.end();
      await embedded.stop();
    },
  };
}

export interface TestProcess {
  child: ChildProcess;
  output: string[];
  /** Resolves with the first output line matching `pattern`. */
  waitForLine(pattern: RegExp, timeoutMs?: number): Promise<string>;
  exited: Promise<number | null>;
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

export function spawnRelax(args: string[], env: NodeJS.ProcessEnv): TestProcess {
  const child = spawn(process.execPath, [RELAX_BIN, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  const output: string[] = [];
  const waiters: Array<{ pattern: RegExp; resolve: (l: string) => void }> = [];
  forwardLines(child, (line) => {
    output.push(line);
    if (process.env.RELAX_TEST_VERBOSE) console.log(`[${args.slice(0, 3).join(' ')}] ${line}`);
    for (const w of waiters.filter((w) => w.pattern.test(line))) {
      waiters.splice(waiters.indexOf(w), 1);
      w.resolve(line);
    }
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return {
    child,
    output,
    exited,
    waitForLine(pattern, timeoutMs = 60_000) {
      const seen = output.find((l) => pattern.test(l));
      if (seen) return Promise.resolve(seen);
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no line matching ${pattern} within ${timeoutMs} ms; output:\n${output.slice(-30).join('\n')}`)), timeoutMs);
        exited.then((code) => {
          clearTimeout(timer);
          reject(new Error(`relax ${args.join(' ')} exited (${code}) before printing ${pattern}; output:\n${output.slice(-30).join('\n')}`));
        });
        waiters.push({
          pattern,
          resolve: (l) => {
            clearTimeout(timer);
            resolve(l);
          },
        });
      });
    },
    async stop(signal = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return exited;
    },
  };
}

/** Starts one real `relax worker` process and waits until it polls. */
export async function startWorkerProcess(role: Role, env: { TEMPORAL_ADDRESS: string; DATABASE_URL: string }): Promise<TestProcess> {
  const p = spawnRelax(['worker', '--role', role, ...(role === 'control' ? [] : ['--device', 'cpu'])], env);
  await p.waitForLine(/^relax worker ready/);
  return p;
}

/** Worker processes replaced whenever they die, as `relax dev` would: the fault suites' stack. */
export class SupervisedWorkers {
  /** Workers that are up and polling, with their role. */
  readonly live = new Map<TestProcess, Role>();
  /** Every worker process started, ready or not, so stopAll can end them all. */
  private readonly spawned = new Set<TestProcess>();
  private stopping = false;

  constructor(private readonly env: () => NodeJS.ProcessEnv) {}

  /** Starts a worker of `role` (and, whenever it dies, its replacement); resolves when it is ready. */
  async start(role: Role): Promise<void> {
    const p = spawnRelax(['worker', '--role', role, ...(role === 'control' ? [] : ['--device', 'cpu'])], this.env());
    this.spawned.add(p);
    void p.exited.then(() => {
      this.spawned.delete(p);
      this.live.delete(p);
      if (!this.stopping) this.start(role).catch(() => undefined);
    });
    await p.waitForLine(/^relax worker ready/);
    this.live.set(p, role);
  }

  /** A live worker of `role` (waiting for a replacement if none is up). */
  one(role: Role): Promise<TestProcess[]> {
    return waitFor(`a live ${role} worker`, async () => {
      const found = [...this.live.entries()].filter(([, r]) => r === role).map(([p]) => p);
      return found.length ? found : undefined;
    }, 60_000);
  }

  /** Kills every worker; none is replaced. */
  async stopAll(): Promise<void> {
    this.stopping = true;
    await Promise.all([...this.spawned].map((p) => p.stop('SIGKILL')));
  }
}

/** Worker processes of the given roles on a fresh database and the shared Temporal server, with a client. */
export interface WorkerStack {
  db: TestDatabase;
  /** RELAX_HOME of the workers (a fresh temporary directory). */
  home: string;
  workers: TestProcess[];
  temporal: Awaited<ReturnType<typeof temporalClient>>;
  /** `work`, failing at once (with the worker's last output) if a worker exits before it settles. */
  whileAlive<T>(work: Promise<T>): Promise<T>;
  /** Kills the workers, closes the client and the database, removes home. */
  close(): Promise<void>;
}

/** Starts real `relax worker` processes for `roles` (repeat a role for several), with `extraEnv` in their environment. */
export async function startWorkerStack(roles: Role[], extraEnv: Record<string, string> = {}, homePrefix = 'relax-test-'): Promise<WorkerStack> {
  const db = await freshDatabase();
  const home = fs.mkdtempSync(path.join(os.tmpdir(), homePrefix));
  const env = { TEMPORAL_ADDRESS: sharedTemporalAddress(), DATABASE_URL: db.url, RELAX_HOME: home, ...extraEnv };
  const workers = await Promise.all(roles.map((r) => startWorkerProcess(r, env)));
  const temporal = await temporalClient();
  return {
    db,
    home,
    workers,
    temporal,
    async whileAlive<T>(work: Promise<T>): Promise<T> {
      let running = true;
      const died = new Promise<never>((_, reject) =>
        workers.forEach((w, i) => void w.exited.then((code) => running && reject(new Error(`the ${roles[i]} worker exited (${code ?? w.child.signalCode}); its output:\n${w.output.slice(-30).join('\n')}`)))),
      );
      return Promise.race([work, died]).finally(() => (running = false));
    },
    async close() {
      await Promise.all(workers.map((w) => w.stop('SIGKILL')));
      await temporal.close();
      await db.close();
      fs.rmSync(home, { recursive: true, force: true });
    },
  };
}

export async function temporalClient(address = sharedTemporalAddress()): Promise<{ client: Client; close(): Promise<void> }> {
  const connection = await Connection.connect({ address });
  return { client: new Client({ connection }), close: () => connection.close() };
}

export async function waitFor<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 60_000, everyMs = 200): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

export function uniqueId(prefix: string): string {
  return `${prefix}-${randomUUID().slice(0, 8)}`;
}

/**
 * The checkpoint registry of a finished run: versions 0..latest each registered exactly once; every
 * version retention keeps (checkpoint.every / keep_last / protect) still has files that verify against
 * their hash; every pruned version is one retention may prune and its files are gone.
 */
export async function checkCheckpointRegistry(pool: Pool, runId: string, latest: number, retention: { every: number; keepLast: number; protect: number }): Promise<{ retained: number[]; pruned: number[] }> {
  const checkpoints = await listCheckpoints(pool, runId);
  assert.deepEqual(checkpoints.map((c) => c.policyVersion), Array.from({ length: latest + 1 }, (_, i) => i), 'every version published exactly once');
  const keep = new Set(versionsToKeep({ ...retention, versions: checkpoints.map((c) => c.policyVersion), latest }));
  const retained: number[] = [];
  const pruned: number[] = [];
  for (const c of checkpoints) {
    if (c.prunedAt) {
      assert.ok(!keep.has(c.policyVersion), `v${c.policyVersion} was pruned but retention keeps it`);
      assert.ok(!fs.existsSync(c.path), `pruned v${c.policyVersion} still has files at ${c.path}`);
      pruned.push(c.policyVersion);
    } else {
      const v = await verifyPolicyVersion(pool, runId, c.policyVersion);
      assert.ok(v.ok, `checkpoint v${c.policyVersion}: ${v.ok ? '' : v.problem}`);
      retained.push(c.policyVersion);
    }
  }
  for (const v of keep) assert.ok(retained.includes(v), `retention keeps v${v} but it was pruned`);
  return { retained, pruned };
}

/** A real `relax dev` (its own Temporal dev server) on a fresh database, with its control API. */
export interface DevStack {
  db: TestDatabase;
  home: string;
  dev: TestProcess;
  /** The control API's base URL and its bearer token (from <home>/api-token). */
  api: string;
  token: string;
  temporalAddress: string;
  /** One API request (with the token unless `auth` is false); the body parsed as JSON. */
  call(method: string, url: string, body?: unknown, auth?: boolean): Promise<{ status: number; json: any }>;
  close(): Promise<void>;
}

/**
 * Starts `relax dev` with a free Temporal port, the API on any free port (`--api-port 0`: the URL is
 * read from its output; a port picked here could be taken, by another lane's connection, in the
 * seconds before relax dev binds it: CI saw EADDRINUSE once) and no reference worker, plus `args` and `env`.
 */
export async function startDevStack(args: string[] = [], env: Record<string, string> = {}): Promise<DevStack> {
  const db = await freshDatabase();
  const home = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-dev-stack-'));
  const temporalPort = await freePort();
  const dev = spawnRelax(
    ['dev', '--data-dir', home, '--temporal-port', String(temporalPort), '--ui-port', '0', '--api-port', '0', '--reference-workers', '0', '--judge-workers', '0', ...(process.env.RELAX_TEST_VERBOSE ? [] : ['--quiet']), ...args],
    { RELAX_HOME: home, DATABASE_URL: db.url, TEMPORAL_ADDRESS: '', ...env },
  );
  const api = (await dev.waitForLine(/^\s+API:\s+http/, 120_000)).trim().split(/\s+/)[1];
  await dev.waitForLine(/Press Ctrl-C/, 60_000);
  const token = fs.readFileSync(path.join(home, 'api-token'), 'utf8').trim();
  return {
    db,
    home,
    dev,
    api,
    token,
    temporalAddress: `127.0.0.1:${temporalPort}`,
    async call(method, url, body, auth = true) {
      const res = await fetch(`${api}${url}`, {
        method,
        headers: { ...(body !== undefined ? { 'content-type': 'application/json' } : {}), ...(auth ? { authorization: `Bearer ${token}` } : {}) },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      });
      const text = await res.text();
      return { status: res.status, json: text ? JSON.parse(text) : undefined };
    },
    async close() {
      await dev.stop('SIGTERM');
      await db.close();
      fs.rmSync(home, { recursive: true, force: true });
    },
  };
}
