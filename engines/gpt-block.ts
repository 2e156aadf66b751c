// The GPT-layout transformer block, shared by the tiny language model and the media encoders
// (engines/encoders.ts): its parameters, pre-LayerNorm attention + GELU MLP, and the attention
// kernels (fused where the backend has one) that the Llama layers of engines/model.ts use too.
// Kept apart from engines/model.ts so the encoders and the model import it without a cycle.
import type { LayerCache, ParameterSpec, TensorOps } from './model';

export const LAYER_NORM_EPS = 1e-5;

/** The parameters of one GPT-layout block at prefix `p` (the LM's `blocks.l.`, an encoder's `vision.blocks.l.`). */
export function gptBlockParameters(p: string, D: number, F: number, residualStd: number): ParameterSpec[] {
  const normal = (std: number) => ({ kind: 'normal' as const, std });
  const zeros = { kind: 'zeros' as const };
  const ones = { kind: 'ones' as const };
  return [
    { name: `${p}ln1.weight`, shape: [D], init: ones },
    { name: `${p}ln1.bias`, shape: [D], init: zeros },
    { name: `${p}attn.qkv.weight`, shape: [D, 3 * D], init: normal(0.02) },
    { name: `${p}attn.qkv.bias`, shape: [3 * D], init: zeros },
    { name: `${p}attn.proj.weight`, shape: [D, D], init: normal(residualStd) },
    { name: `${p}attn.proj.bias`, shape: [D], init: zeros },
    { name: `${p}ln2.weight`, shape: [D], init: ones },
    { name: `${p}ln2.bias`, shape: [D], init: zeros },
    { name: `${p}mlp.fc.weight`, shape: [D, F], init: normal(0.02) },
    { name: `${p}mlp.fc.bias`, shape: [F], init: zeros },
    { name: `${p}mlp.proj.weight`, shape: [F, D], init: normal(residualStd) },
    { name: `${p}mlp.proj.bias`, shape: [D], init: zeros },
  ];
}

/** Width and heads of a GPT-layout block: the language model's, or an encoder's. */
export interface BlockDims {
  dModel: number;
  nHeads: number;
  /** The MLP's GELU: the tanh approximation (absent) or exact erf (Whisper's encoder). */
  gelu?: 'tanh' | 'erf';
}

/** The GELU `dims` asks for; exact GELU is 0.5 x (1 + erf(x / sqrt 2)), PyTorch's F.gelu default and Whisper's. */
export function blockGelu<T>(ops: TensorOps<T>, dims: Pick<BlockDims, 'gelu'>, x: T): T {
  return dims.gelu === 'erf' ? ops.mul(ops.scale(x, 0.5), ops.shift(ops.erf(ops.scale(x, Math.SQRT1_2)), 1)) : ops.gelu(x);
}

/** Multi-head self-attention; `bias` undefined means every query sees every key (an encoder). */
function attention<T>(ops: TensorOps<T>, cfg: BlockDims, w: Record<string, T>, p: string, x: T, bias: T | undefined, past?: LayerCache<T>): { y: T; cache: LayerCache<T> } {
  const H = cfg.nHeads;
  const Dh = cfg.dModel / H;
  const [q, k, v] = ops.split(ops.linear(x, w[`${p}qkv.weight`], w[`${p}qkv.bias`]), 3); // 3 x [B, T, D]
  const q4 = ops.scale(ops.transpose(ops.reshape(q, [0, 0, H, Dh]), [0, 2, 1, 3]), 1 / Math.sqrt(Dh)); // [B, H, T, Dh]
  const kT = ops.transpose(ops.reshape(k, [0, 0, H, Dh]), [0, 2, 3, 1]); // [B, H, Dh, T]
  const v4 = ops.transpose(ops.reshape(v, [0, 0, H, Dh]), [0, 2, 1, 3]); // [B, H, T, Dh]
  const heads = past ? attentionWithPast(ops, q4, past, kT, v4, bias) : attentionCore(ops, q4, kT, v4, bias); // [B, H, T, Dh]
  const merged = ops.reshape(ops.transpose(heads, [0, 2, 1, 3]), [0, 0, cfg.dModel]); // [B, T, D]
  return { y: ops.linear(merged, w[`${p}proj.weight`], w[`${p}proj.bias`]), cache: { k: kT, v: v4 } };
}

/** softmax(q kT + bias) v: the backend's fused op where it has one. */
export function attentionCore<T>(ops: TensorOps<T>, q: T, kT: T, v: T, bias: T | undefined): T {
  if (ops.attention) return ops.attention(q, kT, v, bias);
  const scores = ops.matmul(q, kT);
  return ops.matmul(ops.softmax(bias === undefined ? scores : ops.add(scores, bias)), v);
}

/** Attention over cached and new keys ([B, H, Dh, P] + [B, H, Dh, T]); bias [.., T, P + T]. */
export function attentionWithPast<T>(ops: TensorOps<T>, q: T, past: LayerCache<T>, kT: T, v: T, bias: T | undefined): T {
  if (ops.cachedAttention) return ops.cachedAttention(q, past.k, past.v, kT, v, bias);
  return attentionCore(ops, q, ops.concat([past.k, kT], 3), ops.concat([past.v, v], 2), bias);
}

/**
 * One pre-LayerNorm GPT block at parameter prefix `p` (`blocks.3.`, `vision.blocks.0.`): x + attn(ln1(x)),
 * then + mlp(ln2(x)) with a GELU MLP. Returns the new residual stream and the layer's keys/values.
 */
export function gptBlock<T>(ops: TensorOps<T>, dims: BlockDims, w: Record<string, T>, p: string, x: T, bias: T | undefined, past?: LayerCache<T>): { x: T; cache: LayerCache<T> } {
  const a = attention(ops, dims, w, `${p}attn.`, ops.layerNorm(x, w[`${p}ln1.weight`], w[`${p}ln1.bias`], LAYER_NORM_EPS), bias, past);
  const r = ops.add(x, a.y);
  const h = ops.layerNorm(r, w[`${p}ln2.weight`], w[`${p}ln2.bias`], LAYER_NORM_EPS);
  const m = ops.linear(blockGelu(ops, dims, ops.linear(h, w[`${p}mlp.fc.weight`], w[`${p}mlp.fc.bias`])), w[`${p}mlp.proj.weight`], w[`${p}mlp.proj.bias`]);
  return { x: ops.add(r, m), cache: a.cache };
}
