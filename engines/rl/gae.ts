// Generalized advantage estimation (GAE) over one response's tokens, for PPO with a critic. From
// Schulman et al. 2015, "High-Dimensional Continuous Control Using Generalized Advantage
// Estimation", arXiv 1506.02438, as PPO (Schulman et al. 2017) and verl's
// compute_gae_advantage_return use it: token-level rewards
// r_t = -kl_coef * KL_t plus the final reward on the last response token, the TD residual
// delta_t = r_t + gamma V(s_{t+1}) - V(s_t) (V past the last token is 0), A_t = sum_l (gamma lambda)^l
// delta_{t+l}, and the value targets R_t = A_t + V(s_t). Pure functions of arrays; no tensors.

/**
 * One response's token-level rewards: -klCoef * kl[t] on every token, plus `finalReward` on the last.
 * With `mask` (the response's loss mask: 0 on environment/tool tokens, which GAE skips), the KL
 * term only on mask-1 tokens and the final reward on the last of them, as verl's token_level_rewards
 * (score at the last response token, KL times response_mask).
 */
export function tokenLevelRewards(finalReward: number, length: number, kl?: ArrayLike<number>, klCoef = 0, mask?: ArrayLike<number>): Float64Array {
  if (kl && kl.length !== length) throw new Error(`tokenLevelRewards: kl has ${kl.length} entries for ${length} response tokens`);
  if (mask && mask.length !== length) throw new Error(`tokenLevelRewards: mask has ${mask.length} entries for ${length} response tokens`);
  const on = (t: number) => !mask || mask[t] > 0;
  const r = new Float64Array(length);
  if (kl && klCoef !== 0) for (let t = 0; t < length; t++) if (on(t)) r[t] = -klCoef * kl[t];
  let last = length - 1;
  while (last > 0 && !on(last)) last--;
  if (length > 0) r[last] += finalReward;
  return r;
}

/**
 * GAE advantages and returns of one response; rewards and values have one entry per response token.
 * With `mask`, tokens of mask 0 (environment/tool output: not the policy's actions) are skipped as
 * verl's compute_gae_advantage_return skips observation tokens: their value and TD residual do not
 * enter the recursion, and each carries the advantage of the next action token after it.
 */
export function gaeAdvantages(rewards: ArrayLike<number>, values: ArrayLike<number>, gamma: number, lambda: number, mask?: ArrayLike<number>): { advantages: Float64Array; returns: Float64Array } {
  const n = rewards.length;
  if (values.length !== n) throw new Error(`gaeAdvantages: ${values.length} values for ${n} rewards: give one value per response token`);
  if (mask && mask.length !== n) throw new Error(`gaeAdvantages: ${mask.length} mask entries for ${n} rewards: give one per response token`);
  const advantages = new Float64Array(n);
  let nextValue = 0; // V of the next action token, 0 past the end
  let next = 0; // A of the next action token, 0 past the end
  for (let t = n - 1; t >= 0; t--) {
    if (!mask || mask[t] > 0) {
      const delta = rewards[t] + gamma * nextValue - values[t];
      next = delta + gamma * lambda * next;
      nextValue = values[t];
    }
    advantages[t] = next;
  }
  const returns = Float64Array.from(advantages, (a, t) => a + values[t]);
  return { advantages, returns };
}

/**
 * Whitens advantages over the batch's tokens (verl's masked_whiten, on by default in PPO): the
 * mean and the unbiased variance over every token (with `masks`, the mask-1 tokens), then
 * (A - mean) / sqrt(var + eps) on every token. One array per response, normalized together; fewer
 * than two tokens: centred only.
 */
export function whitenAdvantages(perResponse: ReadonlyArray<ArrayLike<number>>, masks?: ReadonlyArray<ArrayLike<number>>, eps = 1e-8): Float64Array[] {
  const counted = (i: number, t: number) => !masks || masks[i][t] > 0;
  let n = 0;
  let sum = 0;
  perResponse.forEach((a, i) => {
    for (let t = 0; t < a.length; t++) if (counted(i, t)) (sum += a[t]), n++;
  });
  if (n === 0) return perResponse.map((a) => Float64Array.from(a));
  const mean = sum / n;
  let sq = 0;
  perResponse.forEach((a, i) => {
    for (let t = 0; t < a.length; t++) if (counted(i, t)) sq += (a[t] - mean) ** 2;
  });
  if (n < 2) return perResponse.map((a) => Float64Array.from(a, (x) => x - mean));
  const scale = 1 / Math.sqrt(sq / (n - 1) + eps);
  return perResponse.map((a) => Float64Array.from(a, (x) => (x - mean) * scale));
}

/** 1 - Var(returns - values) / Var(returns) over every token (1: perfect critic, 0: as good as the mean; NaN-free, 0 when Var(returns) is 0). */
export function explainedVariance(values: ArrayLike<number>, returns: ArrayLike<number>): number {
  const n = returns.length;
  if (n === 0) return 0;
  const variance = (xs: (i: number) => number) => {
    let m = 0;
    for (let i = 0; i < n; i++) m += xs(i);
    m /= n;
    let v = 0;
    for (let i = 0; i < n; i++) v += (xs(i) - m) ** 2;
    return v / n;
  };
  const varR = variance((i) => returns[i]);
  if (varR === 0) return 0;
  return 1 - variance((i) => returns[i] - values[i]) / varR;
}
