// Advantage estimators by name, and the advantages of one train batch. A run's `algorithm.advantage`
// names a registered estimator ("grpo", "dr_grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline",
// "gae": PPO with a critic, and "opd": on-policy distillation, both computed per token in the train step)
// or a user module ({ module, export }) whose export is an AdvantageFunction;
// `algorithm.advantage_options` is validated by the estimator's own schema. A new estimator is one
// function and one registerAdvantageEstimator call (verl's `register_adv_est`). The math itself is
// engines/rl/advantages.ts. Split in two because the registry loads user modules (envs/) and
// reads the run config, which engines/, a library free of both, may not import.
import { z } from 'zod';
import type { RunConfig } from '../config/run-config';
import { drGrpoAdvantages, grpoAdvantages, reinforcePlusPlusAdvantages, rlooAdvantages } from '../engines/rl/advantages';
import { klPenaltyRewards } from '../engines/rl/kl';
import { loadUserExport } from '../envs/user-modules';

type Algorithm = RunConfig['algorithm'];

/** What an estimator sees: the batch's rewards (after any KL shaping) and its prompt groups. */
export interface AdvantageInput {
  rewards: readonly number[];
  /** Indices into `rewards`, one array per prompt group, in batch order. */
  groups: ReadonlyArray<readonly number[]>;
  /** algorithm.advantage_options, validated by the estimator's schema. */
  options: Record<string, unknown>;
}

/** One advantage per reward, in the order of `rewards`. */
export type AdvantageFunction = (input: AdvantageInput) => number[];

export interface AdvantageEstimator {
  name: string;
  /** Schema of algorithm.advantage_options for this estimator. */
  options: z.ZodType<Record<string, unknown>>;
  compute: AdvantageFunction;
}

/** algorithm.* names something that does not exist or options it does not take. */
export class AlgorithmConfigError extends Error {
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(`${field}: ${message}`);
    this.name = 'AlgorithmConfigError';
  }
}

/** `options` parsed by a registered estimator's or loss's schema; AlgorithmConfigError naming `field` otherwise. */
export function registeredOptions(schema: z.ZodType<Record<string, unknown>>, options: Record<string, unknown>, field: string, what: string): Record<string, unknown> {
  const parsed = schema.safeParse(options);
  if (parsed.success) return parsed.data;
  const problems = parsed.error.issues.map((i) => `${i.path.join('.') || '(options)'}: ${i.message}`).join('; ');
  throw new AlgorithmConfigError(field, `not valid for ${what}: ${problems}`);
}

const estimators = new Map<string, AdvantageEstimator>();

export function registerAdvantageEstimator(estimator: AdvantageEstimator): void {
  if (estimators.has(estimator.name)) throw new Error(`an advantage estimator named "${estimator.name}" is already registered`);
  estimators.set(estimator.name, estimator);
}

export function advantageEstimatorNames(): string[] {
  return [...estimators.keys()];
}

/**
 * A group-baseline estimator applied to each prompt group as it is in the batch: a group whose
 * other samples failed their reward is shorter, and a group of one has no baseline (advantage 0).
 */
export function perGroup(estimate: (rewards: number[], options: Record<string, unknown>) => number[]): AdvantageFunction {
  return ({ rewards, groups, options }) => {
    const out = new Array<number>(rewards.length).fill(0);
    for (const members of groups) {
      if (members.length < 2) continue;
      const a = estimate(members.map((i) => rewards[i]), options);
      members.forEach((i, j) => (out[i] = a[j]));
    }
    return out;
  };
}

const normalizeOptions = z.object({ eps: z.number().positive().optional(), std: z.enum(['sample', 'population']).optional() }).strict();
const noOptions = z.object({}).strict();

registerAdvantageEstimator({ name: 'grpo', options: normalizeOptions, compute: perGroup((r, o) => grpoAdvantages(r, r.length, o)) });
registerAdvantageEstimator({ name: 'dr_grpo', options: noOptions, compute: perGroup((r) => drGrpoAdvantages(r, r.length)) });
registerAdvantageEstimator({ name: 'rloo', options: noOptions, compute: perGroup((r) => rlooAdvantages(r, r.length)) });
// REINFORCE++ normalizes over the whole batch, which only the trainer sees: groups are ignored.
registerAdvantageEstimator({ name: 'reinforce_pp', options: normalizeOptions, compute: ({ rewards, options }) => reinforcePlusPlusAdvantages(rewards, options) });
// REINFORCE++-baseline: the group mean subtracted first, then normalized over the whole batch.
registerAdvantageEstimator({ name: 'reinforce_pp_baseline', options: normalizeOptions, compute: (input) => reinforcePlusPlusAdvantages(perGroup((r) => drGrpoAdvantages(r, r.length))(input), input.options) });

// PPO with a critic (GAE): its advantages are per token and need the value head's V_old, which only
// the trainer has, so the train step computes them (training/critic-step.ts criticSequences). This
// entry names it and gives each sample its (KL-shaped) reward as the per-sample value the step records.
registerAdvantageEstimator({ name: 'gae', options: noOptions, compute: ({ rewards }) => [...rewards] });

// On-policy distillation (training/opd-step.ts): its advantages are per token, the teacher's log-probs
// (the reference stage's) minus the rollout's, plus algorithm.teacher.task_coef times this entry's
// per-sample value: GRPO's group advantage of the task reward (A_task), the value the step records.
registerAdvantageEstimator({ name: 'opd', options: normalizeOptions, compute: perGroup((r, o) => grpoAdvantages(r, r.length, o)) });

/** An estimator with the run's options, ready to compute. */
export interface ResolvedEstimator {
  name: string;
  options: Record<string, unknown>;
  compute: AdvantageFunction;
}

/**
 * The estimator `algorithm.advantage` names, with algorithm.advantage_options validated. A user
 * module's options are passed through as they are (the function validates its own). Throws
 * AlgorithmConfigError naming the field, or UserModuleError for a module that cannot be loaded.
 */
export async function resolveAdvantageEstimator(algorithm: Algorithm): Promise<ResolvedEstimator> {
  const spec = algorithm.advantage;
  if (typeof spec !== 'string') {
    const compute = (await loadUserExport('advantage', spec.module, spec.export)) as AdvantageFunction;
    return { name: `${spec.module}#${spec.export}`, options: algorithm.advantage_options, compute };
  }
  const estimator = estimators.get(spec);
  if (!estimator) throw new AlgorithmConfigError('algorithm.advantage', `unknown estimator ${JSON.stringify(spec)}: use one of ${advantageEstimatorNames().join(', ')}, or { "module": "<path>", "export": "<name>" } for your own`);
  const options = registeredOptions(estimator.options, algorithm.advantage_options, 'algorithm.advantage_options', `estimator "${spec}"`);
  return { name: spec, options, compute: estimator.compute };
}

/** One scored sample of a train batch, as the advantages need it. */
export interface BatchSample {
  /** Samples with the same key were generated for the same prompt (one group). */
  groupKey: string;
  reward: number;
  /** Response tokens only; needed when the KL term shapes the reward. */
  rolloutLogprobs?: ArrayLike<number> | null;
  refLogprobs?: ArrayLike<number> | null;
}

/**
 * Advantages of one train batch, in the batch's order: with kl_mode "reward" the reward is first
 * shaped to r - kl_coef * sum_t k(logp_t, ref_logp_t), then the estimator runs over the batch's
 * prompt groups. A pure function of the batch, so a retried step computes the same advantages.
 */
export function batchAdvantages(estimator: ResolvedEstimator, algorithm: Algorithm, samples: readonly BatchSample[]): number[] {
  let rewards = samples.map((s) => s.reward);
  if (algorithm.kl_mode === 'reward' && algorithm.kl_coef > 0) {
    const missing = samples.findIndex((s) => !s.rolloutLogprobs || !s.refLogprobs);
    if (missing >= 0) throw new Error(`sample ${missing} of the batch has no ${samples[missing].rolloutLogprobs ? 'reference' : 'rollout'} log-probs, which kl_mode "reward" needs`);
    rewards = klPenaltyRewards(rewards, samples.map((s) => s.rolloutLogprobs!), samples.map((s) => s.refLogprobs!), algorithm.kl_coef, algorithm.kl_estimator);
  }
  const groups = new Map<string, number[]>();
  samples.forEach((s, i) => {
    const members = groups.get(s.groupKey);
    if (members) members.push(i);
    else groups.set(s.groupKey, [i]);
  });
  const out = estimator.compute({ rewards, groups: [...groups.values()], options: estimator.options });
  if (!Array.isArray(out) || out.length !== samples.length || !out.every(Number.isFinite)) {
    throw new Error(`advantage estimator ${estimator.name} returned ${Array.isArray(out) ? `${out.length} values` : String(out)} for ${samples.length} samples: return one finite number per reward`);
  }
  return out;
}
