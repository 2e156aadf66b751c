// GGUF import: ggml dequantization (Q8_0, Q4_0, Q4_1, F16, BF16) against hand-computed values, the
// q/k RoPE row un-permutation as the exact inverse of llama.cpp's permutation, and a whole import of
// a tiny hand-built GGUF file into a Hugging Face directory that loadHfModel and HfTokenizer read
// (directly, and through resolveModelSource's cache).
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { GGMLQuantizationType, GGUFValueType, serializeGgufMetadata, type GGUFTypedMetadata } from '@huggingface/gguf';
import { dequantizeGgml, importGguf, permuteRopeRows, readGgufFile, readGgufTensor, unpermuteRopeRows } from '../engines/gguf';
import { loadHfModel, transpose2d } from '../engines/hf-checkpoint';
import { HfTokenizer } from '../engines/tokenizers/hf';
import { ChatTemplate } from '../engines/tokenizers/chat-template';
import { IMPORT_MARKER, readImportMarker, resolveModelSource } from '../engines/model-sources';

let root: string;
before(async () => {
  root = await mkdtemp(path.join(tmpdir(), 'relax-gguf-'));
});
after(async () => {
  await rm(root, { recursive: true, force: true });
});

const le16 = (bits: number) => [bits & 0xff, bits >> 8];
// float16 bit patterns: 0.5 = 0x3800, 2 = 0x4000, 0.25 = 0x3400, -1 = 0xbc00, 1 = 0x3c00.

test('Q8_0: 32 int8 values times the f16 scale, block after block', () => {
  const q = Array.from({ length: 32 }, (_, j) => j * 8 - 128); // -128, -120, ..., 120
  const block = (scaleBits: number, values: number[]) => [...le16(scaleBits), ...values.map((v) => v & 0xff)];
  const bytes = Uint8Array.from([...block(0x3800, q), ...block(0x4000, q.map((v) => -v - 1))]);
  const out = dequantizeGgml(GGMLQuantizationType.Q8_0, bytes, 64);
  for (let j = 0; j < 32; j++) {
    assert.equal(out[j], q[j] * 0.5, `block 0 element ${j}`);
    assert.equal(out[32 + j], (-q[j] - 1) * 2, `block 1 element ${j}`);
  }
  assert.equal(out[0], -64);
  assert.equal(out[32], 254);
});

test('Q4_0: low nibbles are elements 0..15, high nibbles 16..31, value (q - 8) * d', () => {
  // byte j holds lo = j and hi = 15 - j.
  const nibbles = Array.from({ length: 16 }, (_, j) => ((15 - j) << 4) | j);
  const bytes = Uint8Array.from([...le16(0x4000), ...nibbles, ...le16(0x3400), ...nibbles]);
  const out = dequantizeGgml(GGMLQuantizationType.Q4_0, bytes, 64);
  for (let j = 0; j < 16; j++) {
    assert.equal(out[j], (j - 8) * 2);
    assert.equal(out[16 + j], (15 - j - 8) * 2);
    assert.equal(out[32 + j], (j - 8) * 0.25);
    assert.equal(out[48 + j], (15 - j - 8) * 0.25);
  }
  assert.deepEqual([...out.subarray(0, 3)], [-16, -14, -12]);
});

test('Q4_1: value q * d + m with f16 d and m', () => {
  const nibbles = Array.from({ length: 16 }, (_, j) => ((15 - j) << 4) | j);
  const bytes = Uint8Array.from([...le16(0x3400), ...le16(0xbc00), ...nibbles]);
  const out = dequantizeGgml(GGMLQuantizationType.Q4_1, bytes, 32);
  for (let j = 0; j < 16; j++) {
    assert.equal(out[j], j * 0.25 - 1);
    assert.equal(out[16 + j], (15 - j) * 0.25 - 1);
  }
  assert.deepEqual([out[0], out[15], out[16], out[31]], [-1, 2.75, 2.75, -1]);
});

test('F16 and BF16 tensors decode bit patterns exactly (subnormals, infinities, signed zero)', () => {
  const f16 = Uint8Array.from([0x3c00, 0xc000, 0x7bff, 0x0001, 0x7c00, 0x8000, 0x3555].flatMap(le16));
  const a = dequantizeGgml(GGMLQuantizationType.F16, f16, 7);
  assert.deepEqual([...a.subarray(0, 6)], [1, -2, 65504, 2 ** -24, Infinity, -0]);
  assert.ok(Math.abs(a[6] - 1 / 3) < 1e-3);
  const bf16 = Uint8Array.from([0x3f80, 0xc040, 0x4049, 0x7f80].flatMap(le16));
  assert.deepEqual([...dequantizeGgml(GGMLQuantizationType.BF16, bf16, 4)], [1, -3, 3.140625, Infinity]);
  const f32 = new Uint8Array(Float32Array.of(1.5, -0.25).buffer);
  assert.deepEqual([...dequantizeGgml(GGMLQuantizationType.F32, f32, 2)], [1.5, -0.25]);
});

test('unsupported ggml types and short data are refused, naming the tensor and the type', () => {
  assert.throws(() => dequantizeGgml(GGMLQuantizationType.Q4_K, new Uint8Array(144), 256, 'tensor "blk.0.ffn_up.weight"'), /tensor "blk.0.ffn_up.weight" has ggml type Q4_K, which we cannot dequantize \(supported: F32, F16, Q4_0, Q4_1, Q8_0, BF16\)/);
  assert.throws(() => dequantizeGgml(GGMLQuantizationType.Q8_0, new Uint8Array(33), 32, 'w'), /w: 33 bytes hold fewer than the 34/);
  assert.throws(() => dequantizeGgml(GGMLQuantizationType.Q4_0, new Uint8Array(18), 16, 'w'), /16 elements are not a whole number of Q4_0 blocks of 32/);
});

/** llama.cpp's permute written as numpy does it: reshape(nHead, 2, half, cols) -> swapaxes(1, 2) -> reshape. */
function llamaCppPermute(w: Float32Array, nHead: number, rows: number, cols: number): Float32Array {
  const half = rows / nHead / 2;
  const out = new Float32Array(w.length);
  // out[h, j, i, c] = w[h, i, j, c] in C order.
  for (let h = 0; h < nHead; h++) for (let j = 0; j < half; j++) for (let i = 0; i < 2; i++) for (let c = 0; c < cols; c++) {
    out[((h * half + j) * 2 + i) * cols + c] = w[((h * 2 + i) * half + j) * cols + c];
  }
  return out;
}

test('q/k un-permutation: the exact inverse of llama.cpp permute (row orders checked against numpy)', () => {
  const iota = (n: number) => Float32Array.from({ length: n }, (_, i) => i);
  // numpy: permute(np.arange(8), 2, 2) and permute(np.arange(12), 2, 2).
  assert.deepEqual([...llamaCppPermute(iota(8), 2, 8, 1)], [0, 2, 1, 3, 4, 6, 5, 7]);
  assert.deepEqual([...permuteRopeRows(iota(8), 2, 8, 1)], [0, 2, 1, 3, 4, 6, 5, 7]);
  assert.deepEqual([...permuteRopeRows(iota(12), 2, 12, 1)], [0, 3, 1, 4, 2, 5, 6, 9, 7, 10, 8, 11]);
  // numpy: permute(np.arange(24).reshape(12, 2), 6, 2) — a k projection uses the kv head count.
  assert.deepEqual([...permuteRopeRows(iota(24), 2, 12, 2)], [0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11, 12, 13, 18, 19, 14, 15, 20, 21, 16, 17, 22, 23]);
  const w = Float32Array.from({ length: 48 * 5 }, (_, i) => Math.sin(i * 1.7));
  for (const heads of [1, 2, 3, 4, 6]) {
    const gguf = llamaCppPermute(w, heads, 48, 5);
    assert.deepEqual(permuteRopeRows(w, heads, 48, 5), gguf);
    assert.deepEqual(unpermuteRopeRows(gguf, heads, 48, 5), w, `${heads} heads`);
  }
  assert.throws(() => unpermuteRopeRows(iota(10), 2, 10, 1), /10 rows do not split into 2 heads of an even width/);
});

// ---- a tiny GGUF file, written the way llama.cpp lays one out ----

interface FixtureTensor { name: string; shape: number[]; type: number; bytes: Uint8Array }

function gpt2ByteChars(): string[] {
  const keep = new Set<number>();
  for (const [a, b] of [[33, 126], [161, 172], [174, 255]]) for (let x = a; x <= b; x++) keep.add(x);
  let extra = 0;
  return Array.from({ length: 256 }, (_, b) => (keep.has(b) ? String.fromCharCode(b) : String.fromCharCode(256 + extra++)));
}

function metaEntry(value: unknown, type: GGUFValueType, subType?: GGUFValueType) {
  return subType === undefined ? { value, type } : { value, type, subType };
}

async function writeGguf(file: string, kv: Record<string, ReturnType<typeof metaEntry>>, tensors: FixtureTensor[]): Promise<void> {
  const typed = { version: { value: 3, type: GGUFValueType.UINT32 }, tensor_count: { value: BigInt(tensors.length), type: GGUFValueType.UINT64 }, kv_count: { value: 0n, type: GGUFValueType.UINT64 }, ...kv } as unknown as GGUFTypedMetadata;
  const head = serializeGgufMetadata(typed, { alignment: 1 });
  const infos: number[] = [];
  const u32 = (v: number) => [...new Uint8Array(Uint32Array.of(v).buffer)];
  const u64 = (v: number) => [...new Uint8Array(BigUint64Array.of(BigInt(v)).buffer)];
  let offset = 0;
  const offsets: number[] = [];
  for (const t of tensors) {
    const name = [...new TextEncoder().encode(t.name)];
    infos.push(...u64(name.length), ...name, ...u32(t.shape.length), ...[...t.shape].reverse().flatMap(u64), ...u32(t.type), ...u64(offset));
    offsets.push(offset);
    offset += Math.ceil(t.bytes.length / 32) * 32;
  }
  const headerBytes = head.length + infos.length;
  const dataStart = Math.ceil(headerBytes / 32) * 32;
  const out = new Uint8Array(dataStart + offset);
  out.set(head, 0);
  out.set(infos, head.length);
  tensors.forEach((t, i) => out.set(t.bytes, dataStart + offsets[i]));
  await writeFile(file, out);
}

const f32Bytes = (a: Float32Array) => new Uint8Array(a.buffer.slice(0));
const random = (n: number, seed: number) => Float32Array.from({ length: n }, (_, i) => Math.fround(Math.sin(seed * 1000 + i * 12.9898) * 0.5));

test('importGguf: a tiny llama GGUF becomes a Hugging Face directory that loadHfModel and HfTokenizer read', async () => {
  const D = 32, H = 2, Hkv = 1, Dh = 16, F = 64;
  const bytesChars = gpt2ByteChars();
  const special = ['<|endoftext|>', '<|im_start|>', '<|im_end|>'];
  const tokens = [...special, ...bytesChars, 'Ġt', 'he', 'Ġthe'];
  const V = tokens.length;
  const tokenTypes = tokens.map((_, i) => (i < 3 ? 3 : 1));
  const chat = "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  const S = GGUFValueType.STRING, U = GGUFValueType.UINT32, FL = GGUFValueType.FLOAT32, A = GGUFValueType.ARRAY;
  const kv = {
    'general.architecture': metaEntry('llama', S),
    'llama.block_count': metaEntry(1, U),
    'llama.context_length': metaEntry(64, U),
    'llama.embedding_length': metaEntry(D, U),
    'llama.feed_forward_length': metaEntry(F, U),
    'llama.attention.head_count': metaEntry(H, U),
    'llama.attention.head_count_kv': metaEntry(Hkv, U),
    'llama.rope.freq_base': metaEntry(100000, FL),
    'llama.attention.layer_norm_rms_epsilon': metaEntry(1e-5, FL),
    'llama.rope.dimension_count': metaEntry(Dh, U),
    'tokenizer.ggml.model': metaEntry('gpt2', S),
    'tokenizer.ggml.pre': metaEntry('smollm', S),
    'tokenizer.ggml.tokens': metaEntry(tokens, A, S),
    'tokenizer.ggml.token_type': metaEntry(tokenTypes, A, GGUFValueType.INT32),
    'tokenizer.ggml.merges': metaEntry(['Ġ t', 'h e', 'Ġt he'], A, S),
    'tokenizer.ggml.bos_token_id': metaEntry(1, U),
    'tokenizer.ggml.eos_token_id': metaEntry(2, U),
    'tokenizer.ggml.padding_token_id': metaEntry(2, U),
    'tokenizer.ggml.add_bos_token': metaEntry(false, GGUFValueType.BOOL),
    'tokenizer.chat_template': metaEntry(chat, S),
  };
  // Hugging Face layouts ([out, in]) of the weights; the file holds q/k permuted as llama.cpp writes them.
  const hf = { q: random(H * Dh * D, 1), k: random(Hkv * Dh * D, 2), v: random(Hkv * Dh * D, 3), o: random(D * H * Dh, 4), gate: random(F * D, 5), up: random(F * D, 6), down: random(D * F, 7), norm: random(D, 8), out: random(V * D, 9) };
  // The embedding as Q8_0: one block per row of 32 (scale 1/64, values row-dependent).
  const embRows = Array.from({ length: V }, (_, r) => [...le16(0x2400), ...Array.from({ length: 32 }, (_, j) => ((r * 7 + j * 3) % 256) & 0xff)]);
  const f16Norm = Uint8Array.from(Array.from({ length: D }, () => le16(0x3c00)).flat());
  const tensors: FixtureTensor[] = [
    { name: 'token_embd.weight', shape: [V, D], type: GGMLQuantizationType.Q8_0, bytes: Uint8Array.from(embRows.flat()) },
    { name: 'blk.0.attn_norm.weight', shape: [D], type: GGMLQuantizationType.F16, bytes: f16Norm },
    { name: 'blk.0.attn_q.weight', shape: [H * Dh, D], type: GGMLQuantizationType.F32, bytes: f32Bytes(llamaCppPermute(hf.q, H, H * Dh, D)) },
    { name: 'blk.0.attn_k.weight', shape: [Hkv * Dh, D], type: GGMLQuantizationType.F32, bytes: f32Bytes(llamaCppPermute(hf.k, Hkv, Hkv * Dh, D)) },
    { name: 'blk.0.attn_v.weight', shape: [Hkv * Dh, D], type: GGMLQuantizationType.F32, bytes: f32Bytes(hf.v) },
    { name: 'blk.0.attn_output.weight', shape: [D, H * Dh], type: GGMLQuantizationType.F32, bytes: f32Bytes(hf.o) },
    { name: 'blk.0.ffn_norm.weight', shape: [D], type: GGMLQuantizationType.F32, bytes: f32Bytes(hf.norm) },
    { name: 'blk.0.ffn_gate.weight', shape: [F, D], type: GGMLQuantizationType.F32, bytes: f32Bytes(hf.gate) },
    { name: 'blk.0.ffn_up.weight', shape: [F, D], type: GGMLQuantizationType.F32, bytes: f32Bytes(hf.up) },
    { name: 'blk.0.ffn_down.weight', shape: [D, F], type: GGMLQuantizationType.F32, bytes: f32Bytes(hf.down) },
    { name: 'output_norm.weight', shape: [D], type: GGMLQuantizationType.F32, bytes: f32Bytes(hf.norm) },
    { name: 'output.weight', shape: [V, D], type: GGMLQuantizationType.F32, bytes: f32Bytes(hf.out) },
  ];
  const file = path.join(root, 'tiny.gguf');
  await writeGguf(file, kv, tensors);

  const parsed = await readGgufFile(file);
  assert.deepEqual(parsed.tensors.find((t) => t.name === 'blk.0.ffn_down.weight')?.shape, [D, F], 'row-major shape is the GGUF dims reversed');
  const emb = await readGgufTensor(parsed, 'token_embd.weight');
  assert.equal(emb[0], ((0 << 24) >> 24) / 64);
  assert.equal(emb[32 + 1], (((7 + 3) << 24) >> 24) / 64);

  const out = path.join(root, 'tiny-hf');
  const report = await importGguf(file, out);
  assert.deepEqual(report.sourceTypes, { Q8_0: 1, F16: 1, F32: 10 });
  assert.equal(report.config.tie_word_embeddings, false);
  assert.equal(report.config.rms_norm_eps, 1e-5);
  const model = await loadHfModel(out);
  assert.deepEqual(
    { ...model.config },
    { architecture: 'llama', vocabSize: V, dModel: D, nLayers: 1, nHeads: H, dFF: F, contextLength: 64, nKvHeads: Hkv, headDim: Dh, ropeTheta: 100000, rmsNormEps: 1e-5, tieEmbeddings: false },
  );
  const w = model.weights;
  assert.deepEqual(w['blocks.0.attn.q.weight'], transpose2d(hf.q, H * Dh, D), 'q un-permuted and in our [in, out] layout');
  assert.deepEqual(w['blocks.0.attn.k.weight'], transpose2d(hf.k, Hkv * Dh, D), 'k un-permuted with the kv head count');
  assert.deepEqual(w['blocks.0.attn.v.weight'], transpose2d(hf.v, Hkv * Dh, D));
  assert.deepEqual(w['blocks.0.mlp.down.weight'], transpose2d(hf.down, D, F));
  assert.deepEqual(w['lm_head.weight'], transpose2d(hf.out, V, D));
  assert.deepEqual(w['tok_emb.weight'], emb);
  assert.ok(w['blocks.0.attn_norm.weight'].every((x) => x === 1));
  assert.deepEqual(model.eosTokenIds, [2]);
  assert.equal(model.bosTokenId, 1);

  const tokenizer = HfTokenizer.fromFile(path.join(out, 'tokenizer.json'));
  const text = '<|im_start|>user\nthe 12<|im_end|>\n';
  const ids = tokenizer.encode(text);
  const id = (t: string) => tokens.indexOf(t);
  // "the" merges to t + he ("h e"); " 12" is Ġ then one id per digit (the smollm pre-tokenizer).
  assert.deepEqual(ids, [1, id('u'), id('s'), id('e'), id('r'), id('Ċ'), id('t'), id('he'), id('Ġ'), id('1'), id('2'), 2, id('Ċ')], 'specials are single ids, digits are split');
  assert.equal(tokenizer.decode(ids), text);
  assert.deepEqual(tokenizer.encode(' the'), [id('Ġthe')], 'merges apply');
  assert.equal(tokenizer.addBos, false);
  assert.equal(ChatTemplate.fromTokenizerConfig(out).render([{ role: 'user', content: 'hi' }]), '<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n');

  // resolveModelSource: a .gguf file is imported once, under its content hash; a directory is used as is.
  const home = path.join(root, 'home');
  const lines: string[] = [];
  const imported = await resolveModelSource(file, { home, log: (l) => lines.push(l) });
  assert.match(path.basename(imported), /^gguf-[0-9a-f]{16}$/);
  assert.equal(path.dirname(imported), path.join(home, 'models'));
  const marker = await readImportMarker(imported);
  assert.deepEqual(marker?.sourceTypes, { Q8_0: 1, F16: 1, F32: 10 });
  assert.ok(lines.some((l) => l.includes('importing')));
  lines.length = 0;
  assert.equal(await resolveModelSource(file, { home, log: (l) => lines.push(l) }), imported);
  assert.deepEqual(lines, [], 'the second resolve is the cached import');
  assert.equal(await resolveModelSource(imported, { home }), imported);
  assert.ok((await readFile(path.join(imported, IMPORT_MARKER), 'utf8')).includes('sha256'));
  await assert.rejects(resolveModelSource('no-such-model', { home }), /model source "no-such-model" is not found; model.from may be a Hugging Face model directory \(with config.json\), a .gguf file, or a named model: smollm2-135m-instruct/);
  await assert.rejects(resolveModelSource(path.join(root, 'missing.gguf'), { home }), /GGUF file .*missing.gguf does not exist/);
  await assert.rejects(resolveModelSource(root, { home }), /is a directory without config.json/);

  await writeGguf(path.join(root, 'bad-type.gguf'), kv, [{ ...tensors[0], name: 'token_embd.weight', type: GGMLQuantizationType.Q5_K, bytes: new Uint8Array(V * 176) }, ...tensors.slice(1)]);
  await assert.rejects(importGguf(path.join(root, 'bad-type.gguf'), path.join(root, 'bad-out')), /tensor "token_embd.weight" has ggml type Q5_K, which we cannot dequantize/);
  await writeGguf(path.join(root, 'bad-arch.gguf'), { ...kv, 'general.architecture': metaEntry('gemma', S) }, tensors);
  await assert.rejects(importGguf(path.join(root, 'bad-arch.gguf'), path.join(root, 'bad-out')), /general.architecture is "gemma"; only "llama" GGUF files/);
  await writeGguf(path.join(root, 'bad-pre.gguf'), { ...kv, 'tokenizer.ggml.pre': metaEntry('qwen2', S) }, tensors);
  await assert.rejects(importGguf(path.join(root, 'bad-pre.gguf'), path.join(root, 'bad-out')), /tokenizer.ggml.pre "qwen2" is not supported \(supported: default, gpt2, gpt-2, smollm/);
});
