// MIS and OPSM, masks for the rollout/trainer mismatch. The policy that generated a sample (the rollout
// engine's log-probs, recorded with it) is not quite the trainer's; these masks compose with any policy
// loss as constant per-token factors:
//   MIS, masked importance sampling (verl's rollout_rs "token" / "geometric" rejection sampling; Liu,
//     Li et al. 2025, "When Speed Kills Stability: Demystifying RL Collapse from the Training-Inference
//     Mismatch"): with rho_t = pi_trainer(y_t) / pi_rollout(y_t), keep a token when lower <= rho_t <=
//     upper ("token"), or a whole sequence when its geometric mean exp(mean_t log rho_t) is in the
//     band ("sequence"); verl's defaults: upper 2 (token) and 1.001 (geometric), lower 1 / upper.
//   OPSM, off-policy sequence masking (DeepSeek-V3.2 report, arXiv 2512.02556; slime's
//     compute_opsm_mask): drop a sequence of negative advantage whose policy drifted, i.e. whose mean
//     (1/|o|) sum_t log(pi_rollout(y_t) / pi_trainer(y_t)) exceeds delta. Tokens are tested by their
//     own advantage's sign, which is the sequence's for a per-sequence advantage.
// A masked token adds 0 to the policy-gradient term and stays in its denominator (slime multiplies its
// pg_loss by the OPSM mask the same way), so the trainer's micro-batch weighting stays exact.
// Every input is a constant here (the trainer's log-probs pass through stop-gradient); shapes as in ./losses.
import * as tf from '@tensorflow/tfjs';
import { aggregateLoss, stopGradient } from './losses';

export type ImportanceMaskLevel = 'token' | 'sequence';

/** What RolloutCorrection falls back to: verl's thresholds, lower = 1 / upper. */
export const DEFAULT_MIS_UPPER: Record<ImportanceMaskLevel, number> = { token: 2, sequence: 1.001 };

export interface RolloutCorrection {
  /** MIS: mask tokens or sequences whose ratio leaves [lower, upper]; 'none': off. */
  mask: 'none' | ImportanceMaskLevel;
  lower?: number;
  upper?: number;
  /** OPSM's delta; absent: OPSM off. */
  opsmDelta?: number;
}

/**
 * [a >= b] as float 0/1. Only GreaterEqual, Cast and arithmetic: the masks multiply the loss, so the
 * trainer's backprop (engines/tfjs-backprop.ts) walks these ops and needs a gradient for each
 * (tfjs has none for Greater, Less or LogicalAnd); their gradients are zero.
 */
function atLeast(a: tf.Tensor | number, b: tf.Tensor | number): tf.Tensor {
  return tf.cast(tf.greaterEqual(a, b), 'float32');
}

/** Sum over each row's valid tokens / their count: [B, T] -> [B, 1]. */
function sequenceMean(values: tf.Tensor, mask: tf.Tensor): tf.Tensor {
  return tf.div(tf.sum(tf.mul(values, mask), -1, true), tf.maximum(tf.sum(mask, -1, true), 1));
}

/**
 * MIS keep-mask [B, T] (1 keep, 0 masked) from logRatio = log pi_trainer - log pi_rollout [B, T]:
 * per token, or per sequence by the geometric mean of its valid tokens' ratios. Compared in log space.
 */
export function maskedImportanceSampling(logRatio: tf.Tensor2D, mask: tf.Tensor2D, level: ImportanceMaskLevel, lower: number, upper: number): tf.Tensor2D {
  if (!(lower > 0 && lower <= upper)) throw new Error(`masked importance sampling band is [${lower}, ${upper}]: it needs 0 < lower <= upper`);
  return tf.tidy(() => {
    const statistic = level === 'token' ? logRatio : tf.add(tf.zerosLike(logRatio), sequenceMean(logRatio, mask));
    return tf.mul(atLeast(statistic, Math.log(lower)), atLeast(Math.log(upper), statistic)) as tf.Tensor2D;
  });
}

/**
 * OPSM keep-mask [B, T]: 0 where the advantage is < 0 and the sequence's mean log(pi_rollout /
 * pi_trainer) over its valid tokens (= mean of -logRatio) is > delta; 1 elsewhere.
 */
export function offPolicySequenceMask(logRatio: tf.Tensor2D, advantages: tf.Tensor2D | tf.Tensor1D, mask: tf.Tensor2D, delta: number): tf.Tensor2D {
  if (!(delta >= 0)) throw new Error(`OPSM delta is ${delta}: it must be >= 0`);
  return tf.tidy(() => {
    const drift = sequenceMean(tf.neg(logRatio), mask);
    const a = advantages.rank === 1 ? tf.expandDims(advantages, 1) : advantages;
    // dropped = [A < 0] * [drift > delta] = (1 - [A >= 0]) * (1 - [delta >= drift])
    const dropped = tf.mul(tf.sub(1, atLeast(a, 0)), tf.sub(1, atLeast(delta, drift)));
    return tf.sub(1, tf.add(tf.zerosLike(logRatio), dropped)) as tf.Tensor2D;
  });
}

/** The combined keep-mask and the fractions of the valid tokens each part masked. */
export type RolloutCorrectionMask = {
  keep: tf.Tensor2D;
  /** Valid tokens masked by either correction. */
  maskedFraction: tf.Scalar;
  misMaskedFraction?: tf.Scalar;
  opsmMaskedFraction?: tf.Scalar;
};

/** True when `correction` masks anything (MIS on, or OPSM's delta set). */
export function rolloutCorrectionActive(correction: RolloutCorrection | undefined): correction is RolloutCorrection {
  return correction !== undefined && (correction.mask !== 'none' || correction.opsmDelta !== undefined);
}

/** MIS and OPSM together: keep = keep_MIS * keep_OPSM, from the trainer's and the rollout's log-probs. */
export function rolloutCorrectionMask(trainerLogprobs: tf.Tensor2D, rolloutLogprobs: tf.Tensor2D, advantages: tf.Tensor2D | tf.Tensor1D, mask: tf.Tensor2D, correction: RolloutCorrection): RolloutCorrectionMask {
  return tf.tidy(() => {
    const logRatio = tf.sub(stopGradient(trainerLogprobs), rolloutLogprobs) as tf.Tensor2D;
    const out: Partial<RolloutCorrectionMask> = {};
    let keep = tf.onesLike(logRatio) as tf.Tensor2D;
    const masked = (k: tf.Tensor2D) => aggregateLoss(tf.sub(1, k), mask, 'token_mean');
    if (correction.mask !== 'none') {
      const upper = correction.upper ?? DEFAULT_MIS_UPPER[correction.mask];
      const mis = maskedImportanceSampling(logRatio, mask, correction.mask, correction.lower ?? 1 / upper, upper);
      out.misMaskedFraction = masked(mis);
      keep = tf.mul(keep, mis);
    }
    if (correction.opsmDelta !== undefined) {
      const opsm = offPolicySequenceMask(logRatio, advantages, mask, correction.opsmDelta);
      out.opsmMaskedFraction = masked(opsm);
      keep = tf.mul(keep, opsm);
    }
    return { ...out, keep, maskedFraction: masked(keep) } as RolloutCorrectionMask;
  });
}
