// Tasks defined by users in one file and named by module path in the run config ("task":
// "./my-task.js"): prompts, a held-out set, a reward and/or an environment class. See
// docs/environments.md for the shape and a worked example (examples/envs/parity.js).
//
// The module loads in a sandbox thread (envs/sandbox.ts) and the Task is a host-side proxy: what is
// static is read once at load (name, alphabet, heldOut(), maxTurns, maxTurnTokens, turnStops,
// encoders, contextLength, the tokenizer's ids), the Task interface's synchronous methods
// (trainPrompts, warmStartPrompts, reward, demonstrate, a module tokenizer's encode / decode) call the
// thread synchronously (Atomics.wait, limited by RELAX_SANDBOX_LOAD_TIMEOUT_MS: past it the thread is
// stopped and the call throws naming the module and the method), scoreGroup scores its reward in the
// thread with one message per group, and its environment's instances live in the thread.
// demonstrate(prompt, random) gets, in the thread, a PRNG seeded by one draw of the host's random.
import { CharTokenizer } from '../engines/tokenizers/char';
import type { Tokenizer } from '../engines/tokenizers/tokenizer';
import type { EnvironmentClass, InteractionSpec } from './interaction';
import { sandboxModule, SandboxStopped, type SandboxModule } from './sandbox';
import { sandboxLoadTimeoutMs } from './sandbox-protocol';
import { errorPrefix, moduleError, registerTaskReward, SandboxEnvironment } from './sandbox-proxies';
import type { TaskDescriptor } from './sandbox-thread';
import { loadUserExport, moduleLabel, resolveUserModule, sandboxed, UserModuleError } from './user-modules';
import type { Task, TaskEncoders, TaskPrompt } from './task';

/** What a task module exports (module.exports = { ... }). */
export interface TaskModule {
  name?: string;
  /** Characters of a character-level tokenizer (pad, bos, eos are added)... */
  alphabet?: string;
  /** ...or any tokenizer. */
  tokenizer?: () => Tokenizer;
  trainPrompts(seed: number, n: number): TaskPrompt[];
  heldOut(): TaskPrompt[];
  /** Single-turn tasks: reward of a response (decoded with specials kept). */
  reward?(prompt: TaskPrompt, response: string): number;
  /** Multi-turn tasks: the environment class (constructed with { task, seed }). */
  environment?: EnvironmentClass;
  maxTurns?: number;
  maxTurnTokens?: number;
  turnStops?: string[];
  demonstrate?: InteractionSpec['demonstrate'];
  warmStartPrompts?(seed: number, n: number): TaskPrompt[];
  /** Media tasks: the encoders of the tiny policy (prompts then carry `media`; the alphabet tokenizer gains `<image>` and `<audio>`). */
  encoders?: TaskEncoders;
  /** The context length used when model.context_length is unset. */
  contextLength?: number;
}

/** True when a run config's `task` names a module rather than a built-in task. */
export function isTaskModule(name: string): boolean {
  return /[\\/]/.test(name) || /\.[cm]?js$/.test(name);
}

function invalid(spec: string, problem: string): UserModuleError {
  return new UserModuleError(`task ${JSON.stringify(spec)}: ${problem} (see docs/environments.md for what a task module exports)`, 'missing_export', spec, process.cwd());
}

/** Builds a Task from a task module's export, checking its shape. */
export function taskFromModule(spec: string, m: TaskModule): Task {
  checkShape(spec, {
    kind: m === null ? 'null' : typeof m,
    functions: Object.fromEntries(['trainPrompts', 'heldOut', 'tokenizer', 'reward'].map((f) => [f, !!m && typeof (m as unknown as Record<string, unknown>)[f] === 'function'])),
    alphabet: m?.alphabet,
    environmentKind: typeof m?.environment,
  });
  const name = m.name ?? spec;
  const specials = m.encoders ? { specials: ['<image>', '<audio>'] } : {};
  const tokenizer = m.tokenizer ?? (() => new CharTokenizer(m.alphabet as string, specials));
  const Env = m.environment;
  return {
    name,
    tokenizer,
    trainPrompts: (seed, n) => m.trainPrompts(seed, n),
    heldOut: () => m.heldOut(),
    ...(m.warmStartPrompts ? { warmStartPrompts: (seed: number, n: number) => m.warmStartPrompts!(seed, n) } : {}),
    ...(m.encoders ? { encoders: m.encoders } : {}),
    ...(m.contextLength ? { contextLength: m.contextLength } : {}),
    reward: (prompt, response) => {
      if (!m.reward) throw new Error(`task ${name} is rewarded by its environment turn by turn; it has no transcript reward`);
      return m.reward(prompt, response);
    },
    ...(Env
      ? {
          interaction: {
            createEnv: ({ seed }: { seed: number }) => new Env({ task: name, seed }),
            maxTurns: m.maxTurns ?? 4,
            maxTurnTokens: m.maxTurnTokens ?? 8,
            turnStops: m.turnStops ?? [],
            ...(m.demonstrate ? { demonstrate: m.demonstrate } : {}),
          },
        }
      : {}),
  };
}

function checkShape(spec: string, d: Pick<TaskDescriptor, 'kind' | 'functions' | 'alphabet' | 'environmentKind'>): void {
  if (d.kind !== 'object') throw invalid(spec, `exports ${d.kind}, not an object`);
  for (const f of ['trainPrompts', 'heldOut'] as const) if (!d.functions[f]) throw invalid(spec, `${f} must be a function`);
  if (!d.functions.tokenizer && typeof d.alphabet !== 'string') throw invalid(spec, 'export an alphabet (string of characters) or a tokenizer() function');
  if (!d.functions.reward && d.environmentKind === 'undefined') throw invalid(spec, 'export reward(prompt, response) for a single-turn task or an environment class for a multi-turn one');
  if (d.environmentKind !== 'undefined' && d.environmentKind !== 'function') throw invalid(spec, 'environment must be a class');
}

/** A synchronous call of the task module's `method` in its thread; errors name the module and the method. */
function callSync(mod: SandboxModule, method: string, args: unknown[]): unknown {
  try {
    return mod.thread().requestSync('task', { method, args }, sandboxLoadTimeoutMs());
  } catch (err) {
    throw new Error(`${errorPrefix(mod.ref, method)}${err instanceof SandboxStopped ? '' : 'threw: '}${(err as Error).message}`);
  }
}

/** The host-side Task of a task module loaded in its sandbox thread. */
function taskFromSandbox(spec: string, mod: SandboxModule, d: TaskDescriptor): Task {
  checkShape(spec, d);
  const name = d.name ?? spec;
  const info = d.tokenizer;
  const moduleTokenizer: Tokenizer | undefined = info && {
    ...info,
    encode: (text: string) => callSync(mod, 'encode', [text]) as number[],
    decode: (ids: readonly number[], opts?: { skipSpecial?: boolean }) => callSync(mod, 'decode', [ids, opts]) as string,
  };
  const specials = d.encoders ? { specials: ['<image>', '<audio>'] } : {};
  const heldOut = (d.heldOut ?? []) as TaskPrompt[];
  const task: Task = {
    name,
    tokenizer: moduleTokenizer ? () => moduleTokenizer : () => new CharTokenizer(d.alphabet as string, specials),
    trainPrompts: (seed, n) => callSync(mod, 'trainPrompts', [seed, n]) as TaskPrompt[],
    heldOut: () => heldOut.map((p) => ({ ...p })),
    ...(d.functions.warmStartPrompts ? { warmStartPrompts: (seed: number, n: number) => callSync(mod, 'warmStartPrompts', [seed, n]) as TaskPrompt[] } : {}),
    ...(d.encoders ? { encoders: d.encoders as TaskEncoders } : {}),
    ...(d.contextLength ? { contextLength: d.contextLength } : {}),
    reward: (prompt, response) => {
      if (!d.functions.reward) throw new Error(`task ${name} is rewarded by its environment turn by turn; it has no transcript reward`);
      return callSync(mod, 'reward', [prompt, response]) as number;
    },
    ...(d.environmentKind === 'function'
      ? {
          interaction: {
            createEnv: ({ seed }: { seed: number }) => new SandboxEnvironment({ mod, exportName: 'environment', taskEnv: true }, { task: name, seed }),
            maxTurns: d.maxTurns ?? 4,
            maxTurnTokens: d.maxTurnTokens ?? 8,
            turnStops: d.turnStops ?? [],
            ...(d.functions.demonstrate
              ? { demonstrate: (prompt: TaskPrompt, random: () => number) => callSync(mod, 'demonstrate', [prompt, Math.floor(random() * 0x1_0000_0000)]) as ReturnType<NonNullable<InteractionSpec['demonstrate']>> }
              : {}),
          },
        }
      : {}),
  };
  if (d.functions.reward) registerTaskReward(task, mod);
  return task;
}

const sandboxedTasks = new Map<string, Promise<Task>>();

/**
 * The task a module path names, loaded once per process (in its sandbox thread, or in-process with
 * RELAX_SANDBOX=off). Throws UserModuleError naming the problem, NotAllowedError for a module
 * outside the worker's allowed roots.
 */
export async function loadTaskModule(spec: string, cwd: string = process.cwd()): Promise<Task> {
  if (!sandboxed('task')) return taskFromModule(spec, (await loadUserExport('task', spec, 'default', cwd)) as TaskModule);
  const resolved = resolveUserModule(spec, cwd, 'task');
  let loading = sandboxedTasks.get(resolved);
  if (!loading) {
    const mod = sandboxModule({ field: 'task', label: moduleLabel('task'), spec, resolved, cwd });
    loading = mod
      .thread()
      .request('check', { exportName: 'default' }, sandboxLoadTimeoutMs())
      .then(
        (d) => taskFromSandbox(spec, mod, d as TaskDescriptor),
        (err) => {
          throw moduleError(mod.ref, err);
        },
      );
    sandboxedTasks.set(resolved, loading);
    loading.catch(() => sandboxedTasks.delete(resolved));
  }
  return loading;
}
