// Generalized advantage estimation (GAE) over one response's tokens, for PPO with a critic. From
// Schulman et al. 2015, "High-Dimensional Continuous Control Using Generalized Advantage
// Estimation", arXiv 1506.02438, as PPO (Schulman et al. 2017) and verl's
// compute_gae_advantage_return use it: token-level rewards
// r_t = -kl_coef * KL_t plus the final reward on the last response token, the TD residual
// delta_t = r_t + gamma V(s_{t+1}) - V(s_t) (V past the last token is 0), A_t = sum_l (gamma lambda)^l
// delta_{t+l}, and the value targets R_t = A_t + V(s_t). Pure functions of arrays; no tensors.

/** One response's token-level rewards: -klCoef * kl[t] on every token, plus `finalReward` on the last. */
export function tokenLevelRewards(finalReward: number, length: number, kl?: ArrayLike<number>, klCoef = 0): Float64Array {
  if (kl && kl.length !== length) throw new Error(`tokenLevelRewards: kl has ${kl.length} entries for ${length} response tokens`);
  const r = new Float64Array(length);
  if (kl && klCoef !== 0) for (let t = 0; t < length; t++) r[t] = -klCoef * kl[t];
  if (length > 0) r[length - 1] += finalReward;
  return r;
}

/** GAE advantages and returns of one response; rewards and values have one entry per response token. */
export function gaeAdvantages(rewards: ArrayLike<number>, values: ArrayLike<number>, gamma: number, lambda: number): { advantages: Float64Array; returns: Float64Array } {
  const n = rewards.length;
  if (values.length !== n) throw new Error(`gaeAdvantages: ${values.length} values for ${n} rewards: give one value per response token`);
  const advantages = new Float64Array(n);
  let next = 0; // A_{t+1}, 0 past the end
  for (let t = n - 1; t >= 0; t--) {
    const nextValue = t + 1 < n ? values[t + 1] : 0;
    const delta = rewards[t] + gamma * nextValue - values[t];
    next = delta + gamma * lambda * next;
    advantages[t] = next;
  }
  const returns = Float64Array.from(advantages, (a, t) => a + values[t]);
  return { advantages, returns };
}

/**
 * Whitens advantages over every token of the batch (mean 0, std 1; verl's masked_whiten, on by
 * default in PPO): one array per response, normalized together.
 */
export function whitenAdvantages(perResponse: ReadonlyArray<ArrayLike<number>>, eps = 1e-8): Float64Array[] {
  let n = 0;
  let sum = 0;
  for (const a of perResponse) for (let i = 0; i < a.length; i++) (sum += a[i]), n++;
  if (n === 0) return perResponse.map((a) => Float64Array.from(a));
  const mean = sum / n;
  let sq = 0;
  for (const a of perResponse) for (let i = 0; i < a.length; i++) sq += (a[i] - mean) ** 2;
  const std = Math.sqrt(sq / n);
  return perResponse.map((a) => Float64Array.from(a, (x) => (x - mean) / (std + eps)));
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
