// Seeded randomness for reproducible prompt sets: the same seed gives the same prompts on every
// machine and Node version, which Math.random cannot.

/** mulberry32 (Tommy Ettinger): a 32-bit-state generator, uniform in [0, 1). */
export function mulberry32(seed: number): () => number {
  if (!Number.isInteger(seed)) throw new Error(`seed is ${seed}: pass an integer seed`);
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Uniform integer in [lo, hi], both ends included. */
export function randomInt(rng: () => number, lo: number, hi: number): number {
  return lo + Math.floor(rng() * (hi - lo + 1));
}
