// The hyperparameters a run may change while it trains (the setHyperparameters Update), checked
// with the same zod rules as the run config (the bounds of config/bounded.ts) and the cross-field
// rules against the values in force. Workflow-safe: zod and plain functions only, no Node modules
// (the Update's validator runs inside the workflow).
import { z } from 'zod';
import { boundedNumber as n, LR_DECAY_KINDS } from './bounded';

export interface Hyperparameters {
  train: { lr: number; warmup_steps: number; lr_decay: 'constant' | 'linear' | 'cosine'; steps: number; eval_every: number };
  algorithm: { kl_coef: number; entropy_coef: number; clip_low: number; clip_high: number };
  rollout: { temperature: number; top_p: number };
  max_staleness: number;
}

/** What a caller sends: any subset of Hyperparameters, nested the same way. */
export interface HyperparameterUpdate {
  train?: Partial<Hyperparameters['train']>;
  algorithm?: Partial<Hyperparameters['algorithm']>;
  rollout?: Partial<Hyperparameters['rollout']>;
  max_staleness?: number;
}

export class HyperparameterUpdateError extends Error {
  override readonly name = 'HyperparameterUpdateError';
  constructor(readonly problems: string[]) {
    super(`invalid hyperparameter update: ${problems.join('; ')}`);
  }
}

/** The hyperparameters of a parsed run config. */
export function hyperparametersOf(config: Hyperparameters): Hyperparameters {
  return {
    train: { lr: config.train.lr, warmup_steps: config.train.warmup_steps, lr_decay: config.train.lr_decay, steps: config.train.steps, eval_every: config.train.eval_every },
    algorithm: { kl_coef: config.algorithm.kl_coef, entropy_coef: config.algorithm.entropy_coef, clip_low: config.algorithm.clip_low, clip_high: config.algorithm.clip_high },
    rollout: { temperature: config.rollout.temperature, top_p: config.rollout.top_p },
    max_staleness: config.max_staleness,
  };
}

/** Every field an update may set, as a dotted path: the only ones safe to change while a run trains. */
export const HYPERPARAMETER_PATHS = [
  'train.lr',
  'train.warmup_steps',
  'train.lr_decay',
  'train.steps',
  'train.eval_every',
  'algorithm.kl_coef',
  'algorithm.entropy_coef',
  'algorithm.clip_low',
  'algorithm.clip_high',
  'rollout.temperature',
  'rollout.top_p',
  'max_staleness',
] as const;

export type HyperparameterPath = (typeof HYPERPARAMETER_PATHS)[number];

/** Problems an error lists at most (the rest are counted), each at most PROBLEM_MAX_CHARS. */
const MAX_PROBLEMS = 10;
const PROBLEM_MAX_CHARS = 500;

// Built on first use: a workflow that never receives an update allocates no schema.
let schema: z.ZodType<HyperparameterUpdate> | undefined;
function updateSchema(): z.ZodType<HyperparameterUpdate> {
  schema ??= z
    .object({
      train: z.object({ lr: n('train.lr'), warmup_steps: n('train.warmup_steps'), lr_decay: z.enum(LR_DECAY_KINDS), steps: n('train.steps'), eval_every: n('train.eval_every') }).partial().strict().optional(),
      algorithm: z.object({ kl_coef: n('algorithm.kl_coef'), entropy_coef: n('algorithm.entropy_coef'), clip_low: n('algorithm.clip_low'), clip_high: n('algorithm.clip_high') }).partial().strict().optional(),
      rollout: z.object({ temperature: n('rollout.temperature'), top_p: n('rollout.top_p') }).partial().strict().optional(),
      max_staleness: n('max_staleness').optional(),
    })
    .strict();
  return schema;
}

function shortened(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max - 3)}...`;
}

/** A value as a problem quotes it: scalars as JSON, anything else by its kind (never walked). */
function describe(value: unknown): string {
  if (value === undefined) return 'nothing';
  if (value === null || typeof value === 'number' || typeof value === 'boolean') return String(value);
  if (typeof value === 'string') return JSON.stringify(shortened(value, 60));
  return Array.isArray(value) ? 'an array' : `an ${typeof value}`;
}

function valueAt(input: unknown, path: readonly PropertyKey[]): unknown {
  let v: unknown = input;
  for (const key of path) {
    if (v === null || typeof v !== 'object') return undefined;
    v = (v as Record<PropertyKey, unknown>)[key];
  }
  return v;
}

function schemaProblems(update: unknown, issues: readonly z.core.$ZodIssue[]): string[] {
  return issues.map((issue) => {
    const where = issue.path.map((k) => shortened(String(k), 60)).join('.');
    if (issue.code === 'unrecognized_keys') {
      return issue.keys.map((k) => `${where ? `${where}.` : ''}${shortened(k, 60)}: cannot change while a run trains (unknown, or not safe to change mid-run); these can: ${HYPERPARAMETER_PATHS.join(', ')}`).join('; ');
    }
    return `${where || 'update'}: ${shortened(issue.message, 200)} (got ${describe(valueAt(update, issue.path))})`;
  });
}

/** The dotted paths of `update` that hold a value (an empty section holds none). */
function setPaths(update: HyperparameterUpdate): HyperparameterPath[] {
  return HYPERPARAMETER_PATHS.filter((p) => valueAt(update, p.split('.')) !== undefined);
}

/** The rules between fields, on the values that would be in force; `given` are the paths the update sets. */
function crossFieldProblems(h: Hyperparameters, given: readonly HyperparameterPath[], current: Hyperparameters, at: RunPosition): string[] {
  const problems: string[] = [];
  const sets = (...paths: HyperparameterPath[]) => paths.some((p) => given.includes(p));
  if (sets('algorithm.clip_low', 'algorithm.clip_high') && h.algorithm.clip_high < h.algorithm.clip_low) {
    problems.push(`algorithm.clip_high: must be >= algorithm.clip_low (${h.algorithm.clip_low}); got ${h.algorithm.clip_high}`);
  }
  if (sets('train.warmup_steps', 'train.steps') && h.train.warmup_steps > h.train.steps) {
    problems.push(`train.warmup_steps: must be <= train.steps (${h.train.steps}); got ${h.train.warmup_steps}`);
  }
  const started = Math.max(at.step + 1, at.startedSteps ?? 0);
  if (sets('train.steps') && h.train.steps < started) {
    const queued = started > at.step + 1 ? ` and has started steps up to ${started} (placement "colocated" queues steps behind the one in flight; they complete)` : '';
    problems.push(`train.steps: must be at least ${started}: the run has done ${at.step} steps${queued} and cannot end before a step already ${queued ? 'started' : 'done'}; got ${h.train.steps}`);
  }
  if (sets('max_staleness') && at.mode === 'sync' && h.max_staleness !== 0) {
    problems.push(`max_staleness: must stay 0 in mode "sync" (on-policy); the mode cannot change mid-run: start an async run to train on older samples; got ${h.max_staleness}`);
  }
  if (sets('algorithm.kl_coef') && at.mode === 'async' && current.algorithm.kl_coef === 0 && h.algorithm.kl_coef > 0) {
    problems.push(`algorithm.kl_coef: cannot turn the KL term on mid-run in mode "async": samples already generated have no reference log-probs; start the run with kl_coef > 0; got ${h.algorithm.kl_coef}`);
  }
  return problems;
}

/**
 * Where a run is: `step` the steps done so far; `startedSteps`, when steps beyond the next one are
 * already started and will complete (placement "colocated"), the last of them.
 */
export interface RunPosition {
  step: number;
  mode: 'sync' | 'async';
  startedSteps?: number;
}

/**
 * Validates an update against the values in force and where the run is; returns the new values and
 * the dotted paths that changed (those whose value differs). The update applies from the next step
 * the run starts, and train.steps may not fall below at.step + 1 (nor below at.startedSteps).
 * Throws HyperparameterUpdateError naming every bad field.
 */
export function validateHyperparameterUpdate(update: unknown, current: Hyperparameters, at: RunPosition): { hyperparameters: Hyperparameters; changed: string[] } {
  if (update === null || typeof update !== 'object' || Array.isArray(update)) {
    throw new HyperparameterUpdateError([`update: expected an object such as {"train":{"lr":0.0003}}, got ${describe(update)}`]);
  }
  const parsed = updateSchema().safeParse(update);
  if (!parsed.success) throw new HyperparameterUpdateError(limited(schemaProblems(update, parsed.error.issues)));
  const u = parsed.data;
  const given = setPaths(u);
  if (!given.length) throw new HyperparameterUpdateError([`update: empty: set at least one of ${HYPERPARAMETER_PATHS.join(', ')}`]);
  const hyperparameters: Hyperparameters = {
    train: { ...current.train, ...u.train },
    algorithm: { ...current.algorithm, ...u.algorithm },
    rollout: { ...current.rollout, ...u.rollout },
    max_staleness: u.max_staleness ?? current.max_staleness,
  };
  const problems = crossFieldProblems(hyperparameters, given, current, at);
  if (problems.length) throw new HyperparameterUpdateError(limited(problems));
  const changed = given.filter((p) => valueAt(hyperparameters, p.split('.')) !== valueAt(current, p.split('.')));
  return { hyperparameters, changed };
}

function limited(problems: string[]): string[] {
  const listed = problems.slice(0, MAX_PROBLEMS).map((p) => shortened(p, PROBLEM_MAX_CHARS));
  if (problems.length > listed.length) listed.push(`and ${problems.length - listed.length} more problems`);
  return listed;
}

/** A copy of `config` with the hyperparameters replaced. */
export function withHyperparameters<C extends Hyperparameters>(config: C, h: Hyperparameters): C {
  return {
    ...config,
    train: { ...config.train, ...h.train },
    algorithm: { ...config.algorithm, ...h.algorithm },
    rollout: { ...config.rollout, ...h.rollout },
    max_staleness: h.max_staleness,
  };
}
