// Hugging Face model directories: writeHfModel + loadHfModel round trips (F32, F16, BF16, sharded,
// Qwen2 biases, tied and untied), PEFT adapter round trips, and errors that name the unsupported
// field or the missing/unexpected tensor.
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { hfWeightMap, loadHfModel, readHfModelConfig, readPeftAdapter, writeHfModel, writePeftAdapter } from '../engines/hf-checkpoint';
import { initWeights, loraParameterSpec, parameterSpec, type ModelConfig, type PolicyWeights } from '../engines/model';
import { decodeSafetensors, encodeSafetensors, readSafetensorsFile, readSafetensorsHeader, writeSafetensorsFile } from '../engines/safetensors';

const LLAMA: ModelConfig = { architecture: 'llama', vocabSize: 40, dModel: 16, nLayers: 2, nHeads: 4, nKvHeads: 2, headDim: 4, dFF: 24, contextLength: 64, ropeTheta: 10000, rmsNormEps: 1e-5, tieEmbeddings: false };
let root: string;
let n = 0;
const fresh = () => path.join(root, `m${n++}`);

before(async () => {
  root = await mkdtemp(path.join(tmpdir(), 'relax-hf-'));
});
after(async () => {
  await rm(root, { recursive: true, force: true });
});

/** Seeded weights, with norms perturbed off 1 so a layout mix-up cannot hide behind constant tensors. */
function weightsOf(cfg: ModelConfig, seed: number): PolicyWeights {
  const w = initWeights(cfg, seed);
  for (const [name, v] of Object.entries(w)) if (/norm|bias/.test(name)) v.forEach((_, i) => (v[i] = 1 + Math.fround(Math.sin(seed + i) / 10)));
  return w;
}

function assertSameWeights(actual: PolicyWeights, expected: PolicyWeights): void {
  assert.deepEqual(Object.keys(actual).sort(), Object.keys(expected).sort());
  for (const name of Object.keys(expected)) assert.deepEqual(actual[name], expected[name], name);
}

test('writeHfModel + loadHfModel: a random llama round-trips exactly, in Hugging Face names and [out, in] layouts', async () => {
  const dir = fresh();
  const weights = weightsOf(LLAMA, 1);
  await writeHfModel(dir, LLAMA, weights);
  const config = JSON.parse(await readFile(path.join(dir, 'config.json'), 'utf8'));
  assert.deepEqual(config.architectures, ['LlamaForCausalLM']);
  assert.equal(config.model_type, 'llama');
  assert.equal(config.num_key_value_heads, 2);
  assert.equal(config.head_dim, 4);
  assert.equal(config.tie_word_embeddings, false);
  const header = await readSafetensorsHeader(path.join(dir, 'model.safetensors'));
  assert.equal(header.metadata.format, 'pt');
  assert.deepEqual(header.entries.get('model.layers.1.self_attn.k_proj.weight')?.shape, [8, 16], 'k_proj is [Hkv * Dh, D]');
  assert.deepEqual(header.entries.get('model.layers.0.mlp.down_proj.weight')?.shape, [16, 24]);
  assert.deepEqual(header.entries.get('lm_head.weight')?.shape, [40, 16]);
  // [out, in] is the transpose of ours: element (o, i) of q_proj is ours (i, o).
  const file = await readSafetensorsFile(path.join(dir, 'model.safetensors'), { names: ['model.layers.0.self_attn.q_proj.weight'] });
  const q = file.tensors.get('model.layers.0.self_attn.q_proj.weight')!.data;
  assert.equal(q[3 * 16 + 5], weights['blocks.0.attn.q.weight'][5 * 16 + 3]);
  const model = await loadHfModel(dir);
  assert.deepEqual(model.config, LLAMA);
  assert.equal(model.architecture, 'LlamaForCausalLM');
  assertSameWeights(model.weights, weights);
  assert.deepEqual(model.source.dtypes, { F32: hfWeightMap(LLAMA).length });
  assert.equal(model.source.parameterCount, parameterSpec(LLAMA).reduce((s, p) => s + p.shape.reduce((a, b) => a * b, 1), 0));
  assert.equal((await loadHfModel(dir, { contextLength: 32 })).config.contextLength, 32, 'the context length is capped by the option');

  const tied = fresh();
  const tiedCfg = { ...LLAMA, tieEmbeddings: true };
  const tiedWeights = weightsOf(tiedCfg, 2);
  await writeHfModel(tied, tiedCfg, tiedWeights);
  assert.equal((await readSafetensorsHeader(path.join(tied, 'model.safetensors'))).entries.has('lm_head.weight'), false, 'tied: no lm_head tensor');
  assertSameWeights((await loadHfModel(tied)).weights, tiedWeights);
});

test('safetensors F16 and BF16: encoded bits are exact, decoded to float32, and checkpoints in them load', async () => {
  const bytes = encodeSafetensors([['w', { shape: [4], data: Float32Array.of(1, -2, 0.5, 65504) }]], {}, { dtype: 'F16' });
  const n8 = Number(new DataView(bytes.buffer).getBigUint64(0, true));
  assert.deepEqual([...bytes.subarray(8 + n8)], [0x00, 0x3c, 0x00, 0xc0, 0x00, 0x38, 0xff, 0x7b]);
  const bf = encodeSafetensors([['w', { shape: [3], data: Float32Array.of(1, -3, 3.14159) }]], {}, { dtype: 'BF16' });
  const nb = Number(new DataView(bf.buffer).getBigUint64(0, true));
  assert.deepEqual([...bf.subarray(8 + nb)], [0x80, 0x3f, 0x40, 0xc0, 0x49, 0x40], 'bf16 rounds 3.14159 to 3.140625 (0x4049)');
  const back = decodeSafetensors(bf);
  assert.deepEqual([...back.tensors.get('w')!.data], [1, -3, 3.140625]);
  assert.equal(back.dtypes.get('w'), 'BF16');
  const i64 = new TextEncoder().encode(JSON.stringify({ w: { dtype: 'I64', shape: [1], data_offsets: [0, 8] } }));
  const raw = new Uint8Array(8 + i64.length + 8);
  new DataView(raw.buffer).setBigUint64(0, BigInt(i64.length), true);
  raw.set(i64, 8);
  assert.throws(() => decodeSafetensors(raw, 'x.safetensors'), /x.safetensors: tensor "w" has dtype I64; only F32, F16, BF16 are supported/);

  for (const dtype of ['F16', 'BF16'] as const) {
    // Multiples of 1/64 in [-2, 2) are exact in both half formats.
    const weights = weightsOf(LLAMA, 3);
    for (const v of Object.values(weights)) v.forEach((x, i) => (v[i] = Math.round(x * 64) / 64));
    const dir = fresh();
    await writeHfModel(dir, LLAMA, weights, { dtype });
    const model = await loadHfModel(dir);
    assert.deepEqual(model.source.dtypes, { [dtype]: hfWeightMap(LLAMA).length });
    assertSameWeights(model.weights, weights);
  }
});

test('a sharded checkpoint (model.safetensors.index.json) loads the same weights', async () => {
  const single = fresh();
  const weights = weightsOf(LLAMA, 4);
  await writeHfModel(single, LLAMA, weights);
  const all = await readSafetensorsFile(path.join(single, 'model.safetensors'));
  const dir = fresh();
  await mkdir(dir);
  await writeFile(path.join(dir, 'config.json'), await readFile(path.join(single, 'config.json')));
  const names = [...all.tensors.keys()];
  const shards = [names.slice(0, 7), names.slice(7)];
  const weightMap: Record<string, string> = {};
  for (const [i, shard] of shards.entries()) {
    const file = `model-0000${i + 1}-of-00002.safetensors`;
    await writeSafetensorsFile(path.join(dir, file), shard.map((name) => ({ name, shape: all.tensors.get(name)!.shape })), (name) => all.tensors.get(name)!.data, { dtype: i === 0 ? 'F32' : 'BF16' });
    for (const name of shard) weightMap[name] = file;
  }
  await writeFile(path.join(dir, 'model.safetensors.index.json'), JSON.stringify({ metadata: {}, weight_map: weightMap }));
  const model = await loadHfModel(dir);
  assert.equal(model.source.files.length, 2);
  assert.deepEqual(model.weights['tok_emb.weight'], weights['tok_emb.weight']);
  const bf16Name = hfWeightMap(LLAMA).find((m) => m.hfName === shards[1][0])!.name;
  const expected = weights[bf16Name];
  model.weights[bf16Name].forEach((x, i) => assert.ok(Math.abs(x - expected[i]) <= Math.abs(expected[i]) / 128 + 1e-30, `${bf16Name}[${i}]`));
  assert.deepEqual(model.source.dtypes, { F32: 7, BF16: names.length - 7 });
  delete weightMap[shards[1][2]];
  await writeFile(path.join(dir, 'model.safetensors.index.json'), JSON.stringify({ weight_map: weightMap }));
  await assert.rejects(loadHfModel(dir), new RegExp(`missing tensor "${shards[1][2].replace(/\./g, '\\.')}"`));
});

test('Qwen2 (q/k/v biases) round-trips as Qwen2ForCausalLM; Mistral and linear RoPE scaling read', async () => {
  const cfg: ModelConfig = { ...LLAMA, attentionBias: true, tieEmbeddings: true };
  const weights = weightsOf(cfg, 5);
  assert.ok(weights['blocks.1.attn.k.bias'], 'the spec has biases');
  const dir = fresh();
  await writeHfModel(dir, cfg, weights);
  const header = await readSafetensorsHeader(path.join(dir, 'model.safetensors'));
  assert.deepEqual(header.entries.get('model.layers.1.self_attn.k_proj.bias')?.shape, [8]);
  assert.equal(header.entries.has('model.layers.1.self_attn.o_proj.bias'), false);
  const model = await loadHfModel(dir);
  assert.equal(model.architecture, 'Qwen2ForCausalLM');
  assert.deepEqual(model.config, cfg);
  assertSameWeights(model.weights, weights);

  const config = JSON.parse(await readFile(path.join(dir, 'config.json'), 'utf8'));
  const mistral = { ...config, architectures: ['MistralForCausalLM'], model_type: 'mistral', sliding_window: 4096, rope_scaling: { rope_type: 'linear', factor: 2 } };
  delete mistral.use_sliding_window;
  await writeFile(path.join(dir, 'config.json'), JSON.stringify(mistral));
  const plain = fresh();
  await writeHfModel(plain, { ...LLAMA, tieEmbeddings: true }, weightsOf({ ...LLAMA, tieEmbeddings: true }, 6));
  await writeFile(path.join(plain, 'config.json'), JSON.stringify(mistral));
  const m = await readHfModelConfig(plain);
  assert.equal(m.architecture, 'MistralForCausalLM');
  assert.equal(m.config.ropeScalingFactor, 2);
  assert.equal(m.config.attentionBias, undefined);
  await writeFile(path.join(plain, 'config.json'), JSON.stringify({ ...mistral, sliding_window: 16 }));
  await assert.rejects(readHfModelConfig(plain), /sliding_window is 16, below the context length 64: sliding-window attention is not supported/);
  assert.equal((await readHfModelConfig(plain, { contextLength: 16 })).config.contextLength, 16, 'a window at least the capped context is fine');
});

test('unsupported config.json fields and missing or unexpected tensors are errors that name them', async () => {
  const dir = fresh();
  await writeHfModel(dir, LLAMA, weightsOf(LLAMA, 7));
  const configFile = path.join(dir, 'config.json');
  const good = JSON.parse(await readFile(configFile, 'utf8'));
  const withConfig = async (patch: Record<string, unknown>) => writeFile(configFile, JSON.stringify({ ...good, ...patch }));
  await withConfig({ architectures: ['GPT2LMHeadModel'] });
  await assert.rejects(loadHfModel(dir), /architectures \["GPT2LMHeadModel"\] is not supported; supported: LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM/);
  await withConfig({ rope_scaling: { rope_type: 'dynamic', factor: 2 } });
  await assert.rejects(loadHfModel(dir), /rope_scaling type "dynamic" is not supported/);
  await withConfig({ hidden_act: 'gelu' });
  await assert.rejects(loadHfModel(dir), /hidden_act is "gelu"; only "silu"/);
  await withConfig({ hidden_size: 'wide' });
  await assert.rejects(loadHfModel(dir), /config.json: hidden_size: /);
  await withConfig({ attention_bias: true });
  await assert.rejects(loadHfModel(dir), /attention_bias is true/);
  await withConfig({ intermediate_size: 32 });
  await assert.rejects(loadHfModel(dir), /tensor "model.layers.0.mlp.gate_proj.weight" has shape \[24,16\], expected \[32,16\]/);
  await withConfig({});

  const file = path.join(dir, 'model.safetensors');
  const all = await readSafetensorsFile(file);
  const rewrite = async (tensors: Array<[string, { shape: number[]; data: Float32Array }]>) => writeFile(file, encodeSafetensors(tensors));
  await rewrite([...all.tensors].filter(([name]) => name !== 'model.layers.1.mlp.up_proj.weight'));
  await assert.rejects(loadHfModel(dir), /missing tensor "model.layers.1.mlp.up_proj.weight" \(shape \[24,16\]\)/);
  await rewrite([...all.tensors, ['model.layers.0.self_attn.o_proj.bias', { shape: [16], data: new Float32Array(16) }]]);
  await assert.rejects(loadHfModel(dir), /unexpected tensor "model.layers.0.self_attn.o_proj.bias": a LlamaForCausalLM with this config.json has no such parameter/);
  await rewrite([...all.tensors, ['model.rotary_emb.inv_freq', { shape: [2], data: new Float32Array(2) }]]);
  await loadHfModel(dir);
  await rm(file);
  await assert.rejects(loadHfModel(dir), /no model.safetensors or model.safetensors.index.json/);
});

test('tokenizer files, chat template and eos ids come along: generation_config.json first, lists allowed', async () => {
  const tokDir = fresh();
  await mkdir(tokDir);
  const template = "{% for m in messages %}{{ bos_token + m['role'] + ': ' + m['content'] + eos_token }}{% endfor %}";
  await writeFile(path.join(tokDir, 'tokenizer_config.json'), JSON.stringify({ bos_token: '<s>', eos_token: { content: '</s>' }, chat_template: template }));
  await writeFile(path.join(tokDir, 'generation_config.json'), JSON.stringify({ eos_token_id: [2, 7], bos_token_id: 1, temperature: 0.6, top_p: 0.9 }));
  await writeFile(path.join(tokDir, 'tokenizer.json'), '{}');
  await writeFile(path.join(tokDir, 'config.json'), JSON.stringify({ eos_token_id: 2, bos_token_id: 1 }));
  const dir = fresh();
  await writeHfModel(dir, LLAMA, weightsOf(LLAMA, 8), { tokenizerDir: tokDir });
  const info = await readHfModelConfig(dir);
  assert.deepEqual(info.eosTokenIds, [2, 7]);
  assert.equal(info.bosTokenId, 1);
  assert.equal(info.chatTemplate, template);
  assert.deepEqual(info.specialTokens, { bosToken: '<s>', eosToken: '</s>', padToken: undefined });
  assert.deepEqual(info.generation, { temperature: 0.6, topP: 0.9 });
  assert.equal(info.tokenizerPath, path.join(dir, 'tokenizer.json'));
  assert.equal(JSON.parse(await readFile(path.join(dir, 'config.json'), 'utf8')).eos_token_id, 2, "the source config's token ids are carried over");
  await rm(path.join(dir, 'generation_config.json'));
  assert.deepEqual((await readHfModelConfig(dir)).eosTokenIds, [2], 'config.json when there is no generation_config.json');
});

test('PEFT adapters: writePeftAdapter + readPeftAdapter round-trip in PEFT names and layouts', async () => {
  const cfg: ModelConfig = { ...LLAMA, lora: { rank: 3, alpha: 6, targets: ['q', 'v', 'down'] } };
  const adapters = initWeights(cfg, 9, loraParameterSpec(cfg));
  for (const [name, v] of Object.entries(adapters)) if (name.endsWith('lora_b')) v.forEach((_, i) => (v[i] = Math.fround(Math.cos(i))));
  const dir = fresh();
  await writePeftAdapter(dir, cfg, adapters, { baseModel: '/models/base' });
  const ac = JSON.parse(await readFile(path.join(dir, 'adapter_config.json'), 'utf8'));
  assert.equal(ac.peft_type, 'LORA');
  assert.equal(ac.task_type, 'CAUSAL_LM');
  assert.equal(ac.r, 3);
  assert.equal(ac.lora_alpha, 6);
  assert.equal(ac.bias, 'none');
  assert.equal(ac.base_model_name_or_path, '/models/base');
  assert.deepEqual(ac.target_modules, ['q_proj', 'v_proj', 'down_proj']);
  const header = await readSafetensorsHeader(path.join(dir, 'adapter_model.safetensors'));
  assert.deepEqual(header.entries.get('base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight')?.shape, [3, 16], 'A is [r, in]');
  assert.deepEqual(header.entries.get('base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight')?.shape, [8, 3], 'B is [out, r]');
  assert.deepEqual(header.entries.get('base_model.model.model.layers.0.mlp.down_proj.lora_A.weight')?.shape, [3, 24]);
  assert.equal(header.entries.size, 2 * 3 * 2);
  const back = await readPeftAdapter(dir, { config: LLAMA });
  assert.deepEqual(back.lora, cfg.lora);
  assert.equal(back.baseModel, '/models/base');
  assertSameWeights(back.weights, adapters);

  await assert.rejects(writePeftAdapter(fresh(), cfg, { ...adapters, 'blocks.0.attn.k.lora_a': new Float32Array(48) }, { baseModel: 'x' }), /unexpected tensor "blocks.0.attn.k.lora_a"/);
  const { ['blocks.1.mlp.down.lora_b']: _dropped, ...missing } = adapters;
  await assert.rejects(writePeftAdapter(fresh(), cfg, missing, { baseModel: 'x' }), /missing adapter tensor "blocks.1.mlp.down.lora_b" \(shape \[3,16\]\)/);
  await assert.rejects(readPeftAdapter(dir, { config: { ...LLAMA, nLayers: 3 } }), /missing tensor "base_model.model.model.layers.2.self_attn.q_proj.lora_A.weight"/);
  await assert.rejects(readPeftAdapter(dir, { config: { ...LLAMA, nLayers: 1 } }), /unexpected tensor "base_model.model.model.layers.1/);
  await writeFile(path.join(dir, 'adapter_config.json'), JSON.stringify({ ...ac, use_dora: true }));
  await assert.rejects(readPeftAdapter(dir), /use_dora = true is not supported/);
  await writeFile(path.join(dir, 'adapter_config.json'), JSON.stringify({ ...ac, target_modules: ['q_proj', 'lm_head'] }));
  await assert.rejects(readPeftAdapter(dir), /target module "lm_head" is not supported; supported: q_proj, k_proj/);
});
