// Model weights for the engine agreement tests (encoders, rollout and trainer with media): random
// weights where every tensor matters, so a wrong gather, mask or norm shows in the outputs.
import { initWeights, parameterSpec, type ModelConfig, type PolicyWeights } from '../engines/model';

/** A deterministic stream in [-0.5, 0.5). */
export function lcg(seed: number): () => number {
  let s = seed * 7919 + 1;
  return () => ((s = (s * 16807) % 2147483647) / 2147483647) - 0.5;
}

/** initWeights with norms and biases perturbed and the rest scaled by `scale` (std ~0.02 * scale). */
export function randomWeights(cfg: ModelConfig, seed: number, scale = 10): PolicyWeights {
  const w = initWeights(cfg, seed);
  const rand = lcg(seed);
  for (const p of parameterSpec(cfg)) {
    const values = w[p.name];
    if (p.init.kind === 'ones') for (let i = 0; i < values.length; i++) values[i] = 1 + 0.5 * rand();
    else if (p.init.kind === 'zeros') for (let i = 0; i < values.length; i++) values[i] = 0.2 * rand();
    else for (let i = 0; i < values.length; i++) values[i] *= scale;
  }
  return w;
}
