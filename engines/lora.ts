// LoRA adapters folded into their base weights: W' = W + (alpha / rank) A B for every adapted
// projection (our [in, out] layout: A [in, r], B [r, out]). Used to export a trained LoRA policy as
// a plain model, and by the rollout engine's "merged" mode (engines/rollout.ts), which feeds merged
// weights to a graph without adapter inputs instead of running the low-rank matmuls.
import { parameterSpec, type ModelConfig, type PolicyWeights } from './model';

/** The model config without adapters (what merged weights are a model of). */
export function withoutLora(cfg: ModelConfig): ModelConfig {
  const { lora: _lora, ...rest } = cfg;
  return rest;
}

/** Base weights with the adapters of `adapters` merged in; the result has every parameter of withoutLora(cfg). */
export function mergeLoraWeights(cfg: ModelConfig, base: PolicyWeights, adapters: PolicyWeights): PolicyWeights {
  const lora = cfg.lora;
  if (!lora) throw new Error('mergeLoraWeights: the model config has no lora section');
  const scale = lora.alpha / lora.rank;
  const r = lora.rank;
  const out: PolicyWeights = {};
  for (const p of parameterSpec(withoutLora(cfg))) {
    const w = base[p.name];
    if (!w) throw new Error(`mergeLoraWeights: missing base tensor "${p.name}"`);
    const prefix = p.name.endsWith('.weight') ? p.name.slice(0, -'.weight'.length) : undefined;
    const A = prefix ? adapters[`${prefix}.lora_a`] : undefined;
    const B = prefix ? adapters[`${prefix}.lora_b`] : undefined;
    if (!A || !B) {
      out[p.name] = w;
      continue;
    }
    const [inDim, outDim] = p.shape;
    const merged = w.slice();
    for (let i = 0; i < inDim; i++) {
      const row = i * outDim;
      for (let k = 0; k < r; k++) {
        const a = A[i * r + k] * scale;
        if (a === 0) continue;
        const bRow = k * outDim;
        for (let o = 0; o < outDim; o++) merged[row + o] += a * B[bRow + o];
      }
    }
    out[p.name] = merged;
  }
  return out;
}
