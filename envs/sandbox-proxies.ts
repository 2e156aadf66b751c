// Host-side stand-ins for user code running in the sandbox (envs/sandbox.ts): a reward function
// whose group is scored in ONE message (the thread runs the group's calls and reports each result),
// an environment class whose instances live in the thread (reset / step / close by instance id), a
// generate function whose generate() and tokenizer answer from the host. Errors name the config
// field, the module and the export. Stateless calls (rewards, generate functions) that were lost
// because ANOTHER call made their thread stop are retried once on a fresh thread; an environment
// instance dies with its thread, so its episode fails, saying it was collateral.
import { backOff } from 'exponential-backoff';
import type { Environment, Observation, StepResult } from './interaction';
import { describeStop, SandboxCallError, sandboxModule, SandboxStopped, type ModuleRef, type SandboxModule, type SandboxThread } from './sandbox';
import { sandboxLoadTimeoutMs } from './sandbox-protocol';
import type { Task, TaskPrompt } from './task';
import { UserModuleError, type UserModuleErrorCode } from './user-module-error';
import type { ScoredSample } from './user-modules';

/** A proxy's call with an explicit timeout: fn[SANDBOX_CALL](input, timeoutMs), env[SANDBOX_CALL](method, arg, timeoutMs). */
export const SANDBOX_CALL = Symbol.for('relax.sandboxCall');
const REWARD_TARGET = Symbol.for('relax.sandboxReward');
/** The timeout of a proxy called without one (the config's defaults). */
const DEFAULT_TIMEOUT_MS = 10_000;
const MODULE_CODES = new Set<string>(['not_found', 'load_failed', 'missing_export', 'not_a_function']);

/** A sandboxed reward: a reward.module export, or a task module's reward(). */
export interface RewardTarget {
  mod: SandboxModule;
  exportName: string;
  taskReward?: boolean;
}

export function errorPrefix(ref: ModuleRef, exportName: string): string {
  return `${ref.label} ${JSON.stringify(ref.spec)} export ${JSON.stringify(exportName)}: `;
}

function message(err: unknown): string {
  return (err as Error)?.message ?? String(err);
}

/** A failure while checking a module in its thread, as the UserModuleError callers expect. */
export function moduleError(ref: ModuleRef, err: unknown): UserModuleError {
  if (err instanceof UserModuleError) return err;
  if (err instanceof SandboxCallError && err.code && MODULE_CODES.has(err.code)) return new UserModuleError(err.message, err.code as UserModuleErrorCode, ref.spec, ref.cwd);
  return new UserModuleError(`${ref.label} ${JSON.stringify(ref.spec)} (${ref.resolved}) ${err instanceof SandboxStopped ? '' : 'failed to load: '}${message(err)}`, 'load_failed', ref.spec, ref.cwd);
}

/** Loads `ref` in its sandbox thread, checks the export, and returns the proxy used in its place. */
export async function sandboxedExport(ref: ModuleRef, exportName: string): Promise<unknown> {
  const mod = sandboxModule(ref);
  try {
    await mod.thread().request('check', { exportName }, sandboxLoadTimeoutMs());
  } catch (err) {
    throw moduleError(ref, err);
  }
  if (ref.field === 'env') return environmentClass(mod, exportName);
  if (ref.field === 'generate') return generateFunction(mod, exportName);
  return rewardFunction(mod, exportName);
}

// ---------------------------------------------------------------------------------------------
// Rewards

function rewardFunction(mod: SandboxModule, exportName: string): unknown {
  const target: RewardTarget = { mod, exportName };
  // Called directly (not through scoreGroup): one call, its error thrown.
  const fn = async (input: { prompt: TaskPrompt; response?: string; responses?: string[]; task: string }) => {
    const group = Array.isArray(input.responses);
    const scored = await scoreSandboxed(target, group ? 'group' : 'sample', input.prompt, group ? input.responses! : [input.response ?? ''], input.task, DEFAULT_TIMEOUT_MS);
    const failed = scored.find((s) => s.error !== null);
    if (failed) throw new Error(failed.error!);
    return group ? scored.map((s) => s.reward) : scored[0].reward;
  };
  Object.defineProperty(fn, REWARD_TARGET, { value: target });
  return fn;
}

/** The sandboxed reward behind a reward proxy, if `fn` is one. */
export function rewardTarget(fn: unknown): RewardTarget | undefined {
  return typeof fn === 'function' ? (fn as unknown as Record<symbol, RewardTarget>)[REWARD_TARGET] : undefined;
}

const taskRewards = new WeakMap<Task, RewardTarget>();
/** Marks a task's reward as a task module's, scored in its sandbox thread by scoreGroup. */
export function registerTaskReward(task: Task, mod: SandboxModule): void {
  taskRewards.set(task, { mod, exportName: 'reward', taskReward: true });
}
export function taskRewardTarget(task: Task): RewardTarget | undefined {
  return taskRewards.get(task);
}

/**
 * Scores one group in the thread, one message for the whole group. The culprit of a stopped thread
 * fails alone: the group's other samples are sent again once, to a fresh thread.
 */
export async function scoreSandboxed(target: RewardTarget, scope: 'sample' | 'group', prompt: TaskPrompt, responses: string[], task: string, timeoutMs: number): Promise<ScoredSample[]> {
  const prefix = errorPrefix(target.mod.ref, target.exportName);
  const out: ScoredSample[] = new Array(responses.length);
  const fail = (i: number, error: string) => (out[i] = { reward: null, error: prefix + error });
  let todo = responses.map((_, i) => i);
  // A hand-written loop, not backOff: each try sends a smaller group (the culprit's sample drops out).
  for (let attempt = 0; todo.length > 0; attempt++) {
    try {
      const body = { exportName: target.exportName, taskReward: target.taskReward === true, scope, prompt, responses: todo.map((i) => responses[i]), task };
      const got = (await target.mod.thread().request('reward', body, timeoutMs)) as ScoredSample[];
      got.forEach((s, k) => (s.error === null ? (out[todo[k]] = s) : fail(todo[k], s.error.replace(/^reward function /, ''))));
      break;
    } catch (err) {
      if (!(err instanceof SandboxStopped) || err.reason.kind === 'loadTimeout') {
        for (const i of todo) fail(i, message(err));
        break;
      }
      if (err.culprit && scope === 'sample' && err.item !== undefined && todo[err.item] !== undefined) {
        const culprit = todo[err.item];
        fail(culprit, err.message);
        todo = todo.filter((i) => i !== culprit);
      } else if (err.culprit) {
        for (const i of todo) fail(i, err.message);
        break;
      }
      if (attempt >= 1) {
        for (const i of todo) fail(i, describeStop(err.reason, false));
        break;
      }
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Environments

let nextInstance = 1;

/** How an environment instance is made in the thread: an env.module export, or a task module's environment. */
export interface EnvironmentTarget {
  mod: SandboxModule;
  exportName: string;
  taskEnv?: boolean;
}

/** One environment instance living in a sandbox thread; dies with that thread. */
export class SandboxEnvironment implements Environment {
  private thread?: SandboxThread;
  private created?: Promise<unknown>;
  private released = false;
  private readonly instance = nextInstance++;

  constructor(
    private readonly target: EnvironmentTarget,
    private readonly options: { task: string; seed: number },
  ) {}

  reset(prompt: TaskPrompt): Promise<string | Observation> {
    return this.call('reset', prompt, DEFAULT_TIMEOUT_MS) as Promise<string | Observation>;
  }

  step(response: string): Promise<StepResult> {
    return this.call('step', response, DEFAULT_TIMEOUT_MS) as Promise<StepResult>;
  }

  close(): Promise<void> {
    return this.call('close', undefined, DEFAULT_TIMEOUT_MS).then(() => undefined);
  }

  [SANDBOX_CALL](method: string, arg: unknown, timeoutMs: number): Promise<unknown> {
    return this.call(method, arg, timeoutMs);
  }

  /** Forgets the instance in its thread without calling close() (an episode whose reset failed). */
  release(): void {
    if (this.released || !this.thread) return;
    this.released = true;
    this.thread.instances--;
    this.thread.notify('envDrop', { instance: this.instance });
  }

  private async call(method: string, arg: unknown, timeoutMs: number): Promise<unknown> {
    const { mod, exportName, taskEnv } = this.target;
    const prefix = errorPrefix(mod.ref, taskEnv ? 'environment' : exportName);
    if (!this.thread) {
      this.thread = mod.thread();
      this.thread.instances++;
      this.created = this.thread.request('envCall', { instance: this.instance, method: 'new', exportName, taskEnv: taskEnv === true, options: this.options }, timeoutMs);
      this.created.catch(() => undefined);
    }
    try {
      await this.created;
      return await this.thread.request('envCall', { instance: this.instance, method, arg }, timeoutMs);
    } catch (err) {
      if (method === 'close' || err instanceof SandboxStopped) this.release();
      throw new Error(prefix + message(err));
    } finally {
      if (method === 'close' && !this.released) {
        this.released = true;
        this.thread.instances--;
      }
    }
  }
}

function environmentClass(mod: SandboxModule, exportName: string): unknown {
  return class SandboxedEnvironment extends SandboxEnvironment {
    constructor(options: { task: string; seed: number }) {
      super({ mod, exportName }, options);
    }
  };
}

// ---------------------------------------------------------------------------------------------
// Generate functions

interface GenerateInput {
  prompt: TaskPrompt;
  groupSize: number;
  task: string;
  seed: number;
  tokenizer: { vocabSize: number; padId: number; bosId: number; eosId: number; addBos?: boolean; stopIds?: readonly number[]; encode(t: string): number[]; decode(ids: readonly number[], o?: { skipSpecial?: boolean }): string };
  generate(contexts: number[][], params?: unknown): Promise<unknown>;
}

function generateFunction(mod: SandboxModule, exportName: string): unknown {
  const prefix = errorPrefix(mod.ref, exportName);
  const call = async (input: GenerateInput, timeoutMs: number): Promise<unknown> => {
    const t = input.tokenizer;
    const body = {
      exportName,
      input: { prompt: input.prompt, groupSize: input.groupSize, task: input.task, seed: input.seed },
      tokenizer: { vocabSize: t.vocabSize, padId: t.padId, bosId: t.bosId, eosId: t.eosId, ...(t.addBos !== undefined ? { addBos: t.addBos } : {}), ...(t.stopIds ? { stopIds: [...t.stopIds] } : {}) },
    };
    const callbacks = {
      rpc: { generate: (contexts: number[][], params?: unknown) => input.generate(contexts, params) },
      sync: { encode: (text: string) => t.encode(text), decode: (ids: number[], o?: { skipSpecial?: boolean }) => t.decode(ids, o) },
    };
    // A thread stopped by something else than this call (not its culprit, not a load timeout) is tried once more, on a fresh thread.
    const retry = (err: unknown) => err instanceof SandboxStopped && !err.culprit && err.reason.kind !== 'loadTimeout';
    try {
      return await backOff(() => mod.thread().request('generate', body, timeoutMs, callbacks), { numOfAttempts: 2, startingDelay: 0, retry });
    } catch (err) {
      throw new Error(prefix + message(err));
    }
  };
  const fn = (input: GenerateInput) => call(input, DEFAULT_TIMEOUT_MS);
  Object.defineProperty(fn, SANDBOX_CALL, { value: call });
  return fn;
}
