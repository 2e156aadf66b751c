// One RL iteration on the engine library, as plain functions the in-process loop and the durable
// workflow's activities share: rollout groups -> rewards -> advantages -> policy-gradient step.
import type { RunConfig } from '../config/run-config';
import type { GeneratedSample, RolloutEngine, SamplingParams } from '../engines/rollout';
import { drGrpoAdvantages, grpoAdvantages, reinforcePlusPlusAdvantages, rlooAdvantages } from '../engines/rl/advantages';
import { klPenaltyRewards } from '../engines/rl/kl';
import type { TrainingLoss } from '../engines/trainer';
import { policyLoss } from '../engines/trainer-losses';
import type { Task, TaskPrompt } from '../envs/task';
import { promptTokens } from './policy';

export interface GroupRollout {
  prompts: TaskPrompt[];
  /** One context per sample: each prompt's tokens repeated groupSize times, groups adjacent. */
  contexts: number[][];
  samples: GeneratedSample[];
  rewards: number[];
}

export function samplingParams(rollout: RunConfig['rollout'], eosId: number, seed: number): SamplingParams {
  return {
    maxNewTokens: rollout.max_new_tokens,
    temperature: rollout.temperature,
    topP: rollout.top_p,
    topK: rollout.top_k,
    stopTokens: [eosId],
    seed,
  };
}

export type GeneratedGroups = Omit<GroupRollout, 'rewards'>;

/** Generates groupSize responses per prompt (groups adjacent), without scoring them. */
export async function generateGroups(engine: RolloutEngine, task: Task, prompts: readonly TaskPrompt[], groupSize: number, sampling: SamplingParams): Promise<GeneratedGroups> {
  const tokenizer = task.tokenizer();
  const contexts = prompts.flatMap((p) => {
    const ids = promptTokens(tokenizer, p);
    return Array.from({ length: groupSize }, () => ids);
  });
  const samples = await engine.generate(contexts, sampling);
  return { prompts: [...prompts], contexts, samples };
}

/** Generates groupSize responses per prompt and scores each with the task's reward. */
export async function rolloutGroups(engine: RolloutEngine, task: Task, prompts: readonly TaskPrompt[], groupSize: number, sampling: SamplingParams): Promise<GroupRollout> {
  const tokenizer = task.tokenizer();
  const generated = await generateGroups(engine, task, prompts, groupSize, sampling);
  const rewards = generated.samples.map((s, i) => task.reward(prompts[Math.floor(i / groupSize)], tokenizer.decode(s.tokens)));
  return { ...generated, rewards };
}

/** The advantage estimator a run's config names, over rewards laid out group by group. */
export function advantagesFor(estimator: RunConfig['algorithm']['advantage'], rewards: number[], groupSize: number): number[] {
  switch (estimator) {
    case 'grpo':
      return grpoAdvantages(rewards, groupSize);
    case 'dr_grpo':
      return drGrpoAdvantages(rewards, groupSize);
    case 'rloo':
      return rlooAdvantages(rewards, groupSize);
    case 'reinforce_pp':
      return reinforcePlusPlusAdvantages(rewards);
  }
}

/** One scored sample of a train batch, as batchAdvantages needs it. */
export interface BatchSample {
  /** Samples with the same key were generated for the same prompt (one group). */
  groupKey: string;
  reward: number;
  /** Response tokens only; needed when the KL term shapes the reward. */
  rolloutLogprobs?: ArrayLike<number> | null;
  refLogprobs?: ArrayLike<number> | null;
}

/**
 * Advantages of one train batch, in the batch's order. With kl_mode "reward" the reward is first
 * shaped to r - kl_coef * sum_t k(logp_t, ref_logp_t). Group estimators (GRPO, Dr.GRPO, RLOO) work
 * on each prompt group as it is in the batch: a group whose other samples failed their reward is
 * shorter, and a group of one has no baseline, so its advantage is 0. REINFORCE++ normalizes over
 * the whole batch, which only the trainer sees, so this is computed when the batch is chosen.
 */
export function batchAdvantages(algorithm: RunConfig['algorithm'], samples: readonly BatchSample[]): number[] {
  let rewards = samples.map((s) => s.reward);
  if (algorithm.kl_mode === 'reward' && algorithm.kl_coef > 0) {
    const missing = samples.findIndex((s) => !s.rolloutLogprobs || !s.refLogprobs);
    if (missing >= 0) throw new Error(`sample ${missing} of the batch has no ${samples[missing].rolloutLogprobs ? 'reference' : 'rollout'} log-probs, which kl_mode "reward" needs`);
    rewards = klPenaltyRewards(rewards, samples.map((s) => s.rolloutLogprobs!), samples.map((s) => s.refLogprobs!), algorithm.kl_coef, algorithm.kl_estimator);
  }
  if (algorithm.advantage === 'reinforce_pp') return reinforcePlusPlusAdvantages(rewards);
  const groups = new Map<string, number[]>();
  samples.forEach((s, i) => {
    const members = groups.get(s.groupKey);
    if (members) members.push(i);
    else groups.set(s.groupKey, [i]);
  });
  const out = new Array<number>(samples.length).fill(0);
  for (const members of groups.values()) {
    if (members.length < 2) continue;
    const a = advantagesFor(algorithm.advantage, members.map((i) => rewards[i]), members.length);
    members.forEach((i, j) => (out[i] = a[j]));
  }
  return out;
}

/** The policy loss a run's config names. */
export function policyLossFor(algorithm: RunConfig['algorithm']): TrainingLoss {
  return policyLoss({
    algorithm: algorithm.policy_loss === 'gspo' ? 'gspo' : 'ppo',
    clipLow: algorithm.clip_low,
    clipHigh: algorithm.clip_high,
    aggregation: algorithm.loss_aggregation,
    klCoef: algorithm.kl_mode === 'loss' ? algorithm.kl_coef : 0,
    klEstimator: algorithm.kl_estimator,
    entropyCoef: algorithm.entropy_coef,
    offPolicy: algorithm.off_policy,
    ...(algorithm.importance_cap !== undefined ? { importanceCap: algorithm.importance_cap } : {}),
  });
}

/**
 * Indices of the groups that carry a learning signal: a group whose rewards are all equal has zero
 * group-relative advantage everywhere (DAPO's dynamic-sampling filter drops such groups).
 */
export function informativeGroups(rewards: readonly number[], groupSize: number): number[] {
  const keep: number[] = [];
  for (let g = 0; g * groupSize < rewards.length; g++) {
    const group = rewards.slice(g * groupSize, (g + 1) * groupSize);
    if (group.some((r) => r !== group[0])) keep.push(g);
  }
  return keep;
}
