// Every seed of a run, in one place: the generator (seededRandom), seed mixing, and the formulas that
// derive each stream (prompts, sampling, environments, user generate functions, SFT batches) from the
// run's `seed`, so the workflow's activities and the in-process loop draw exactly the same numbers on
// every machine and Node version, which Math.random cannot.

/** A seeded uniform [0, 1) generator (seededRandom): weight init, sampling, prompts, environments. */
export function seededRandom(seed: number): () => number {
  if (!Number.isInteger(seed)) throw new Error(`seed is ${seed}: pass an integer seed`);
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Mixes a seed with a string (FNV-1a), so each named stream (a parameter, a sample) gets its own. */
export function mixSeed(seed: number, label: string): number {
  let h = (0x811c9dc5 ^ seed) >>> 0;
  for (let i = 0; i < label.length; i++) h = Math.imul(h ^ label.charCodeAt(i), 0x01000193) >>> 0;
  return h;
}

/** Uniform integer in [lo, hi], both ends included. */
export function randomInt(rng: () => number, lo: number, hi: number): number {
  return lo + Math.floor(rng() * (hi - lo + 1));
}

/** The seed of rollout iteration `iteration`'s prompt set (the same on every worker and retry). */
export function promptSeed(runSeed: number, iteration: number): number {
  return runSeed * 1_000_003 + iteration + 1;
}

/**
 * The seed of one rollout slice (the groups from `firstGroup` on of iteration `iteration`): it seeds
 * sampling, the slice's environments and its user generate calls, so a retried slice reproduces.
 */
export function rolloutSeed(runSeed: number, iteration: number, firstGroup: number): number {
  return runSeed * 7_919 + iteration * 1_009 + firstGroup;
}

/** The seed of extra round `round` (>= 1) of DAPO's dynamic sampling: its prompts (with `promptSeed`'s role) and its slice's sampling. */
export function dynamicSamplingSeed(seed: number, round: number): number {
  return mixSeed(seed, `dapo-round-${round}`);
}

/** The seed a user generate function gets for group `group` of a slice seeded `sliceSeed`. */
export function generateGroupSeed(sliceSeed: number, group: number): number {
  return sliceSeed * 1_009 + group;
}

/** Sampling seed of turn `turn` of a multi-turn episode whose rollout is seeded `sliceSeed`. */
export function episodeTurnSeed(sliceSeed: number, turn: number): number {
  return sliceSeed * 31 + turn * 7_919;
}

/** The seed of SFT batch `step` (1-based) of a warm start seeded `seed`. */
export function sftBatchSeed(seed: number, step: number): number {
  return seed * 1_000_003 + step;
}
