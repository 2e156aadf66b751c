// Tasks defined by users in one file and named by module path in the run config ("task":
// "./my-task.js"): prompts, a held-out set, a reward and/or an environment class. See
// docs/environments.md for the shape and a worked example (examples/envs/parity.js).
import { CharTokenizer } from '../engines/tokenizers/char';
import type { Tokenizer } from '../engines/tokenizers/tokenizer';
import type { EnvironmentClass, InteractionSpec } from './interaction';
import { loadUserExport, UserModuleError } from './user-modules';
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
  if (!m || typeof m !== 'object') throw invalid(spec, `exports ${String(m)}, not an object`);
  for (const f of ['trainPrompts', 'heldOut'] as const) if (typeof m[f] !== 'function') throw invalid(spec, `${f} must be a function`);
  if (!m.tokenizer && typeof m.alphabet !== 'string') throw invalid(spec, 'export an alphabet (string of characters) or a tokenizer() function');
  if (!m.reward && !m.environment) throw invalid(spec, 'export reward(prompt, response) for a single-turn task or an environment class for a multi-turn one');
  if (m.environment && typeof m.environment !== 'function') throw invalid(spec, 'environment must be a class');
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

/** The task a module path names (the module is loaded once per process through loadUserExport). Throws UserModuleError naming the problem. */
export async function loadTaskModule(spec: string): Promise<Task> {
  return taskFromModule(spec, (await loadUserExport('task', spec, 'default')) as TaskModule);
}
