// Checkpoint retention: which policy versions of a run may be deleted. Every train step publishes a
// version, so without this a long run fills the disk. Pure functions; pruneCheckpoints in
// store/checkpoint-registry.ts applies them to the registry and the files.

export interface RetentionPolicy {
  /** checkpoint.every: the versions that are multiples of it are the run's periodic checkpoints. */
  every: number;
  /** checkpoint.keep_last: how many of the newest periodic checkpoints survive. */
  keepLast: number;
  /**
   * The newest `protect` versions (latest - protect < v <= latest) survive whatever they are, because
   * rollout engines may still be reading them: max_staleness + 1. At least 1, so the latest survives.
   */
  protect: number;
}

export interface RetentionInput extends RetentionPolicy {
  /** Every registered version of the run (pruned ones included; order and duplicates do not matter). */
  versions: readonly number[];
  /** The newest published version: the one the protect window ends at. */
  latest: number;
}

function checkInteger(name: string, value: number, min: number, why = ''): void {
  if (!Number.isInteger(value) || value < min) throw new Error(`${name} must be an integer >= ${min}${why}, got ${value}`);
}

export function checkRetentionPolicy(p: RetentionPolicy): void {
  checkInteger('every', p.every, 1);
  checkInteger('keepLast', p.keepLast, 0);
  checkInteger('protect', p.protect, 1, ' (the latest version is always kept)');
}

/**
 * The versions retention keeps, ascending: version 0 (the run's initial policy, also the reference
 * policy of the KL term), the newest `protect` versions up to `latest`, the newest `keepLast`
 * registered versions <= latest that are multiples of `every`, and every version above `latest`
 * (a delayed call with an older `latest` must never delete what a newer step just published).
 *
 * Monotone in `latest`: whatever a call with latest = b keeps, a call with any a < b keeps too, so
 * a stale or retried call never prunes anything a newer call would keep.
 */
export function versionsToKeep(input: RetentionInput): number[] {
  checkRetentionPolicy(input);
  checkInteger('latest', input.latest, 0);
  input.versions.forEach((v) => checkInteger('every registered version', v, 0));
  const { latest, every, keepLast, protect } = input;
  const versions = [...new Set(input.versions)].sort((a, b) => a - b);
  const periodic = versions.filter((v) => v <= latest && v % every === 0);
  const keep = new Set<number>([
    ...versions.filter((v) => v === 0 || v > latest || v > latest - protect),
    ...(keepLast > 0 ? periodic.slice(-keepLast) : []),
  ]);
  return versions.filter((v) => keep.has(v));
}

/** The registered versions retention deletes, ascending: all of `versions` that versionsToKeep does not keep. */
export function versionsToPrune(input: RetentionInput): number[] {
  const keep = new Set(versionsToKeep(input));
  return [...new Set(input.versions)].filter((v) => !keep.has(v)).sort((a, b) => a - b);
}

/** Versions for a message, runs of consecutive ones collapsed: [0, 10, 20, 27, 28, 29, 30] -> "0, 10, 20, 27..30". */
export function formatVersions(versions: readonly number[]): string {
  const sorted = [...new Set(versions)].sort((a, b) => a - b);
  const parts: string[] = [];
  for (let i = 0; i < sorted.length; ) {
    let j = i;
    while (j + 1 < sorted.length && sorted[j + 1] === sorted[j] + 1) j++;
    parts.push(j - i >= 2 ? `${sorted[i]}..${sorted[j]}` : sorted.slice(i, j + 1).join(', '));
    i = j + 1;
  }
  return parts.join(', ');
}
