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
import * as tf from '@tensorflow/tfjs';
import { klTensor, LOG_RATIO_CLAMP, type KlEstimator } from './kl';

export type { KlEstimator } from './kl';

/**
 * token_mean: sum(l * m) / sum(m) over the whole batch (DAPO; every token weighs the same).
 * sequence_mean: mean over sequences of sum_t(l * m) / sum_t(m) (original GRPO, GSPO); sequences
 *   with no valid token are left out of the mean.
 * sequence_sum_norm: sum(l * m) / (B * T) with T the padded length, a constant (Dr.GRPO's fix for
 *   the length bias of sequence_mean; verl's "seq-mean-token-sum-norm").
 */
export type LossAggregation = 'token_mean' | 'sequence_mean' | 'sequence_sum_norm';

export function aggregateLoss(perToken: tf.Tensor, mask: tf.Tensor, aggregation: LossAggregation): tf.Scalar {
  return tf.tidy(() => {
    const masked = tf.mul(perToken, mask);
    switch (aggregation) {
      case 'token_mean':
        return tf.div(tf.sum(masked), tf.maximum(tf.sum(mask), 1)) as tf.Scalar;
      case 'sequence_mean': {
        const tokens = tf.sum(mask, -1);
        const perSequence = tf.div(tf.sum(masked, -1), tf.maximum(tokens, 1));
        const sequences = tf.sum(tf.cast(tf.greater(tokens, 0), 'float32'));
        return tf.div(tf.sum(perSequence), tf.maximum(sequences, 1)) as tf.Scalar;
      }
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
  const loss = aggregateLoss(perToken, mask, input.aggregation ?? defaultAggregation);
  const clipFraction = aggregateLoss(tf.cast(tf.greater(clipped, unclipped), 'float32'), mask, 'token_mean');
  const ratioMean = aggregateLoss(stopGradient(ratio), mask, 'token_mean');
  const approxKl = aggregateLoss(stopGradient(tf.sub(input.oldLogprobs, input.logprobs)), mask, 'token_mean');
  return { loss, clipFraction, ratio, ratioMean, approxKl };
}

/**
 * PPO clipped surrogate (Schulman et al. 2017) with separate low/high clip (DAPO clip-higher,
 * Yu et al. 2025). Token ratio r_t = exp(logprobs - oldLogprobs). Default aggregation token_mean.
 */
export function ppoClipLoss(input: PolicyLossInput): PolicyLossOutput {
  checkClip(input.clipLow, input.clipHigh);
  return tf.tidy(() => clippedSurrogate(tf.sub(input.logprobs, input.oldLogprobs), input, 'token_mean'));
}

/**
 * GSPO (Zheng et al. 2025): the importance ratio is per sequence,
 *   s_i = exp( sum_t m_t (logp_t - oldLogp_t) / sum_t m_t ),
 * clipped as a whole (the paper's ranges are tiny, e.g. clipLow 3e-4, clipHigh 4e-4). Implemented in
 * the paper's GSPO-token form, s_{i,t} = sg[s_i] * pi(y_t) / sg[pi(y_t)]: its value equals s_i at
 * every token and, with a per-sequence advantage and sequence_mean aggregation (the default), its
 * gradient equals GSPO's; a token-level advantage [B, T] gives GSPO-token.
 */
export function gspoLoss(input: PolicyLossInput): PolicyLossOutput {
  checkClip(input.clipLow, input.clipHigh);
  return tf.tidy(() => {
    const { logprobs, oldLogprobs, mask } = input;
    const tokens = tf.maximum(tf.sum(mask, -1, true), 1);
    const sequenceLogRatio = tf.div(tf.sum(tf.mul(tf.sub(logprobs, oldLogprobs), mask), -1, true), tokens);
    const logRatio = tf.add(tf.sub(logprobs, stopGradient(logprobs)), stopGradient(sequenceLogRatio));
    return clippedSurrogate(logRatio, input, 'sequence_mean');
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
  aggregation: LossAggregation = 'token_mean',
): tf.Scalar {
  return tf.tidy(() => {
    return aggregateLoss(klTensor(logprobs, refLogprobs, estimator), mask, aggregation);
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
