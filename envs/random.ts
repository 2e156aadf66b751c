// Seeded randomness for reproducible prompt sets: the same seed gives the same prompts on every
// machine and Node version, which Math.random cannot.

import { seededRandom } from '../engines/model';

/** mulberry32 (the generator the engines use for weight init and sampling), uniform in [0, 1). */
export function mulberry32(seed: number): () => number {
  if (!Number.isInteger(seed)) throw new Error(`seed is ${seed}: pass an integer seed`);
  return seededRandom(seed);
}

/** Uniform integer in [lo, hi], both ends included. */
export function randomInt(rng: () => number, lo: number, hi: number): number {
  return lo + Math.floor(rng() * (hi - lo + 1));
}
