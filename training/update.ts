// The RL core of a train step, shared by the train activity and the in-process loop: from a claimed
// batch of scored samples to advantages (training/advantages.ts), training sequences with their
// loss masks, and one policy-gradient update with the run's loss (training/losses.ts), with the
// step's metrics named as the metrics table records them. No database, no Temporal: samples in,
// update and metrics out. Also the reference policy's log-probs, which both paths write to samples.
import type { RunConfig } from '../config/run-config';
import { batchTotals, staleTokenMask, type BatchTotals } from '../engines/rl/losses';
import { trainSequenceFromSample, type ScoredSequence, type TrainingLoss, type TrainSequence, type TrainStepMetrics } from '../engines/trainer';
import { batchAdvantages, resolveAdvantageEstimator, type BatchSample, type ResolvedEstimator } from './advantages';
import { resolvePolicyLoss, zeroAdvantageHasGradient } from './losses';
import { countsZeroAdvantageSamples } from '../config/loss-aggregations';
import type { TrainSample } from './sample-buffer';
import type { SequenceMedia } from '../engines/media/model-inputs';
import type { MediaPrompts } from '../rollout/media-prompts';

/** A sample's media loaded and processed for the model's encoders (its `media` field holds only their ids). */
interface WithSequenceMedia {
  sequenceMedia?: SequenceMedia;
}

/**
 * The samples with their media loaded (by id, from the run's media store or the process's cache)
 * and processed as `sequenceMedia`; samples without media pass unchanged.
 */
export async function withSequenceMedia<S extends { media?: readonly string[] | null }>(samples: readonly S[], media: MediaPrompts | undefined): Promise<Array<S & WithSequenceMedia>> {
  if (!samples.some((s) => s.media?.length)) return [...samples];
  if (!media) throw new Error('samples reference media but the run has no media store: the model has no vision or audio encoder');
  return Promise.all(samples.map(async (s) => (s.media?.length ? { ...s, sequenceMedia: await media.fromIds(s.media) } : s)));
}

type Algorithm = RunConfig['algorithm'];

/** The run's advantage estimator and policy loss, resolved once (a user module loads once). */
export interface UpdateRule {
  algorithm: Algorithm;
  estimator: ResolvedEstimator;
  loss: TrainingLoss;
  /** The run's rollout.max_new_tokens: the dr_grpo aggregation's L (TRL's max_completion_length). */
  maxCompletionTokens?: number;
}

export async function resolveUpdateRule(algorithm: Algorithm, options: { maxCompletionTokens?: number } = {}): Promise<UpdateRule> {
  const [estimator, loss] = await Promise.all([resolveAdvantageEstimator(algorithm), resolvePolicyLoss(algorithm)]);
  return { algorithm, estimator, loss, ...(options.maxCompletionTokens !== undefined ? { maxCompletionTokens: options.maxCompletionTokens } : {}) };
}

function batchSample(s: TrainSample): BatchSample {
  if (s.reward === null) throw new Error(`sample ${s.iteration}/${s.groupIndex}/${s.sampleIndex} was selected for training without a reward`);
  return { groupKey: `${s.iteration}/${s.groupIndex}`, reward: s.reward, rolloutLogprobs: s.rolloutLogprobs, refLogprobs: s.refLogprobs };
}

/** The batch's advantages, in its order: a pure function of the claimed set, so a retry computes the same. */
export function stepAdvantages(rule: UpdateRule, samples: readonly TrainSample[]): number[] {
  return batchAdvantages(rule.estimator, rule.algorithm, samples.map(batchSample));
}

/** A sample's loss mask over its response tokens, with algorithm.max_token_staleness's stale tokens masked out. */
function sampleLossMask(s: TrainSample, fromVersion: number, maxTokenStaleness: number | undefined): ArrayLike<number> {
  if (maxTokenStaleness === undefined) return s.lossMask;
  const fresh = staleTokenMask(s.tokenVersions ?? s.responseTokens.map(() => s.policyVersion), fromVersion, maxTokenStaleness);
  return Float32Array.from(s.lossMask, (m, t) => m * fresh[t]);
}

/**
 * The totals the step's loss is normalized over: every sample of the batch, those of advantage 0
 * (left out of the sequences when their gradient is 0) included, as TRL counts them.
 */
export function stepBatchTotals(samples: readonly TrainSample[], fromVersion: number, maxTokenStaleness: number | undefined, maxCompletionTokens?: number): BatchTotals {
  return batchTotals(samples.map((s) => sampleLossMask(s, fromVersion, maxTokenStaleness)), maxCompletionTokens);
}

/**
 * Training sequences of the batch; samples without a learning signal (advantage 0) are left out
 * unless `keepZeroAdvantage` (a loss with a KL or entropy term gives them a gradient). Each sample's
 * own loss mask applies, and with algorithm.max_token_staleness tokens generated too many versions
 * before `fromVersion` are masked out too. A sample's `sequenceMedia` goes with it.
 */
export function trainSequences(samples: ReadonlyArray<TrainSample & WithSequenceMedia>, advantages: readonly number[], fromVersion: number, maxTokenStaleness: number | undefined, options: { keepZeroAdvantage?: boolean } = {}): TrainSequence[] {
  return samples
    .map((s, i) => ({ s, advantage: advantages[i] }))
    .filter(({ advantage }) => options.keepZeroAdvantage === true || advantage !== 0)
    .map(({ s, advantage }) => {
      const lossMask = sampleLossMask(s, fromVersion, maxTokenStaleness);
      return trainSequenceFromSample(s.promptTokens, { tokens: s.responseTokens, logprobs: s.rolloutLogprobs ?? [] }, {
        advantage,
        lossMask,
        ...(s.refLogprobs ? { refLogprobs: [...new Array(s.promptTokens.length - 1).fill(0), ...s.refLogprobs] } : {}),
        ...(s.sequenceMedia ? { media: s.sequenceMedia } : {}),
      });
    })
    .filter((seq) => Array.prototype.some.call(seq.lossMask, (m: number) => m > 0));
}

/**
 * How many policy versions behind the trainer each consumed sample was: fromVersion - the version
 * that generated it. Mean, max and a histogram (staleness_hist_<d>: samples d versions old).
 */
export function stalenessMetrics(samples: ReadonlyArray<Pick<TrainSample, 'policyVersion'>>, fromVersion: number): Record<string, number> {
  if (!samples.length) return {};
  const out: Record<string, number> = {};
  let sum = 0;
  let max = 0;
  for (const s of samples) {
    const d = fromVersion - s.policyVersion;
    sum += d;
    max = Math.max(max, d);
    out[`staleness_hist_${d}`] = (out[`staleness_hist_${d}`] ?? 0) + 1;
  }
  return { staleness_mean: sum / samples.length, staleness_max: max, ...out };
}

/**
 * One optimizer step on the sequences with the rule's loss: a local Trainer's trainStep with
 * rule.loss, or a trainer thread's (training/trainer-thread.ts) with rule.algorithm.
 */
export type TrainStepFn = (sequences: readonly TrainSequence[], rule: UpdateRule, batch: BatchTotals | undefined) => Promise<TrainStepMetrics>;

/**
 * One policy-gradient update on the batch through `trainStep`: its metrics, or { trained_samples: 0 }
 * when no sample carries a learning signal (no update is applied). Throws the trainer's
 * NonFiniteUpdateError, applying nothing, when the loss or a gradient is not finite.
 */
export async function computeUpdate(trainStep: TrainStepFn, rule: UpdateRule, samples: readonly TrainSample[], advantages: readonly number[], fromVersion: number): Promise<Record<string, number>> {
  const staleness = rule.algorithm.max_token_staleness;
  const wholeBatch = countsZeroAdvantageSamples(rule.algorithm.loss_aggregation);
  const sequences = trainSequences(samples, advantages, fromVersion, staleness, { keepZeroAdvantage: wholeBatch && zeroAdvantageHasGradient(rule.loss) });
  // No update without a learning signal, as before (zero-advantage samples kept for their KL or entropy term alone make none).
  if (!sequences.some((q) => q.advantages !== 0)) return { trained_samples: 0 };
  const m = await trainStep(sequences, rule, wholeBatch ? stepBatchTotals(samples, fromVersion, staleness, rule.maxCompletionTokens) : undefined);
  return {
    loss: m.loss,
    grad_norm: m.gradNorm,
    lr: m.lr,
    entropy: m.entropy,
    clip_fraction: m.clipFraction ?? 0,
    ratio_mean: m.ratioMean ?? 1,
    trained_samples: sequences.length,
    duration_ms: m.durationMs,
    micro_batches: m.microBatches,
    padded_tokens: m.paddedTokens,
    ...(m.kl !== undefined ? { kl: m.kl } : {}),
    ...(m.lossMetrics.logprobMismatch !== undefined ? { logprob_mismatch: m.lossMetrics.logprobMismatch } : {}),
    ...(m.lossMetrics.importanceWeightMean !== undefined ? { importance_weight_mean: m.lossMetrics.importanceWeightMean } : {}),
    ...(m.lossMetrics.importanceTruncatedFraction !== undefined ? { importance_truncated_fraction: m.lossMetrics.importanceTruncatedFraction } : {}),
  };
}

/** Per response token, the frozen reference policy's log-probs of each sample (the KL term's ref_logprobs), with its `sequenceMedia`. */
export async function referenceLogprobs(reference: { logprobs(sequences: ReadonlyArray<ScoredSequence>): Promise<Float32Array[]> }, samples: ReadonlyArray<{ promptTokens: ArrayLike<number>; responseTokens: ArrayLike<number> } & WithSequenceMedia>): Promise<number[][]> {
  const full = await reference.logprobs(samples.map((s) => ({ tokens: [...Array.from(s.promptTokens), ...Array.from(s.responseTokens)], media: s.sequenceMedia, promptLength: s.promptTokens.length })));
  return samples.map((s, i) => Array.from(full[i].slice(s.promptTokens.length - 1)));
}
