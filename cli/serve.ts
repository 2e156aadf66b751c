// `relax serve --run <run_id>`: a run's policy behind the OpenAI-compatible endpoint
// (serving/openai-server.ts, docs/openai-endpoint.md): "<run_id>" is the run's newest retained
// version, "<run_id>@<n>" version n (rollout/policy-engine.ts resolves them). The server runs one
// request at a time, so switching versions between requests never races a generation. Its limits
// (sessions held, timeouts, connections, body size) are flags (addServeLimitOptions).
import { Option, type Command } from 'commander';
import type { Pool } from 'pg';
import { engineTokenFromEnv } from '../config/environment';
import { parseRunConfig } from '../config/run-config';
import { startEngineServer } from '../serving/engine-server';
import { loadRunPolicy } from '../training/policy-model';
import { loadRunContext } from '../training/run-context';
import { resolveAddresses } from '../client';
import { DEFAULT_HTTP_LIMITS, startOpenAIServer, type HttpLimits, type OpenAIServer } from '../serving/openai-server';
import { DEFAULT_MAX_SESSIONS, DEFAULT_SESSION_IDLE_MS, DEFAULT_SESSION_MEDIA_BYTES, type SessionRecorderOptions } from '../serving/sessions';
import { PolicyEngine, type PolicyEngineOptions } from '../rollout/policy-engine';
import { openStore, redactUrl } from '../store/db';
import { loadPolicyWeights } from '../training/policy-versions';

export interface ServeCommandOptions {
  /** The run to serve from this stack's database; or `engine`. */
  run?: string;
  /** An external rollout engine: no database, versions loaded when a stack says (serving/engine-server.ts). */
  engine?: boolean;
  maxCheckpointMb?: number;
  port: number;
  host: string;
  /** "cpu" (default) or "cuda:N". */
  device?: string;
  /** The flags of addServeLimitOptions; each defaults to the server's default. */
  maxSessions?: number;
  sessionIdleS?: number;
  sessionMediaMb?: number;
  bodyLimitMb?: number;
  headersTimeoutS?: number;
  requestTimeoutS?: number;
  connectionTimeoutS?: number;
  keepAliveTimeoutS?: number;
  maxRequestsPerSocket?: number;
  maxConnections?: number;
}

const MiB = 1024 * 1024;

function positiveNumber(flag: string, integer: boolean): (v: string) => number {
  return (v) => {
    const n = Number(v);
    if (!(Number.isFinite(n) && n > 0 && (!integer || Number.isSafeInteger(n)))) throw new Error(`${flag} is ${JSON.stringify(v)}: pass a positive ${integer ? 'integer' : 'number'}`);
    return n;
  };
}

/** The limit flags of `relax serve` (docs/openai-endpoint.md "Limits"), added to `command`. */
export function addServeLimitOptions(command: Command): Command {
  const flags: Array<[string, string, number, boolean]> = [
    ['--max-sessions <n>', 'sessions held at most; more evict the least recently used', DEFAULT_MAX_SESSIONS, true],
    ['--session-idle-s <s>', 'a session without a call for this long is forgotten', DEFAULT_SESSION_IDLE_MS / 1000, false],
    ['--session-media-mb <n>', 'MiB of images and clips all sessions hold at most', DEFAULT_SESSION_MEDIA_BYTES / MiB, false],
    ['--body-limit-mb <n>', 'the largest request body, in MiB', DEFAULT_HTTP_LIMITS.bodyLimit / MiB, false],
    ['--headers-timeout-s <s>', 'a request\'s headers must arrive within this', DEFAULT_HTTP_LIMITS.headersTimeoutMs / 1000, false],
    ['--request-timeout-s <s>', 'a whole request (body included) must arrive within this', DEFAULT_HTTP_LIMITS.requestTimeoutMs / 1000, false],
    ['--connection-timeout-s <s>', 'a connection without traffic for this long is closed', DEFAULT_HTTP_LIMITS.connectionTimeoutMs / 1000, false],
    ['--keep-alive-timeout-s <s>', 'an idle keep-alive connection is closed after this', DEFAULT_HTTP_LIMITS.keepAliveTimeoutMs / 1000, false],
    ['--max-requests-per-socket <n>', 'requests one connection may carry', DEFAULT_HTTP_LIMITS.maxRequestsPerSocket, true],
    ['--max-connections <n>', 'open connections at most; more are closed at once', DEFAULT_HTTP_LIMITS.maxConnections, true],
  ];
  for (const [flag, help, fallback, integer] of flags) command.addOption(new Option(flag, `${help} (default ${fallback})`).argParser(positiveNumber(flag.split(' ')[0], integer)));
  return command;
}

const ms = (s: number | undefined) => (s === undefined ? undefined : Math.max(1, Math.round(s * 1000)));
const bytes = (mb: number | undefined) => (mb === undefined ? undefined : Math.max(1, Math.round(mb * MiB)));

/** The server's session and HTTP limits from the flags (undefined: the default). */
export function serveLimits(o: ServeCommandOptions): { sessionLimits: SessionRecorderOptions; http: Partial<HttpLimits> } {
  return {
    sessionLimits: { maxSessions: o.maxSessions, maxIdleMs: ms(o.sessionIdleS), maxMediaBytes: bytes(o.sessionMediaMb) },
    http: {
      bodyLimit: bytes(o.bodyLimitMb),
      headersTimeoutMs: ms(o.headersTimeoutS),
      requestTimeoutMs: ms(o.requestTimeoutS),
      connectionTimeoutMs: ms(o.connectionTimeoutS),
      keepAliveTimeoutMs: ms(o.keepAliveTimeoutS),
      maxRequestsPerSocket: o.maxRequestsPerSocket,
      maxConnections: o.maxConnections,
    },
  };
}

export interface RunServer {
  server: OpenAIServer;
  policy: PolicyEngine;
  close(): Promise<void>;
}

/** Serves one run's policy versions on the OpenAI-compatible endpoint. The pool stays the caller's. */
export async function startRunServer(pool: Pool, options: ServeCommandOptions & { run: string } & Omit<PolicyEngineOptions, 'loadWeights'>): Promise<RunServer> {
  const run = await loadRunContext(pool, options.run);
  const policy = await PolicyEngine.create(pool, { runId: run.runId, model: run.model, tokenizer: run.task.tokenizer() }, { ...options, loadWeights: (v) => loadPolicyWeights(pool, run, v) });
  let server: OpenAIServer;
  try {
    server = await startOpenAIServer({
      resolveModel: (m) => policy.resolveModel(m),
      listModels: () => policy.listModels(),
      // Ready once the run has a version to serve.
      readiness: async () => {
        const newest = await policy.newestVersion();
        return { ready: newest !== undefined, run: run.runId, newest_version: newest ?? null };
      },
      host: options.host,
      port: options.port,
      ...serveLimits(options),
    });
  } catch (err) {
    await policy.release();
    throw err;
  }
  return {
    server,
    policy,
    async close() {
      await server.close();
      await policy.release();
    },
  };
}

function untilSignal(): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    const on = (signal: NodeJS.Signals) => {
      process.off('SIGINT', on);
      process.off('SIGTERM', on);
      resolve(signal);
    };
    process.on('SIGINT', on);
    process.on('SIGTERM', on);
  });
}

/**
 * `relax serve --run <id> [--port 8000] [--host 127.0.0.1]`: serves until SIGINT / SIGTERM. The
 * database comes from DATABASE_URL or a running `relax dev` (.relax/stack.json).
 */
export async function serveCommandAction(options: ServeCommandOptions): Promise<void> {
  if (options.engine && options.run) throw new Error('--run and --engine exclude each other: --run serves a run of this stack, --engine serves whatever a registering stack tells it to load');
  if (options.engine) return engineCommandAction(options);
  if (!options.run) throw new Error('say what to serve: --run <run_id> (a run of this stack) or --engine (an external rollout engine for another stack)');
  const run = options.run;
  const { databaseUrl } = resolveAddresses();
  if (!databaseUrl) throw new Error('no database to read the run from: start `relax dev` (other commands find it through .relax/stack.json) or set DATABASE_URL');
  const pool = await openStore({ url: databaseUrl, maxConnections: 2 });
  let handle: RunServer;
  try {
    handle = await startRunServer(pool, { ...options, run });
  } catch (err) {
    await pool.end();
    throw new Error(`cannot serve run ${run} (database ${redactUrl(databaseUrl)}): ${(err as Error).message}`);
  }
  const { server } = handle;
  console.log(`serving run ${run} at ${server.baseURL}`);
  console.log(`  models: "${run}" (newest policy version), "${run}@<n>" (version n); GET ${server.baseURL}/models lists them`);
  printLimits(server, options);
  const signal = await untilSignal();
  const stats = server.stats();
  console.log(`${signal}: stopping (sessions held ${stats.sessions.sessions}, evicted ${JSON.stringify(stats.sessions.evicted)}, connections refused ${stats.refusedConnections})`);
  await handle.close();
  await pool.end();
}

function printLimits(server: OpenAIServer, options: ServeCommandOptions): void {
  const l = server.limits;
  console.log(
    `  limits: ${l.maxConnections} connections, ${l.bodyLimit / MiB} MiB bodies, headers within ${l.headersTimeoutMs / 1000} s, requests within ${l.requestTimeoutMs / 1000} s; ` +
      `sessions: ${options.maxSessions ?? DEFAULT_MAX_SESSIONS} held at most, forgotten after ${options.sessionIdleS ?? DEFAULT_SESSION_IDLE_MS / 1000} s idle (relax serve --help lists the flags)`,
  );
  console.log('  Ctrl-C stops');
}

/**
 * `relax serve --engine`: an external rollout engine (serving/engine-server.ts). No database: the
 * registering stack sends each version's checkpoint URL, sha256 and run config. The load call needs
 * RELAX_ENGINE_TOKEN (or the file RELAX_ENGINE_TOKEN_FILE names), the same value the stack has.
 */
async function engineCommandAction(options: ServeCommandOptions): Promise<void> {
  const token = engineTokenFromEnv();
  if (!token) throw new Error('relax serve --engine needs a token for its version-load call: set RELAX_ENGINE_TOKEN (or RELAX_ENGINE_TOKEN_FILE) here and the same value on the Relax stack that registers this engine');
  const mb = options.maxCheckpointMb;
  if (mb !== undefined && !(Number.isFinite(mb) && mb > 0)) throw new Error(`--max-checkpoint-mb is ${mb}: pass a positive number of MiB`);
  const handle = await startEngineServer({
    token: token.token,
    resolvePolicy: async (config) => {
      const policy = await loadRunPolicy(parseRunConfig(config, { memoryLimitBytes: Infinity }));
      return { model: policy.model, tokenizer: policy.task.tokenizer() };
    },
    host: options.host,
    port: options.port,
    ...(options.device ? { device: options.device } : {}),
    ...(mb !== undefined ? { maxCheckpointBytes: Math.round(mb * MiB) } : {}),
    openai: serveLimits(options),
  });
  console.log(`relax engine serving at ${handle.server.baseURL} (holds no run yet; version loads need the token from ${token.source})`);
  printLimits(handle.server, options);
  const signal = await untilSignal();
  console.log(`${signal}: stopping (held ${JSON.stringify(handle.held())})`);
  await handle.close();
}
