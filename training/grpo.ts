// One RL iteration on the engine library, as plain functions the in-process loop and the durable
// workflow's activities share: rollout groups -> rewards -> advantages -> policy-gradient step.
import type { RunConfig } from '../config/run-config';
import type { GeneratedSample, RolloutEngine, SamplingParams } from '../engines/rollout';
import { drGrpoAdvantages, grpoAdvantages, reinforcePlusPlusAdvantages, rlooAdvantages } from '../engines/rl/advantages';
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

/** Generates groupSize responses per prompt and scores each with the task's reward. */
export async function rolloutGroups(engine: RolloutEngine, task: Task, prompts: readonly TaskPrompt[], groupSize: number, sampling: SamplingParams): Promise<GroupRollout> {
  const tokenizer = task.tokenizer();
  const contexts = prompts.flatMap((p) => {
    const ids = promptTokens(tokenizer, p);
    return Array.from({ length: groupSize }, () => ids);
  });
  const samples = await engine.generate(contexts, sampling);
  const rewards = samples.map((s, i) => task.reward(prompts[Math.floor(i / groupSize)], tokenizer.decode(s.tokens)));
  return { prompts: [...prompts], contexts, samples, rewards };
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
