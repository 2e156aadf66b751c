// KL(policy || reference) estimated from the sampled token only (Schulman, "Approximating KL
// divergence", 2020), on plain numbers: for reward shaping, outside any gradient. The tensor forms
// used as loss terms are klK1/klK2/klK3 in ./losses. With d = refLogp - logp (the log of the
// reference-to-policy ratio at the sampled token):
//   k1 = -d            unbiased, high variance, can be negative
//   k2 = d^2 / 2       biased, low variance, >= 0
//   k3 = e^d - d - 1   unbiased, low variance, >= 0
// Sign convention everywhere: a positive KL is subtracted from the reward (penalty), coef >= 0.

export type KlEstimator = 'k1' | 'k2' | 'k3';

/**
 * k3 exponentiates the log-ratio; verl clamps it to +-20 before that, since e^20 is already a
 * meaningless penalty and e^800 is Infinity. Only k3 is clamped: k1 and k2 cannot overflow.
 */
export const K3_LOG_RATIO_CLAMP = 20;

export function klEstimate(logp: number, refLogp: number, estimator: KlEstimator): number {
  const d = refLogp - logp;
  switch (estimator) {
    case 'k1':
      return -d;
    case 'k2':
      return 0.5 * d * d;
    case 'k3': {
      const c = Math.min(K3_LOG_RATIO_CLAMP, Math.max(-K3_LOG_RATIO_CLAMP, d));
      return Math.exp(c) - c - 1;
    }
  }
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

/**
 * Token-level KL shaping (InstructGPT / PPO-with-critic style): row i has -coef * k_t at every response
 * token and the outcome reward added at the last token. Its sum equals klPenaltyRewards' entry.
 */
export function klPenaltyTokenRewards(
  rewards: readonly number[],
  logprobs: readonly ArrayLike<number>[],
  refLogprobs: readonly ArrayLike<number>[],
  coef: number,
  estimator: KlEstimator,
): Float32Array[] {
  checkShapes(rewards, logprobs, refLogprobs);
  return rewards.map((r, i) => {
    const n = logprobs[i].length;
    if (n === 0) throw new Error(`response ${i} has no tokens: a token-level reward needs at least one response token`);
    const out = new Float32Array(n);
    for (let t = 0; t < n; t++) out[t] = -coef * klEstimate(logprobs[i][t], refLogprobs[i][t], estimator);
    out[n - 1] += r;
    return out;
  });
}
