// Hugging Face model directories in and out: config.json of LlamaForCausalLM, Qwen2ForCausalLM or
// MistralForCausalLM to our ModelConfig, model.safetensors (or a sharded index; F32, F16 or BF16)
// to our parameter names and [in, out] layouts, the tokenizer files, chat template and end-of-turn
// ids beside them; and back out again (writeHfModel), plus PEFT LoRA adapter directories
// (writePeftAdapter / readPeftAdapter). Every unsupported field or unexpected tensor is an error
// that names it.
//
// Over 400 lines because the config mapping, the tensor-name mapping and the PEFT mapping are one
// table read in both directions; split apart, each direction would need its own copy of it.
import { copyFile, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import { checkWeights, loraParameterSpec, parameterSpec, parseModelConfig, type LoraConfig, type LoraTarget, type ModelConfig, type PolicyWeights } from './model';
import { readSafetensorsFile, readSafetensorsHeader, writeSafetensorsFile, type NamedTensor, type SafetensorsDtype } from './safetensors';
import { writeAddedTokens, type AddedSpecialToken } from './tokenizers/added-tokens';
import { tokenString } from './tokenizers/hf';

export const HF_ARCHITECTURES = ['LlamaForCausalLM', 'Qwen2ForCausalLM', 'MistralForCausalLM'] as const;
export type HfArchitecture = (typeof HF_ARCHITECTURES)[number];

const tokenIds = z.union([z.number().int(), z.array(z.number().int())]).nullable().optional();
const hfConfigSchema = z
  .object({
    architectures: z.array(z.string()).min(1),
    vocab_size: z.number().int().min(2),
    hidden_size: z.number().int().min(1),
    intermediate_size: z.number().int().min(1),
    num_hidden_layers: z.number().int().min(1),
    num_attention_heads: z.number().int().min(1),
    num_key_value_heads: z.number().int().min(1).nullable().optional(),
    head_dim: z.number().int().min(2).nullable().optional(),
    max_position_embeddings: z.number().int().min(2),
    rms_norm_eps: z.number().positive().optional(),
    rope_theta: z.number().positive().optional(),
    rope_scaling: z.record(z.string(), z.unknown()).nullable().optional(),
    rope_parameters: z.record(z.string(), z.unknown()).nullable().optional(),
    tie_word_embeddings: z.boolean().optional(),
    attention_bias: z.boolean().optional(),
    mlp_bias: z.boolean().optional(),
    hidden_act: z.string().optional(),
    sliding_window: z.number().int().nullable().optional(),
    use_sliding_window: z.boolean().optional(),
    bos_token_id: tokenIds,
    eos_token_id: tokenIds,
  })
  .passthrough();
type HfConfig = z.infer<typeof hfConfigSchema>;

export interface HfLoadOptions {
  /** Cap on the context length (default: the model's max_position_embeddings). */
  contextLength?: number;
}

export interface GenerationDefaults {
  temperature?: number;
  topP?: number;
  topK?: number;
  maxNewTokens?: number;
  doSample?: boolean;
  repetitionPenalty?: number;
}

export interface HfModelInfo {
  dir: string;
  architecture: HfArchitecture;
  config: ModelConfig;
  /** config.json as read. */
  hfConfig: Record<string, unknown>;
  /** tokenizer.json beside the weights, when there is one. */
  tokenizerPath?: string;
  chatTemplate?: string;
  /** Token strings of tokenizer_config.json (for chat templates). */
  specialTokens: { bosToken?: string; eosToken?: string; padToken?: string };
  /** Ids that end a turn: generation_config.json's eos_token_id (int or list), else config.json's. */
  eosTokenIds: number[];
  bosTokenId?: number;
  generation: GenerationDefaults;
}

export interface LoadedHfModel extends HfModelInfo {
  weights: PolicyWeights;
  source: { files: string[]; dtypes: Record<string, number>; parameterCount: number };
}

async function readJsonFile(file: string, what: string): Promise<Record<string, unknown>> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    throw new Error(`cannot read ${what} ${file}: ${(err as Error).message}`);
  }
  try {
    const v = JSON.parse(text);
    if (v === null || typeof v !== 'object' || Array.isArray(v)) throw new Error('not a JSON object');
    return v as Record<string, unknown>;
  } catch (err) {
    throw new Error(`${what} ${file} does not parse as a JSON object: ${(err as Error).message}`);
  }
}

const optionalJson = async (file: string, what: string) => (existsSync(file) ? readJsonFile(file, what) : undefined);

function idList(v: unknown): number[] {
  if (typeof v === 'number') return [v];
  return Array.isArray(v) ? v.filter((x): x is number => typeof x === 'number') : [];
}


/** config.json -> our ModelConfig; `file` names config.json in errors. */
export function hfConfigToModelConfig(raw: unknown, options: HfLoadOptions = {}, file = 'config.json'): { architecture: HfArchitecture; config: ModelConfig } {
  const parsed = hfConfigSchema.safeParse(raw);
  if (!parsed.success) throw new Error(`${file}: ${parsed.error.issues.map((i) => `${i.path.join('.') || '(config)'}: ${i.message}`).join('; ')}`);
  const hf: HfConfig = parsed.data;
  const architecture = hf.architectures[0] as HfArchitecture;
  if (hf.architectures.length !== 1 || !HF_ARCHITECTURES.includes(architecture)) {
    throw new Error(`${file}: architectures ${JSON.stringify(hf.architectures)} is not supported; supported: ${HF_ARCHITECTURES.join(', ')}`);
  }
  const bad = (field: string, why: string) => new Error(`${file}: ${field} ${why} (${architecture})`);
  if (hf.hidden_act !== undefined && hf.hidden_act !== 'silu') throw bad('hidden_act', `is ${JSON.stringify(hf.hidden_act)}; only "silu" (SwiGLU) is supported`);
  if (hf.mlp_bias) throw bad('mlp_bias', 'is true; MLP biases are not supported');
  if (architecture !== 'Qwen2ForCausalLM' && hf.attention_bias) throw bad('attention_bias', 'is true; Llama-style attention biases (on o_proj too) are not supported');
  const contextLength = Math.min(hf.max_position_embeddings, options.contextLength ?? Infinity);
  const window = hf.sliding_window;
  const windowApplies = architecture === 'MistralForCausalLM' || (architecture === 'Qwen2ForCausalLM' && hf.use_sliding_window === true);
  if (windowApplies && window != null && window < contextLength) {
    throw bad('sliding_window', `is ${window}, below the context length ${contextLength}: sliding-window attention is not supported; cap the context length at ${window} (model contextLength) or use a model without a window`);
  }
  const rope = hf.rope_scaling ?? undefined;
  let ropeScalingFactor: number | undefined;
  if (rope) {
    const kind = rope.rope_type ?? rope.type;
    if (kind === 'linear') {
      if (typeof rope.factor !== 'number' || rope.factor <= 0) throw bad('rope_scaling.factor', 'must be a positive number');
      ropeScalingFactor = rope.factor === 1 ? undefined : rope.factor;
    } else if (kind !== 'default') {
      throw bad('rope_scaling', `type ${JSON.stringify(kind)} is not supported; only null or {"type": "linear", "factor": ...}`);
    }
  }
  const ropeTheta = hf.rope_theta ?? (typeof hf.rope_parameters?.rope_theta === 'number' ? hf.rope_parameters.rope_theta : 10000);
  const heads = hf.num_attention_heads;
  const config = parseModelConfig({
    architecture: 'llama',
    vocabSize: hf.vocab_size,
    dModel: hf.hidden_size,
    nLayers: hf.num_hidden_layers,
    nHeads: heads,
    dFF: hf.intermediate_size,
    contextLength,
    nKvHeads: hf.num_key_value_heads ?? heads,
    headDim: hf.head_dim ?? hf.hidden_size / heads,
    ropeTheta,
    ...(ropeScalingFactor !== undefined ? { ropeScalingFactor } : {}),
    rmsNormEps: hf.rms_norm_eps ?? 1e-6,
    tieEmbeddings: hf.tie_word_embeddings ?? false,
    ...(architecture === 'Qwen2ForCausalLM' ? { attentionBias: true } : {}),
  });
  return { architecture, config };
}

const HF_PROJECTION: Record<LoraTarget, string> = { q: 'self_attn.q_proj', k: 'self_attn.k_proj', v: 'self_attn.v_proj', o: 'self_attn.o_proj', gate: 'mlp.gate_proj', up: 'mlp.up_proj', down: 'mlp.down_proj' };

/** Our parameter name -> the Hugging Face tensor name, and whether the layouts are transposes ([in, out] vs [out, in]). */
export function hfTensorNameOf(name: string): { hfName: string; transpose: boolean } {
  const fixed: Record<string, string> = { 'tok_emb.weight': 'model.embed_tokens.weight', 'norm_f.weight': 'model.norm.weight' };
  if (fixed[name]) return { hfName: fixed[name], transpose: false };
  if (name === 'lm_head.weight') return { hfName: 'lm_head.weight', transpose: true };
  const m = /^blocks\.(\d+)\.(attn_norm|mlp_norm|attn|mlp)\.(?:(\w+)\.)?(weight|bias)$/.exec(name);
  if (m) {
    const layer = `model.layers.${m[1]}.`;
    if (m[2] === 'attn_norm') return { hfName: `${layer}input_layernorm.weight`, transpose: false };
    if (m[2] === 'mlp_norm') return { hfName: `${layer}post_attention_layernorm.weight`, transpose: false };
    const proj = HF_PROJECTION[m[3] as LoraTarget];
    if (proj) return { hfName: `${layer}${proj}.${m[4]}`, transpose: m[4] === 'weight' };
  }
  throw new Error(`parameter "${name}" has no Hugging Face counterpart (only llama-architecture parameters map)`);
}

/** Every base parameter of `cfg` with its Hugging Face name and shape. */
export function hfWeightMap(cfg: ModelConfig): Array<{ name: string; hfName: string; shape: number[]; hfShape: number[]; transpose: boolean }> {
  if (cfg.architecture !== 'llama') throw new Error('only llama-architecture models map onto Hugging Face checkpoints (set model.architecture to "llama")');
  return parameterSpec(cfg)
    .filter((p) => !p.adapter)
    .map((p) => {
      const { hfName, transpose } = hfTensorNameOf(p.name);
      return { name: p.name, hfName, shape: p.shape, hfShape: transpose ? [p.shape[1], p.shape[0]] : p.shape, transpose };
    });
}

/** [rows, cols] row-major -> [cols, rows], blocked for the cache. */
export function transpose2d(data: Float32Array, rows: number, cols: number): Float32Array {
  const out = new Float32Array(data.length);
  const B = 64;
  for (let r0 = 0; r0 < rows; r0 += B) {
    const r1 = Math.min(rows, r0 + B);
    for (let c0 = 0; c0 < cols; c0 += B) {
      const c1 = Math.min(cols, c0 + B);
      for (let r = r0; r < r1; r++) for (let c = c0; c < c1; c++) out[c * rows + r] = data[r * cols + c];
    }
  }
  return out;
}

async function chatTemplateOf(dir: string, tokenizerConfig: Record<string, unknown> | undefined): Promise<string | undefined> {
  const t = tokenizerConfig?.chat_template;
  if (typeof t === 'string') return t;
  if (Array.isArray(t)) {
    const named = t.find((e) => e && typeof e === 'object' && (e as { name?: unknown }).name === 'default') ?? t[0];
    if (named && typeof (named as { template?: unknown }).template === 'string') return (named as { template: string }).template;
  }
  const jinja = path.join(dir, 'chat_template.jinja');
  if (existsSync(jinja)) return readFile(jinja, 'utf8');
  const json = await optionalJson(path.join(dir, 'chat_template.json'), 'chat template file');
  return typeof json?.chat_template === 'string' ? json.chat_template : undefined;
}

/** Reads a model directory's config, tokenizer, chat template and generation settings (no weights). */
export async function readHfModelConfig(dir: string, options: HfLoadOptions = {}): Promise<HfModelInfo> {
  const configFile = path.join(dir, 'config.json');
  const hfConfig = await readJsonFile(configFile, 'model config');
  const { architecture, config } = hfConfigToModelConfig(hfConfig, options, configFile);
  const tokenizerConfig = await optionalJson(path.join(dir, 'tokenizer_config.json'), 'tokenizer config');
  const generation = await optionalJson(path.join(dir, 'generation_config.json'), 'generation config');
  const eosTokenIds = idList(generation?.eos_token_id ?? hfConfig.eos_token_id);
  const bos = generation?.bos_token_id ?? hfConfig.bos_token_id;
  const num = (v: unknown) => (typeof v === 'number' ? v : undefined);
  const defaults: GenerationDefaults = {
    temperature: num(generation?.temperature),
    topP: num(generation?.top_p),
    topK: num(generation?.top_k),
    maxNewTokens: num(generation?.max_new_tokens),
    doSample: typeof generation?.do_sample === 'boolean' ? generation.do_sample : undefined,
    repetitionPenalty: num(generation?.repetition_penalty),
  };
  const tokenizerPath = path.join(dir, 'tokenizer.json');
  return {
    dir,
    architecture,
    config,
    hfConfig,
    tokenizerPath: existsSync(tokenizerPath) ? tokenizerPath : undefined,
    chatTemplate: await chatTemplateOf(dir, tokenizerConfig),
    specialTokens: { bosToken: tokenString(tokenizerConfig?.bos_token), eosToken: tokenString(tokenizerConfig?.eos_token), padToken: tokenString(tokenizerConfig?.pad_token) },
    eosTokenIds,
    bosTokenId: typeof bos === 'number' ? bos : undefined,
    generation: Object.fromEntries(Object.entries(defaults).filter(([, v]) => v !== undefined)) as GenerationDefaults,
  };
}

/** The safetensors files of `dir` and which file holds each tensor (model.safetensors, or the sharded index). */
async function weightFiles(dir: string): Promise<Map<string, string[]>> {
  const single = path.join(dir, 'model.safetensors');
  const index = path.join(dir, 'model.safetensors.index.json');
  const files = new Map<string, string[]>();
  if (existsSync(index)) {
    const map = (await readJsonFile(index, 'safetensors index')).weight_map;
    if (!map || typeof map !== 'object') throw new Error(`${index}: has no weight_map object`);
    for (const [name, file] of Object.entries(map as Record<string, unknown>)) {
      if (typeof file !== 'string') throw new Error(`${index}: weight_map["${name}"] is not a file name`);
      const full = path.join(dir, file);
      files.set(full, [...(files.get(full) ?? []), name]);
    }
  } else if (existsSync(single)) {
    files.set(single, [...(await readSafetensorsHeader(single)).entries.keys()]);
  } else {
    const bin = ['pytorch_model.bin', 'model.pt'].find((f) => existsSync(path.join(dir, f)));
    throw new Error(`${dir}: no model.safetensors or model.safetensors.index.json${bin ? ` (only ${bin}: convert it to safetensors first)` : ''}`);
  }
  return files;
}

/** Tensors a checkpoint may carry that are not parameters (RoPE caches of older exports). */
const IGNORED = /(^|\.)rotary_emb\.inv_freq$/;

/** Loads a Hugging Face model directory: config, weights in our names and layouts, tokenizer, template, eos ids. */
export async function loadHfModel(dir: string, options: HfLoadOptions = {}): Promise<LoadedHfModel> {
  const info = await readHfModelConfig(dir, options);
  const map = hfWeightMap(info.config);
  const byHfName = new Map(map.map((m) => [m.hfName, m]));
  const files = await weightFiles(dir);
  const where = new Map<string, string>();
  for (const [file, names] of files) {
    const header = await readSafetensorsHeader(file);
    for (const name of names) {
      const entry = header.entries.get(name);
      if (!entry) throw new Error(`${file}: the index says it holds tensor "${name}", but it does not`);
      if (IGNORED.test(name) || (name === 'lm_head.weight' && info.config.tieEmbeddings)) continue;
      const m = byHfName.get(name);
      if (!m) throw new Error(`${file}: unexpected tensor "${name}": a ${info.architecture} with this config.json has no such parameter`);
      if (entry.shape.join() !== m.hfShape.join()) throw new Error(`${file}: tensor "${name}" has shape [${entry.shape}], expected [${m.hfShape}] from config.json`);
      where.set(name, file);
    }
  }
  const missing = map.find((m) => !where.has(m.hfName));
  if (missing) throw new Error(`${dir}: missing tensor "${missing.hfName}" (shape [${missing.hfShape}]) in its safetensors files`);
  const weights: PolicyWeights = {};
  const dtypes: Record<string, number> = {};
  for (const file of files.keys()) {
    const names = [...where].filter(([, f]) => f === file).map(([n]) => n);
    const read = await readSafetensorsFile(file, {
      names,
      map: (name, t): NamedTensor => {
        const m = byHfName.get(name)!;
        return { shape: m.shape, data: m.transpose ? transpose2d(t.data, t.shape[0], t.shape[1]) : t.data };
      },
    });
    for (const [name, t] of read.tensors) weights[byHfName.get(name)!.name] = t.data;
    for (const d of read.dtypes.values()) dtypes[d] = (dtypes[d] ?? 0) + 1;
  }
  const parameterCount = map.reduce((n, m) => n + m.shape.reduce((a, b) => a * b, 1), 0);
  return { ...info, weights, source: { files: [...files.keys()], dtypes, parameterCount } };
}

/** Parameter count and stored dtypes of a model directory, from the safetensors headers only. */
export async function describeHfWeights(dir: string): Promise<{ files: string[]; tensors: number; parameterCount: number; dtypes: Record<string, number> }> {
  const files = await weightFiles(dir);
  let tensors = 0;
  let parameterCount = 0;
  const dtypes: Record<string, number> = {};
  for (const [file, names] of files) {
    const header = await readSafetensorsHeader(file);
    for (const name of names) {
      const e = header.entries.get(name);
      if (!e || IGNORED.test(name)) continue;
      tensors++;
      parameterCount += e.shape.reduce((a, b) => a * b, 1);
      dtypes[e.dtype] = (dtypes[e.dtype] ?? 0) + 1;
    }
  }
  return { files: [...files.keys()], tensors, parameterCount, dtypes };
}

/** Our ModelConfig as a Hugging Face config.json (LlamaForCausalLM, or Qwen2ForCausalLM with q/k/v biases). */
export function modelConfigToHfConfig(cfg: ModelConfig, extra: Record<string, unknown> = {}): Record<string, unknown> {
  if (cfg.architecture !== 'llama') throw new Error('only llama-architecture models can be written as Hugging Face checkpoints');
  const qwen = cfg.attentionBias === true;
  return {
    architectures: [qwen ? 'Qwen2ForCausalLM' : 'LlamaForCausalLM'],
    model_type: qwen ? 'qwen2' : 'llama',
    vocab_size: cfg.vocabSize,
    hidden_size: cfg.dModel,
    intermediate_size: cfg.dFF,
    num_hidden_layers: cfg.nLayers,
    num_attention_heads: cfg.nHeads,
    num_key_value_heads: cfg.nKvHeads ?? cfg.nHeads,
    head_dim: cfg.headDim ?? cfg.dModel / cfg.nHeads,
    hidden_act: 'silu',
    max_position_embeddings: cfg.contextLength,
    rms_norm_eps: cfg.rmsNormEps ?? 1e-5,
    rope_theta: cfg.ropeTheta ?? 10000,
    rope_scaling: cfg.ropeScalingFactor && cfg.ropeScalingFactor !== 1 ? { type: 'linear', rope_type: 'linear', factor: cfg.ropeScalingFactor } : null,
    tie_word_embeddings: cfg.tieEmbeddings ?? false,
    ...(qwen ? { use_sliding_window: false, sliding_window: null } : { attention_bias: false, mlp_bias: false }),
    torch_dtype: 'float32',
    ...extra,
  };
}

const TOKENIZER_FILES = ['tokenizer.json', 'tokenizer_config.json', 'generation_config.json', 'special_tokens_map.json', 'chat_template.jinja'];

/**
 * Writes `weights` (base parameters; LoRA adapters go to writePeftAdapter) as a Hugging Face model
 * directory that transformers loads: config.json, model.safetensors (F32 unless `dtype`), and the
 * tokenizer files copied from `tokenizerDir` (its config.json's bos/eos ids carried over), with
 * `addedTokens` (model.add_special_tokens) written into them.
 */
export async function writeHfModel(outDir: string, config: ModelConfig, weights: PolicyWeights, options: { tokenizerDir?: string; dtype?: SafetensorsDtype; addedTokens?: readonly AddedSpecialToken[] } = {}): Promise<void> {
  const map = hfWeightMap(config);
  const base = Object.fromEntries(map.map((m) => [m.name, weights[m.name]]).filter(([, w]) => w !== undefined));
  const { lora: _lora, ...baseConfig } = config;
  checkWeights(baseConfig, base);
  await mkdir(outDir, { recursive: true });
  // A sharded index left by an earlier model in outDir would shadow the new model.safetensors.
  await rm(path.join(outDir, 'model.safetensors.index.json'), { force: true });
  const extra: Record<string, unknown> = {};
  if (options.tokenizerDir) {
    const source = await optionalJson(path.join(options.tokenizerDir, 'config.json'), 'model config');
    for (const key of ['bos_token_id', 'eos_token_id', 'pad_token_id']) if (source?.[key] !== undefined) extra[key] = source[key];
    for (const file of TOKENIZER_FILES) {
      const from = path.join(options.tokenizerDir, file);
      if (existsSync(from) && path.resolve(from) !== path.resolve(outDir, file)) await copyFile(from, path.join(outDir, file));
    }
  }
  if (options.addedTokens?.length) await writeAddedTokens(outDir, options.addedTokens);
  await writeSafetensorsFile(
    path.join(outDir, 'model.safetensors'),
    map.map((m) => ({ name: m.hfName, shape: m.hfShape })),
    (_name, i) => (map[i].transpose ? transpose2d(base[map[i].name], map[i].shape[0], map[i].shape[1]) : base[map[i].name]),
    { metadata: { format: 'pt' }, dtype: options.dtype },
  );
  await writeFile(path.join(outDir, 'config.json'), `${JSON.stringify(modelConfigToHfConfig(config, extra), null, 2)}\n`);
}

const PEFT_PREFIX = 'base_model.model.';
const PEFT_NAME = /^base_model\.model\.model\.layers\.(\d+)\.(self_attn|mlp)\.(q|k|v|o|gate|up|down)_proj\.lora_(A|B)(?:\.default)?\.weight$/;

/** PEFT tensor name of our adapter `<prefix>.lora_a|lora_b`. */
function peftNameOf(name: string): string {
  const m = /^(.*)\.lora_(a|b)$/.exec(name);
  if (!m) throw new Error(`"${name}" is not a LoRA adapter tensor (<projection>.lora_a or .lora_b)`);
  const { hfName } = hfTensorNameOf(`${m[1]}.weight`);
  return `${PEFT_PREFIX}${hfName.replace(/\.weight$/, '')}.lora_${m[2].toUpperCase()}.weight`;
}

/**
 * Writes a PEFT LoRA adapter directory (adapter_config.json + adapter_model.safetensors, PEFT names,
 * A [r, in] and B [out, r]) for `config.lora`. `adapterWeights` may also hold base parameters (ignored).
 */
export async function writePeftAdapter(outDir: string, config: ModelConfig, adapterWeights: PolicyWeights, options: { baseModel: string }): Promise<void> {
  const lora = config.lora;
  if (!lora) throw new Error('writePeftAdapter: the model config has no lora section');
  const spec = loraParameterSpec(config);
  const known = new Set(parameterSpec(config).map((p) => p.name));
  for (const name of Object.keys(adapterWeights)) if (!known.has(name)) throw new Error(`writePeftAdapter: unexpected tensor "${name}": not a parameter of this LoRA model`);
  for (const p of spec) {
    const w = adapterWeights[p.name];
    if (!w) throw new Error(`writePeftAdapter: missing adapter tensor "${p.name}" (shape [${p.shape}])`);
    if (w.length !== p.shape[0] * p.shape[1]) throw new Error(`writePeftAdapter: tensor "${p.name}" has ${w.length} values, expected shape [${p.shape}]`);
  }
  await mkdir(outDir, { recursive: true });
  await writeSafetensorsFile(
    path.join(outDir, 'adapter_model.safetensors'),
    spec.map((p) => ({ name: peftNameOf(p.name), shape: [p.shape[1], p.shape[0]] })),
    (_name, i) => transpose2d(adapterWeights[spec[i].name], spec[i].shape[0], spec[i].shape[1]),
    { metadata: { format: 'pt' } },
  );
  const adapterConfig = {
    peft_type: 'LORA',
    task_type: 'CAUSAL_LM',
    base_model_name_or_path: options.baseModel,
    r: lora.rank,
    lora_alpha: lora.alpha,
    lora_dropout: 0,
    target_modules: lora.targets.map((t) => HF_PROJECTION[t].split('.')[1]),
    bias: 'none',
    fan_in_fan_out: false,
    inference_mode: true,
    init_lora_weights: true,
    use_rslora: false,
    use_dora: false,
    modules_to_save: null,
    layers_to_transform: null,
    rank_pattern: {},
    alpha_pattern: {},
  };
  await writeFile(path.join(outDir, 'adapter_config.json'), `${JSON.stringify(adapterConfig, null, 2)}\n`);
}

const TARGET_OF_MODULE: Record<string, LoraTarget> = Object.fromEntries(Object.entries(HF_PROJECTION).map(([t, p]) => [p.split('.')[1], t as LoraTarget]));

/** Reads a PEFT LoRA adapter directory into our adapter names and layouts; with `config`, checks it fits that model. */
export async function readPeftAdapter(dir: string, options: { config?: ModelConfig } = {}): Promise<{ lora: LoraConfig; weights: PolicyWeights; baseModel?: string }> {
  const file = path.join(dir, 'adapter_config.json');
  const ac = await readJsonFile(file, 'PEFT adapter config');
  if (ac.peft_type !== 'LORA') throw new Error(`${file}: peft_type is ${JSON.stringify(ac.peft_type)}; only "LORA" adapters are supported`);
  for (const [key, ok] of [['use_rslora', !ac.use_rslora], ['use_dora', !ac.use_dora], ['fan_in_fan_out', !ac.fan_in_fan_out], ['bias', ac.bias === undefined || ac.bias === 'none'], ['layers_to_transform', ac.layers_to_transform == null], ['modules_to_save', ac.modules_to_save == null || (Array.isArray(ac.modules_to_save) && ac.modules_to_save.length === 0)], ['rank_pattern', !ac.rank_pattern || Object.keys(ac.rank_pattern).length === 0], ['alpha_pattern', !ac.alpha_pattern || Object.keys(ac.alpha_pattern).length === 0]] as const) {
    if (!ok) throw new Error(`${file}: ${key} = ${JSON.stringify(ac[key])} is not supported (plain LoRA only: use_rslora/use_dora/fan_in_fan_out false, bias "none", no per-layer patterns or modules_to_save)`);
  }
  if (!Number.isInteger(ac.r) || (ac.r as number) < 1) throw new Error(`${file}: r must be a positive integer, got ${JSON.stringify(ac.r)}`);
  if (typeof ac.lora_alpha !== 'number') throw new Error(`${file}: lora_alpha must be a number, got ${JSON.stringify(ac.lora_alpha)}`);
  if (!Array.isArray(ac.target_modules)) throw new Error(`${file}: target_modules must be a list of module names (e.g. ["q_proj", "v_proj"]), got ${JSON.stringify(ac.target_modules)}`);
  const targets = (ac.target_modules as unknown[]).map((m) => {
    const t = TARGET_OF_MODULE[String(m)];
    if (!t) throw new Error(`${file}: target module ${JSON.stringify(m)} is not supported; supported: ${Object.keys(TARGET_OF_MODULE).join(', ')}`);
    return t;
  });
  const lora: LoraConfig = { rank: ac.r as number, alpha: ac.lora_alpha, targets };
  const weightsFile = path.join(dir, 'adapter_model.safetensors');
  if (!existsSync(weightsFile)) throw new Error(`${dir}: no adapter_model.safetensors${existsSync(path.join(dir, 'adapter_model.bin')) ? ' (only adapter_model.bin: save the adapter with safe_serialization=True)' : ''}`);
  const weights: PolicyWeights = {};
  const shapes: Record<string, number[]> = {};
  const read = await readSafetensorsFile(weightsFile);
  for (const [name, t] of read.tensors) {
    const m = PEFT_NAME.exec(name);
    if (!m || t.shape.length !== 2) throw new Error(`${weightsFile}: unexpected tensor "${name}" [${t.shape}]: not a LoRA A/B matrix of a llama projection`);
    const ours = `blocks.${m[1]}.${m[2] === 'self_attn' ? 'attn' : 'mlp'}.${m[3]}.lora_${m[4].toLowerCase()}`;
    weights[ours] = transpose2d(t.data, t.shape[0], t.shape[1]);
    shapes[ours] = [t.shape[1], t.shape[0]];
  }
  if (options.config) {
    const cfg = { ...options.config, lora };
    const spec = loraParameterSpec(cfg);
    for (const p of spec) {
      const w = weights[p.name];
      if (!w) throw new Error(`${weightsFile}: missing tensor "${peftNameOf(p.name)}" for target ${p.name}`);
      if (shapes[p.name].join() !== p.shape.join()) throw new Error(`${weightsFile}: tensor "${peftNameOf(p.name)}" has shape [${[...shapes[p.name]].reverse()}], but this model needs [${[...p.shape].reverse()}]`);
    }
    const expected = new Set(spec.map((p) => p.name));
    const extra = Object.keys(weights).find((n) => !expected.has(n));
    if (extra) throw new Error(`${weightsFile}: unexpected tensor "${peftNameOf(extra)}": the model has no such projection (layers ${cfg.nLayers})`);
  }
  return { lora, weights, baseModel: typeof ac.base_model_name_or_path === 'string' ? ac.base_model_name_or_path : undefined };
}
