// PPO with a critic in a train step. After Schulman et al. 2017 (arXiv 1707.06347): the value head's V_old over the claimed
// batch from the trainer's own pass before the update (as verl's critic compute_values, so it holds in
// async mode: the values are the trainer's at fromVersion, whatever version generated the samples),
// token-level rewards (final reward + per-token KL penalty with kl_mode "reward"), GAE (Schulman et
// al. 2015, arXiv 1506.02438; engines/rl/gae.ts) into per-token advantages and returns, optionally
// whitened over the batch, and the training sequences that carry them for the clipped value loss
// (engines/rl/value-loss.ts, added to the policy loss by training/losses.ts).
import * as tf from '@tensorflow/tfjs';
import type { CriticConfig, RunConfig } from '../config/run-config';
import { explainedVariance, gaeAdvantages, tokenLevelRewards, whitenAdvantages } from '../engines/rl/gae';
import { klEstimate } from '../engines/rl/kl';
import { staleTokenMask } from '../engines/rl/losses';
import { trainSequenceFromSample, type ScoredSequence, type TrainingLoss, type TrainSequence } from '../engines/trainer';
import { clippedValueLoss } from '../engines/rl/value-loss';
import type { SequenceMedia } from '../engines/media/model-inputs';
import type { TrainSample } from './sample-buffer';

type Algorithm = RunConfig['algorithm'];

/** The trainer's value pass (Trainer.values / RemoteTrainer.values): per sequence, V(s_t) of every target. */
export type ValuesFn = (sequences: ReadonlyArray<ScoredSequence>) => Promise<Float32Array[]>;

/** algorithm.critic with its defaults, for a run whose advantage is "gae"; undefined otherwise. */
export function criticOf(algorithm: Algorithm): CriticConfig | undefined {
  if (algorithm.advantage !== 'gae') return undefined;
  return { gamma: 1, lambda: 0.95, vf_coef: 0.5, value_clip: 0.2, whiten: true, ...algorithm.critic };
}

/**
 * One response's token-level rewards: its final reward on its last action token, and -kl_coef * KL_t
 * per action token with kl_mode "reward" (action tokens: loss mask 1; environment tokens get none).
 */
export function sampleTokenRewards(s: Pick<TrainSample, 'reward' | 'responseTokens' | 'rolloutLogprobs' | 'refLogprobs' | 'lossMask'>, algorithm: Algorithm): Float64Array {
  const n = s.responseTokens.length;
  if (algorithm.kl_mode !== 'reward' || !(algorithm.kl_coef > 0)) return tokenLevelRewards(s.reward ?? 0, n, undefined, 0, s.lossMask);
  if (!s.rolloutLogprobs || !s.refLogprobs) throw new Error('a sample has no rollout or reference log-probs, which the per-token KL reward of kl_mode "reward" needs');
  const kl = Float64Array.from({ length: n }, (_, t) => klEstimate(s.rolloutLogprobs![t], s.refLogprobs![t], algorithm.kl_estimator));
  return tokenLevelRewards(s.reward ?? 0, n, kl, algorithm.kl_coef, s.lossMask);
}

/** The response part (targets promptLength - 1 ..) of a full-sequence row. */
function responseOf(row: ArrayLike<number>, promptLength: number): Float64Array {
  return Float64Array.from(Array.prototype.slice.call(row, promptLength - 1) as number[]);
}

/** A response row back to a full-sequence row, zeros on the prompt's targets. */
function fullRow(response: ArrayLike<number>, promptLength: number): Float32Array {
  const out = new Float32Array(promptLength - 1 + response.length);
  out.set(Array.from(response), promptLength - 1);
  return out;
}

/**
 * The batch's training sequences with per-token GAE advantages, V_old and returns, and the critic's
 * data metrics (value mean, return mean, explained variance of V_old on the returns). Every sample
 * trains (no advantage-0 filter: its value loss still has a gradient).
 */
export async function criticSequences(values: ValuesFn, critic: CriticConfig, algorithm: Algorithm, samples: ReadonlyArray<TrainSample & { sequenceMedia?: SequenceMedia }>, fromVersion: number): Promise<{ sequences: TrainSequence[]; metrics: Record<string, number> }> {
  const full = await values(samples.map((s) => ({ tokens: [...Array.from(s.promptTokens), ...Array.from(s.responseTokens)], ...(s.sequenceMedia ? { media: s.sequenceMedia } : {}), promptLength: s.promptTokens.length })));
  const oldValues = samples.map((s, i) => responseOf(full[i], s.promptTokens.length));
  // GAE and whitening over the action tokens (the sample's loss mask), as verl's response_mask.
  const gae = samples.map((s, i) => gaeAdvantages(sampleTokenRewards(s, algorithm), oldValues[i], critic.gamma, critic.lambda, s.lossMask));
  const advantages = critic.whiten ? whitenAdvantages(gae.map((g) => g.advantages), samples.map((s) => s.lossMask)) : gae.map((g) => g.advantages);
  const sequences = samples.map((s, i) => {
    const P = s.promptTokens.length;
    const stale = algorithm.max_token_staleness;
    const lossMask = stale === undefined ? s.lossMask : Float32Array.from(s.lossMask, (m, t) => m * staleTokenMask(s.tokenVersions ?? s.responseTokens.map(() => s.policyVersion), fromVersion, stale)[t]);
    const seq = trainSequenceFromSample(Array.from(s.promptTokens), { tokens: Array.from(s.responseTokens), logprobs: Array.from(s.rolloutLogprobs ?? []) }, {
      lossMask,
      ...(s.refLogprobs ? { refLogprobs: [...new Array(P - 1).fill(0), ...Array.from(s.refLogprobs)] } : {}),
      ...(s.sequenceMedia ? { media: s.sequenceMedia } : {}),
    });
    return { ...seq, advantages: fullRow(advantages[i], P), oldValues: fullRow(oldValues[i], P), returns: fullRow(gae[i].returns, P) };
  });
  const flat = (rows: ReadonlyArray<ArrayLike<number>>) => rows.flatMap((r) => Array.from(r));
  const v = flat(oldValues);
  const r = flat(gae.map((g) => g.returns));
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
  return {
    sequences: sequences.filter((q) => Array.prototype.some.call(q.lossMask, (m: number) => m > 0)),
    metrics: { critic_value_mean: mean(v), critic_return_mean: mean(r), critic_explained_var: explainedVariance(v, r), critic_advantage_mean: mean(flat(gae.map((g) => g.advantages))) },
  };
}

/**
 * The run's policy loss plus vf_coef times the clipped value loss (engines/rl/value-loss.ts) of the
 * sequences' V_old and returns, for a run with a critic (criticOf); the loss unchanged otherwise.
 * Reports valueLoss, valueClipFraction and valueMean (of the prediction being trained).
 */
export function withValueLoss(loss: TrainingLoss, algorithm: Algorithm): TrainingLoss {
  const critic = criticOf(algorithm);
  if (!critic) return loss;
  return {
    name: `${loss.name}+value`,
    microBatchWeighting: loss.microBatchWeighting,
    compute(inputs) {
      const out = loss.compute(inputs);
      const { oldValues, returns, mask } = inputs;
      if (!oldValues || !returns) throw new Error('algorithm.advantage "gae": the sequences carry no oldValues/returns (build them with criticSequences)');
      const values = inputs.values;
      if (!values) throw new Error('algorithm.advantage "gae": the model has no value head (valueHead: true in its config)');
      const value = clippedValueLoss({ values, oldValues, returns, mask, clip: critic.value_clip > 0 ? critic.value_clip : Infinity });
      const valueMean = tf.div(tf.sum(tf.mul(values, mask)), tf.maximum(tf.sum(mask), tf.scalar(1))) as tf.Scalar;
      return {
        loss: tf.add(out.loss, tf.mul(value.loss, tf.scalar(critic.vf_coef))) as tf.Scalar,
        metrics: { ...out.metrics, valueLoss: value.loss, valueClipFraction: value.clipFraction, valueMean },
      };
    },
  };
}
