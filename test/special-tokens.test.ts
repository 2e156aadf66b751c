// model.add_special_tokens: special tokens added to a pretrained model's Hugging Face tokenizer
// (engines/tokenizers/added-tokens.ts), each one id, never split, decoded back; the vocabulary grown
// with embedding rows at the mean of the old ones (engines/embedding-growth.ts, through
// training/policy-model.ts); the tokens and the grown embedding carried by an export
// (training/export.ts writeExportedPolicy) and reused, not added again, when the export is loaded
// as model.from with the same list; and the config's errors. A tiny byte-level BPE tokenizer and a
// tiny llama are written here; SmolLM2's real tokenizer is checked too when it is imported locally.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { relaxEnvironment } from '../config/environment';
import { parseRunConfig, RunConfigError } from '../config/run-config';
import { grownVocabularyWeights, meanRow } from '../engines/embedding-growth';
import { loadHfModel, writeHfModel } from '../engines/hf-checkpoint';
import { readSafetensorsFile } from '../engines/safetensors';
import { initWeights, trainableParameterSpec, type ModelConfig, type PolicyWeights } from '../engines/model';
import { planSpecialTokens, withAddedTokens } from '../engines/tokenizers/added-tokens';
import { HfTokenizer } from '../engines/tokenizers/hf';
import { writeExportedPolicy } from '../training/export';
import { initialPolicyWeights, loadRunPolicy, RunModelError, type RunPolicy } from '../training/policy-model';

// A byte-level BPE (SmolLM2's kind) over a small alphabet, no merges: "<audio>" is 7 tokens. "<tool>"
// is a plain vocabulary entry that text never produces (the pre-tokenizer splits "<" from "tool").
const ALPHABET = [...'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:?!.,<>+=', 'Ġ', 'Ċ'];
const VOCAB: Record<string, number> = { '<|endoftext|>': 0, ...Object.fromEntries(ALPHABET.map((c, i) => [c, i + 1])), '<tool>': ALPHABET.length + 1 };
const BASE_VOCAB = ALPHABET.length + 2;
const byteLevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true };
const TOKENIZER_JSON = {
  version: '1.0',
  truncation: null,
  padding: null,
  added_tokens: [{ id: 0, content: '<|endoftext|>', single_word: false, lstrip: false, rstrip: false, normalized: false, special: true }],
  normalizer: null,
  pre_tokenizer: byteLevel,
  post_processor: null,
  decoder: byteLevel,
  model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab: VOCAB, merges: [] },
};
const TOKENIZER_CONFIG = { bos_token: '<|endoftext|>', eos_token: '<|endoftext|>', pad_token: '<|endoftext|>', add_bos_token: false, additional_special_tokens: ['<|endoftext|>'] };

const llama = (tied: boolean): ModelConfig => ({ architecture: 'llama', vocabSize: BASE_VOCAB, dModel: 8, nLayers: 1, nHeads: 2, nKvHeads: 1, headDim: 4, dFF: 16, contextLength: 64, ropeTheta: 10000, rmsNormEps: 1e-5, tieEmbeddings: tied });

let root: string;
let n = 0;
const fresh = () => path.join(root, `d${n++}`);
let tokenizerDir: string;
let dataFile: string;

before(async () => {
  root = await mkdtemp(path.join(tmpdir(), 'relax-special-tokens-'));
  tokenizerDir = path.join(root, 'tokenizer');
  await mkdir(tokenizerDir);
  await writeFile(path.join(tokenizerDir, 'tokenizer.json'), JSON.stringify(TOKENIZER_JSON));
  await writeFile(path.join(tokenizerDir, 'tokenizer_config.json'), JSON.stringify(TOKENIZER_CONFIG));
  dataFile = path.join(root, 'train.jsonl');
  await writeFile(dataFile, `${JSON.stringify({ prompt: 'Listen: now', answer: 'now' })}\n`);
});
after(async () => {
  await rm(root, { recursive: true, force: true });
});

const tokenizerFile = () => path.join(tokenizerDir, 'tokenizer.json');

/** A tiny llama with the test tokenizer, written as a Hugging Face directory. */
async function tinyModelDir(tied: boolean, seed = 1): Promise<{ dir: string; weights: PolicyWeights }> {
  const dir = fresh();
  const weights = initWeights(llama(tied), seed);
  await writeHfModel(dir, llama(tied), weights, { tokenizerDir });
  return { dir, weights };
}

function runConfig(from: string, model: Record<string, unknown> = {}, extra: Record<string, unknown> = {}) {
  return parseRunConfig({ model: { from, context_length: 64, ...model }, data: { train: dataFile, eval: dataFile, prompt_format: 'raw' }, rollout: { max_new_tokens: 4 }, ...extra });
}

const load = (from: string, model: Record<string, unknown> = {}, extra: Record<string, unknown> = {}) => loadRunPolicy(runConfig(from, model, extra), { home: path.join(root, 'home') });

test('added special tokens: one id each from the vocabulary size on, never split inside text, decoded back', () => {
  const plain = HfTokenizer.fromFile(tokenizerFile());
  assert.equal(plain.vocabSize, BASE_VOCAB);
  assert.equal(plain.encode('<audio>').length, 7, 'without it, "<audio>" is characters');
  const tok = HfTokenizer.fromFile(tokenizerFile(), {}, { addSpecialTokens: ['<audio>', '<image>'] });
  const [audio, image] = [BASE_VOCAB, BASE_VOCAB + 1];
  assert.deepEqual(tok.addedSpecialTokens, [{ content: '<audio>', id: audio, origin: 'new' }, { content: '<image>', id: image, origin: 'new' }]);
  assert.equal(tok.vocabSize, BASE_VOCAB + 2);
  assert.deepEqual(tok.encode('<audio>'), [audio]);
  const ids = tok.encode('Listen: <audio> now');
  assert.deepEqual(ids, [...plain.encode('Listen: '), audio, ...plain.encode(' now')], 'the text around the token is encoded as before');
  assert.equal(ids.filter((id) => id === audio).length, 1);
  assert.deepEqual(tok.encode('x<audio><image>y'), [VOCAB.x, audio, image, VOCAB.y], 'matched inside a word and back to back');
  assert.equal(tok.decode([audio]), '<audio>');
  assert.equal(tok.decode(ids), 'Listen: <audio> now');
  assert.equal(tok.decode(ids, { skipSpecial: true }), 'Listen:  now', 'special: skipped like the other specials');
  // the pad/bos/eos roles and the file are unchanged
  assert.deepEqual([tok.padId, tok.bosId, tok.eosId], [plain.padId, plain.bosId, plain.eosId]);
});

test('a token the vocabulary already has as one token is reused with its id, never added twice', () => {
  const tok = HfTokenizer.fromFile(tokenizerFile(), {}, { addSpecialTokens: ['<tool>', '<|endoftext|>', '<audio>'] });
  assert.deepEqual(tok.addedSpecialTokens, [
    { content: '<tool>', id: VOCAB['<tool>'], origin: 'vocabulary' },
    { content: '<|endoftext|>', id: 0, origin: 'added' },
    { content: '<audio>', id: BASE_VOCAB, origin: 'new' },
  ]);
  assert.equal(tok.vocabSize, BASE_VOCAB + 1, 'only <audio> takes a new id');
  // "<tool>" was a vocabulary entry the pre-tokenizer never produced; as an added token it is matched whole
  assert.equal(HfTokenizer.fromFile(tokenizerFile()).encode('a<tool>').length, 7);
  assert.deepEqual(tok.encode('a<tool>'), [VOCAB.a, VOCAB['<tool>']]);
  // planning and the JSON edit are idempotent
  const again = planSpecialTokens(['<audio>'], { idOf: (t) => (t === '<audio>' ? BASE_VOCAB : undefined), isAddedToken: () => true, vocabSize: BASE_VOCAB + 1 });
  assert.deepEqual(again, [{ content: '<audio>', id: BASE_VOCAB, origin: 'added' }]);
  const once = withAddedTokens(TOKENIZER_JSON, tok.addedSpecialTokens);
  assert.equal(withAddedTokens(once, tok.addedSpecialTokens), once);
  assert.deepEqual((once.added_tokens as Array<{ id: number }>).map((t) => t.id), [0, VOCAB['<tool>'], BASE_VOCAB], 'sorted by id');
});

test('growth: new rows are the mean of the old ones (untied lm_head too), old rows unchanged', () => {
  const cfg = llama(false);
  const w = initWeights(cfg, 3);
  const grown = grownVocabularyWeights(w, cfg.dModel, BASE_VOCAB + 2);
  const D = cfg.dModel;
  const emb = grown['tok_emb.weight'];
  assert.equal(emb.length, (BASE_VOCAB + 2) * D);
  assert.deepEqual(emb.subarray(0, BASE_VOCAB * D), w['tok_emb.weight'], 'old rows unchanged');
  const mean = meanRow(w['tok_emb.weight'], BASE_VOCAB, D);
  for (const r of [BASE_VOCAB, BASE_VOCAB + 1]) assert.deepEqual(emb.subarray(r * D, (r + 1) * D), mean);
  for (let c = 0; c < D; c++) {
    let s = 0;
    for (let r = 0; r < BASE_VOCAB; r++) s += w['tok_emb.weight'][r * D + c];
    assert.ok(Math.abs(mean[c] - s / BASE_VOCAB) < 1e-6);
  }
  // lm_head is [D, V] here: each row gains columns at its mean (Hugging Face's [V, D] gains mean rows)
  const head = grown['lm_head.weight'];
  const V = BASE_VOCAB + 2;
  assert.equal(head.length, D * V);
  for (let d = 0; d < D; d++) {
    const old = w['lm_head.weight'].subarray(d * BASE_VOCAB, (d + 1) * BASE_VOCAB);
    assert.deepEqual(head.subarray(d * V, d * V + BASE_VOCAB), old);
    const m = Math.fround(old.reduce((a, b) => a + b, 0) / BASE_VOCAB);
    assert.deepEqual([head[d * V + BASE_VOCAB], head[d * V + BASE_VOCAB + 1]], [m, m]);
  }
  // the other weights are the same arrays; weights already large enough come back as they are
  assert.equal(grown['norm_f.weight'], w['norm_f.weight']);
  assert.equal(grownVocabularyWeights(w, D, BASE_VOCAB), w);
});

test('model.add_special_tokens through loadRunPolicy: the vocabulary grows, model.audio finds <audio>', async () => {
  const { dir, weights } = await tinyModelDir(true);
  const plain = await load(dir, { audio: {} }).then(
    () => assert.fail('accepted'),
    (err: Error) => err,
  );
  assert.ok(plain instanceof RunModelError);
  assert.match(plain.message, /^model\.audio: the tokenizer of model\.from .* has no single <audio> token .*add it with model\.add_special_tokens: \["<audio>"\]/);

  const policy = await load(dir, { add_special_tokens: ['<audio>', '<image>'] });
  assert.equal(policy.model.vocabSize, BASE_VOCAB + 2);
  assert.deepEqual(policy.addedTokens?.map((t) => [t.content, t.id]), [['<audio>', BASE_VOCAB], ['<image>', BASE_VOCAB + 1]]);
  assert.deepEqual(policy.task.tokenizer().encode('<image>'), [BASE_VOCAB + 1], 'the task encodes with the grown tokenizer');
  const base = await policy.baseWeights!();
  const D = policy.model.dModel;
  assert.equal(base['tok_emb.weight'].length, (BASE_VOCAB + 2) * D);
  assert.deepEqual(base['tok_emb.weight'].subarray(0, BASE_VOCAB * D), weights['tok_emb.weight']);
  assert.deepEqual(base['tok_emb.weight'].subarray(BASE_VOCAB * D, (BASE_VOCAB + 1) * D), meanRow(weights['tok_emb.weight'], BASE_VOCAB, D));
  assert.equal(base['lm_head.weight'], undefined, 'tied: no lm_head to grow');
  // every read computes the same rows (each worker reads and grows on its own)
  assert.deepEqual((await policy.baseWeights!())['tok_emb.weight'], base['tok_emb.weight']);
  // full fine-tuning trains the whole embedding, new rows included
  assert.deepEqual(trainableParameterSpec(policy.model).find((p) => p.name === 'tok_emb.weight')?.shape, [BASE_VOCAB + 2, D]);

  const audio = await load(dir, { add_special_tokens: ['<audio>'], audio: { max_frames: 20 } });
  assert.equal(audio.model.audio?.tokenId, BASE_VOCAB);
  assert.equal(audio.model.vocabSize, BASE_VOCAB + 1);
});

test('export and re-import: the same ids, the same rows, the tokenizer files carry the tokens, no second growth', async () => {
  const { dir } = await tinyModelDir(false, 2);
  const tokens = ['<audio>', '<tool>'];
  const policy = await load(dir, { add_special_tokens: tokens });
  // a full fine-tuning version: the base with the grown rows, then moved, as training moves them
  const version = { ...(await initialPolicyWeights(policy, 0)) };
  version['tok_emb.weight'] = version['tok_emb.weight'].map((v, i) => v + (i % 7) * 1e-3);
  const out = fresh();
  const exported = await writeExportedPolicy(pretrained(policy), policy.model, version, out);
  assert.equal(exported.adapterDir, undefined);

  const hfConfig = JSON.parse(await readFile(path.join(out, 'config.json'), 'utf8'));
  assert.equal(hfConfig.vocab_size, BASE_VOCAB + 1);
  const tokenizerJson = JSON.parse(await readFile(path.join(out, 'tokenizer.json'), 'utf8'));
  const entry = (content: string) => tokenizerJson.added_tokens.find((t: { content: string }) => t.content === content);
  assert.deepEqual(entry('<audio>'), { id: BASE_VOCAB, content: '<audio>', single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
  assert.equal(entry('<tool>').id, VOCAB['<tool>']);
  const tokenizerConfig = JSON.parse(await readFile(path.join(out, 'tokenizer_config.json'), 'utf8'));
  assert.deepEqual(tokenizerConfig.added_tokens_decoder[String(BASE_VOCAB)], { content: '<audio>', single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
  assert.deepEqual(tokenizerConfig.additional_special_tokens, ['<|endoftext|>', '<audio>', '<tool>']);
  assert.equal(tokenizerConfig.eos_token, '<|endoftext|>', 'the rest of the config is kept');
  // the source model's files are untouched
  assert.equal(JSON.parse(await readFile(path.join(dir, 'tokenizer.json'), 'utf8')).added_tokens.length, 1);

  // loaded back as a plain Hugging Face directory: same ids, same weights
  const loaded = await loadHfModel(out);
  assert.equal(loaded.config.vocabSize, BASE_VOCAB + 1);
  for (const name of ['tok_emb.weight', 'lm_head.weight']) assert.deepEqual(loaded.weights[name], version[name], name);
  const tok = HfTokenizer.fromFile(path.join(out, 'tokenizer.json'));
  assert.deepEqual(tok.encode('Listen: <audio> now<tool>'), policy.task.tokenizer().encode('Listen: <audio> now<tool>'));
  assert.deepEqual(tok.encode('<audio>'), [BASE_VOCAB]);

  // as model.from again with the same list: every token is reused, nothing grows
  const again = await load(out, { add_special_tokens: tokens });
  assert.deepEqual(again.addedTokens?.map((t) => [t.content, t.id, t.origin]), [['<audio>', BASE_VOCAB, 'added'], ['<tool>', VOCAB['<tool>'], 'added']]);
  assert.equal(again.model.vocabSize, BASE_VOCAB + 1);
  assert.deepEqual((await again.baseWeights!())['tok_emb.weight'], version['tok_emb.weight']);
  // and exported again: the files are the same
  const out2 = fresh();
  await writeExportedPolicy(pretrained(again), again.model, await again.baseWeights!(), out2);
  for (const file of ['tokenizer.json', 'tokenizer_config.json']) assert.equal(await readFile(path.join(out2, file), 'utf8'), await readFile(path.join(out, file), 'utf8'), file);
});

test('a LoRA run that added tokens exports the merged model (grown embedding, frozen mean rows) and no PEFT adapter', async () => {
  const { dir, weights } = await tinyModelDir(true, 4);
  const policy = await load(dir, { add_special_tokens: ['<audio>'] }, { lora: { rank: 2, alpha: 4 } });
  const adapters = await initialPolicyWeights(policy, 0);
  assert.ok(!('tok_emb.weight' in adapters), 'with LoRA the embedding, new rows included, is frozen base');
  assert.ok(!trainableParameterSpec(policy.model).some((p) => p.name === 'tok_emb.weight'));
  const out = fresh();
  const exported = await writeExportedPolicy(pretrained(policy), policy.model, adapters, out);
  assert.equal(exported.adapterDir, undefined);
  assert.match(exported.adapterSkipped ?? '', /added \["<audio>"\] to the tokenizer .*load the merged model in/);
  assert.equal(existsSync(path.join(out, 'adapter')), false);
  const loaded = await loadHfModel(out);
  assert.equal(loaded.config.vocabSize, BASE_VOCAB + 1);
  const D = loaded.config.dModel;
  assert.deepEqual(loaded.weights['tok_emb.weight'].subarray(BASE_VOCAB * D), meanRow(weights['tok_emb.weight'], BASE_VOCAB, D));
  // without added tokens the PEFT adapter is written as before
  const plain = await load(dir, {}, { lora: { rank: 2, alpha: 4 } });
  const plainOut = fresh();
  assert.equal((await writeExportedPolicy(pretrained(plain), plain.model, await initialPolicyWeights(plain, 0), plainOut)).adapterDir, path.join(plainOut, 'adapter'));
});

test('an audio model exports its language model for transformers and its encoder and projector beside it (encoders.safetensors, encoders.json)', async () => {
  const { dir } = await tinyModelDir(true, 5);
  // full fine-tuning (the encoder trains: a version holds it) and LoRA (a frozen base holds it)
  for (const extra of [{}, { lora: { rank: 2, alpha: 4 } }]) {
    const policy = await load(dir, { add_special_tokens: ['<audio>'], audio: { max_frames: 20 } }, extra);
    const base = await policy.baseWeights!();
    // a version: what the run trains, moved as training moves it
    const version = Object.fromEntries(Object.entries(await initialPolicyWeights(policy, 0)).map(([name, w]) => [name, w.map((v, i) => v + ((i % 5) + 1) * 1e-3)]));
    const out = fresh();
    const exported = await writeExportedPolicy(pretrained(policy), policy.model, version, out);
    assert.equal(exported.encodersFile, path.join(out, 'encoders.safetensors'));

    // the language model: a Hugging Face directory without the encoder, the <audio> row in its embedding
    const loaded = await loadHfModel(out);
    assert.equal(loaded.config.vocabSize, BASE_VOCAB + 1);
    assert.equal(loaded.config.audio, undefined);
    assert.ok(!Object.keys(loaded.weights).some((n) => n.startsWith('audio.')));
    if (!policy.model.lora) assert.deepEqual(loaded.weights['tok_emb.weight'], version['tok_emb.weight']);
    // the encoder and projector: every audio tensor, as the version has it where it trains, else the base's
    const audioNames = Object.keys(base).filter((n) => n.startsWith('audio.')).sort();
    assert.ok(audioNames.some((n) => n.startsWith('audio.proj')) && audioNames.some((n) => n.startsWith('audio.blocks.')), audioNames.join(', '));
    assert.equal(audioNames.some((n) => n in version), !policy.model.lora, 'the encoder trains in full fine-tuning, is frozen base with LoRA');
    const encoders = await readSafetensorsFile(exported.encodersFile!);
    assert.deepEqual([...encoders.tensors.keys()].sort(), audioNames);
    for (const name of audioNames) assert.deepEqual(encoders.tensors.get(name)!.data, version[name] ?? base[name], name);
    const configs = JSON.parse(await readFile(path.join(out, 'encoders.json'), 'utf8'));
    assert.deepEqual(configs.audio, policy.model.audio);
    assert.equal(configs.audio.tokenId, BASE_VOCAB);
    assert.equal(exported.parameters, Object.values(loaded.weights).reduce((n, w) => n + w.length, 0) + audioNames.reduce((n, name) => n + base[name].length, 0));
  }
});

/** The policy of a model.from run, as exportPolicyVersion narrows it. */
function pretrained(policy: RunPolicy) {
  assert.ok(policy.modelDir && policy.baseWeights);
  return { ...policy, modelDir: policy.modelDir, baseWeights: policy.baseWeights };
}

test('config errors name model.add_special_tokens', () => {
  const problems = (model: Record<string, unknown>): string => {
    try {
      parseRunConfig({ model });
    } catch (err) {
      assert.ok(err instanceof RunConfigError);
      return err.message;
    }
    return assert.fail('accepted');
  };
  assert.match(problems({ add_special_tokens: ['<audio>'] }), /model\.add_special_tokens: adds tokens to a pretrained tokenizer: set model\.from/);
  assert.match(problems({ from: 'x', add_special_tokens: [] }), /model\.add_special_tokens: must list at least one token/);
  assert.match(problems({ from: 'x', add_special_tokens: ['<a>', '<b>', '<a>'] }), /model\.add_special_tokens\.2: repeats "<a>" \(item 0\): list each token once/);
  assert.match(problems({ from: 'x', add_special_tokens: ['<a>', ''] }), /model\.add_special_tokens\.1: /);
  assert.match(problems({ from: 'x', add_special_tokens: ['  '] }), /model\.add_special_tokens\.0: is blank/);
  assert.match(problems({ from: 'x', add_special_tokens: ['x'.repeat(129)] }), /model\.add_special_tokens\.0: must be at most 128 characters/);
  assert.match(problems({ from: 'x', add_special_tokens: Array.from({ length: 257 }, (_, i) => `<t${i}>`) }), /model\.add_special_tokens: must list at most 256 tokens/);
  assert.match(problems({ from: 'x', add_special_tokens: '<audio>' }), /model\.add_special_tokens: /);
  assert.deepEqual(parseRunConfig({ model: { from: 'x', add_special_tokens: ['<audio>', '<image>'] } }).model.add_special_tokens, ['<audio>', '<image>']);
});

test("SmolLM2's tokenizer (when imported locally): <audio> and <image> become ids 49152 and 49153", (t) => {
  const file = path.join(relaxEnvironment().home, 'models', 'smollm2-135m-instruct', 'tokenizer.json');
  if (!existsSync(file)) return t.skip(`not imported here (${file}); \`relax model import smollm2-135m-instruct\` imports it`);
  const plain = HfTokenizer.fromFile(file);
  assert.equal(plain.vocabSize, 49152);
  assert.equal(plain.encode('<audio>').length, 3);
  const tok = HfTokenizer.fromFile(file, {}, { addSpecialTokens: ['<audio>', '<image>', '<|im_end|>'] });
  assert.deepEqual(tok.addedSpecialTokens.map((a) => [a.id, a.origin]), [[49152, 'new'], [49153, 'new'], [2, 'added']]);
  const text = 'Listen: <audio> now, look: <image>.';
  const ids = tok.encode(text);
  assert.deepEqual(ids.filter((id) => id >= 49152), [49152, 49153]);
  assert.equal(tok.decode(ids), text);
  assert.deepEqual(tok.encode('Listen: '), plain.encode('Listen: '));
});
