// DAPO's rollout-side pieces as pure functions on plain numbers, as arXiv 2503.14476 defines them.
// The paper: Yu et al. 2025, "DAPO: An Open-Source LLM Reinforcement Learning System at Scale". Its
//   dynamic sampling (section 3.2): a group trains only when 0 < #correct < G, i.e. its task rewards
//     are not all equal (std > 0); groups without that signal are filtered and more are generated
//     until the batch is full (rollout/producers.ts draws the extra rounds, capped);
//   overlong reward shaping (eq. 13): R_len(y) = 0 if |y| <= L_max - L_cache,
//     ((L_max - L_cache) - |y|) / L_cache if L_max - L_cache < |y| <= L_max, -1 if |y| > L_max;
//   overlong filtering (section 3.4): a truncated sample's loss mask is zeroed.
// Token-level aggregation (loss_aggregation "dapo") and clip-higher (clip_high) live in the loss.

/** DAPO's soft overlong punishment R_len(y) for a response of `length` tokens (eq. 13); in [-1, 0]. */
export function overlongPenalty(length: number, maxTokens: number, cacheTokens: number): number {
  if (!(Number.isInteger(cacheTokens) && cacheTokens >= 1 && cacheTokens <= maxTokens)) {
    throw new Error(`overlong shaping: cache_tokens must be an integer in [1, max_new_tokens=${maxTokens}]; got ${cacheTokens}`);
  }
  const free = maxTokens - cacheTokens;
  if (length <= free) return 0;
  if (length <= maxTokens) return (free - length) / cacheTokens;
  return -1;
}

/** Dynamic sampling's test: a group's scored rewards differ (std > 0); failed samples (null) do not count. */
export function groupHasSignal(rewards: ReadonlyArray<number | null>): boolean {
  const scored = rewards.filter((r): r is number => r !== null);
  return scored.length > 1 && Math.max(...scored) > Math.min(...scored);
}

/** What dynamic sampling kept of the groups it generated, and what it dropped. */
export interface DynamicSelection<G> {
  /** Groups with signal, in generation order, at most `wanted`; then zero-signal ones when the cap left it short. */
  kept: G[];
  /** Zero-signal groups dropped (the metric DAPO filters). */
  filtered: number;
  /** Zero-signal groups kept to fill a batch the round cap left short of signal. */
  filledWithoutSignal: number;
}

/**
 * Keeps the first `wanted` groups with signal; when fewer have it (the cap on extra rounds was
 * hit), the batch is filled with the first zero-signal groups so it keeps its size (they train as
 * before: advantage 0). Signal groups past `wanted` (a round's surplus) are not counted as filtered.
 */
export function selectSignalGroups<G>(groups: readonly G[], wanted: number, hasSignal: (g: G) => boolean): DynamicSelection<G> {
  const withSignal = groups.filter(hasSignal).slice(0, wanted);
  const without = groups.filter((g) => !hasSignal(g));
  const fill = without.slice(0, Math.max(0, wanted - withSignal.length));
  const keep = new Set<G>([...withSignal, ...fill]);
  return { kept: groups.filter((g) => keep.has(g)), filtered: without.length - fill.length, filledWithoutSignal: fill.length };
}

/** Whether generation stops: enough groups with signal, or no extra round left. */
export function dynamicSamplingDone(signalGroups: number, wanted: number, roundsDone: number, maxExtraRounds: number): boolean {
  return signalGroups >= wanted || roundsDone > maxExtraRounds;
}

/** A response as the overlong rules see it: its policy tokens' mask, its reward, whether it was cut off. */
export interface OverlongInput {
  lossMask: readonly number[];
  reward: number | null;
  /** It hit max_new_tokens (or the context) without a stop token. */
  truncated: boolean;
}

export interface OverlongOptions {
  maxTokens: number;
  /** Shaping on: L_cache and the penalty's factor. */
  penalty?: { cacheTokens: number; factor: number };
  /** Overlong filtering on: truncated responses are not trained on. */
  filter: boolean;
}

/**
 * The overlong rules applied to one response: the reward plus factor x R_len(|y|) (|y| = its policy
 * tokens, the loss mask's ones), and with `filter` a truncated response's loss mask all zeros. A
 * failed sample (reward null) keeps its null reward. `penalty` is the shaping term added (0 if none).
 */
export function applyOverlong(s: OverlongInput, o: OverlongOptions): { reward: number | null; lossMask: number[]; penalty: number } {
  const length = s.lossMask.reduce((n, m) => n + (m > 0 ? 1 : 0), 0);
  const penalty = o.penalty && s.reward !== null ? o.penalty.factor * overlongPenalty(length, o.maxTokens, o.penalty.cacheTokens) : 0;
  return {
    reward: s.reward === null ? null : s.reward + penalty,
    lossMask: o.filter && s.truncated ? s.lossMask.map(() => 0) : [...s.lossMask],
    penalty,
  };
}

/** A response with no stop token at its end that used every new token it was allowed: truncated. */
export function looksTruncated(responseTokens: readonly number[], policyTokens: number, maxTokens: number, stopTokens: readonly number[]): boolean {
  const last = responseTokens[responseTokens.length - 1];
  return policyTokens >= maxTokens && (last === undefined || !stopTokens.includes(last));
}

/** A rollout slice's DAPO counts; slices add up (sumDapoCounts). */
export interface DapoCounts {
  /** Groups generated in all rounds. */
  groups: number;
  /** Zero-signal groups dropped by dynamic sampling. */
  filteredGroups: number;
  /** Zero-signal groups kept because the cap on extra rounds was hit. */
  filledGroups: number;
  /** Extra generation rounds drawn. */
  extraRounds: number;
  /** Samples kept, of them truncated ones, of them with their loss mask zeroed (overlong filtering). */
  samples: number;
  truncated: number;
  masked: number;
  /** The overlong shaping terms added, summed (<= 0). */
  penaltySum: number;
}

export function sumDapoCounts(parts: ReadonlyArray<DapoCounts | undefined>): DapoCounts | undefined {
  const present = parts.filter((p): p is DapoCounts => p !== undefined);
  if (!present.length) return undefined;
  const keys = Object.keys(present[0]) as Array<keyof DapoCounts>;
  return Object.fromEntries(keys.map((k) => [k, present.reduce((n, p) => n + p[k], 0)])) as unknown as DapoCounts;
}

/** The counts as a step's metrics (the metrics table's names). */
export function dapoMetrics(c: DapoCounts | undefined): Record<string, number> {
  if (!c) return {};
  return {
    dapo_groups_generated: c.groups,
    dapo_filtered_groups: c.filteredGroups,
    dapo_filled_groups: c.filledGroups,
    dapo_extra_rounds: c.extraRounds,
    dapo_truncated_samples: c.truncated,
    dapo_masked_samples: c.masked,
    dapo_overlong_penalty_mean: c.penaltySum / Math.max(1, c.samples),
  };
}
