// GGUF files (llama.cpp's model format) turned into Hugging Face model directories. The header and
// tensor table are parsed by @huggingface/gguf; the tensor bytes are read here and dequantized to
// float32 (F32, F16, BF16, Q8_0, Q4_0, Q4_1: ggml's block formats). importGguf writes config.json,
// model.safetensors (Hugging Face names and [out, in] layouts, float32), the tokenizer files and
// generation_config.json; llama.cpp's converter permutes the q/k projection rows for its RoPE
// layout, and the import undoes that. The tokenizer files come from engines/tokenizers/gguf-vocab.ts.
import { mkdir, open, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { gguf as parseGguf, GGMLQuantizationType } from '@huggingface/gguf';
import { decodeValues, float16Table, writeSafetensorsFile } from './safetensors';
import { ggufTokenizerFiles } from './tokenizers/gguf-vocab';

export interface GgufTensor {
  name: string;
  /** Row-major shape (GGUF lists dims fastest-varying first; this is that list reversed). */
  shape: number[];
  /** ggml type code (GGMLQuantizationType) and its name. */
  type: number;
  typeName: string;
  /** Absolute byte position in the file, and the byte length of the stored data. */
  offset: number;
  byteLength: number;
}

export interface GgufFile {
  path: string;
  version: number;
  /** Metadata key -> value (64-bit integers as numbers). */
  metadata: Record<string, unknown>;
  tensors: GgufTensor[];
  alignment: number;
  /** Absolute byte position of the tensor data section. */
  dataOffset: number;
}

/** Per ggml type we dequantize: elements per block and bytes per block. */
const BLOCKS: Partial<Record<number, { elements: number; bytes: number }>> = {
  [GGMLQuantizationType.F32]: { elements: 1, bytes: 4 },
  [GGMLQuantizationType.F16]: { elements: 1, bytes: 2 },
  [GGMLQuantizationType.BF16]: { elements: 1, bytes: 2 },
  [GGMLQuantizationType.Q8_0]: { elements: 32, bytes: 34 },
  [GGMLQuantizationType.Q4_0]: { elements: 32, bytes: 18 },
  [GGMLQuantizationType.Q4_1]: { elements: 32, bytes: 20 },
};

export function ggmlTypeName(type: number): string {
  return GGMLQuantizationType[type] ?? `type ${type}`;
}

const SUPPORTED = () => Object.keys(BLOCKS).map((t) => ggmlTypeName(Number(t))).join(', ');

function toNumber(value: unknown): unknown {
  if (typeof value === 'bigint') return Number(value);
  if (Array.isArray(value)) return value.map(toNumber);
  return value;
}

/** Parses the header and tensor table of the GGUF file at `file` (reads kilobytes to megabytes, not the tensors). */
export async function readGgufFile(file: string): Promise<GgufFile> {
  let parsed: Awaited<ReturnType<typeof parseGguf>>;
  try {
    parsed = await parseGguf(path.resolve(file), { allowLocalFile: true });
  } catch (err) {
    throw new Error(`${file} is not a readable GGUF file: ${(err as Error).message}`);
  }
  const metadata: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(parsed.metadata)) metadata[key] = toNumber(value);
  const dataOffset = Number(parsed.tensorDataOffset);
  const size = (await stat(file)).size;
  const tensors = parsed.tensorInfos.map((info): GgufTensor => {
    const shape = info.shape.map(Number).reverse();
    const count = shape.reduce((a, b) => a * b, 1);
    const block = BLOCKS[info.dtype];
    const rowLength = shape[shape.length - 1] ?? 1;
    const byteLength = block && rowLength % block.elements === 0 ? (count / block.elements) * block.bytes : Number.NaN;
    const offset = dataOffset + Number(info.offset);
    if (block && offset + byteLength > size) {
      throw new Error(`${file}: tensor "${info.name}" needs bytes ${offset}..${offset + byteLength} but the file has ${size} (truncated download?)`);
    }
    return { name: info.name, shape, type: info.dtype, typeName: ggmlTypeName(info.dtype), offset, byteLength };
  });
  return { path: file, version: Number(parsed.metadata.version), metadata, tensors, alignment: Number(metadata['general.alignment'] ?? 32), dataOffset };
}

/** ggml block data of `count` elements of `type` -> float32. `what` names the tensor in errors. */
export function dequantizeGgml(type: number, src: Uint8Array, count: number, what = 'tensor'): Float32Array {
  const block = BLOCKS[type];
  if (!block) throw new Error(`${what} has ggml type ${ggmlTypeName(type)}, which we cannot dequantize (supported: ${SUPPORTED()}); re-quantize the GGUF to one of those or import the original Hugging Face model`);
  if (count % block.elements !== 0) throw new Error(`${what}: ${count} elements are not a whole number of ${ggmlTypeName(type)} blocks of ${block.elements}`);
  const blocks = count / block.elements;
  if (src.length < blocks * block.bytes) throw new Error(`${what}: ${src.length} bytes hold fewer than the ${blocks * block.bytes} that ${count} ${ggmlTypeName(type)} values need`);
  if (type === GGMLQuantizationType.F32) return decodeValues(src, 'F32', count);
  if (type === GGMLQuantizationType.F16) return decodeValues(src, 'F16', count);
  if (type === GGMLQuantizationType.BF16) return decodeValues(src, 'BF16', count);
  const half = float16Table();
  const out = new Float32Array(count);
  if (type === GGMLQuantizationType.Q8_0) {
    // block_q8_0: f16 scale d, 32 int8 q; x = q * d.
    for (let b = 0; b < blocks; b++) {
      const o = b * 34;
      const d = half[src[o] | (src[o + 1] << 8)];
      const y = b * 32;
      for (let j = 0; j < 32; j++) out[y + j] = ((src[o + 2 + j] << 24) >> 24) * d;
    }
  } else if (type === GGMLQuantizationType.Q4_0) {
    // block_q4_0: f16 d, 16 bytes; element j is the low nibble of byte j, element j+16 the high one; x = (q - 8) * d.
    for (let b = 0; b < blocks; b++) {
      const o = b * 18;
      const d = half[src[o] | (src[o + 1] << 8)];
      const y = b * 32;
      for (let j = 0; j < 16; j++) {
        const q = src[o + 2 + j];
        out[y + j] = ((q & 0x0f) - 8) * d;
        out[y + j + 16] = ((q >> 4) - 8) * d;
      }
    }
  } else {
    // block_q4_1: f16 d, f16 m, 16 bytes of nibbles as in Q4_0; x = q * d + m.
    for (let b = 0; b < blocks; b++) {
      const o = b * 20;
      const d = half[src[o] | (src[o + 1] << 8)];
      const m = half[src[o + 2] | (src[o + 3] << 8)];
      const y = b * 32;
      for (let j = 0; j < 16; j++) {
        const q = src[o + 4 + j];
        out[y + j] = (q & 0x0f) * d + m;
        out[y + j + 16] = (q >> 4) * d + m;
      }
    }
  }
  return out;
}

/** Reads and dequantizes one tensor of `file` (row-major float32, shape `tensor.shape`). */
export async function readGgufTensor(file: GgufFile, name: string): Promise<Float32Array> {
  const tensor = file.tensors.find((t) => t.name === name);
  if (!tensor) throw new Error(`${file.path}: has no tensor "${name}"`);
  const what = `${file.path}: tensor "${name}"`;
  if (!BLOCKS[tensor.type]) return dequantizeGgml(tensor.type, new Uint8Array(0), 0, what);
  if (!Number.isFinite(tensor.byteLength)) throw new Error(`${what}: its rows of ${tensor.shape[tensor.shape.length - 1]} are not a whole number of ${tensor.typeName} blocks`);
  const bytes = new Uint8Array(tensor.byteLength);
  const fh = await open(file.path, 'r');
  try {
    let done = 0;
    while (done < bytes.length) {
      const { bytesRead } = await fh.read(bytes, done, bytes.length - done, tensor.offset + done);
      if (bytesRead === 0) throw new Error(`${what}: the file ends before the tensor does (truncated)`);
      done += bytesRead;
    }
  } finally {
    await fh.close();
  }
  return dequantizeGgml(tensor.type, bytes, tensor.shape.reduce((a, b) => a * b, 1), what);
}

/**
 * llama.cpp's convert_hf_to_gguf.py `permute(w, n_head, n_head_kv)` on the rows of a [rows, cols]
 * matrix (or a bias: cols 1): w.reshape(nHead, 2, rows / nHead / 2, cols).swapaxes(1, 2).reshape(rows, cols).
 * Row h*Dh + i*Dh/2 + j of the Hugging Face weight becomes row h*Dh + 2j + i.
 */
export function permuteRopeRows(w: Float32Array, nHead: number, rows: number, cols: number): Float32Array {
  return moveRows(w, nHead, rows, cols, true);
}

/** The inverse of permuteRopeRows: GGUF q/k rows back to Hugging Face's rotate-half layout. */
export function unpermuteRopeRows(w: Float32Array, nHead: number, rows: number, cols: number): Float32Array {
  return moveRows(w, nHead, rows, cols, false);
}

function moveRows(w: Float32Array, nHead: number, rows: number, cols: number, forward: boolean): Float32Array {
  if (w.length !== rows * cols) throw new Error(`RoPE row permutation: ${w.length} values are not [${rows}, ${cols}]`);
  if (rows % (2 * nHead) !== 0) throw new Error(`RoPE row permutation: ${rows} rows do not split into ${nHead} heads of an even width`);
  const half = rows / nHead / 2;
  const out = new Float32Array(w.length);
  for (let h = 0; h < nHead; h++) {
    for (let i = 0; i < 2; i++) {
      for (let j = 0; j < half; j++) {
        const hfRow = h * 2 * half + i * half + j;
        const ggRow = h * 2 * half + 2 * j + i;
        const [from, to] = forward ? [hfRow, ggRow] : [ggRow, hfRow];
        out.set(w.subarray(from * cols, (from + 1) * cols), to * cols);
      }
    }
  }
  return out;
}

export interface GgufImportReport {
  outDir: string;
  /** What the GGUF stored: ggml type name -> tensor count. */
  sourceTypes: Record<string, number>;
  parameterCount: number;
  /** The Hugging Face config.json written. */
  config: Record<string, unknown>;
  bytesWritten: number;
}

/** The shortest decimal that is the same float32 (GGUF stores floats as float32: 1e-5, not 9.99999974e-6). */
function float32Decimal(value: number): number {
  for (let p = 1; p <= 9; p++) {
    const candidate = Number(value.toPrecision(p));
    if (Math.fround(candidate) === Math.fround(value)) return candidate;
  }
  return value;
}

function hfConfigFromGguf(file: GgufFile): { config: Record<string, unknown>; heads: number; kvHeads: number } {
  const m = file.metadata;
  const arch = m['general.architecture'];
  if (arch !== 'llama') throw new Error(`${file.path}: general.architecture is ${JSON.stringify(arch)}; only "llama" GGUF files (Llama, SmolLM, Mistral-style) can be imported`);
  const need = (key: string): number => {
    const v = m[`llama.${key}`];
    if (typeof v !== 'number') throw new Error(`${file.path}: metadata llama.${key} is missing or not a number`);
    return v;
  };
  const hidden = need('embedding_length');
  const heads = need('attention.head_count');
  const kvHeads = typeof m['llama.attention.head_count_kv'] === 'number' ? (m['llama.attention.head_count_kv'] as number) : heads;
  const headDim = typeof m['llama.attention.key_length'] === 'number' ? (m['llama.attention.key_length'] as number) : hidden / heads;
  const ropeDims = m['llama.rope.dimension_count'];
  if (typeof ropeDims === 'number' && ropeDims !== headDim) throw new Error(`${file.path}: llama.rope.dimension_count ${ropeDims} differs from the head width ${headDim}; partial rotary embeddings are not supported`);
  const scaling = m['llama.rope.scaling.type'];
  let ropeScaling: Record<string, unknown> | null = null;
  if (scaling === 'linear') ropeScaling = { type: 'linear', rope_type: 'linear', factor: float32Decimal(Number(m['llama.rope.scaling.factor'])) };
  else if (scaling !== undefined && scaling !== 'none') throw new Error(`${file.path}: llama.rope.scaling.type ${JSON.stringify(scaling)} is not supported (only linear)`);
  const tokens = m['tokenizer.ggml.tokens'];
  const embd = file.tensors.find((t) => t.name === 'token_embd.weight');
  const vocab = typeof m['llama.vocab_size'] === 'number' ? m['llama.vocab_size'] : Array.isArray(tokens) ? tokens.length : embd?.shape[0];
  const config: Record<string, unknown> = {
    architectures: ['LlamaForCausalLM'],
    model_type: 'llama',
    hidden_size: hidden,
    intermediate_size: need('feed_forward_length'),
    num_attention_heads: heads,
    num_key_value_heads: kvHeads,
    num_hidden_layers: need('block_count'),
    head_dim: headDim,
    hidden_act: 'silu',
    rms_norm_eps: float32Decimal(typeof m['llama.attention.layer_norm_rms_epsilon'] === 'number' ? (m['llama.attention.layer_norm_rms_epsilon'] as number) : 1e-5),
    rope_theta: float32Decimal(typeof m['llama.rope.freq_base'] === 'number' ? (m['llama.rope.freq_base'] as number) : 10000),
    rope_scaling: ropeScaling,
    vocab_size: vocab,
    max_position_embeddings: need('context_length'),
    tie_word_embeddings: !file.tensors.some((t) => t.name === 'output.weight'),
    attention_bias: false,
    mlp_bias: false,
    torch_dtype: 'float32',
  };
  if (typeof m['tokenizer.ggml.bos_token_id'] === 'number') config.bos_token_id = m['tokenizer.ggml.bos_token_id'];
  if (typeof m['tokenizer.ggml.eos_token_id'] === 'number') config.eos_token_id = m['tokenizer.ggml.eos_token_id'];
  return { config, heads, kvHeads };
}

/** GGUF llama tensor name -> Hugging Face name and the head count whose RoPE permutation to undo. */
function hfTensorName(name: string, heads: number, kvHeads: number): { hf: string; unpermuteHeads?: number } | undefined {
  const fixed: Record<string, string> = { 'token_embd.weight': 'model.embed_tokens.weight', 'output_norm.weight': 'model.norm.weight', 'output.weight': 'lm_head.weight' };
  if (fixed[name]) return { hf: fixed[name] };
  const m = /^blk\.(\d+)\.(\w+)\.weight$/.exec(name);
  if (!m) return undefined;
  const p = `model.layers.${m[1]}.`;
  const parts: Record<string, { hf: string; unpermuteHeads?: number }> = {
    attn_norm: { hf: `${p}input_layernorm.weight` },
    ffn_norm: { hf: `${p}post_attention_layernorm.weight` },
    attn_q: { hf: `${p}self_attn.q_proj.weight`, unpermuteHeads: heads },
    attn_k: { hf: `${p}self_attn.k_proj.weight`, unpermuteHeads: kvHeads },
    attn_v: { hf: `${p}self_attn.v_proj.weight` },
    attn_output: { hf: `${p}self_attn.o_proj.weight` },
    ffn_gate: { hf: `${p}mlp.gate_proj.weight` },
    ffn_up: { hf: `${p}mlp.up_proj.weight` },
    ffn_down: { hf: `${p}mlp.down_proj.weight` },
  };
  return parts[m[2]];
}

/**
 * Converts the GGUF file at `ggufPath` into a Hugging Face model directory `outDir` (created; files
 * in it are overwritten): config.json, model.safetensors (float32), tokenizer.json,
 * tokenizer_config.json, generation_config.json. Only `general.architecture = llama` files.
 */
export async function importGguf(ggufPath: string, outDir: string, options: { log?: (line: string) => void } = {}): Promise<GgufImportReport> {
  const log = options.log ?? (() => undefined);
  const file = await readGgufFile(ggufPath);
  const { config, heads, kvHeads } = hfConfigFromGguf(file);
  const tokenizer = ggufTokenizerFiles(file.metadata, `${ggufPath}`);
  const plan: Array<{ tensor: GgufTensor; hf: string; unpermuteHeads?: number }> = [];
  const sourceTypes: Record<string, number> = {};
  for (const tensor of file.tensors) {
    const mapped = hfTensorName(tensor.name, heads, kvHeads);
    if (!mapped) throw new Error(`${ggufPath}: tensor "${tensor.name}" has no Hugging Face Llama counterpart (e.g. rope_freqs.weight is Llama-3 RoPE scaling, biases are not Llama); this file cannot be imported`);
    if (!BLOCKS[tensor.type]) dequantizeGgml(tensor.type, new Uint8Array(0), 0, `${ggufPath}: tensor "${tensor.name}"`);
    plan.push({ tensor, hf: mapped.hf, unpermuteHeads: mapped.unpermuteHeads });
    sourceTypes[tensor.typeName] = (sourceTypes[tensor.typeName] ?? 0) + 1;
  }
  const order = (hf: string) => (hf.startsWith('model.embed') ? -1 : hf.startsWith('model.layers.') ? Number(hf.split('.')[2]) : 1e9);
  plan.sort((a, b) => order(a.hf) - order(b.hf) || (a.hf < b.hf ? -1 : a.hf > b.hf ? 1 : 0));
  await mkdir(outDir, { recursive: true });
  // A sharded index left by an earlier model in outDir would shadow the new model.safetensors.
  await rm(path.join(outDir, 'model.safetensors.index.json'), { force: true });
  log(`importing ${plan.length} tensors from ${ggufPath} (${Object.entries(sourceTypes).map(([t, n]) => `${n} ${t}`).join(', ')})`);
  const { bytes } = await writeSafetensorsFile(
    path.join(outDir, 'model.safetensors'),
    plan.map((p) => ({ name: p.hf, shape: p.tensor.shape })),
    async (_name, i) => {
      const { tensor, unpermuteHeads } = plan[i];
      const values = await readGgufTensor(file, tensor.name);
      return unpermuteHeads ? unpermuteRopeRows(values, unpermuteHeads, tensor.shape[0], tensor.shape.length > 1 ? tensor.shape[1] : 1) : values;
    },
    { metadata: { format: 'pt', source: `gguf:${path.basename(ggufPath)}` } },
  );
  const json = (v: unknown) => `${JSON.stringify(v, null, 2)}\n`;
  await writeFile(path.join(outDir, 'config.json'), json(config));
  await writeFile(path.join(outDir, 'tokenizer.json'), JSON.stringify(tokenizer.tokenizerJson));
  await writeFile(path.join(outDir, 'tokenizer_config.json'), json(tokenizer.tokenizerConfig));
  await writeFile(path.join(outDir, 'generation_config.json'), json({ bos_token_id: config.bos_token_id, eos_token_id: config.eos_token_id }));
  const parameterCount = plan.reduce((n, p) => n + p.tensor.shape.reduce((a, b) => a * b, 1), 0);
  return { outDir, sourceTypes, parameterCount, config, bytesWritten: bytes };
}
