// Policy-gradient losses as differentiable tfjs functions, in the order the trainer adds them:
// token log-probs, surrogate (PPO clip / GSPO), KL to the reference, entropy bonus, and SFT.
//
// Shapes (B = sequences in the micro-batch, T = padded length, V = vocabulary):
//   logits [B, T, V] float32, targets [B, T] int32: logits[:, t] predicts targets[:, t], so the
//     caller shifts (targets = input ids moved left by one).
//   logprobs, oldLogprobs, refLogprobs [B, T] float32: log-prob of the sampled token.
//   advantages [B, T] float32 (token level), or [B] (one per sequence, broadcast over T).
//   mask [B, T] float32 0/1: 1 on response tokens that carry loss, 0 on prompt and padding.
// Every loss is a quantity to MINIMIZE (the negated objective); metrics come back as tensors
// computed from the same forward pass. They are created inside tf.tidy; a caller that reads them
// after tf.variableGrads/optimizer.minimize must tf.keep them inside its closure.
//
// No backend has a gradient for gatherND, so the sampled token's log-prob is picked with a one-hot
// multiply-and-sum, which is differentiable everywhere (cpu, wasm, tfjs-node).
// The math only: the registry that names these losses for a run (and loads user losses) is
// training/losses.ts, since engines/ may not import user modules or the run config.
import * as tf from '@tensorflow/tfjs';
import { klTensor, LOG_RATIO_CLAMP, type KlEstimator } from './kl';
import { canonicalLossAggregation, type LossAggregation } from '../../config/loss-aggregations';

export type { KlEstimator } from './kl';

export { LOSS_AGGREGATIONS, canonicalLossAggregation, lossAggregationWeighting, type LossAggregation, type CanonicalLossAggregation } from '../../config/loss-aggregations';

/**
 * The counts a train step's loss is normalized by: those of the WHOLE batch, samples of advantage 0
 * included (TRL trains every sample of the batch; a zero-advantage one adds 0 to the surrogate's
 * sum but counts in its denominators). The caller may leave such samples out of the forward pass
 * when they have no gradient (no KL or entropy term) and still pass their counts here.
 */
export interface BatchTotals {
  /** Sequences with at least one loss token (TRL: the batch's completions). */
  sequences: number;
  /** Loss tokens over the batch (TRL's num_items_in_batch: its completion tokens). */
  lossTokens: number;
  /** The rollout's max_new_tokens (TRL's max_completion_length): dr_grpo's per-sequence length. */
  maxCompletionTokens?: number;
}

/** BatchTotals of a batch from every sample's loss mask (0/1 per target or per response token). */
export function batchTotals(lossMasks: ReadonlyArray<ArrayLike<number>>, maxCompletionTokens?: number): BatchTotals {
  let sequences = 0;
  let lossTokens = 0;
  for (const mask of lossMasks) {
    let n = 0;
    for (let t = 0; t < mask.length; t++) if (mask[t] > 0) n += 1;
    lossTokens += n;
    if (n > 0) sequences += 1;
  }
  return { sequences, lossTokens, ...(maxCompletionTokens !== undefined ? { maxCompletionTokens } : {}) };
}

/**
 * A micro-batch's weight in the batch loss: its loss tokens / the batch's ("tokens") or its
 * sequences with a loss token / the batch's ("sequences"). Summing share x aggregateLoss(micro-batch)
 * over the micro-batches gives aggregateLoss's formula over the whole batch with the batch's totals
 * as denominators, for the aggregation's weighting (lossAggregationWeighting); the shares sum to
 * less than 1 when the totals count samples left out of the forward pass.
 */
export function microBatchShare(weighting: 'tokens' | 'sequences', microBatch: { lossTokens: number; sequencesWithLoss: number }, batch: BatchTotals): number {
  const total = weighting === 'tokens' ? batch.lossTokens : batch.sequences;
  const part = weighting === 'tokens' ? microBatch.lossTokens : microBatch.sequencesWithLoss;
  if (!(total >= part)) throw new Error(`the batch totals (${batch.lossTokens} loss tokens, ${batch.sequences} sequences) are smaller than one micro-batch's (${microBatch.lossTokens}, ${microBatch.sequencesWithLoss}): pass the totals of the whole batch`);
  return part === 0 ? 0 : part / total;
}

/**
 * Token losses l [B, T] and mask m [B, T] to one loss, by TRL's GRPOTrainer loss_type names. Over
 * the rows given (a micro-batch, or the whole batch), with N = sum(m) its loss tokens, S its rows with
 * at least one loss token (rows without one are padding) and L = maxCompletionTokens:
 *   dapo (= token_mean): sum(l * m) / N. TRL divides by the global batch's completion tokens; with
 *     microBatchShare's "tokens" weighting over the batch's totals the trainer's sum is exactly that.
 *   bnpo: the same here. TRL divides by the tokens of its local batch (one device, one accumulation
 *     step) and averages those; Relax's trainer computes the whole batch's gradient in one process,
 *     so its local batch is the batch.
 *   grpo (= sequence_mean): sum_i [ sum_t(l * m) / sum_t(m) ] / S (the original GRPO; GSPO).
 *   dr_grpo: sum(l * m) / (S * L), L a constant (Dr. GRPO's fix for the length bias of grpo).
 *   sequence_sum_norm: sum(l * m) / (B * T), T the padded length of these rows (Relax's earlier
 *     stand-in for dr_grpo; T varies with the micro-batch).
 */
export function aggregateLoss(perToken: tf.Tensor, mask: tf.Tensor, aggregation: LossAggregation, options: { maxCompletionTokens?: number } = {}): tf.Scalar {
  const a = canonicalLossAggregation(aggregation);
  const L = options.maxCompletionTokens;
  if (a === 'dr_grpo' && !(L !== undefined && Number.isInteger(L) && L >= 1)) {
    throw new Error(`dr_grpo divides by the maximum completion length: pass maxCompletionTokens (the run's rollout.max_new_tokens), got ${L}`);
  }
  return tf.tidy(() => {
    const masked = tf.mul(perToken, mask);
    const sequencesWithLoss = (tokens: tf.Tensor) => tf.sum(tf.cast(tf.greater(tokens, 0), 'float32'));
    switch (a) {
      case 'dapo':
      case 'bnpo':
        return tf.div(tf.sum(masked), tf.maximum(tf.sum(mask), 1)) as tf.Scalar;
      case 'grpo': {
        const tokens = tf.sum(mask, -1);
        const perSequence = tf.div(tf.sum(masked, -1), tf.maximum(tokens, 1));
        return tf.div(tf.sum(perSequence), tf.maximum(sequencesWithLoss(tokens), 1)) as tf.Scalar;
      }
      case 'dr_grpo':
        return tf.div(tf.sum(masked), tf.mul(tf.maximum(sequencesWithLoss(tf.sum(mask, -1)), 1), L!)) as tf.Scalar;
      case 'sequence_sum_norm':
        return tf.div(tf.sum(masked), mask.size) as tf.Scalar;
    }
  });
}

/** Identity forward, zero gradient (tfjs has no tf.stopGradient). */
export const stopGradient: (x: tf.Tensor) => tf.Tensor = tf.customGrad((...inputs) => {
  const x = inputs[0] as tf.Tensor;
  return { value: x.clone(), gradFunc: (dy: tf.Tensor) => tf.zerosLike(dy) };
});

/** Vocabularies above this are normalized with a two-level sum (see logSoftmaxLargeVocab). */
const LARGE_VOCAB = 1024;
const SUM_BLOCK = 128;

/**
 * Log-softmax over a large last axis, summing exp() in blocks of SUM_BLOCK and then the block sums.
 * One running float32 sum over ~50k mostly tiny probabilities drops each term below half an ulp of
 * the total: a systematic error of ~1e-4 in every log-prob of a 49,152-token vocabulary, where the
 * two-level sum stays near 1e-6. (The max is subtracted first, as in tf.logSoftmax.)
 */
function logSoftmaxLargeVocab(logits: tf.Tensor3D): tf.Tensor3D {
  const [B, T, V] = logits.shape;
  const shifted = tf.sub(logits, stopGradient(tf.max(logits, -1, true)));
  const blocks = Math.ceil(V / SUM_BLOCK);
  let e = tf.exp(shifted);
  if (blocks * SUM_BLOCK !== V) e = tf.pad(e, [[0, 0], [0, 0], [0, blocks * SUM_BLOCK - V]]);
  const total = tf.sum(tf.sum(tf.reshape(e, [B, T, blocks, SUM_BLOCK]), -1), -1, true);
  return tf.sub(shifted, tf.log(total)) as tf.Tensor3D;
}

/** Log-softmax over the vocabulary, [B, T, V] -> [B, T, V] (a two-level sum on large vocabularies). */
export function vocabLogSoftmax(logits: tf.Tensor3D): tf.Tensor3D {
  return tf.tidy(() => (logits.shape[2] > LARGE_VOCAB ? logSoftmaxLargeVocab(logits) : (tf.logSoftmax(logits) as tf.Tensor3D)));
}

/** The log-prob of each target token from a log-softmax: [B, T, V] x [B, T] int32 -> [B, T]. */
export function targetLogprobs(logSoftmax: tf.Tensor3D, targets: tf.Tensor2D): tf.Tensor2D {
  return tf.tidy(() => tf.sum(tf.mul(logSoftmax, tf.oneHot(tf.cast(targets, 'int32'), logSoftmax.shape[2])), -1) as tf.Tensor2D);
}

/** Log-softmax of the logits at the target token: [B, T, V] x [B, T] int32 -> [B, T]. */
export function tokenLogprobs(logits: tf.Tensor3D, targets: tf.Tensor2D): tf.Tensor2D {
  return tf.tidy(() => targetLogprobs(vocabLogSoftmax(logits), targets));
}

/** Masked mean negative log-likelihood of the targets (token_mean). */
export function sftCrossEntropy(logits: tf.Tensor3D, targets: tf.Tensor2D, mask: tf.Tensor2D): tf.Scalar {
  return tf.tidy(() => tf.neg(aggregateLoss(tokenLogprobs(logits, targets), mask, 'token_mean')));
}

export interface PolicyLossInput {
  logprobs: tf.Tensor2D;
  oldLogprobs: tf.Tensor2D;
  advantages: tf.Tensor2D | tf.Tensor1D;
  mask: tf.Tensor2D;
  /** The ratio is clipped to [1 - clipLow, 1 + clipHigh]; clipHigh > clipLow is DAPO's clip-higher. */
  clipLow: number;
  clipHigh: number;
  aggregation?: LossAggregation;
  /** dr_grpo's L (the run's rollout.max_new_tokens); required by that aggregation only. */
  maxCompletionTokens?: number;
  /**
   * Per-token importance weights multiplying the clipped surrogate (constants: no gradient flows
   * through them); see behaviorImportanceWeights. Absent: 1.
   */
  weights?: tf.Tensor2D;
}

// A type alias, not an interface, so tf.tidy accepts it as a TensorContainer.
export type PolicyLossOutput = {
  loss: tf.Scalar;
  /** Fraction of valid tokens whose clipped branch is active (their gradient is zero). */
  clipFraction: tf.Scalar;
  /** Token-level ratio pi/pi_old [B, T] (for GSPO: the sequence ratio repeated over the tokens). */
  ratio: tf.Tensor2D;
  /** Mean ratio over valid tokens. */
  ratioMean: tf.Scalar;
  /** Mean over valid tokens of oldLogprobs - logprobs: a k1 estimate of KL(pi_old || pi). */
  approxKl: tf.Scalar;
};

function checkClip(clipLow: number, clipHigh: number): void {
  if (!(clipLow >= 0 && clipLow <= 1) || !(clipHigh >= 0)) {
    throw new Error(`clip range is [1 - ${clipLow}, 1 + ${clipHigh}]: clipLow must be in [0, 1] and clipHigh >= 0`);
  }
}

function tokenAdvantages(advantages: tf.Tensor): tf.Tensor {
  return advantages.rank === 1 ? tf.expandDims(advantages, 1) : advantages;
}

/**
 * The pessimistic clipped surrogate shared by PPO and GSPO: per token
 * max(-A * ratio, -A * clip(ratio, 1 - clipLow, 1 + clipHigh)).
 */
function clippedSurrogate(
  logRatio: tf.Tensor,
  input: PolicyLossInput,
  defaultAggregation: LossAggregation,
): PolicyLossOutput {
  const { mask, clipLow, clipHigh } = input;
  const advantages = tokenAdvantages(input.advantages);
  const ratio = tf.exp(tf.clipByValue(logRatio, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)) as tf.Tensor2D;
  const unclipped = tf.neg(tf.mul(advantages, ratio));
  const clipped = tf.neg(tf.mul(advantages, tf.clipByValue(ratio, 1 - clipLow, 1 + clipHigh)));
  const surrogate = tf.maximum(unclipped, clipped);
  const perToken = input.weights ? tf.mul(stopGradient(input.weights), surrogate) : surrogate;
  const loss = aggregateLoss(perToken, mask, input.aggregation ?? defaultAggregation, { maxCompletionTokens: input.maxCompletionTokens });
  const clipFraction = aggregateLoss(tf.cast(tf.greater(clipped, unclipped), 'float32'), mask, 'token_mean');
  const ratioMean = aggregateLoss(stopGradient(ratio), mask, 'token_mean');
  const approxKl = aggregateLoss(stopGradient(tf.sub(input.oldLogprobs, input.logprobs)), mask, 'token_mean');
  return { loss, clipFraction, ratio, ratioMean, approxKl };
}

/**
 * PPO clipped surrogate (Schulman et al. 2017) with separate low/high clip (DAPO clip-higher,
 * Yu et al. 2025). Token ratio r_t = exp(logprobs - oldLogprobs). Default aggregation dapo (token mean).
 */
export function ppoClipLoss(input: PolicyLossInput): PolicyLossOutput {
  checkClip(input.clipLow, input.clipHigh);
  return tf.tidy(() => clippedSurrogate(tf.sub(input.logprobs, input.oldLogprobs), input, 'dapo'));
}

/**
 * GSPO (Zheng et al. 2025): the importance ratio is per sequence,
 *   s_i = exp( sum_t m_t (logp_t - oldLogp_t) / sum_t m_t ),
 * clipped as a whole (the paper's ranges are tiny, e.g. clipLow 3e-4, clipHigh 4e-4). Implemented in
 * the paper's GSPO-token form, s_{i,t} = sg[s_i] * pi(y_t) / sg[pi(y_t)]: its value equals s_i at
 * every token and, with a per-sequence advantage and grpo aggregation (the default), its
 * gradient equals GSPO's; a token-level advantage [B, T] gives GSPO-token.
 */
export function gspoLoss(input: PolicyLossInput): PolicyLossOutput {
  checkClip(input.clipLow, input.clipHigh);
  return tf.tidy(() => {
    const { logprobs, oldLogprobs, mask } = input;
    const tokens = tf.maximum(tf.sum(mask, -1, true), 1);
    const sequenceLogRatio = tf.div(tf.sum(tf.mul(tf.sub(logprobs, oldLogprobs), mask), -1, true), tokens);
    const logRatio = tf.add(tf.sub(logprobs, stopGradient(logprobs)), stopGradient(sequenceLogRatio));
    return clippedSurrogate(logRatio, input, 'grpo');
  });
}

/**
 * Off-policy correction for samples the rollout engine generated under another policy than the
 * trainer's (stale versions in async mode, or the engines' numeric mismatch):
 *   w_t = min(pi_prox(y_t) / pi_behav(y_t), cap)
 * pi_behav is the rollout engine's log-prob (recorded with the sample); pi_prox the proximal policy,
 * the trainer's policy before this update. The PPO ratio is then taken against pi_prox instead of
 * pi_behav and the surrogate multiplied by w (constants):
 *   - decoupled PPO (Hilton et al. 2022, "Batch size-invariance for policy optimization"; AReaL, Fu et
 *     al. 2025): cap Infinity, or AReaL's optional cap;
 *   - truncated importance sampling (TIS; Yao et al. 2025, "Your efficient RL framework secretly
 *     brings you off-policy RL training"): cap C (e.g. 2).
 * Relax applies one optimizer update per batch, so pi_prox is the trainer's own forward pass:
 * proxLogprobs = stop_gradient(logprobs) (recomputing it with a separate pass would give the same
 * numbers). Returns the weights and the proximal log-probs to use as the ratio's denominator.
 */
export function behaviorImportanceWeights(
  logprobs: tf.Tensor2D,
  behaviorLogprobs: tf.Tensor2D,
  cap: number = Infinity,
): { weights: tf.Tensor2D; proxLogprobs: tf.Tensor2D } {
  if (!(cap > 0)) throw new Error(`importance weight cap is ${cap}: it must be > 0 (Infinity for none)`);
  const proxLogprobs = stopGradient(logprobs) as tf.Tensor2D;
  const logWeights = tf.clipByValue(tf.sub(proxLogprobs, behaviorLogprobs), -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP);
  const raw = tf.exp(logWeights) as tf.Tensor2D;
  const weights = Number.isFinite(cap) ? (tf.minimum(raw, tf.scalar(cap)) as tf.Tensor2D) : raw;
  return { weights, proxLogprobs };
}

/**
 * Masks tokens generated by a policy version more than `maxStaleness` versions before the trainer's
 * (`currentVersion`): 0 there, 1 elsewhere. tokenVersions holds one version per response token.
 */
export function staleTokenMask(tokenVersions: ArrayLike<number>, currentVersion: number, maxStaleness: number): Float32Array {
  if (!Number.isInteger(maxStaleness) || maxStaleness < 0) throw new Error(`maxStaleness is ${maxStaleness}: pass a non-negative integer`);
  const out = new Float32Array(tokenVersions.length);
  for (let t = 0; t < tokenVersions.length; t++) out[t] = currentVersion - tokenVersions[t] <= maxStaleness ? 1 : 0;
  return out;
}

/** KL(pi || ref) as a loss term (GRPO puts coef * this in the loss; k3 is its choice). */
export function klLoss(
  logprobs: tf.Tensor2D,
  refLogprobs: tf.Tensor2D,
  mask: tf.Tensor2D,
  estimator: KlEstimator,
  aggregation: LossAggregation = 'dapo',
  options: { maxCompletionTokens?: number } = {},
): tf.Scalar {
  return tf.tidy(() => {
    return aggregateLoss(klTensor(logprobs, refLogprobs, estimator), mask, aggregation, options);
  });
}

/** Entropy of the next-token distribution at every position: [B, T, V] -> [B, T], in nats. */
export function tokenEntropy(logits: tf.Tensor3D): tf.Tensor2D {
  return tf.tidy(() => entropyFromLogSoftmax(tf.logSoftmax(logits) as tf.Tensor3D));
}

/** Per-token entropy -sum_v p log p from a log-softmax [B, T, V] -> [B, T] (the trainer computes the log-softmax once). */
export function entropyFromLogSoftmax(logSoftmax: tf.Tensor3D): tf.Tensor2D {
  return tf.tidy(() => tf.neg(tf.sum(tf.mul(tf.exp(logSoftmax), logSoftmax), -1)) as tf.Tensor2D);
}

/** Mean entropy over valid tokens (token_mean). */
export function entropyFromLogits(logits: tf.Tensor3D, mask: tf.Tensor2D): tf.Scalar {
  return tf.tidy(() => aggregateLoss(tokenEntropy(logits), mask, 'token_mean'));
}

/** The entropy bonus as a loss term: -coef * entropy, so minimizing the loss raises entropy. */
export function entropyBonus(logits: tf.Tensor3D, mask: tf.Tensor2D, coef: number): tf.Scalar {
  return tf.tidy(() => tf.mul(entropyFromLogits(logits, mask), -coef));
}
