// The policy model, defined once: a decoder-only transformer (GPT-2 layout) written against a small
// tensor-ops interface. The trainer runs it with tfjs tensors (engines/model-tfjs.ts); the rollout
// engine runs the same function through an ONNX graph builder (engines/model-onnx.ts), so the
// training graph and the generation graph cannot drift.
//
// Architecture: learned token + position embeddings; nLayers pre-LayerNorm blocks of causal
// multi-head self-attention and a GELU MLP (tanh approximation); a final LayerNorm; an UNTIED
// unembedding `lm_head` (no bias). Untied because the tied variant needs the embedding transposed on
// every step, and a transposed matmul is the slow path on the wasm backend. Linear weights are stored
// [in, out] so every projection is a plain x @ W.
import { z } from 'zod';
import { mixSeed, seededRandom } from '../config/seeds';

export const modelConfigSchema = z
  .object({
    vocabSize: z.number().int().min(2),
    dModel: z.number().int().min(1),
    nLayers: z.number().int().min(1),
    nHeads: z.number().int().min(1),
    dFF: z.number().int().min(1),
    contextLength: z.number().int().min(2),
  })
  .strict()
  .refine((c) => c.dModel % c.nHeads === 0, { message: 'dModel must be a multiple of nHeads', path: ['dModel'] });

export type ModelConfig = z.infer<typeof modelConfigSchema>;

/** Validates a model config; the error names the offending field. */
export function parseModelConfig(value: unknown): ModelConfig {
  const r = modelConfigSchema.safeParse(value);
  if (!r.success) {
    const issues = r.error.issues.map((i) => `${i.path.join('.') || '(config)'}: ${i.message}`).join('; ');
    throw new Error(`invalid model config: ${issues}`);
  }
  return r.data;
}

/** The first field where two model configs differ, described; undefined when they agree. */
export function modelConfigDifference(actual: ModelConfig, expected: ModelConfig): string | undefined {
  for (const key of Object.keys(modelConfigSchema.shape) as Array<keyof ModelConfig>) {
    if (actual[key] !== expected[key]) return `model.${key} is ${actual[key]}, expected ${expected[key]}`;
  }
  return undefined;
}

/** The default policy for the add2 task: a 2-layer, 64-wide model that trains in seconds on wasm. */
export const TINY_MODEL: ModelConfig = { vocabSize: 16, dModel: 64, nLayers: 2, nHeads: 4, dFF: 256, contextLength: 32 };

export const LAYER_NORM_EPS = 1e-5;
/** Additive attention bias for a masked key: exp() of it underflows to exactly 0 in float32. */
export const MASKED_BIAS = -1e9;

export interface ParameterSpec {
  name: string;
  shape: number[];
  init: { kind: 'normal'; std: number } | { kind: 'zeros' } | { kind: 'ones' };
}

/** Every parameter of the model, in a fixed order (the order of checkpoint files and graph inputs). */
export function parameterSpec(cfg: ModelConfig): ParameterSpec[] {
  const { vocabSize: V, dModel: D, dFF: F, contextLength: C } = cfg;
  const normal = (std: number) => ({ kind: 'normal' as const, std });
  const zeros = { kind: 'zeros' as const };
  const ones = { kind: 'ones' as const };
  // GPT-2: residual projections get a smaller init so the residual stream's variance stays ~constant.
  const residualStd = 0.02 / Math.sqrt(2 * cfg.nLayers);
  const spec: ParameterSpec[] = [
    { name: 'tok_emb.weight', shape: [V, D], init: normal(0.02) },
    { name: 'pos_emb.weight', shape: [C, D], init: normal(0.01) },
  ];
  for (let l = 0; l < cfg.nLayers; l++) {
    const p = `blocks.${l}.`;
    spec.push(
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
    );
  }
  spec.push(
    { name: 'ln_f.weight', shape: [D], init: ones },
    { name: 'ln_f.bias', shape: [D], init: zeros },
    { name: 'lm_head.weight', shape: [D, V], init: normal(0.02) },
  );
  return spec;
}

export function parameterCount(cfg: ModelConfig): number {
  return parameterSpec(cfg).reduce((n, p) => n + shapeSize(p.shape), 0);
}

export function shapeSize(shape: readonly number[]): number {
  return shape.reduce((a, b) => a * b, 1);
}

/** A policy's weights: parameter name -> float32 values, row-major, shapes as in parameterSpec. */
export type PolicyWeights = Record<string, Float32Array>;

/** Fresh weights for `cfg`, a pure function of `seed`. */
export function initWeights(cfg: ModelConfig, seed: number): PolicyWeights {
  const weights: PolicyWeights = {};
  for (const p of parameterSpec(cfg)) {
    const values = new Float32Array(shapeSize(p.shape));
    if (p.init.kind === 'ones') values.fill(1);
    else if (p.init.kind === 'normal') {
      const rand = seededRandom(mixSeed(seed, p.name));
      for (let i = 0; i < values.length; i++) {
        // Box-Muller; 1 - u keeps the log argument in (0, 1].
        const u = 1 - rand();
        const v = rand();
        values[i] = p.init.std * Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
      }
    }
    weights[p.name] = values;
  }
  return weights;
}

/** Throws, naming the tensor, unless `weights` has exactly the parameters of `cfg` with the right sizes. */
export function checkWeights(cfg: ModelConfig, weights: PolicyWeights, shapes?: Record<string, number[]>): void {
  const spec = parameterSpec(cfg);
  const expected = new Set(spec.map((p) => p.name));
  for (const name of Object.keys(weights)) {
    if (!expected.has(name)) throw new Error(`unexpected tensor "${name}": the model config has no such parameter`);
  }
  for (const p of spec) {
    const w = weights[p.name];
    if (!w) throw new Error(`missing tensor "${p.name}" (expected shape [${p.shape}])`);
    const actual = shapes?.[p.name];
    if (actual && (actual.length !== p.shape.length || actual.some((d, i) => d !== p.shape[i]))) {
      throw new Error(`tensor "${p.name}" has shape [${actual}], expected [${p.shape}] for this model config`);
    }
    if (w.length !== shapeSize(p.shape)) {
      throw new Error(`tensor "${p.name}" has ${w.length} values, expected ${shapeSize(p.shape)} (shape [${p.shape}])`);
    }
  }
}

/**
 * The tensor operations the model needs. Each backend implements exactly these semantics.
 * Shapes use B batch, T new positions, P cached positions, S = P + T, D model width, H heads,
 * Dh = D / H head width.
 */
export interface TensorOps<T> {
  /** table [N, D], ids [B, T] (int) -> [B, T, D]. */
  embed(table: T, ids: T): T;
  /** x [B, T, in] @ weight [in, out] (+ bias [out]) -> [B, T, out]. */
  linear(x: T, weight: T, bias?: T): T;
  /** Batched rank-4 matmul: [B, H, M, K] @ [B, H, K, N] -> [B, H, M, N]. */
  matmul(a: T, b: T): T;
  /** Elementwise with broadcasting. */
  add(a: T, b: T): T;
  mul(a: T, b: T): T;
  /** x * s for a constant s. */
  scale(x: T, s: number): T;
  /** x + s for a constant s. */
  shift(x: T, s: number): T;
  tanh(x: T): T;
  /** Softmax over the last axis. */
  softmax(x: T): T;
  /** LayerNorm over the last axis: (x - mean) / sqrt(biased var + eps) * gamma + beta. */
  layerNorm(x: T, gamma: T, beta: T, eps: number): T;
  /** Splits the last axis into `parts` equal chunks. */
  split(x: T, parts: number): T[];
  /** Reshape where 0 copies the input's dimension at that index and -1 is inferred. */
  reshape(x: T, shape: number[]): T;
  /** Transpose of a rank <= 4 tensor. */
  transpose(x: T, perm: number[]): T;
  concat(xs: T[], axis: number): T;
  /** [B, T, D] -> [B, 1, D]: the last position. */
  lastPosition(x: T): T;
}

/** One layer's key/value cache. Keys are kept transposed so attention needs no per-step transpose. */
export interface LayerCache<T> {
  /** [B, H, Dh, P] */
  k: T;
  /** [B, H, P, Dh] */
  v: T;
}

export interface ForwardInputs<T> {
  /** [B, T] token ids (int). */
  tokens: T;
  /** [B, T] position ids (int), each < contextLength. */
  positions: T;
  /** [B or 1, 1, T, S] additive bias: 0 where query t may attend key s, MASKED_BIAS elsewhere. */
  attentionBias: T;
  /** Cached keys/values of earlier positions, one per layer (generation only). */
  past?: LayerCache<T>[];
  /** Compute logits for the last position only (generation), else for every position. */
  lastPositionOnly?: boolean;
}

export interface ForwardOutputs<T> {
  /** [B, T, V], or [B, 1, V] with lastPositionOnly. */
  logits: T;
  /** Keys/values of past + new positions, one per layer. */
  present: LayerCache<T>[];
}

/** GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
function gelu<T>(ops: TensorOps<T>, x: T): T {
  const cubic = ops.mul(ops.mul(x, x), x);
  const inner = ops.scale(ops.add(x, ops.scale(cubic, 0.044715)), Math.sqrt(2 / Math.PI));
  return ops.mul(ops.scale(x, 0.5), ops.shift(ops.tanh(inner), 1));
}

function attention<T>(ops: TensorOps<T>, cfg: ModelConfig, w: Record<string, T>, p: string, x: T, bias: T, past?: LayerCache<T>): { y: T; cache: LayerCache<T> } {
  const H = cfg.nHeads;
  const Dh = cfg.dModel / H;
  const [q, k, v] = ops.split(ops.linear(x, w[`${p}qkv.weight`], w[`${p}qkv.bias`]), 3); // 3 x [B, T, D]
  const q4 = ops.scale(ops.transpose(ops.reshape(q, [0, 0, H, Dh]), [0, 2, 1, 3]), 1 / Math.sqrt(Dh)); // [B, H, T, Dh]
  let kT = ops.transpose(ops.reshape(k, [0, 0, H, Dh]), [0, 2, 3, 1]); // [B, H, Dh, T]
  let v4 = ops.transpose(ops.reshape(v, [0, 0, H, Dh]), [0, 2, 1, 3]); // [B, H, T, Dh]
  if (past) {
    kT = ops.concat([past.k, kT], 3); // [B, H, Dh, S]
    v4 = ops.concat([past.v, v4], 2); // [B, H, S, Dh]
  }
  const weights = ops.softmax(ops.add(ops.matmul(q4, kT), bias)); // [B, H, T, S]
  const heads = ops.matmul(weights, v4); // [B, H, T, Dh]
  const merged = ops.reshape(ops.transpose(heads, [0, 2, 1, 3]), [0, 0, cfg.dModel]); // [B, T, D]
  return { y: ops.linear(merged, w[`${p}proj.weight`], w[`${p}proj.bias`]), cache: { k: kT, v: v4 } };
}

/** The model's forward pass. `w` maps parameter names (parameterSpec) to backend tensors. */
export function forward<T>(ops: TensorOps<T>, cfg: ModelConfig, w: Record<string, T>, inputs: ForwardInputs<T>): ForwardOutputs<T> {
  let x = ops.add(ops.embed(w['tok_emb.weight'], inputs.tokens), ops.embed(w['pos_emb.weight'], inputs.positions)); // [B, T, D]
  const present: LayerCache<T>[] = [];
  for (let l = 0; l < cfg.nLayers; l++) {
    const p = `blocks.${l}.`;
    const a = attention(ops, cfg, w, `${p}attn.`, ops.layerNorm(x, w[`${p}ln1.weight`], w[`${p}ln1.bias`], LAYER_NORM_EPS), inputs.attentionBias, inputs.past?.[l]);
    present.push(a.cache);
    x = ops.add(x, a.y);
    const h = ops.layerNorm(x, w[`${p}ln2.weight`], w[`${p}ln2.bias`], LAYER_NORM_EPS);
    const m = ops.linear(gelu(ops, ops.linear(h, w[`${p}mlp.fc.weight`], w[`${p}mlp.fc.bias`])), w[`${p}mlp.proj.weight`], w[`${p}mlp.proj.bias`]);
    x = ops.add(x, m);
  }
  let h = ops.layerNorm(x, w['ln_f.weight'], w['ln_f.bias'], LAYER_NORM_EPS);
  if (inputs.lastPositionOnly) h = ops.lastPosition(h);
  return { logits: ops.linear(h, w['lm_head.weight']), present };
}

/**
 * The attention bias for B rows of T new queries at cache slots [P, P + T) over keys at slots
 * [0, P + T): a query may see a key at or before its own slot, unless `keyMasked(row, slot)` says the
 * key is padding. Returned flat, shape [B, 1, T, P + T].
 */
export function attentionBias(batch: number, queryLen: number, pastLen: number, keyMasked?: (row: number, slot: number) => boolean): Float32Array {
  const S = pastLen + queryLen;
  const out = new Float32Array(batch * queryLen * S);
  for (let b = 0; b < batch; b++) {
    for (let t = 0; t < queryLen; t++) {
      const row = (b * queryLen + t) * S;
      for (let s = 0; s < S; s++) {
        if (s > pastLen + t || (keyMasked && keyMasked(b, s))) out[row + s] = MASKED_BIAS;
      }
    }
  }
  return out;
}
