// The environment variables that decide what a worker's engines and user code may use: the tfjs
// backend and engine threads, the sandbox's limits and passed variables, the module allow-list and
// the run memory cap. Read only here (config/environment.ts re-exports it); engines/backends.ts,
// envs/sandbox-protocol.ts, envs/module-policy.ts and config/run-bounds.ts use what these return.
import os from 'node:os';

/** Which backend to load: RELAX_TFJS_BACKEND = auto (default: native where built, else wasm), native or wasm. */
export type TfjsBackendChoice = 'auto' | 'native' | 'wasm';

export function tfjsBackendChoice(env: NodeJS.ProcessEnv = process.env): TfjsBackendChoice {
  const v = (env.RELAX_TFJS_BACKEND ?? 'auto').trim().toLowerCase() || 'auto';
  if (v === 'auto' || v === 'native' || v === 'wasm') return v;
  throw new Error(`RELAX_TFJS_BACKEND: expected auto, native or wasm, got "${env.RELAX_TFJS_BACKEND}"`);
}

/** A whole number of threads >= 1 from `name`, or undefined when it is unset or blank. */
function threadCount(env: NodeJS.ProcessEnv, name: string): number | undefined {
  const set = env[name]?.trim();
  if (!set) return undefined;
  const n = Number(set);
  if (!Number.isInteger(n) || n < 1) throw new Error(`${name}: expected a whole number of threads >= 1, got "${env[name]}"`);
  return n;
}

/** RELAX_ENGINE_THREADS: intra-op threads for every engine, or undefined (engines/backends.ts engineThreads decides). */
export function engineThreadsSetting(env: NodeJS.ProcessEnv = process.env): number | undefined {
  return threadCount(env, 'RELAX_ENGINE_THREADS');
}

/** RELAX_ORT_THREADS: intra-op threads for ONNX Runtime alone, or undefined (engines/backends.ts ortThreads). */
export function ortThreadsSetting(env: NodeJS.ProcessEnv = process.env): number | undefined {
  return threadCount(env, 'RELAX_ORT_THREADS');
}

/** TF_NUM_INTRAOP_THREADS as the user set it (read at load, before any backend sets it for TensorFlow). */
export const USER_TF_INTRAOP_THREADS = process.env.TF_NUM_INTRAOP_THREADS;

/** RELAX_SANDBOX=off runs user code in this process's event loop (debugging only: a hang there freezes the worker). */
export function sandboxEnabled(env: NodeJS.ProcessEnv = process.env): boolean {
  return !/^(off|0|false|no)$/i.test((env.RELAX_SANDBOX ?? '').trim());
}

function positiveInt(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n <= 0) throw new Error(`${name} is ${JSON.stringify(raw)}: set it to a positive whole number, or unset it for ${fallback}`);
  return n;
}

/** The old-generation heap of one sandbox thread (RELAX_SANDBOX_MEMORY_MB, default 512). */
export function sandboxMemoryMb(env: NodeJS.ProcessEnv = process.env): number {
  return positiveInt(env, 'RELAX_SANDBOX_MEMORY_MB', 512);
}

/** How long a user module may take to load in a fresh thread (RELAX_SANDBOX_LOAD_TIMEOUT_MS, default 10000). */
export function sandboxLoadTimeoutMs(env: NodeJS.ProcessEnv = process.env): number {
  return positiveInt(env, 'RELAX_SANDBOX_LOAD_TIMEOUT_MS', 10_000);
}

/** RELAX_SANDBOX_PASS_ENV: the secret-named variables user code gets anyway (names joined by ',', ':' or spaces). */
export function sandboxPassEnv(env: NodeJS.ProcessEnv = process.env): Set<string> {
  return new Set((env.RELAX_SANDBOX_PASS_ENV ?? '').split(/[,:\s]+/).filter(Boolean));
}

export const MODULE_ROOTS_SETTING = 'RELAX_ALLOWED_MODULE_ROOTS';
export const AGENT_COMMANDS_SETTING = 'RELAX_ALLOW_AGENT_COMMANDS';

/** RELAX_ALLOWED_MODULE_ROOTS as given (paths joined by ':'); empty when unset (envs/module-policy.ts then allows its defaults). */
export function configuredModuleRoots(env: NodeJS.ProcessEnv = process.env): string[] {
  return (env[MODULE_ROOTS_SETTING] ?? '').split(':').map((s) => s.trim()).filter(Boolean);
}

export const DATA_ROOTS_SETTING = 'RELAX_ALLOWED_DATA_ROOTS';

/** RELAX_ALLOWED_DATA_ROOTS as given (paths joined by ':'); empty when unset (envs/module-policy.ts then allows its defaults). */
export function configuredDataRoots(env: NodeJS.ProcessEnv = process.env): string[] {
  return (env[DATA_ROOTS_SETTING] ?? '').split(':').map((s) => s.trim()).filter(Boolean);
}

/** True when this worker lets runs name an agent command (RELAX_ALLOW_AGENT_COMMANDS=1). */
export function agentCommandsAllowed(env: NodeJS.ProcessEnv = process.env): boolean {
  return /^(1|true|yes)$/i.test(env[AGENT_COMMANDS_SETTING] ?? '');
}

/** The setting that caps a run's estimated trainer memory on a worker, in GB (10^9 bytes). */
export const RUN_MEMORY_SETTING = 'RELAX_MAX_RUN_MEMORY_GB';

/** The memory a run may need on this machine: RELAX_MAX_RUN_MEMORY_GB, else 75% of its memory. */
export function runMemoryLimitBytes(env: NodeJS.ProcessEnv = process.env): number {
  const gb = Number(env[RUN_MEMORY_SETTING]);
  return env[RUN_MEMORY_SETTING] && Number.isFinite(gb) && gb > 0 ? gb * 1e9 : 0.75 * os.totalmem();
}

/** Where the run memory limit comes from, for refusals: the setting and its value, or the default. */
export function runMemoryLimitSource(env: NodeJS.ProcessEnv = process.env): string {
  return env[RUN_MEMORY_SETTING] ? `${RUN_MEMORY_SETTING}=${env[RUN_MEMORY_SETTING]}` : `${RUN_MEMORY_SETTING}, default: 75% of this machine's memory`;
}
