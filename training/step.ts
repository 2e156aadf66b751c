// The rules of one RL step, shared by every driver (the workflow's train activity, the colocated
// activity, the in-process loop): the rollout's statistics, the failure-budget verdict (train, skip,
// or fail the run), the reference policy's log-probs attached to samples, then from a claimed batch
// of scored samples to advantages (training/advantages.ts), training sequences with their loss
// masks, and one policy-gradient update with the run's loss (training/losses.ts), with the step's
// metrics named as the metrics table records them. No database, no Temporal: samples in, verdict,
// update and metrics out.
import type { RunConfig } from '../config/run-config';
import { batchTotals, staleTokenMask, type BatchTotals } from '../engines/rl/losses';
import { trainSequenceFromSample, type ScoredSequence, type TrainingLoss, type TrainSequence, type TrainStepMetrics } from '../engines/trainer';
import { batchAdvantages, resolveAdvantageEstimator, type BatchSample, type ResolvedEstimator } from './advantages';
import { resolvePolicyLoss, zeroAdvantageHasGradient } from './losses';
import { criticOf, criticSequences, type ValuesFn } from './critic-step';
import { opdOf, opdSequences } from './opd-step';
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

/** A rollout's statistics: its samples, those whose reward failed, and the reward of the others. */
export interface RolloutStats {
  samples: number;
  failed: number;
  rewardSum: number;
  /** rewardSum over the scored samples (0 when none was scored). */
  rewardMean: number;
}

function withMean(samples: number, failed: number, rewardSum: number): RolloutStats {
  return { samples, failed, rewardSum, rewardMean: rewardSum / Math.max(1, samples - failed) };
}

/** The statistics of a rollout's samples: a sample without a reward failed (its reward threw). */
export function rolloutStats(samples: ReadonlyArray<{ reward?: number | null }>): RolloutStats {
  const scored = samples.filter((s) => s.reward != null);
  return withMean(samples.length, samples.length - scored.length, scored.reduce((a, s) => a + (s.reward as number), 0));
}

/** One iteration's statistics from its slices' (the generate activities'). */
export function mergeRolloutStats(parts: ReadonlyArray<Pick<RolloutStats, 'samples' | 'failed' | 'rewardSum'>>): RolloutStats {
  return withMean(
    parts.reduce((n, p) => n + p.samples, 0),
    parts.reduce((n, p) => n + p.failed, 0),
    parts.reduce((n, p) => n + p.rewardSum, 0),
  );
}

/** The rollout's statistics as the step's metrics (the metrics table's names). */
export function rolloutStatsMetrics(stats: RolloutStats): Record<string, number> {
  return { reward_mean: stats.rewardMean, samples: stats.samples, failed_samples: stats.failed };
}

/** The rollout's statistics back from a step's recorded metrics, when it recorded them. */
export function rolloutStatsFromMetrics(metrics: Record<string, number>): RolloutStats | undefined {
  if (metrics.reward_mean === undefined || metrics.samples === undefined) return undefined;
  const failed = metrics.failed_samples ?? 0;
  return withMean(metrics.samples, failed, metrics.reward_mean * Math.max(1, metrics.samples - failed));
}

/** More of a step's samples failed than train.failure_budget allows: the run fails (FailureBudgetExceeded, non-retryable). */
export class FailureBudgetExceededError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'FailureBudgetExceededError';
  }
}

/** What a failing step's message names: the run's scorers and the first failed sample's error. */
export interface FailureCause {
  /** The modules that score the samples (scorerOf). */
  scorer: string;
  /** The first failed sample ("iteration/group/sample") and its error, when it was looked up. */
  first?: { key: string; error: string };
}

/** The user code and models that can fail a run's samples, as its config names them (or the task's built-in reward). */
export function scorerOf(config: Pick<RunConfig, 'task' | 'reward' | 'env' | 'generate'>): string {
  const parts = [
    ...(config.reward.module ? [`reward.module ${config.reward.module} (export ${config.reward.export})`] : []),
    ...(config.reward.judge ? [`reward.judge from ${config.reward.judge.from}`] : []),
    ...(config.env.module ? [`env.module ${config.env.module} (export ${config.env.export})`] : []),
    ...(config.generate.module ? [`generate.module ${config.generate.module} (export ${config.generate.export})`] : []),
  ];
  return parts.length ? parts.join(', ') : `the built-in reward of task ${config.task}`;
}

/** The longest first error a failure message quotes. */
const QUOTED_ERROR_CHARS = 500;

/**
 * The failure budget's verdict on step `step`'s rollout: 'train'; 'skip' when every sample failed
 * within train.failure_budget (nothing to train on, no version is published, the run goes on); or
 * FailureBudgetExceededError when more failed than the budget allows, naming `cause`'s scorer and
 * quoting its first error when given.
 */
export function stepVerdict(stats: RolloutStats, failureBudget: number, step: number, cause?: FailureCause): 'train' | 'skip' {
  if (stats.failed > failureBudget * stats.samples) {
    const first = cause?.first;
    const quoted = first ? `; the first error (sample ${first.key}): ${first.error.length > QUOTED_ERROR_CHARS ? `${first.error.slice(0, QUOTED_ERROR_CHARS)}...` : first.error}` : '';
    throw new FailureBudgetExceededError(
      `step ${step}: the reward failed on ${stats.failed} of ${stats.samples} samples, over train.failure_budget (${failureBudget})${cause ? `; scored by ${cause.scorer}` : ''}${quoted}; every failed sample's error is in the transfer queue (samples with status 'failed')`,
    );
  }
  return stats.samples > 0 && stats.failed === stats.samples ? 'skip' : 'train';
}

/** Why a step was skipped (stepVerdict 'skip'): its rollout, iteration step - 1, failed entirely. */
export function skipReason(stats: RolloutStats, failureBudget: number, step: number): string {
  return `every one of the ${stats.samples} samples of iteration ${step - 1} failed (train.failure_budget ${failureBudget} allows it)`;
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
export async function computeUpdate(trainStep: TrainStepFn, rule: UpdateRule, samples: readonly TrainSample[], advantages: readonly number[], fromVersion: number, values?: ValuesFn): Promise<Record<string, number>> {
  const staleness = rule.algorithm.max_token_staleness;
  const wholeBatch = countsZeroAdvantageSamples(rule.algorithm.loss_aggregation);
  // algorithm.advantage "gae": per-token advantages from the trainer's values before the update (training/critic-step.ts).
  const critic = criticOf(rule.algorithm);
  if (critic && !values) throw new Error('algorithm.advantage "gae" needs the trainer\'s value pass: pass computeUpdate its values function');
  const withCritic = critic && (await criticSequences(values!, critic, rule.algorithm, samples, fromVersion));
  // algorithm.advantage "opd": per-token reverse KL to the teacher (its log-probs are the samples' refLogprobs; training/opd-step.ts).
  const teacher = opdOf(rule.algorithm);
  const withTeacher = teacher && opdSequences(teacher, samples, advantages, (s, a) => trainSequences([s], [a], fromVersion, staleness, { keepZeroAdvantage: true })[0]);
  const perToken = withCritic || withTeacher;
  const sequences = perToken ? perToken.sequences : trainSequences(samples, advantages, fromVersion, staleness, { keepZeroAdvantage: wholeBatch && zeroAdvantageHasGradient(rule.loss) });
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
    ...(withTeacher ? withTeacher.metrics : {}),
    ...(withCritic ? { ...withCritic.metrics, value_loss: m.lossMetrics.valueLoss, value_clip_fraction: m.lossMetrics.valueClipFraction, value_mean: m.lossMetrics.valueMean, ...(m.valueHeadLr !== undefined ? { value_head_lr: m.valueHeadLr } : {}) } : {}),
  };
}

/** A sample the reference policy's log-probs attach to: its tokens, status, media ids and refLogprobs. */
interface ReferenceRow {
  promptTokens: ArrayLike<number>;
  responseTokens: ArrayLike<number>;
  status?: string;
  media?: readonly string[] | null;
  refLogprobs?: ArrayLike<number> | null;
}

/**
 * Attaches the frozen reference policy's log-probs per response token (the KL term's ref_logprobs)
 * to every in-flight sample (generated or scored: not failed, not consumed) that has none yet, its
 * media loaded for the encoders. Returns the samples it set, in order (a retry skips what is set).
 */
export async function attachReferenceLogprobs<R extends ReferenceRow>(
  reference: { logprobs(sequences: ReadonlyArray<ScoredSequence>): Promise<Float32Array[]> },
  rows: readonly R[],
  media: MediaPrompts | undefined,
): Promise<Array<R & { refLogprobs: number[] }>> {
  const todo = rows.filter((r) => (r.status === undefined || r.status === 'generated' || r.status === 'scored') && r.refLogprobs == null);
  if (!todo.length) return [];
  const withMedia = await withSequenceMedia(todo, media);
  const full = await reference.logprobs(withMedia.map((s) => ({ tokens: [...Array.from(s.promptTokens), ...Array.from(s.responseTokens)], media: s.sequenceMedia, promptLength: s.promptTokens.length })));
  return todo.map((r, i) => Object.assign(r, { refLogprobs: Array.from(full[i].slice(r.promptTokens.length - 1)) }));
}
