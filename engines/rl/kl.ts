// KL(policy || reference) estimated from the sampled token only (Schulman, "Approximating KL
// divergence", 2020), defined once (klPerToken) and evaluated on plain numbers for reward shaping
// (klEstimate, klPenaltyRewards) and on tensors for the loss term (klTensor; klLoss in ./losses).
// With d = refLogp - logp (the log of the reference-to-policy ratio at the sampled token):
//   k1 = -d            unbiased, high variance, can be negative
//   k2 = d^2 / 2       biased, low variance, >= 0
//   k3 = e^d - d - 1   unbiased, low variance, >= 0
// Sign convention everywhere: a positive KL is subtracted from the reward (penalty), coef >= 0.

import * as tf from '@tensorflow/tfjs';

export type KlEstimator = 'k1' | 'k2' | 'k3';

/**
 * Log-ratios are clamped to +-20 before exp (k3 here, the policy ratio in ./losses), as verl does:
 * e^20 is already a meaningless penalty and e^800 is Infinity. k1 and k2 cannot overflow.
 */
export const LOG_RATIO_CLAMP = 20;

/** The few operations the estimators need, so one definition serves plain numbers and tensors. */
interface KlOps<T> {
  sub(a: T, b: T): T;
  scale(a: T, s: number): T;
  square(a: T): T;
  exp(a: T): T;
  clamp(a: T, lo: number, hi: number): T;
  addScalar(a: T, s: number): T;
}

const numberOps: KlOps<number> = {
  sub: (a, b) => a - b,
  scale: (a, s) => a * s,
  square: (a) => a * a,
  exp: Math.exp,
  clamp: (a, lo, hi) => Math.min(hi, Math.max(lo, a)),
  addScalar: (a, s) => a + s,
};

const tensorOps: KlOps<tf.Tensor> = {
  sub: (a, b) => tf.sub(a, b),
  scale: (a, s) => tf.mul(a, s),
  square: (a) => tf.square(a),
  exp: (a) => tf.exp(a),
  clamp: (a, lo, hi) => tf.clipByValue(a, lo, hi),
  addScalar: (a, s) => tf.add(a, s),
};

/** The per-token estimate, written once for both number and tensor operands. */
function klPerToken<T>(ops: KlOps<T>, logp: T, refLogp: T, estimator: KlEstimator): T {
  const d = ops.sub(refLogp, logp);
  switch (estimator) {
    case 'k1':
      return ops.scale(d, -1);
    case 'k2':
      return ops.scale(ops.square(d), 0.5);
    case 'k3': {
      const c = ops.clamp(d, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP);
      return ops.addScalar(ops.sub(ops.exp(c), c), -1);
    }
  }
}

/** KL estimate at one sampled token, on plain numbers (reward shaping, outside any gradient). */
export function klEstimate(logp: number, refLogp: number, estimator: KlEstimator): number {
  return klPerToken(numberOps, logp, refLogp, estimator);
}

/** The same estimate elementwise on tensors (the KL loss term; differentiable). */
export function klTensor(logprobs: tf.Tensor, refLogprobs: tf.Tensor, estimator: KlEstimator): tf.Tensor {
  return tf.tidy(() => klPerToken(tensorOps, logprobs, refLogprobs, estimator));
}

function checkShapes(rewards: readonly number[], logprobs: readonly ArrayLike<number>[], refLogprobs: readonly ArrayLike<number>[]): void {
  if (logprobs.length !== rewards.length || refLogprobs.length !== rewards.length) {
    throw new Error(
      `rewards has ${rewards.length} entries, logprobs ${logprobs.length} rows, refLogprobs ${refLogprobs.length} rows: pass one row of response-token log-probs per reward`,
    );
  }
  for (let i = 0; i < rewards.length; i++) {
    if (logprobs[i].length !== refLogprobs[i].length) {
      throw new Error(`logprobs[${i}] has ${logprobs[i].length} tokens but refLogprobs[${i}] has ${refLogprobs[i].length}: both must cover the same response tokens`);
    }
  }
}

/**
 * Sequence-level KL shaping: r_i - coef * sum_t k(logprobs[i][t], refLogprobs[i][t]).
 * Rows hold the log-probs of the RESPONSE tokens only (ragged rows are fine; no prompt, no padding).
 * This is what verl's in-reward KL penalty amounts to for outcome-reward estimators (GRPO, RLOO,
 * REINFORCE++), which sum the token-level rewards of a response.
 */
export function klPenaltyRewards(
  rewards: readonly number[],
  logprobs: readonly ArrayLike<number>[],
  refLogprobs: readonly ArrayLike<number>[],
  coef: number,
  estimator: KlEstimator,
): number[] {
  checkShapes(rewards, logprobs, refLogprobs);
  return rewards.map((r, i) => {
    let kl = 0;
    for (let t = 0; t < logprobs[i].length; t++) kl += klEstimate(logprobs[i][t], refLogprobs[i][t], estimator);
    return r - coef * kl;
  });
}
