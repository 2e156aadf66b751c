// The environment variables of one worker process (`relax worker`): its metrics endpoints, its log
// levels (Relax's and the SDK's), its shutdown grace, rollout concurrency, an external engine it drives and the
// checkpoint server that engine loads from, and whether `relax dev` supervises it. Read only here
// (config/environment.ts re-exports it); workers/worker.ts, workers/worker-metrics.ts and cli/main.ts use them.
import type { Role } from './task-queues';

/** RELAX_METRICS: "off" turns a worker's metrics off (no endpoint, interceptor or SDK telemetry); default on. */
export function metricsEnabled(env: NodeJS.ProcessEnv = process.env): boolean {
  const v = (env.RELAX_METRICS ?? '').trim().toLowerCase();
  if (v === '' || v === 'on') return true;
  if (v === 'off') return false;
  throw new Error(`RELAX_METRICS must be "on" or "off", got "${env.RELAX_METRICS}"`);
}

/** RELAX_METRICS_PORT: the port of this worker's Prometheus endpoint (default: a free one, named in its ready line). */
export function workerMetricsPort(env: NodeJS.ProcessEnv = process.env): { port?: number } {
  const raw = env.RELAX_METRICS_PORT;
  if (raw === undefined || raw === '') return {};
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new Error(`RELAX_METRICS_PORT must be a port number (0 = any free one), got "${raw}"`);
  return { port: n };
}

/** RELAX_SDK_METRICS_PORT: the port of the Temporal SDK's own Prometheus endpoint; undefined when unset (then a free one). */
export function sdkMetricsPort(env: NodeJS.ProcessEnv = process.env): number | undefined {
  const raw = env.RELAX_SDK_METRICS_PORT;
  if (!raw) return undefined;
  const n = Number(raw);
  if (!Number.isInteger(n) || n <= 0 || n > 65535) throw new Error(`RELAX_SDK_METRICS_PORT must be a port number, got "${raw}"`);
  return n;
}

const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const;
export type RelaxLogLevel = (typeof LOG_LEVELS)[number];

/** RELAX_LOG_LEVEL: the level of Relax's own logs (telemetry/log.ts) in workers and servers, any case; default info (relax dev's own process: warn). */
export function logLevel(env: NodeJS.ProcessEnv = process.env, fallback: RelaxLogLevel = 'info'): RelaxLogLevel {
  const raw = (env.RELAX_LOG_LEVEL ?? '').trim().toLowerCase();
  if (raw === '') return fallback;
  if ((LOG_LEVELS as readonly string[]).includes(raw)) return raw as RelaxLogLevel;
  throw new Error(`RELAX_LOG_LEVEL must be one of ${LOG_LEVELS.join(', ')}, got "${env.RELAX_LOG_LEVEL}"`);
}

/**
 * The Temporal SDK's log level in a worker (its lines go through telemetry/log.ts): RELAX_SDK_LOG_LEVEL
 * when set; else WARN (the SDK logs every state change at INFO), or TRACE/DEBUG when RELAX_LOG_LEVEL asks for that much.
 */
export function sdkLogLevel(env: NodeJS.ProcessEnv = process.env): 'TRACE' | 'DEBUG' | 'INFO' | 'WARN' | 'ERROR' {
  const sdk = (env.RELAX_SDK_LOG_LEVEL ?? '').trim().toUpperCase();
  if (sdk === '') return ['trace', 'debug'].includes(logLevel(env)) ? (logLevel(env).toUpperCase() as 'TRACE' | 'DEBUG') : 'WARN';
  if (['TRACE', 'DEBUG', 'INFO', 'WARN', 'ERROR'].includes(sdk)) return sdk as 'TRACE' | 'DEBUG' | 'INFO' | 'WARN' | 'ERROR';
  throw new Error(`RELAX_SDK_LOG_LEVEL must be one of TRACE, DEBUG, INFO, WARN, ERROR, got "${env.RELAX_SDK_LOG_LEVEL}"`);
}

/** RELAX_WORKER_SHUTDOWN_GRACE_MS: how long running activities may finish when the worker is stopped (default 5 s; relax dev gives rollout workers 120 s, so a drain loses nothing). */
export function workerShutdownGrace(env: NodeJS.ProcessEnv = process.env): { shutdownGraceMs?: number } {
  const raw = env.RELAX_WORKER_SHUTDOWN_GRACE_MS;
  if (raw === undefined || raw === '') return {};
  const ms = Number(raw);
  if (!Number.isInteger(ms) || ms < 0) throw new Error(`RELAX_WORKER_SHUTDOWN_GRACE_MS must be an integer number of milliseconds >= 0, got "${raw}"`);
  return { shutdownGraceMs: ms };
}

/**
 * RELAX_ROLLOUT_MAX_CONCURRENT: rollout activities one rollout worker runs at once (default: the
 * SDK's, 100). A device's engine gains little from running many generate activities side by side;
 * bounding them makes work beyond the fleet's capacity wait in the queue, where the autoscaler (and
 * Temporal's task-queue statistics) see it as backlog.
 */
export function rolloutConcurrency(env: NodeJS.ProcessEnv = process.env): { maxConcurrentActivityTaskExecutions?: number } {
  const raw = env.RELAX_ROLLOUT_MAX_CONCURRENT;
  if (raw === undefined || raw === '') return {};
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1) throw new Error(`RELAX_ROLLOUT_MAX_CONCURRENT must be an integer >= 1, got "${raw}"`);
  return { maxConcurrentActivityTaskExecutions: n };
}

/**
 * RELAX_ENGINE_URL on a rollout worker: the base URL (no trailing slash) of the external
 * OpenAI-compatible engine it drives instead of a local one; undefined when unset. An error names
 * the variable when another role has it or it is not a base URL.
 */
export function externalEngineUrl(role: Role, env: NodeJS.ProcessEnv = process.env): string | undefined {
  const raw = env.RELAX_ENGINE_URL;
  if (!raw) return undefined;
  if (role !== 'rollout') throw new Error(`RELAX_ENGINE_URL is set, but only rollout workers drive external engines (this is a ${role} worker): unset it`);
  if (!/^https?:\/\/[^/?#]+\/?$/.test(raw)) throw new Error(`RELAX_ENGINE_URL is ${JSON.stringify(raw)}: give the engine's base URL, http(s)://host:port (it serves /v1/...)`);
  return raw.replace(/\/$/, '');
}

/** Where the checkpoint server an external engine loads from listens (RELAX_CHECKPOINT_HOST, default loopback) and the URL it is reached at (RELAX_CHECKPOINT_URL). */
export function checkpointServerSettings(env: NodeJS.ProcessEnv = process.env): { host: string; advertisedUrl?: string } {
  return { host: env.RELAX_CHECKPOINT_HOST || '127.0.0.1', ...(env.RELAX_CHECKPOINT_URL ? { advertisedUrl: env.RELAX_CHECKPOINT_URL } : {}) };
}

/**
 * Set in the environment of the worker processes `relax dev` starts (with an IPC channel): the
 * worker exits when that channel closes, i.e. when relax dev dies. `relax worker` run by hand has
 * neither and runs on.
 */
export const SUPERVISED_ENV = 'RELAX_SUPERVISED';

/** True when `relax dev` started this process as a supervised worker (SUPERVISED_ENV=1). */
export function supervisedWorker(env: NodeJS.ProcessEnv = process.env): boolean {
  return env[SUPERVISED_ENV] === '1';
}

export const UMASK_SETTING = 'RELAX_UMASK';

/**
 * RELAX_UMASK: the file-creation mask every relax process runs with (cli/main.ts), so what it and its
 * children (the embedded database, the Temporal dev server, workers) create is private: default 077
 * (files 0600, directories 0700); 027 lets the group read (a shared deployment's group), 007 lets it
 * write too. Other users never get access: a mask without all of 007 is refused.
 */
export function fileCreationMask(env: NodeJS.ProcessEnv = process.env): number {
  const raw = (env[UMASK_SETTING] ?? '').trim();
  if (raw === '') return 0o077;
  if (!/^0?[0-7]{3}$/.test(raw)) throw new Error(`${UMASK_SETTING}=${raw} is not an octal file-creation mask: use 077 (the default: private), 027 (the group reads) or 007 (the group reads and writes)`);
  const mask = parseInt(raw, 8);
  if ((mask & 0o007) !== 0o007) throw new Error(`${UMASK_SETTING}=${raw} would give other users access to the data directory (the database, workflow histories, checkpoints): keep the last digit 7, e.g. 077 or 027`);
  return mask;
}


/**
 * RELAX_WORKER_LIVENESS_S: how long `relax dev` waits for a ready worker to answer its liveness ping
 * (over the IPC channel, from the worker's event loop) before it kills the worker (SIGKILL) and
 * restarts it like one that died: a worker stopped (SIGSTOP), or whose event loop is blocked, takes
 * no work and frees nothing until then. Default 30; 0 turns the check off. At least 5.
 */
export function workerLivenessMs(env: NodeJS.ProcessEnv = process.env): number {
  const raw = (env.RELAX_WORKER_LIVENESS_S ?? '').trim();
  if (raw === '') return 30_000;
  const n = Number(raw);
  if (!Number.isFinite(n) || (n !== 0 && n < 5) || n > 86_400) throw new Error(`RELAX_WORKER_LIVENESS_S must be 0 (off) or a number of seconds from 5 to 86400, got "${raw}"`);
  return n * 1000;
}

/**
 * RELAX_FAILPOINTS_DIR: a directory where a chaos test arms failpoints (config/failpoints.ts); unset
 * (always, outside chaos tests) every failpoint is a no-op.
 */
export function failpointsDir(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const raw = (env.RELAX_FAILPOINTS_DIR ?? '').trim();
  return raw === '' ? undefined : raw;
}
