// The policy model, defined once: a decoder-only transformer in two layouts, the tiny GPT-2 one and
// the Llama family (Llama, SmolLM, Qwen2, Mistral), written against a small tensor-ops interface. The trainer runs it with tfjs tensors (engines/model-tfjs.ts); the rollout
// engine runs the same function through an ONNX graph builder (engines/model-onnx.ts), so the
// training graph and the generation graph cannot drift.
//
// GPT architecture: learned token + position embeddings; nLayers pre-LayerNorm blocks of causal
// multi-head self-attention and a GELU MLP (tanh approximation); a final LayerNorm; an UNTIED
// unembedding `lm_head` (no bias). Untied because the tied variant needs the embedding transposed on
// every step, and a transposed matmul is the slow path on the wasm backend. Linear weights are stored
// [in, out] so every projection is a plain x @ W.
//
// Llama architecture: token embedding; pre-RMSNorm blocks of grouped-query attention with rotary
// position embeddings (Hugging Face's rotate-half layout) and a SwiGLU MLP; a final RMSNorm; a tied
// or untied unembedding; optional q/k/v biases (Qwen2); optional LoRA adapters on any projection.
// Hugging Face checkpoints map onto these names in engines/hf-checkpoint.ts.
//
// Optional vision and audio encoders (cfg.vision, cfg.audio; engines/encoders.ts) turn image patches
// and log-mel frames into embeddings that replace the placeholder positions of the prompt.
//
// Over 400 lines because both layouts share one parameter spec, one ops interface and one forward
// entry point; split apart, the trainer and the ONNX builder would need two of each.
import { TRAINABLE_PARTS, type TrainablePart } from '../config/trainable-parts';
import { z } from 'zod';
import { mixSeed, seededRandom } from '../config/seeds';
import { audioEmbeddingCount, encoderParameterSpec, mediaEmbeddings } from './encoders';
import { attentionCore, attentionWithPast, gptBlock, gptBlockParameters, LAYER_NORM_EPS } from './gpt-block';

export { gptBlock, gptBlockParameters, LAYER_NORM_EPS, type BlockDims } from './gpt-block';

const LORA_TARGETS = ['q', 'k', 'v', 'o', 'gate', 'up', 'down'] as const;
export type LoraTarget = (typeof LORA_TARGETS)[number];

/**
 * How a fresh adapter's A is drawn (B is always zeros): "peft" (absent) as PEFT's default
 * (init_lora_weights=True: torch's kaiming_uniform_ with a = sqrt(5), i.e. uniform in
 * [-1/sqrt(in), 1/sqrt(in)], std 1/sqrt(3 in)); "normal", Relax's earlier normal(0, 1/sqrt(in)),
 * sqrt(3) times larger.
 */
export const LORA_INITS = ['peft', 'normal'] as const;
export type LoraInit = (typeof LORA_INITS)[number];

/** Low-rank adapters (Hu et al. 2021) on the named projections: W x + (alpha / rank) B A x, A and B trained, W frozen. */
export const loraConfigSchema = z
  .object({
    rank: z.number().int().min(1),
    alpha: z.number().positive(),
    targets: z.array(z.enum(LORA_TARGETS)).min(1),
    /** How fresh adapters are drawn; absent: "peft". Not part of what the weights mean (modelConfigDifference ignores it). */
    init: z.enum(LORA_INITS).optional(),
  })
  .strict();
export type LoraConfig = z.infer<typeof loraConfigSchema>;

/** One encoder's transformer: pre-LayerNorm blocks (the GPT block shapes), non-causal attention. */
const encoderFields = {
  dModel: z.number().int().min(1),
  nLayers: z.number().int().min(1),
  nHeads: z.number().int().min(1),
  dFF: z.number().int().min(1),
};
const headsDivide = (name: string) => (c: { dModel: number; nHeads: number }, ctx: z.RefinementCtx) => {
  if (c.dModel % c.nHeads !== 0) ctx.addIssue({ code: 'custom', path: ['dModel'], message: `${name}.dModel (${c.dModel}) must be a multiple of ${name}.nHeads (${c.nHeads})` });
};

/** The vision encoder: linear patch embedding, learned positions, blocks, LayerNorm, linear projector to the LM width. */
export const visionConfigSchema = z
  .object({
    patchSize: z.number().int().min(1),
    maxPatches: z.number().int().min(1),
    /** The `<image>` placeholder's token id (Hugging Face LLaVA's image_token_index). */
    tokenId: z.number().int().min(0).optional(),
    ...encoderFields,
  })
  .strict()
  .superRefine(headsDivide('vision'));
export type VisionConfig = z.infer<typeof visionConfigSchema>;

/** The audio encoder (Whisper's layout): two 1-D convolutions (kernel 3; stride 1, then 2), learned positions, blocks, LayerNorm, projector. */
export const audioConfigSchema = z
  .object({
    nMels: z.number().int().min(1),
    maxFrames: z.number().int().min(2),
    /** The `<audio>` placeholder's token id. */
    tokenId: z.number().int().min(0).optional(),
    /** The encoder's GELU (convolutions and blocks): the tanh approximation (absent), or exact erf as Whisper's. */
    gelu: z.enum(['tanh', 'erf']).optional(),
    /** Consecutive encoder positions concatenated into one embedding before the projector (absent: 1); must divide the positions. */
    stack: z.number().int().min(1).optional(),
    /** A two-layer projector (linear, GELU, linear) of this hidden width instead of one linear layer. */
    projectorHidden: z.number().int().min(1).optional(),
    /**
     * A pretrained encoder, frozen: every audio.* parameter but the projector is out of the optimizer
     * and of published versions (each engine reads it from its source, like a LoRA base); the
     * projector trains, with LoRA too (as PEFT's modules_to_save).
     */
    freeze: z.boolean().optional(),
    ...encoderFields,
  })
  .strict()
  .superRefine(headsDivide('audio'))
  .superRefine((a, ctx) => {
    const positions = audioEmbeddingCount(a.maxFrames);
    if (a.stack !== undefined && positions % a.stack !== 0) ctx.addIssue({ code: 'custom', path: ['stack'], message: `audio.stack (${a.stack}) must divide the encoder's ${positions} positions (audio.maxFrames ${a.maxFrames}): choose a window whose positions it divides` });
  });
export type AudioConfig = z.infer<typeof audioConfigSchema>;

export const modelConfigSchema = z
  .object({
    /** "gpt" (absent): the tiny GPT-2-layout model; "llama": RMSNorm, RoPE, grouped-query attention, SwiGLU. */
    architecture: z.enum(['gpt', 'llama']).optional(),
    vocabSize: z.number().int().min(2),
    dModel: z.number().int().min(1),
    nLayers: z.number().int().min(1),
    nHeads: z.number().int().min(1),
    dFF: z.number().int().min(1),
    contextLength: z.number().int().min(2),
    /** llama: key/value heads (grouped-query attention); default nHeads. */
    nKvHeads: z.number().int().min(1).optional(),
    /** llama: width of one head; default dModel / nHeads. */
    headDim: z.number().int().min(2).optional(),
    /** llama: RoPE base; default 10000. */
    ropeTheta: z.number().positive().optional(),
    /** llama: linear RoPE scaling (positions divided by this); default 1. */
    ropeScalingFactor: z.number().positive().optional(),
    /** llama: RMSNorm epsilon; default 1e-5. */
    rmsNormEps: z.number().positive().optional(),
    /** llama: the unembedding is the token embedding (no lm_head.weight). */
    tieEmbeddings: z.boolean().optional(),
    /** llama: biases on the q, k and v projections (Qwen2). */
    attentionBias: z.boolean().optional(),
    /** Low-rank adapters; the base weights are then frozen. */
    lora: loraConfigSchema.optional(),
    /** An image encoder whose projected patches replace `<image>` placeholder positions. */
    vision: visionConfigSchema.optional(),
    /** An audio encoder whose projected frames replace `<audio>` placeholder positions. */
    audio: audioConfigSchema.optional(),
    /** A value head (PPO's critic, engines/rl/gae.ts): value_head.weight [D, 1] and .bias [1] on the last hidden state, trained (and published) with the policy, LoRA or not. */
    valueHead: z.boolean().optional(),
  })
  .strict()
  .superRefine((c, ctx) => {
    for (const kind of ['vision', 'audio'] as const) {
      const id = c[kind]?.tokenId;
      if (id !== undefined && id >= c.vocabSize) ctx.addIssue({ code: 'custom', path: [kind, 'tokenId'], message: `${kind}.tokenId ${id} is outside the ${c.vocabSize}-token vocabulary` });
    }
    const llama = c.architecture === 'llama';
    if (!llama) {
      for (const key of ['nKvHeads', 'headDim', 'ropeTheta', 'ropeScalingFactor', 'rmsNormEps', 'tieEmbeddings', 'attentionBias'] as const) {
        if (c[key] !== undefined) ctx.addIssue({ code: 'custom', path: [key], message: `${key} is a llama setting: set architecture to "llama" or remove it` });
      }
      if (c.dModel % c.nHeads !== 0) ctx.addIssue({ code: 'custom', path: ['dModel'], message: 'dModel must be a multiple of nHeads' });
      return;
    }
    const kv = c.nKvHeads ?? c.nHeads;
    if (c.nHeads % kv !== 0) ctx.addIssue({ code: 'custom', path: ['nKvHeads'], message: `nKvHeads (${kv}) must divide nHeads (${c.nHeads})` });
    if (c.headDim === undefined && c.dModel % c.nHeads !== 0) ctx.addIssue({ code: 'custom', path: ['dModel'], message: 'dModel must be a multiple of nHeads (or set headDim)' });
    if ((c.headDim ?? c.dModel / c.nHeads) % 2 !== 0) ctx.addIssue({ code: 'custom', path: ['headDim'], message: 'the head width must be even for rotary embeddings' });
  });

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
  // lora.init only says how fresh adapters were drawn, not what trained weights mean: a checkpoint
  // loads whichever init its run (or the caller's config) names.
  if (actual.lora?.init !== expected.lora?.init) return modelConfigDifference(withoutLoraInit(actual), withoutLoraInit(expected));
  const keys = new Set([...Object.keys(actual), ...Object.keys(expected)] as Array<keyof ModelConfig>);
  // Nested sections (lora, vision, audio) compare by value, whatever order their keys were written in.
  const canonical = (v: unknown): string | undefined =>
    JSON.stringify(v, (_, x: unknown) => (x && typeof x === 'object' && !Array.isArray(x) ? Object.fromEntries(Object.entries(x).sort(([p], [q]) => (p < q ? -1 : 1))) : x));
  for (const key of keys) {
    const a = canonical(actual[key]);
    const e = canonical(expected[key]);
    if (a !== e) return `model.${key} is ${a ?? 'unset'}, expected ${e ?? 'unset'}`;
  }
  return undefined;
}

function withoutLoraInit(cfg: ModelConfig): ModelConfig {
  if (!cfg.lora || cfg.lora.init === undefined) return cfg;
  const { init: _init, ...lora } = cfg.lora;
  return { ...cfg, lora };
}

/** Attention shapes: H query heads, Hkv key/value heads, G = H / Hkv queries per key head, Dh head width. */
export function attentionDims(cfg: ModelConfig): { H: number; Hkv: number; G: number; Dh: number } {
  const H = cfg.nHeads;
  const Hkv = cfg.architecture === 'llama' ? (cfg.nKvHeads ?? H) : H;
  const Dh = cfg.architecture === 'llama' ? (cfg.headDim ?? cfg.dModel / H) : cfg.dModel / H;
  return { H, Hkv, G: H / Hkv, Dh };
}

/** The default policy for the add2 task: a 2-layer, 64-wide model that trains in seconds on wasm. */
export const TINY_MODEL: ModelConfig = { vocabSize: 16, dModel: 64, nLayers: 2, nHeads: 4, dFF: 256, contextLength: 32 };

/** Additive attention bias for a masked key: exp() of it underflows to exactly 0 in float32. */
export const MASKED_BIAS = -1e9;

export interface ParameterSpec {
  name: string;
  shape: number[];
  /** normal(0, std); uniform in [-bound, bound]; or constant. Random kinds are seeded by (seed, name). */
  init: { kind: 'normal'; std: number } | { kind: 'uniform'; bound: number } | { kind: 'zeros' } | { kind: 'ones' };
  /** With LoRA, the base weights are frozen: out of the optimizer, not in published versions. */
  frozen?: boolean;
  /** A LoRA adapter tensor (`<projection>.lora_a` / `.lora_b`). */
  adapter?: boolean;
}

/** The projections of a llama block, by LoRA target name: parameter prefix, in and out widths. */
export function llamaProjections(cfg: ModelConfig, layer: number): Array<{ target: LoraTarget; prefix: string; in: number; out: number }> {
  const { H, Hkv, Dh } = attentionDims(cfg);
  const p = `blocks.${layer}.`;
  const D = cfg.dModel;
  const F = cfg.dFF;
  return [
    { target: 'q', prefix: `${p}attn.q`, in: D, out: H * Dh },
    { target: 'k', prefix: `${p}attn.k`, in: D, out: Hkv * Dh },
    { target: 'v', prefix: `${p}attn.v`, in: D, out: Hkv * Dh },
    { target: 'o', prefix: `${p}attn.o`, in: H * Dh, out: D },
    { target: 'gate', prefix: `${p}mlp.gate`, in: D, out: F },
    { target: 'up', prefix: `${p}mlp.up`, in: D, out: F },
    { target: 'down', prefix: `${p}mlp.down`, in: F, out: D },
  ];
}

function llamaParameterSpec(cfg: ModelConfig): ParameterSpec[] {
  const { vocabSize: V, dModel: D } = cfg;
  const normal = (std: number) => ({ kind: 'normal' as const, std });
  const ones = { kind: 'ones' as const };
  const zeros = { kind: 'zeros' as const };
  const residualStd = 0.02 / Math.sqrt(2 * cfg.nLayers);
  const spec: ParameterSpec[] = [{ name: 'tok_emb.weight', shape: [V, D], init: normal(0.02) }];
  for (let l = 0; l < cfg.nLayers; l++) {
    const p = `blocks.${l}.`;
    spec.push({ name: `${p}attn_norm.weight`, shape: [D], init: ones });
    for (const proj of llamaProjections(cfg, l)) {
      if (proj.target === 'gate') spec.push({ name: `${p}mlp_norm.weight`, shape: [D], init: ones });
      const residual = proj.target === 'o' || proj.target === 'down';
      spec.push({ name: `${proj.prefix}.weight`, shape: [proj.in, proj.out], init: normal(residual ? residualStd : 0.02) });
      if (cfg.attentionBias && (proj.target === 'q' || proj.target === 'k' || proj.target === 'v')) spec.push({ name: `${proj.prefix}.bias`, shape: [proj.out], init: zeros });
    }
  }
  spec.push({ name: 'norm_f.weight', shape: [D], init: ones });
  if (!cfg.tieEmbeddings) spec.push({ name: 'lm_head.weight', shape: [D, V], init: normal(0.02) });
  return spec;
}

/**
 * The init of a fresh adapter's A for a projection of `fanIn` inputs. PEFT (init_lora_weights=True)
 * calls torch.nn.init.kaiming_uniform_(lora_A.weight, a=math.sqrt(5)) on nn.Linear(in, r).weight of
 * shape [r, in]: fan_in = in, gain = sqrt(2 / (1 + a^2)) = sqrt(1/3), bound = gain * sqrt(3 / fan_in)
 * = 1 / sqrt(in) (std bound / sqrt(3)). "normal" is Relax's earlier normal(0, 1 / sqrt(in)).
 */
export function loraAInit(fanIn: number, init: LoraInit = 'peft'): ParameterSpec['init'] {
  if (init === 'normal') return { kind: 'normal', std: 1 / Math.sqrt(fanIn) };
  const a = Math.sqrt(5);
  const gain = Math.sqrt(2 / (1 + a * a));
  return { kind: 'uniform', bound: gain * Math.sqrt(3 / fanIn) };
}

/**
 * The LoRA adapters of `cfg.lora`: per targeted projection, `<prefix>.lora_a` [in, rank] (random,
 * as PEFT's A unless lora.init is "normal": loraAInit) and `<prefix>.lora_b` [rank, out] (zeros, so
 * a fresh adapter changes nothing).
 */
export function loraParameterSpec(cfg: ModelConfig): ParameterSpec[] {
  const lora = cfg.lora;
  if (!lora) return [];
  if (cfg.architecture !== 'llama') throw new Error('LoRA adapters need a llama-architecture model');
  const targets = new Set(lora.targets);
  const spec: ParameterSpec[] = [];
  for (let l = 0; l < cfg.nLayers; l++) {
    for (const proj of llamaProjections(cfg, l)) {
      if (!targets.has(proj.target)) continue;
      spec.push({ name: `${proj.prefix}.lora_a`, shape: [proj.in, lora.rank], init: loraAInit(proj.in, lora.init), adapter: true });
      spec.push({ name: `${proj.prefix}.lora_b`, shape: [lora.rank, proj.out], init: { kind: 'zeros' }, adapter: true });
    }
  }
  return spec;
}

/** Every parameter of the model, in a fixed order (the order of checkpoint files and graph inputs). */
export function parameterSpec(cfg: ModelConfig): ParameterSpec[] {
  // The encoders' parameters come after the language model's (existing checkpoints keep their order);
  // with LoRA they are frozen with the rest of the base (selectedParameterSpec chooses trained parts).
  // A frozen (pretrained) audio encoder stays frozen, and its projector trains, with or without LoRA.
  const frozen = (p: ParameterSpec): ParameterSpec => ({ ...p, frozen: true });
  const projectorTrains = (p: ParameterSpec) => cfg.audio?.freeze === true && parameterPart(p.name) === 'audio_projector';
  const encoders = encoderParameterSpec(cfg).map((p) => (cfg.audio?.freeze && parameterPart(p.name) === 'audio_encoder' ? frozen(p) : p));
  if (cfg.architecture === 'llama') {
    if (!cfg.lora) return [...llamaParameterSpec(cfg), ...encoders, ...valueHeadParameterSpec(cfg)];
    return [...llamaParameterSpec(cfg).map(frozen), ...encoders.map((p) => (projectorTrains(p) ? p : frozen(p))), ...loraParameterSpec(cfg), ...valueHeadParameterSpec(cfg)];
  }
  if (cfg.lora) throw new Error('LoRA adapters need a llama-architecture model');
  return [...gptParameterSpec(cfg), ...encoders, ...valueHeadParameterSpec(cfg)];
}

/** Whether some parameters are frozen (a LoRA base, a pretrained encoder): engines then complete versions with the run's base weights. */
export function hasFrozenParameters(cfg: ModelConfig): boolean {
  return cfg.lora !== undefined || cfg.audio?.freeze === true;
}

/** The value head of `cfg.valueHead` (last, never frozen: it trains beside LoRA adapters); zeros, so a fresh critic predicts 0. The rollout ignores it. */
export function valueHeadParameterSpec(cfg: ModelConfig): ParameterSpec[] {
  if (!cfg.valueHead) return [];
  return [
    { name: 'value_head.weight', shape: [cfg.dModel, 1], init: { kind: 'zeros' } },
    { name: 'value_head.bias', shape: [1], init: { kind: 'zeros' } },
  ];
}

/** The parameters the optimizer updates and a published version holds: the adapters with LoRA, else all. */
export function trainableParameterSpec(cfg: ModelConfig): ParameterSpec[] {
  return parameterSpec(cfg).filter((p) => !p.frozen);
}

/** The parts of a model that train separately (TrainerOptions.trainable); a run config validates against this list. */
export { TRAINABLE_PARTS, type TrainablePart };

/** The part a parameter belongs to: an encoder's projector (`vision.proj.*`), the rest of its encoder, else the language model (LoRA adapters included). */
export function parameterPart(name: string): TrainablePart {
  for (const kind of ['vision', 'audio'] as const) {
    if (name.startsWith(`${kind}.`)) return name.startsWith(`${kind}.proj.`) ? `${kind}_projector` : `${kind}_encoder`;
  }
  return 'language_model';
}

/**
 * The parameters trained when only `parts` train (default: every part, i.e. trainableParameterSpec).
 * Throws, naming the part, for an unknown part, one the model does not have, and (with LoRA, whose
 * frozen base includes the encoders) an encoder part; and for an empty list.
 */
export function selectedParameterSpec(cfg: ModelConfig, parts?: readonly string[]): ParameterSpec[] {
  const trainable = trainableParameterSpec(cfg);
  if (parts === undefined) return trainable;
  if (parts.length === 0) throw new Error(`trainable is empty: list at least one of ${TRAINABLE_PARTS.join(', ')}`);
  const all = new Set(parameterSpec(cfg).map((p) => parameterPart(p.name)));
  const trained = new Set(trainable.map((p) => parameterPart(p.name)));
  for (const part of parts) {
    if (!(TRAINABLE_PARTS as readonly string[]).includes(part)) throw new Error(`trainable: unknown part "${part}"; the parts are ${TRAINABLE_PARTS.join(', ')}`);
    const encoder = part.startsWith('vision') ? 'vision' : 'audio';
    if (!all.has(part as TrainablePart)) throw new Error(`trainable: the model has no ${part} (add model.${encoder} or remove "${part}")`);
    if (!trained.has(part as TrainablePart)) {
      if (part === 'audio_encoder' && cfg.audio?.freeze) throw new Error('trainable: audio_encoder is a frozen pretrained encoder (model.audio.from); remove "audio_encoder", or set model.audio.train_encoder to true');
      throw new Error(`trainable: ${part} cannot train with LoRA (model.lora freezes the whole base, encoders included); remove "${part}" or train without LoRA`);
    }
  }
  return trainable.filter((p) => parts.includes(parameterPart(p.name)));
}

function gptParameterSpec(cfg: ModelConfig): ParameterSpec[] {
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
  for (let l = 0; l < cfg.nLayers; l++) spec.push(...gptBlockParameters(`blocks.${l}.`, D, F, residualStd));
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

/** Fresh weights for `cfg` (or for the parameters `spec` of it), a pure function of `seed`. */
export function initWeights(cfg: ModelConfig, seed: number, spec: ParameterSpec[] = parameterSpec(cfg)): PolicyWeights {
  const weights: PolicyWeights = {};
  for (const p of spec) {
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
    } else if (p.init.kind === 'uniform') {
      const rand = seededRandom(mixSeed(seed, p.name));
      for (let i = 0; i < values.length; i++) values[i] = p.init.bound * (2 * rand() - 1);
    }
    weights[p.name] = values;
  }
  return weights;
}

/** Throws, naming the tensor, unless `weights` has exactly the parameters of `cfg` with the right sizes. */
export function checkWeights(cfg: ModelConfig, weights: PolicyWeights, shapes?: Record<string, number[]>, which: 'all' | 'trainable' = 'all'): void {
  const spec = which === 'all' ? parameterSpec(cfg) : trainableParameterSpec(cfg);
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

/** One column block of a fused LoRA projection (TensorOps.loraLinear): its width and its adapter, if any. */
export interface LoraPart<T> {
  size?: number;
  a?: T;
  b?: T;
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
  /** GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) (geluTanh spells it in the other ops). */
  gelu(x: T): T;
  /** The error function, elementwise (exact GELU: gpt-block.ts blockGelu). */
  erf(x: T): T;
  /** Softmax over the last axis. */
  softmax(x: T): T;
  /** LayerNorm over the last axis: (x - mean) / sqrt(biased var + eps) * gamma + beta. */
  layerNorm(x: T, gamma: T, beta: T, eps: number): T;
  /** RMSNorm over the last axis: x / sqrt(mean(x^2) + eps) * gamma. */
  rmsNorm(x: T, gamma: T, eps: number): T;
  sigmoid(x: T): T;
  /**
   * Optional fused forms of compositions the model spells in the ops above (a backend that keeps
   * every intermediate for its backward pass saves memory with them): swiglu(gate, up) =
   * gate sigmoid(gate) up, rotary(x, cos, sin) = x cos + rotateHalf(x) sin (x [B, H, T, Dh]).
   */
  swiglu?(gate: T, up: T): T;
  rotary?(x: T, cos: T, sin: T): T;
  /**
   * Optional gradient checkpointing: layer(x, w) whose backward pass computes the layer again from
   * x instead of keeping its intermediates. `w` holds the layer's weights; those the backend trains
   * get gradients.
   */
  checkpoint?(layer: (x: T, w: Record<string, T>) => T, x: T, w: Record<string, T>): T;
  /**
   * Optional scope for one decoder layer: what `f` returns is kept, every other tensor it made is
   * freed when it returns (a backend that records a tape for gradients keeps what the backward pass
   * reads). Without it, a train step's forward pass holds every intermediate of every layer until
   * its loss is computed.
   */
  scope?<R>(f: () => R): R;
  /**
   * Optional fused attention core: softmax(q kT + bias) v for q [B, H, M, Dh], kT [B, H, Dh, S],
   * v [B, H, S, Dh] and an additive bias that broadcasts to [B, H, M, S] (none: every key).
   */
  attention?(q: T, kT: T, v: T, bias?: T): T;
  /**
   * softmax([q pastKT, q kT] + bias) [pastV; v] without concatenating the cache (a generation
   * graph's cache is an input buffer the caller appends to; copying it on every decode step was
   * most of a step's non-matmul time). Without it the keys and values are concatenated.
   */
  cachedAttention?(q: T, pastKT: T, pastV: T, kT: T, v: T, bias?: T): T;
  /**
   * Optional fused LoRA projection: linear(x, weight, bias) whose output columns are split into
   * `parts` in order, each part with an adapter adding scale (loraX a) b. A part's `size` (its
   * columns) is needed only where there are several parts; one part spans the whole output.
   */
  loraLinear?(x: T, weight: T, bias: T | undefined, loraX: T, parts: ReadonlyArray<LoraPart<T>>, scale: number): T;
  /** x [B, T, in] @ weight^T for weight [out, in] -> [B, T, out] (a tied unembedding). */
  linearTransposed(x: T, weight: T): T;
  /** Splits the last axis into chunks of the given sizes. */
  splitSizes(x: T, sizes: number[]): T[];
  /** Splits the last axis into `parts` equal chunks. */
  split(x: T, parts: number): T[];
  /** Reshape where 0 copies the input's dimension at that index and -1 is inferred. */
  reshape(x: T, shape: number[]): T;
  /** Transpose of a rank <= 4 tensor. */
  transpose(x: T, perm: number[]): T;
  concat(xs: T[], axis: number): T;
  /** [B, T, D] -> [B, 1, D]: the last position. */
  lastPosition(x: T): T;
  /** [B, T, D] -> [B, T - start, D]: positions start.. (logits only where the loss needs them). */
  positionsFrom(x: T, start: number): T;
  /** table [N, D], x [B, n, ...] -> table's first n rows [n, D] (learned positions of an encoder's n inputs). */
  leadingRows(table: T, x: T): T;
  /**
   * 1-D convolution over time, channels last: x [B, T, Cin], weight [k, Cin, Cout] (tfjs's conv1d
   * layout), bias [Cout], zero padding `padding` on both sides -> [B, floor((T + 2 padding - k) / stride) + 1, Cout].
   */
  conv1d(x: T, weight: T, bias: T, stride: number, padding: number): T;
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
  /** Compute logits for positions logitsFrom.. only (training: the prompt's positions carry no loss). */
  logitsFrom?: number;
  /** llama: cos and sin of the rotary angles of each new position, [B or 1, 1, T, Dh] (ropeTables). */
  rope?: { cos: T; sin: T };
  /**
   * LoRA: applied to a projection's input before its adapter (dropout while training); `projection`
   * names it (`blocks.3.attn.q`, or a fused group's `blocks.3.attn.qkv_fused`), so a layer computed
   * again (recomputeLayers) draws the same mask.
   */
  loraInput?: (x: T, projection: string) => T;
  /**
   * Training with ops.checkpoint: each decoder layer keeps only its input for the backward pass and
   * is computed again there (gradient checkpointing); `present` is then empty.
   */
  recomputeLayers?: boolean;
  /** Images and audio whose encoder embeddings replace placeholder positions (engines/encoders.ts). */
  media?: MediaInputs<T>;
}

export interface MediaInputs<T> {
  /** [nImages, nPatches, patchSize * patchSize * 3] patches (processImage), all images of one call with the same patch count. */
  images?: T;
  /** [nClips, nFrames, nMels] log-mel frames (processAudio), all clips of one call with the same frame count. */
  audio?: T;
  /**
   * [B, T] int: the row each position's input embedding comes from, in the concatenation of the
   * text embeddings [B * T] (position (b, t) is row b * T + t), then the image embeddings (image-major,
   * nPatches each), then the audio embeddings (clip-major, ceil(nFrames / 2) each). embeddingIndex
   * in engines/encoders.ts builds it.
   */
  embeddingIndex: T;
}

export interface ForwardOutputs<T> {
  /** [B, T, V], or [B, 1, V] with lastPositionOnly, or [B, T - logitsFrom, V]. */
  logits: T;
  /** Keys/values of the new positions, one per layer (a caller with a cache appends them to it). */
  present: LayerCache<T>[];
}

/** GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
/** GELU (tanh approximation) in terms of the other ops: how a backend without a fused one computes it. */
export function geluTanh<T>(ops: TensorOps<T>, x: T): T {
  const cubic = ops.mul(ops.mul(x, x), x);
  const inner = ops.scale(ops.add(x, ops.scale(cubic, 0.044715)), Math.sqrt(2 / Math.PI));
  return ops.mul(ops.scale(x, 0.5), ops.shift(ops.tanh(inner), 1));
}

/** Token embeddings [B, T, D], with the encoders' embeddings at the media positions when `inputs.media` is given. */
function inputEmbeddings<T>(ops: TensorOps<T>, cfg: ModelConfig, w: Record<string, T>, inputs: ForwardInputs<T>): T {
  const text = ops.embed(w['tok_emb.weight'], inputs.tokens);
  if (!inputs.media) return text;
  const rows = [ops.reshape(text, [-1, cfg.dModel]), ...mediaEmbeddings(ops, cfg, w, inputs.media)];
  return ops.embed(ops.concat(rows, 0), inputs.media.embeddingIndex);
}

/** The model's forward pass. `w` maps parameter names (parameterSpec) to backend tensors. */
export function forward<T>(ops: TensorOps<T>, cfg: ModelConfig, w: Record<string, T>, inputs: ForwardInputs<T>): ForwardOutputs<T> {
  const { hidden, present } = forwardHidden(ops, cfg, w, inputs);
  return { logits: unembed(ops, cfg, w, hidden), present };
}

/**
 * The forward pass up to the final norm: the hidden states the unembedding reads ([B, T, D], or the
 * positions lastPositionOnly / logitsFrom select), for a backend that computes the vocabulary head
 * its own way (the trainer's chunked log-probs, engines/vocab-head.ts).
 */
export function forwardHidden<T>(ops: TensorOps<T>, cfg: ModelConfig, w: Record<string, T>, inputs: ForwardInputs<T>): { hidden: T; present: LayerCache<T>[] } {
  const out = cfg.architecture === 'llama' ? llamaHidden(ops, cfg, w, inputs) : gptHidden(ops, cfg, w, inputs);
  let h = out.hidden;
  if (inputs.lastPositionOnly) h = ops.lastPosition(h);
  else if (inputs.logitsFrom) h = ops.positionsFrom(h, inputs.logitsFrom);
  return { hidden: h, present: out.present };
}

/**
 * The unembedding weight as [D, V] (`transposed` false) or the tied token embedding [V, D]
 * (`transposed` true). A tied model may still be given lm_head.weight (the embedding, transposed
 * once) to skip the transpose.
 */
export function unembeddingWeight<T>(w: Record<string, T>): { weight: T; transposed: boolean } {
  const head = w['lm_head.weight'];
  return head ? { weight: head, transposed: false } : { weight: w['tok_emb.weight'], transposed: true };
}

/** The value head (cfg.valueHead) on hidden states [B, T, D] -> [B, T, 1]: V(s_t), the critic's estimate of the return from position t. */
export function valueHead<T>(ops: TensorOps<T>, w: Record<string, T>, hidden: T): T {
  if (!w['value_head.weight']) throw new Error('valueHead: the model has no value head (set valueHead: true in its config)');
  return ops.linear(hidden, w['value_head.weight'], w['value_head.bias']);
}

/** Logits of hidden states [B, T, D] -> [B, T, V]. */
export function unembed<T>(ops: TensorOps<T>, cfg: ModelConfig, w: Record<string, T>, hidden: T): T {
  const { weight, transposed } = unembeddingWeight(w);
  return transposed ? ops.linearTransposed(hidden, weight) : ops.linear(hidden, weight);
}

/**
 * One decoder layer at prefix `p`: computed again in the backward pass (ops.checkpoint) when
 * inputs.recomputeLayers asks, its keys/values then dropped; else run once, its cache pushed onto
 * `present`.
 */
function decoderLayer<T>(ops: TensorOps<T>, inputs: ForwardInputs<T>, w: Record<string, T>, p: string, x: T, present: LayerCache<T>[], layer: (x: T, w: Record<string, T>) => { x: T; cache: LayerCache<T> }): T {
  if (!inputs.recomputeLayers || !ops.checkpoint || inputs.past) {
    const out = ops.scope ? ops.scope(() => layer(x, w)) : layer(x, w);
    present.push(out.cache);
    return out.x;
  }
  // Everything the layer reads comes through `w` (its weights and the pass's tensors named by
  // withLayerInputs), so the backend can keep it for the second computation.
  const own = Object.fromEntries(Object.entries(w).filter(([name]) => name.startsWith(p) || name.startsWith('@')));
  return ops.checkpoint((xin, lw) => layer(xin, lw).x, x, own);
}

/**
 * The tensors of a forward pass that every decoder layer reads besides its weights, under the names
 * the layers read them by from their weight record: the attention bias (grouped for GQA) and the
 * rotary tables.
 */
function withLayerInputs<T>(w: Record<string, T>, bias: T | undefined, rope?: { cos: T; sin: T }): Record<string, T> {
  return { ...w, ...(bias === undefined ? {} : { '@attention_bias': bias }), ...(rope ? { '@rope_cos': rope.cos, '@rope_sin': rope.sin } : {}) };
}

function gptHidden<T>(ops: TensorOps<T>, cfg: ModelConfig, w: Record<string, T>, inputs: ForwardInputs<T>): { hidden: T; present: LayerCache<T>[] } {
  let x = ops.add(inputEmbeddings(ops, cfg, w, inputs), ops.embed(w['pos_emb.weight'], inputs.positions)); // [B, T, D]
  const present: LayerCache<T>[] = [];
  const lw0 = withLayerInputs(w, inputs.attentionBias);
  for (let l = 0; l < cfg.nLayers; l++) {
    const p = `blocks.${l}.`;
    x = decoderLayer(ops, inputs, lw0, p, x, present, (xin, lw) => gptBlock(ops, cfg, lw, p, xin, lw['@attention_bias'], inputs.past?.[l]));
  }
  return { hidden: ops.layerNorm(x, w['ln_f.weight'], w['ln_f.bias'], LAYER_NORM_EPS), present };
}

/**
 * A projection's LoRA term (alpha / rank) (x A) B, or undefined when `w` holds no adapter for it. The
 * scale multiplies the rank-wide x A, not the projection-wide output: the same product, rank / out
 * of the elementwise work (and of what the trainer's tape keeps).
 */
function loraDelta<T>(ops: TensorOps<T>, cfg: ModelConfig, w: Record<string, T>, prefix: string, x: T, loraInput?: (x: T, projection: string) => T): T | undefined {
  const a = w[`${prefix}.lora_a`];
  if (!a || !cfg.lora) return undefined;
  return ops.linear(ops.scale(ops.linear(loraInput ? loraInput(x, prefix) : x, a), cfg.lora.alpha / cfg.lora.rank), w[`${prefix}.lora_b`]);
}

/** A llama projection x @ W (+ b), plus its LoRA adapter (alpha / rank) (x A) B when `w` holds one. */
function project<T>(ops: TensorOps<T>, cfg: ModelConfig, w: Record<string, T>, prefix: string, x: T, loraInput?: (x: T, projection: string) => T): T {
  const a = w[`${prefix}.lora_a`];
  if (ops.loraLinear && a && cfg.lora) {
    return ops.loraLinear(x, w[`${prefix}.weight`], w[`${prefix}.bias`], loraInput ? loraInput(x, prefix) : x, [{ a, b: w[`${prefix}.lora_b`] }], cfg.lora.alpha / cfg.lora.rank);
  }
  const y = ops.linear(x, w[`${prefix}.weight`], w[`${prefix}.bias`]);
  const delta = loraDelta(ops, cfg, w, prefix, x, loraInput);
  return delta ? ops.add(y, delta) : y;
}

/**
 * Frozen projections that read the same input, concatenated along the output axis (fuseFrozenProjections):
 * `fused` names the runtime weight, `parts` the projections in order.
 */
export const FUSED_PROJECTIONS: ReadonlyArray<{ fused: string; parts: readonly string[] }> = [
  { fused: 'attn.qkv_fused', parts: ['attn.q', 'attn.k', 'attn.v'] },
  { fused: 'mlp.gate_up_fused', parts: ['mlp.gate', 'mlp.up'] },
];

/**
 * Several projections of one input: one matmul when `w` holds their fused frozen weight (a LoRA
 * base, fused once by fuseFrozenProjections), each with its own LoRA term; else one by one.
 */
function projectAll<T>(ops: TensorOps<T>, cfg: ModelConfig, w: Record<string, T>, block: string, group: { fused: string; parts: readonly string[] }, sizes: number[], x: T, loraInput?: (x: T, projection: string) => T): T[] {
  const fused = w[`${block}${group.fused}.weight`];
  if (!fused) return group.parts.map((part) => project(ops, cfg, w, `${block}${part}`, x, loraInput));
  const parts = group.parts.map((part, i) => ({ size: sizes[i], a: w[`${block}${part}.lora_a`], b: w[`${block}${part}.lora_b`] }));
  if (ops.loraLinear && cfg.lora && parts.some((part) => part.a)) {
    return ops.splitSizes(ops.loraLinear(x, fused, w[`${block}${group.fused}.bias`], loraInput ? loraInput(x, `${block}${group.fused}`) : x, parts, cfg.lora.alpha / cfg.lora.rank), sizes);
  }
  return ops.splitSizes(ops.linear(x, fused, w[`${block}${group.fused}.bias`]), sizes).map((y, i) => {
    const delta = loraDelta(ops, cfg, w, `${block}${group.parts[i]}`, x, loraInput);
    return delta ? ops.add(y, delta) : y;
  });
}

/**
 * Concatenates frozen llama projections of one input ([in, out] layout) into the weights
 * projectAll multiplies at once, for every layer where all parts (and all or none of their biases)
 * are frozen. Returns the fused weights and the names they replace.
 */
export function fuseFrozenProjections<W>(cfg: ModelConfig, frozen: ReadonlyMap<string, W>, concatColumns: (ws: W[]) => W): { fused: Map<string, W>; replaced: string[] } {
  const fused = new Map<string, W>();
  const replaced: string[] = [];
  if (cfg.architecture !== 'llama') return { fused, replaced };
  for (let l = 0; l < cfg.nLayers; l++) {
    for (const group of FUSED_PROJECTIONS) {
      const names = group.parts.map((part) => `blocks.${l}.${part}`);
      if (!names.every((n) => frozen.has(`${n}.weight`))) continue;
      const biases = names.filter((n) => frozen.has(`${n}.bias`));
      if (biases.length !== 0 && biases.length !== names.length) continue;
      fused.set(`blocks.${l}.${group.fused}.weight`, concatColumns(names.map((n) => frozen.get(`${n}.weight`)!)));
      replaced.push(...names.map((n) => `${n}.weight`));
      if (biases.length) {
        fused.set(`blocks.${l}.${group.fused}.bias`, concatColumns(names.map((n) => frozen.get(`${n}.bias`)!)));
        replaced.push(...names.map((n) => `${n}.bias`));
      }
    }
  }
  return { fused, replaced };
}

/** Rotary embedding, Hugging Face layout: x cos + rotate_half(x) sin, rotate_half([x1, x2]) = [-x2, x1]. */
function rotary<T>(ops: TensorOps<T>, x: T, rope: { cos: T; sin: T }): T {
  if (ops.rotary) return ops.rotary(x, rope.cos, rope.sin);
  const [x1, x2] = ops.split(x, 2);
  return ops.add(ops.mul(x, rope.cos), ops.mul(ops.concat([ops.scale(x2, -1), x1], 3), rope.sin));
}

/**
 * The attention bias for grouped-query attention: the G query heads of one key head are stacked
 * along the query axis, so the mask [B or 1, 1, T, S] is repeated G times along it (made once per
 * forward, not once per layer).
 */
function groupedAttentionBias<T>(ops: TensorOps<T>, cfg: ModelConfig, bias: T): T {
  const { G } = attentionDims(cfg);
  return G === 1 ? bias : ops.concat(Array.from({ length: G }, () => bias), 2);
}

/** Reads the grouped attention bias and the rotary tables from `w` (withLayerInputs). */
function llamaAttention<T>(ops: TensorOps<T>, cfg: ModelConfig, w: Record<string, T>, layer: number, x: T, inputs: ForwardInputs<T>): { y: T; cache: LayerCache<T> } {
  const { H, Hkv, G, Dh } = attentionDims(cfg);
  const p = `blocks.${layer}.attn.`;
  const rope = { cos: w['@rope_cos'], sin: w['@rope_sin'] };
  const groupedBias = w['@attention_bias'];
  const heads = (t: T, n: number) => ops.transpose(ops.reshape(t, [0, 0, n, Dh]), [0, 2, 1, 3]); // [B, n, T, Dh]
  const [qp, kp, vp] = projectAll(ops, cfg, w, `blocks.${layer}.`, FUSED_PROJECTIONS[0], [H * Dh, Hkv * Dh, Hkv * Dh], x, inputs.loraInput);
  const q = ops.scale(rotary(ops, heads(qp, H), rope), 1 / Math.sqrt(Dh));
  const kT = ops.transpose(rotary(ops, heads(kp, Hkv), rope), [0, 1, 3, 2]); // [B, Hkv, Dh, T]
  const v = heads(vp, Hkv); // [B, Hkv, T, Dh]
  const past = inputs.past?.[layer];
  // Grouped-query attention without repeating keys: the G query heads of one key head are stacked
  // along the query axis ([B, Hkv, G * T, Dh]), and the mask is repeated G times to match (groupedBias).
  const grouped = G === 1 ? q : ops.reshape(q, [0, Hkv, -1, Dh]);
  let out = past ? attentionWithPast(ops, grouped, past, kT, v, groupedBias) : attentionCore(ops, grouped, kT, v, groupedBias); // [B, Hkv, G * T, Dh]
  if (G > 1) out = ops.reshape(out, [0, H, -1, Dh]);
  const merged = ops.reshape(ops.transpose(out, [0, 2, 1, 3]), [0, 0, H * Dh]);
  return { y: project(ops, cfg, w, `${p}o`, merged, inputs.loraInput), cache: { k: kT, v } };
}

function llamaHidden<T>(ops: TensorOps<T>, cfg: ModelConfig, w: Record<string, T>, inputs: ForwardInputs<T>): { hidden: T; present: LayerCache<T>[] } {
  const eps = cfg.rmsNormEps ?? 1e-5;
  let x = inputEmbeddings(ops, cfg, w, inputs);
  const present: LayerCache<T>[] = [];
  if (!inputs.rope) throw new Error('llama forward needs inputs.rope (ropeTables)');
  const lw0 = withLayerInputs(w, groupedAttentionBias(ops, cfg, inputs.attentionBias), inputs.rope);
  for (let l = 0; l < cfg.nLayers; l++) {
    const p = `blocks.${l}.`;
    x = decoderLayer(ops, inputs, lw0, p, x, present, (xin, lw) => {
      const a = llamaAttention(ops, cfg, lw, l, ops.rmsNorm(xin, lw[`${p}attn_norm.weight`], eps), inputs);
      const r = ops.add(xin, a.y);
      const h = ops.rmsNorm(r, lw[`${p}mlp_norm.weight`], eps);
      const [gate, up] = projectAll(ops, cfg, lw, p, FUSED_PROJECTIONS[1], [cfg.dFF, cfg.dFF], h, inputs.loraInput);
      const swiglu = ops.swiglu ? ops.swiglu(gate, up) : ops.mul(ops.mul(gate, ops.sigmoid(gate)), up);
      return { x: ops.add(r, project(ops, cfg, lw, `${p}mlp.down`, swiglu, inputs.loraInput)), cache: a.cache };
    });
  }
  return { hidden: ops.rmsNorm(x, w['norm_f.weight'], eps), present };
}

/**
 * cos and sin of the rotary angles for `positions` (row-major [B, T]), as [B, 1, T, Dh] arrays:
 * angle(pos, i) = (pos / scaling) * theta^(-2i / Dh) for i < Dh / 2, repeated for the second half.
 */
export function ropeTables(cfg: ModelConfig, positions: ArrayLike<number>, batch: number, length: number): { cos: Float32Array; sin: Float32Array } {
  const { Dh } = attentionDims(cfg);
  const half = Dh / 2;
  const theta = cfg.ropeTheta ?? 10000;
  const scaling = cfg.ropeScalingFactor ?? 1;
  const invFreq = Float32Array.from({ length: half }, (_, i) => 1 / theta ** ((2 * i) / Dh));
  const cos = new Float32Array(batch * length * Dh);
  const sin = new Float32Array(batch * length * Dh);
  for (let r = 0; r < batch * length; r++) {
    const pos = Math.fround(positions[r] / scaling);
    for (let i = 0; i < half; i++) {
      const angle = Math.fround(pos * invFreq[i]);
      const c = Math.cos(angle);
      const s = Math.sin(angle);
      cos[r * Dh + i] = cos[r * Dh + half + i] = c;
      sin[r * Dh + i] = sin[r * Dh + half + i] = s;
    }
  }
  return { cos, sin };
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
