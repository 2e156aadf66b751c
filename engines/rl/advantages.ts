// Advantage estimators for outcome rewards: one scalar reward per sampled response, no critic.
// Rewards arrive grouped: the `groupSize` responses sampled for one prompt sit next to each other
// (rewards[g * groupSize + j] is response j of prompt g), which is how the rollout engine emits them.
//
// Standard-deviation convention: SAMPLE std (Bessel's correction, divide by n - 1), because both
// verl (`torch.std` in compute_grpo_outcome_advantage, eps 1e-6) and TRL (`rewards.view(-1, G).std()`)
// use torch's default, which is unbiased. `std: 'population'` divides by n instead.
// A group whose rewards are all equal has advantage 0 for every member whatever the convention.
// The math only: the registry that names these for a run (and loads user estimators) is
// training/advantages.ts, since engines/ may not import user modules or the run config.

export type StdConvention = 'sample' | 'population';

export interface NormalizeOptions {
  /** Divide by (std + eps) after centring. Default true. */
  normalizeStd?: boolean;
  /** Added to the std before dividing. Default 1e-6 (verl's). */
  eps?: number;
  /** Default 'sample' (n - 1), as verl and TRL. */
  std?: StdConvention;
}

const DEFAULT_EPS = 1e-6;

function checkRewards(rewards: readonly number[]): void {
  for (let i = 0; i < rewards.length; i++) {
    if (!Number.isFinite(rewards[i])) {
      throw new Error(`reward at index ${i} is ${rewards[i]}: every reward must be a finite number (check the reward function for that sample)`);
    }
  }
}

function checkGroups(rewards: readonly number[], groupSize: number): void {
  if (!Number.isInteger(groupSize) || groupSize < 2) {
    throw new Error(`groupSize is ${groupSize}: a group baseline needs an integer groupSize >= 2 (responses sampled per prompt)`);
  }
  if (rewards.length % groupSize !== 0) {
    throw new Error(
      `rewards has ${rewards.length} entries, not a multiple of groupSize ${groupSize}: pass every response of each group (groups of ${groupSize} adjacent rewards)`,
    );
  }
  checkRewards(rewards);
}

function mean(xs: readonly number[], from: number, to: number): number {
  let s = 0;
  for (let i = from; i < to; i++) s += xs[i];
  return s / (to - from);
}

function std(xs: readonly number[], from: number, to: number, mu: number, convention: StdConvention): number {
  const n = to - from;
  let ss = 0;
  for (let i = from; i < to; i++) ss += (xs[i] - mu) ** 2;
  const denom = convention === 'sample' ? n - 1 : n;
  return denom > 0 ? Math.sqrt(ss / denom) : 0;
}

/**
 * GRPO (Shao et al. 2024): A_i = (r_i - mean(group)) / (std(group) + eps).
 * With normalizeStd false this is Dr.GRPO's r_i - mean(group) (Liu et al. 2025).
 */
export function grpoAdvantages(rewards: readonly number[], groupSize: number, opts: NormalizeOptions = {}): number[] {
  checkGroups(rewards, groupSize);
  const normalizeStd = opts.normalizeStd ?? true;
  const eps = opts.eps ?? DEFAULT_EPS;
  const out = new Array<number>(rewards.length);
  for (let g = 0; g < rewards.length; g += groupSize) {
    const mu = mean(rewards, g, g + groupSize);
    const scale = normalizeStd ? std(rewards, g, g + groupSize, mu, opts.std ?? 'sample') + eps : 1;
    for (let i = g; i < g + groupSize; i++) out[i] = (rewards[i] - mu) / scale;
  }
  return out;
}

/** Dr.GRPO ("GRPO done right", Liu et al. 2025): group-mean baseline, no std division. */
export function drGrpoAdvantages(rewards: readonly number[], groupSize: number): number[] {
  return grpoAdvantages(rewards, groupSize, { normalizeStd: false });
}

/** RLOO (Ahmadian et al. 2024): A_i = r_i - mean of the other groupSize - 1 rewards of the group. */
export function rlooAdvantages(rewards: readonly number[], groupSize: number): number[] {
  checkGroups(rewards, groupSize);
  const out = new Array<number>(rewards.length);
  for (let g = 0; g < rewards.length; g += groupSize) {
    let sum = 0;
    for (let i = g; i < g + groupSize; i++) sum += rewards[i];
    for (let i = g; i < g + groupSize; i++) out[i] = rewards[i] - (sum - rewards[i]) / (groupSize - 1);
  }
  return out;
}

/** Normalizes over the whole batch: (x - mean_batch) / (std_batch + eps). */
function batchNormalize(xs: readonly number[], eps: number, convention: StdConvention): number[] {
  if (xs.length === 0) return [];
  const mu = mean(xs, 0, xs.length);
  const sigma = std(xs, 0, xs.length, mu, convention);
  return xs.map((x) => (x - mu) / (sigma + eps));
}

export interface BatchNormalizeOptions {
  eps?: number;
  std?: StdConvention;
}

/**
 * REINFORCE++ (Hu 2025) for outcome rewards: the batch mean is the baseline and the batch std the
 * scale, A_i = (r_i - mean_batch) / (std_batch + eps). verl whitens per token (each response's
 * reward repeated over its tokens); this is the per-response form, which weighs responses equally.
 */
export function reinforcePlusPlusAdvantages(rewards: readonly number[], opts: BatchNormalizeOptions = {}): number[] {
  checkRewards(rewards);
  return batchNormalize(rewards, opts.eps ?? DEFAULT_EPS, opts.std ?? 'sample');
}
