// User modules named by path in the run config: `reward` (functions called with a per-call timeout,
// their failures captured per sample: a bad sample is marked failed and the run goes on within
// train.failure_budget; without reward.module the task's built-in reward is used, through the same
// capture), and through loadUserExport the `env`, `generate`, `task`, `algorithm.advantage` and
// `algorithm.policy_loss` modules. Every module is resolved here and checked against the worker's
// allow-list (envs/module-policy.ts). Reward, env, generate and task modules then load and run in a
// sandbox thread (envs/sandbox.ts; loadUserExport returns host-side proxies, cached per process), so
// a hang, a crash or running out of memory stops only that thread. `RELAX_SANDBOX=off` in a worker's
// environment runs them in-process instead (debugging only: unsafe, a `for(;;){}` freezes the
// worker). Algorithm modules (advantage, policy_loss) always run in-process: they operate on the
// trainer's tensors. withTimeout is the one timeout helper for in-process calls into user code.
//
// A module is a CommonJS file (or package) whose export is a function; ES modules (.mjs, or a
// package with "type": "module") load too, through import() when require() cannot load them.
//
// In-process, a timeout can only be noticed when the function yields to the event loop; a
// synchronous call that returns after its timeout is reported as timed out. In the sandbox the host
// stops the thread of a call still running past its timeout.
//
// Over 400 lines because loading (resolution, CommonJS / ES module fallbacks, export checks) and
// calling (timeouts, result checks) share the error vocabulary that names the config field to fix.
import { createRequire } from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import type { RunConfig } from '../config/run-config';
import { checkModuleAllowed } from './module-policy';
import { RESERVED_EXPORT_NAMES } from '../config/bounded';
import { rewardTarget, sandboxedExport, SANDBOX_CALL, scoreSandboxed, taskRewardTarget } from './sandbox-proxies';
import { stopSandboxes } from './sandbox';
import { sandboxEnabled } from './sandbox-protocol';
import type { Task, TaskPrompt } from './task';
import { UserModuleError, type UserModuleErrorCode } from './user-module-error';

export { UserModuleError, type UserModuleErrorCode } from './user-module-error';

/**
 * The input of a sample-scope reward function. `response` is the decoded response with special
 * tokens KEPT (as Task.reward receives it), so the function can see whether and where it emitted
 * eos. `signal` aborts when the call times out (pass it to fetch etc. to stop abandoned work).
 */
export interface SampleRewardInput {
  prompt: TaskPrompt;
  response: string;
  task: string;
  signal?: AbortSignal;
}
export type SampleReward = (input: SampleRewardInput) => number | Promise<number>;

/** The input of a group-scope reward function: every response of one prompt, in sample order. */
export interface GroupRewardInput {
  prompt: TaskPrompt;
  responses: string[];
  task: string;
  signal?: AbortSignal;
}
/** Returns one reward per response, in the order of `responses`. */
export type GroupReward = (input: GroupRewardInput) => number[] | Promise<number[]>;

export type RewardSpec = RunConfig['reward'];

interface LoadedRewardBase {
  /** reward.module as configured. */
  module: string;
  /** The file it resolved to. */
  resolvedPath: string;
  /** reward.export as configured. */
  exportName: string;
}
/** A validated user reward function with its scope. */
export type LoadedReward =
  | (LoadedRewardBase & { scope: 'sample'; fn: SampleReward })
  | (LoadedRewardBase & { scope: 'group'; fn: GroupReward });

export interface ScoredSample {
  reward: number | null;
  error: string | null;
}

const MAX_ERROR_CHARS = 1000;

export function describeThrown(err: unknown): string {
  if (err instanceof Error) return err.name && err.name !== 'Error' ? `${err.name}: ${err.message}` : err.message;
  if (typeof err === 'string') return err;
  try {
    const json = JSON.stringify(err);
    if (json !== undefined) return json;
  } catch {
    // fall through
  }
  return String(err);
}

export function clip(text: string): string {
  return text.length > MAX_ERROR_CHARS ? `${text.slice(0, MAX_ERROR_CHARS - 3)}...` : text;
}

export function describeValue(value: unknown): string {
  if (typeof value === 'number') return String(value); // NaN, Infinity, -Infinity
  if (value === undefined) return 'undefined (did the function forget to return it?)';
  if (value === null) return 'null';
  let text: string;
  try {
    text = JSON.stringify(value) ?? String(value);
  } catch {
    text = String(value);
  }
  if (text.length > 60) text = `${text.slice(0, 57)}...`;
  return `${text} (${Array.isArray(value) ? 'array' : typeof value})`;
}

/** null when `value` is a usable reward, else the error naming what it is. */
export function checkReward(value: unknown): string | null {
  if (typeof value === 'number' && Number.isFinite(value)) return null;
  return `reward is ${describeValue(value)}, not a finite number`;
}

// ---------------------------------------------------------------------------------------------
// Loading

/** The run config section a user module is named in (its errors say which). */
export type ModuleField = 'reward' | 'env' | 'generate' | 'task' | 'advantage' | 'policy_loss';

/** How errors name the config field that held the module: "reward.module", "algorithm.advantage.module", or "task" itself. */
export function moduleLabel(field: ModuleField): string {
  if (field === 'task') return 'task';
  return field === 'advantage' || field === 'policy_loss' ? `algorithm.${field}.module` : `${field}.module`;
}

const exportCache = new Map<string, Promise<unknown>>();
/** The fields whose modules run in the sandbox (unless RELAX_SANDBOX=off). */
const SANDBOXED_FIELDS: ReadonlySet<ModuleField> = new Set(['reward', 'env', 'generate', 'task']);

/** True when `field`'s modules load in a sandbox thread in this process. */
export function sandboxed(field: ModuleField): boolean {
  return SANDBOXED_FIELDS.has(field) && sandboxEnabled();
}

/**
 * Loads `<field>.module`'s export `exportName` and checks it is a function (a class is one too).
 * Reward, env and generate modules load in their sandbox thread and what returns is a host-side
 * proxy of the export (see the top of this file). Cached per resolved file and export; failures
 * are not cached. Throws UserModuleError (whose message names the config field), or
 * NotAllowedError when the file is outside the worker's allowed module roots. Relative paths
 * resolve against `cwd`.
 */
export async function loadUserExport(field: ModuleField, moduleSpec: string, exportName: string, cwd: string = process.cwd()): Promise<unknown> {
  const resolved = resolveUserModule(moduleSpec, cwd, field);
  const inSandbox = sandboxed(field) && field !== 'task';
  const key = `${field}\0${resolved}\0${exportName}\0${inSandbox ? 'sandbox' : 'in-process'}`;
  let loading = exportCache.get(key);
  if (!loading) {
    loading = inSandbox
      ? sandboxedExport({ field, label: moduleLabel(field), spec: moduleSpec, resolved, cwd }, exportName)
      : loadModule(moduleSpec, resolved, cwd, field).then((mod) => pickExport(mod, moduleSpec, exportName, resolved, cwd, field));
    exportCache.set(key, loading);
    loading.catch(() => exportCache.delete(key));
  }
  return loading;
}

/** The file a module spec names (resolveModule), checked against the worker's allow-list. Throws UserModuleError or NotAllowedError. */
export function resolveUserModule(spec: string, cwd: string, field: ModuleField): string {
  const resolved = resolveModule(spec, cwd, field);
  checkModuleAllowed(moduleLabel(field), spec, resolved, process.env, cwd);
  return resolved;
}

function isPathLike(spec: string): boolean {
  return path.isAbsolute(spec) || spec === '.' || spec === '..' || /^\.\.?[\\/]/.test(spec);
}

function isNotFound(err: unknown, request: string): boolean {
  const e = err as NodeJS.ErrnoException;
  // Only the module itself missing, not a require() inside it failing.
  return e?.code === 'MODULE_NOT_FOUND' && typeof e.message === 'string' && e.message.includes(`'${request}'`);
}

/**
 * The file reward.module names: a path (absolute, or starting with ./ or ../) is resolved against
 * the working directory; anything else is tried as a path relative to it first, then as a package
 * installed where the working directory (or Relax itself) can see it.
 */
function resolveModule(spec: string, cwd: string, field: ModuleField = 'reward'): string {
  const fromCwd = createRequire(path.join(cwd, 'noop.js'));
  const asPath = path.resolve(cwd, spec);
  const howToFix =
    `pass an absolute path, a path relative to the worker's working directory (${cwd}), ` +
    'or the name of a package installed there';
  if (isPathLike(spec)) {
    try {
      return fromCwd.resolve(asPath);
    } catch (err) {
      const why = isNotFound(err, asPath)
        ? `which does not exist${path.extname(asPath) ? '' : ` (also tried ${asPath}.js and ${path.join(asPath, 'index.js')})`}`
        : `which cannot be resolved: ${clip(describeThrown(err))}`;
      throw new UserModuleError(
        `${moduleLabel(field)} ${JSON.stringify(spec)} not found: resolved from the working directory ${cwd} to ${asPath}, ${why}: ${howToFix}`,
        'not_found',
        spec,
        cwd,
      );
    }
  }
  try {
    return fromCwd.resolve(asPath);
  } catch {
    // not a file there: try it as a package
  }
  try {
    return fromCwd.resolve(spec);
  } catch {
    // not visible from the working directory
  }
  try {
    return require.resolve(spec);
  } catch {
    throw new UserModuleError(
      `${moduleLabel(field)} ${JSON.stringify(spec)} not found: it is neither a file relative to the working directory ${cwd} ` +
        `(${asPath} does not exist) nor a package resolvable from there: ${howToFix}`,
      'not_found',
      spec,
      cwd,
    );
  }
}

// A real dynamic import in this CommonJS build (tsc keeps import() under module node16); held in a
// function so a test runner that rewrites import() cannot turn it into require().
const importModule = (url: string): Promise<Record<string, unknown>> => import(url);

export async function loadModule(spec: string, resolved: string, cwd: string, field: ModuleField = 'reward'): Promise<unknown> {
  try {
    try {
      return require(resolved);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException)?.code;
      // An ES module require() cannot load (top-level await, or a Node without require(esm)).
      if (code !== 'ERR_REQUIRE_ESM' && code !== 'ERR_REQUIRE_ASYNC_MODULE') throw err;
      return await importModule(pathToFileURL(resolved).href);
    }
  } catch (err) {
    throw new UserModuleError(
      `${moduleLabel(field)} ${JSON.stringify(spec)} (${resolved}) failed to load: ${clip(describeThrown(err))}: ` +
        'fix the error in the module (try `node -e "require(process.argv[1])" <path>` to see it on its own)',
      'load_failed',
      spec,
      cwd,
    );
  }
}

function exportNames(mod: unknown): string[] {
  if ((typeof mod !== 'object' && typeof mod !== 'function') || mod === null) return [];
  return Object.keys(mod).filter((k) => k !== '__esModule');
}

export function pickExport(mod: unknown, spec: string, exportName: string, resolved: string, cwd: string, field: ModuleField = 'reward'): unknown {
  if (RESERVED_EXPORT_NAMES.includes(exportName)) {
    throw new UserModuleError(`${moduleLabel(field).replace(/\.module$/, '')}.export ${JSON.stringify(exportName)} is inherited by every object, never a module's own export: name the function or class ${JSON.stringify(spec)} exports`, 'missing_export', spec, cwd);
  }
  const container = (typeof mod === 'object' || typeof mod === 'function') && mod !== null ? (mod as Record<string, unknown>) : undefined;
  let value: unknown = container && Object.prototype.hasOwnProperty.call(container, exportName) ? container[exportName] : undefined;
  // "default" also means module.exports itself (module.exports = function ...).
  if (value === undefined && exportName === 'default' && (typeof mod === 'function' || (field === 'task' && typeof mod === 'object' && mod !== null))) value = mod;
  // An ES module loaded through require() or import() whose default export is a CommonJS object.
  if (value === undefined && container && exportName !== 'default' && typeof container.default === 'object' && container.default !== null) {
    const inner = container.default as Record<string, unknown>;
    if (Object.prototype.hasOwnProperty.call(inner, exportName)) value = inner[exportName];
  }
  if (value === undefined) {
    const names = exportNames(mod);
    const existing = names.length ? `it exports ${names.map((n) => JSON.stringify(n)).join(', ')}` : 'it exports nothing';
    const fix = names.length
      ? `set ${moduleLabel(field).replace(/\.module$/, "")}.export to one of those, or export a ${field === 'env' ? 'class' : field === 'task' ? 'task object' : 'function'} named ${JSON.stringify(exportName)}`
      : `export the function (module.exports = function reward(input) {...}, or exports.${exportName === 'default' ? 'default' : exportName} = ...)`;
    throw new UserModuleError(
      `${moduleLabel(field)} ${JSON.stringify(spec)} (${resolved}) has no export ${JSON.stringify(exportName)}: ${existing}: ${fix}`,
      'missing_export',
      spec,
      cwd,
    );
  }
  if (field !== 'task' && typeof value !== 'function') {
    throw new UserModuleError(
      `${moduleLabel(field)} ${JSON.stringify(spec)} (${resolved}) export ${JSON.stringify(exportName)} is ${describeValue(value)}, not a function: ` +
        (field === 'reward' ? 'export the reward function itself (it is called with { prompt, response, task } and returns a number)' : field === 'env' ? 'export the environment class itself (constructed with { task, seed }; methods reset(prompt) and step(response))' : 'export the generate function itself (see docs/environments.md)'),
      'not_a_function',
      spec,
      cwd,
    );
  }
  return value;
}

/**
 * The user reward function reward.module/export names, validated (the module resolves and loads,
 * the export exists and is a function); undefined when no module is configured (use the task's
 * built-in reward). Loaded through loadUserExport, so a worker loads a module once. Throws
 * UserModuleError. Relative paths resolve against `cwd` (default: the process's working directory).
 */
export async function loadRewardFunction(spec: RewardSpec | undefined, cwd: string = process.cwd()): Promise<LoadedReward | undefined> {
  if (!spec?.module) return undefined;
  const exportName = spec.export ?? 'default';
  const fn = (await loadUserExport('reward', spec.module, exportName, cwd)) as SampleReward & GroupReward;
  return { module: spec.module, resolvedPath: resolveUserModule(spec.module, cwd, 'reward'), exportName, scope: spec.scope ?? 'sample', fn } as LoadedReward;
}

/**
 * Validation at run start: loads the configured reward function (if any) so a bad module fails the
 * run at once with a clear message instead of failing every sample. Throws UserModuleError.
 * Note it resolves in THIS process's working directory; rollout workers resolve in theirs.
 */
export async function validateRewardConfig(config: RunConfig, cwd: string = process.cwd()): Promise<void> {
  await loadRewardFunction(config.reward, cwd);
}

// ---------------------------------------------------------------------------------------------
// Calling

/** Thrown by withTimeout when the call ran past its timeout. */
export class UserCodeTimeout extends Error {
  override name = 'UserCodeTimeout';
}

/**
 * The one timeout helper for user code (rewards, environments, generate functions): calls
 * fn(signal) and returns its result, or throws UserCodeTimeout ("<what> timed out after N ms") once
 * timeoutMs passes, aborting `signal`. A throw or rejection of fn is rethrown as it is. A synchronous
 * call cannot be interrupted (see the top of this file); one that overran still counts as timed out,
 * so the outcome does not depend on whether the function was async. The timer is always cleared,
 * and a promise that settles after its timeout is ignored (its rejection handled).
 */
export async function withTimeout<T>(what: string, timeoutMs: number, fn: (signal: AbortSignal) => T | Promise<T>): Promise<T> {
  const controller = new AbortController();
  const timedOut = `${what} timed out after ${timeoutMs} ms`;
  const started = performance.now();
  const result = fn(controller.signal);
  const isThenable = result !== null && (typeof result === 'object' || typeof result === 'function') && typeof (result as PromiseLike<unknown>).then === 'function';
  if (!isThenable) {
    const elapsed = performance.now() - started;
    if (elapsed > timeoutMs) {
      controller.abort();
      throw new UserCodeTimeout(`${timedOut} (it ran synchronously for ${Math.round(elapsed)} ms)`);
    }
    return result as T;
  }
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      // Settle as timed out first: aborting may make the call reject at once, with the abort reason.
      reject(new UserCodeTimeout(timedOut));
      controller.abort(new Error(timedOut));
    }, timeoutMs);
  });
  const settled = Promise.resolve(result as PromiseLike<T>);
  settled.catch(() => undefined);
  try {
    return await Promise.race([settled, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

type CallOutcome = { ok: true; value: unknown } | { ok: false; error: string };

/** Wraps one synchronous entry into user code (the sandbox thread marks it for the host's watchdog). */
export type CallWrap = (item: number, call: () => unknown) => unknown;
const noWrap: CallWrap = (_item, call) => call();

/** A reward call through withTimeout, its failure described for the sample's error. */
async function callReward(call: (signal: AbortSignal) => unknown, timeoutMs: number, item: number, wrap: CallWrap): Promise<CallOutcome> {
  let sync = true;
  try {
    const value = await withTimeout('reward function', timeoutMs, (signal) =>
      wrap(item, () => {
        const r = call(signal);
        sync = false;
        return r;
      }),
    );
    return { ok: true, value };
  } catch (err) {
    if (err instanceof UserCodeTimeout) return { ok: false, error: err.message };
    return { ok: false, error: clip(`reward function ${sync ? 'threw' : 'rejected'}: ${describeThrown(err)}`) };
  }
}

function failAll(n: number, error: string): ScoredSample[] {
  return Array.from({ length: n }, () => ({ reward: null, error }));
}

function checked(value: unknown): ScoredSample {
  const error = checkReward(value);
  return error ? { reward: null, error } : { reward: value as number, error: null };
}

export interface ScoreGroupOptions {
  task: Task;
  /** The user reward function (loadRewardFunction); absent: task.reward. */
  reward?: LoadedReward;
  prompt: TaskPrompt;
  /** Decoded responses with special tokens kept, in sample order. */
  responses: string[];
  /** Per call: per sample in sample scope, per group in group scope (reward.timeout_ms). */
  timeoutMs: number;
}

/**
 * Scores one prompt's responses: one { reward, error } per response, in order. Exactly one of the
 * two is null. A throw, a rejected promise, a result that is not a finite number, or a call past
 * timeoutMs gives that sample (in group scope: every sample of the call) reward null and an error
 * naming what happened. Never throws for a failing reward function. Sample-scope calls of one group
 * run concurrently (each with its own timeout). A sandboxed reward (reward.module, a task module's
 * reward) is scored in its thread with one message per group; its errors name the module and export.
 */
export async function scoreGroup(opts: ScoreGroupOptions): Promise<ScoredSample[]> {
  const { task, reward, prompt, responses, timeoutMs } = opts;
  if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) throw new Error(`timeoutMs is ${timeoutMs}: pass a positive number of milliseconds`);
  if (responses.length === 0) return [];
  const target = reward ? rewardTarget(reward.fn) : taskRewardTarget(task);
  if (target) return scoreSandboxed(target, reward?.scope ?? 'sample', prompt, responses, task.name, timeoutMs);
  const fn = reward ? reward.fn : ({ prompt: p, response }: SampleRewardInput) => task.reward(p, response);
  return scoreLocally(reward?.scope ?? 'sample', fn as SampleReward & GroupReward, prompt, responses, task.name, timeoutMs);
}

/** scoreGroup's capture around a function in this thread (the sandbox thread runs it too, with `wrap`). */
export async function scoreLocally(scope: 'sample' | 'group', fn: SampleReward & GroupReward, prompt: TaskPrompt, responses: string[], taskName: string, timeoutMs: number, wrap: CallWrap = noWrap): Promise<ScoredSample[]> {
  const n = responses.length;
  if (scope === 'group') {
    const outcome = await callReward((signal) => fn({ prompt: { ...prompt }, responses: [...responses], task: taskName, signal }), timeoutMs, 0, wrap);
    if (!outcome.ok) return failAll(n, outcome.error);
    const value = outcome.value;
    const isList = Array.isArray(value) || (ArrayBuffer.isView(value) && !(value instanceof DataView));
    if (!isList) {
      return failAll(n, `group reward function returned ${describeValue(value)}, not an array: return one number per response, in order`);
    }
    const list = value as ArrayLike<unknown>;
    if (list.length !== n) {
      return failAll(n, `group reward function returned ${list.length} rewards for ${n} responses: return one number per response, in order`);
    }
    return Array.from({ length: n }, (_, i) => checked(list[i]));
  }
  return Promise.all(
    responses.map(async (response, i): Promise<ScoredSample> => {
      const outcome = await callReward((signal) => fn({ prompt: { ...prompt }, response, task: taskName, signal }), timeoutMs, i, wrap);
      return outcome.ok ? checked(outcome.value) : { reward: null, error: outcome.error };
    }),
  );
}

/**
 * Calls a user function with `input` under `timeoutMs`: a sandbox proxy through its thread (the
 * thread and the host's watchdog keep the time), an in-process function through withTimeout.
 */
export function callUserFunction<T>(what: string, timeoutMs: number, fn: (input: never) => unknown, input: unknown): Promise<T> {
  const sandboxCall = (fn as unknown as Record<symbol, ((input: unknown, timeoutMs: number) => Promise<T>) | undefined>)[SANDBOX_CALL];
  if (sandboxCall) return sandboxCall(input, timeoutMs);
  return withTimeout(what, timeoutMs, () => (fn as (input: unknown) => T | Promise<T>)(input));
}

/** Calls an environment's reset / step / close under `timeoutMs` (a sandboxed one through its thread). */
export function callEnvironment<T>(env: object, method: 'reset' | 'step' | 'close', arg: unknown, timeoutMs: number): Promise<T> {
  const sandboxCall = (env as Record<symbol, ((m: string, a: unknown, t: number) => Promise<T>) | undefined>)[SANDBOX_CALL];
  if (sandboxCall) return sandboxCall.call(env, method, arg, timeoutMs);
  return withTimeout(`environment ${method}`, timeoutMs, () => (env as Record<string, (a: unknown) => T | Promise<T>>)[method](arg));
}

/** Forgets loaded user modules and stops their sandbox threads (tests). Node's own require cache is left alone. */
export function clearUserModuleCache(): void {
  exportCache.clear();
  stopSandboxes();
}
