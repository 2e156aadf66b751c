// Media between tasks, engines and the transfer queue: placeholder tokens, the built-in media tasks
// and their model configs, MediaPrompts (expansion, ids, the media store, reading back by id), the
// size and duration budgets (a 10 MB image, a 60 s clip), samples that reference media ids in
// Postgres, and the zoom environment's tool.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { parseRunConfig } from '../config/run-config';
import { decodeImage, encodePng } from '../engines/media/decode';
import { audioInput, imageInput, modelMediaInput, MEDIA_LIMITS } from '../engines/media/model-inputs';
import { MediaError } from '../engines/media/sources';
import { mediaIdOf, MediaStore } from '../engines/media/store';
import { RolloutEngine } from '../engines/rollout';
import { CharTokenizer } from '../engines/tokenizers/char';
import { getTask } from '../envs/registry';
import { crop, quadrantZoom, ZOOM_BONUS, ZoomEnv, zoomTask } from '../envs/zoom';
import { MediaPrompts } from '../rollout/media-prompts';
import { insertSamples, readSamples } from '../store/transfer-queue';
import { policyModelConfig, trainerOptions } from '../training/options';
import { MULTIMODAL_RECIPES } from '../config/recipes';
import { sftSequences } from '../training/sft';
import { freshDatabase, uniqueId, type TestDatabase } from './helpers';

let root: string;
let db: TestDatabase;
before(async () => {
  root = await mkdtemp(path.join(tmpdir(), 'relax-media-plane-'));
  db = await freshDatabase();
});
after(async () => {
  await rm(root, { recursive: true, force: true });
  await db?.close();
});

const tinyModel = (task: string) => {
  const t = getTask(task);
  return policyModelConfig(parseRunConfig({ task }).model, t.tokenizer().vocabSize, t);
};

test('placeholders are one token each in the char tokenizer, kept or dropped when decoding', () => {
  const tok = new CharTokenizer('ab:', { specials: ['<image>', '<audio>'] });
  assert.equal(tok.vocabSize, 3 + 3 + 2);
  const ids = tok.encode('<image>a:<audio>b');
  assert.deepEqual(ids, [tok.specialId('<image>'), 3, 5, tok.specialId('<audio>'), 4]);
  assert.equal(tok.decode(ids), '<image>a:<audio>b');
  assert.equal(tok.decode(ids, { skipSpecial: true }), 'a:b');
  // Text that merely starts like a placeholder is still characters (and "<" is not in this alphabet).
  assert.throws(() => tok.encode('<imag'), /not in the alphabet/);
});

test('media tasks: prompts carry one medium per placeholder; the model gets the encoder, placeholder id and context length', () => {
  const vision = getTask('vision-colour');
  const [p] = vision.trainPrompts(1, 1);
  assert.match(p.text, /^<image>(top left|top right|bottom left|bottom right):$/);
  assert.equal(p.media?.length, 1);
  assert.equal(p.media?.[0].kind, 'image');
  assert.equal(decodeImage(p.media![0].bytes, 'png').width, 64);
  const eos = vision.tokenizer().decode([vision.tokenizer().eosId]);
  assert.equal(vision.reward(p, `${p.answer}${eos}`), 1);
  assert.equal(vision.reward(p, `${p.answer}x${eos}`), 0);
  const model = tinyModel('vision-colour');
  assert.equal(model.vision?.tokenId, vision.tokenizer().encode('<image>')[0]);
  assert.equal(model.contextLength, 40);
  const audio = tinyModel('audio-tone');
  assert.equal(audio.audio?.maxFrames, 140);
  assert.equal(audio.vision, undefined);
  // The run config overrides the task's encoder defaults.
  const t = getTask('vision-colour');
  const custom = policyModelConfig(parseRunConfig({ task: 'vision-colour', model: { vision: { max_patches: 64, d_model: 16, n_heads: 2 } } }).model, t.tokenizer().vocabSize, t);
  assert.equal(custom.vision?.maxPatches, 64);
  assert.equal(custom.vision?.dModel, 16);
  // A text task has no <image> token to put an encoder's embeddings at.
  const add2 = getTask('add2');
  assert.throws(() => policyModelConfig(parseRunConfig({ task: 'add2', model: { vision: {} } }).model, add2.tokenizer().vocabSize, add2), /no single <image> token/);
});

test('MediaPrompts: placeholders expand to one token per embedding, media are stored by sha256 and read back by id', async () => {
  const task = getTask('vision-colour');
  const model = tinyModel('vision-colour');
  const store = new MediaStore(path.join(root, 'store'));
  const media = new MediaPrompts(model, store);
  const [prompt] = task.trainPrompts(2, 1);
  const inputs = await media.prompt(task.tokenizer(), prompt);
  const img = model.vision!.tokenId!;
  assert.equal(inputs.tokens.filter((t) => t === img).length, 16, '16 patches -> 16 placeholder positions');
  assert.equal(inputs.tokens[0], task.tokenizer().bosId);
  assert.deepEqual(inputs.mediaIds, [mediaIdOf(prompt.media![0].bytes)]);
  assert.ok(await store.has(inputs.mediaIds![0]), 'the bytes are in the store');
  // A fresh process (no cache) reads the medium back from the store and processes it identically.
  const again = await new MediaPrompts(model, store).fromIds(inputs.mediaIds!);
  assert.deepEqual(again.images[0], inputs.media!.images[0]);
  await assert.rejects(new MediaPrompts(model).fromIds([mediaIdOf(Uint8Array.of(1))]), (e: unknown) => e instanceof MediaError && e.code === 'MediaNotFound');
  // A prompt whose placeholders and media disagree is refused.
  await assert.rejects(media.prompt(task.tokenizer(), { ...prompt, text: `<image>${prompt.text}` }), /placeholder 2 .* has no medium|2 placeholders|no medium/);
});

test('MediaPrompts keeps the most recently used media: a medium used again is not the next evicted', async () => {
  const task = getTask('vision-colour');
  const media = new MediaPrompts(tinyModel('vision-colour'), undefined, 2);
  const [a, b, c] = task.trainPrompts(5, 3);
  const ids = [];
  for (const p of [a, b, a, c]) ids.push((await media.prompt(task.tokenizer(), p)).mediaIds![0]);
  // a was used after b, so adding c evicted b, not a.
  assert.ok((await media.fromIds([ids[0], ids[3]])).images.length === 2);
  await assert.rejects(media.fromIds([ids[1]]), /not in this process's cache/);
});

test('budgets: a 10 MB image and a 60 s clip are refused with the limit named', () => {
  const model = tinyModel('audio-tone');
  const vision = tinyModel('vision-colour');
  // Noise does not compress: a 1900 x 1900 noise PNG is about 10.8 MB.
  const side = 1900;
  const data = new Uint8Array(side * side * 3);
  let x = 12345;
  for (let i = 0; i < data.length; i++) data[i] = (x = (x * 1103515245 + 12345) >>> 0) >>> 24;
  const big = encodePng({ width: side, height: side, data });
  assert.ok(big.length > 10_000_000, `the PNG is ${big.length} bytes`);
  assert.throws(() => modelMediaInput(big, 'png', vision), (e: unknown) => e instanceof MediaError && e.code === 'MediaTooLarge' && /over the 8 MiB limit/.test(e.message));
  assert.ok(big.length > MEDIA_LIMITS.maxBytes);
  const minute = { sampleRate: 16000, samples: new Float32Array(16000 * 60) };
  assert.throws(() => audioInput(minute, model.audio!), (e: unknown) => e instanceof MediaError && e.code === 'MediaTooLarge' && /60\.00 s long, over the audio encoder's 1\.4 s window/.test(e.message));
  // Within budget, shapes are fixed by the model config whatever the input size.
  assert.equal(imageInput({ width: 100, height: 37, data: new Uint8Array(100 * 37 * 3) }, vision.vision!).length, 16 * 8 * 8 * 3);
  assert.equal(audioInput({ sampleRate: 8000, samples: new Float32Array(4000) }, model.audio!).length, 140 * 80);
});

test('samples reference their media by id in the transfer queue; malformed ids are refused', async () => {
  const runId = uniqueId('media-samples');
  await db.pool.query(`INSERT INTO runs (run_id, workflow_id, kind, config) VALUES ($1, $1, 'test', '{}')`, [runId]);
  const id = mediaIdOf(Uint8Array.of(1, 2, 3));
  const base = { iteration: 0, groupIndex: 0, promptTokens: [1, 2], responseTokens: [3], lossMask: [1], policyVersion: 0, status: 'scored' as const, reward: 1 };
  await insertSamples(db.pool, runId, [{ ...base, sampleIndex: 0, media: [id, id] }, { ...base, sampleIndex: 1 }]);
  const rows = await readSamples(db.pool, runId);
  assert.deepEqual(rows.map((r) => r.media), [[id, id], null]);
  await assert.rejects(insertSamples(db.pool, runId, [{ ...base, sampleIndex: 2, media: ['sha256:xyz'] }]), /media\[0\] is not a media id/);
});

test('zoom: the tool returns the crop as an image observation; the right answer after a zoom earns the bonus', async () => {
  const [prompt] = zoomTask.trainPrompts(3, 1);
  const env = new ZoomEnv();
  assert.equal(env.reset(prompt), prompt.text);
  const q = ['tl', 'tr', 'bl', 'br'].indexOf(prompt.text.slice('<image>'.length, -1));
  const step = env.step(quadrantZoom(q));
  assert.equal(step.observation, '<image>');
  const cropped = decodeImage(step.media![0].bytes, 'png');
  assert.deepEqual([cropped.width, cropped.height], [64, 64]);
  const eos = zoomTask.tokenizer().decode([zoomTask.tokenizer().eosId]);
  const done = env.step(`${prompt.answer}${eos}`);
  assert.equal(done.reward, 1 + ZOOM_BONUS);
  assert.deepEqual(done.info, { success: 1, tool_calls: 1, tool_use: 1 });
  // Without a zoom: no bonus; a malformed call is penalized.
  env.reset(prompt);
  assert.equal(env.step(`${prompt.answer}${eos}`).reward, 1);
  // A malformed call ends the episode, penalized (and every observation is in the tokenizer's alphabet).
  for (const bad of ['zoom(1,2)', 'zoom(1,2,3,4', 'zoom(0,0,4,4)', 'blue']) {
    env.reset(prompt);
    const r = env.step(bad);
    assert.ok(r.reward < 0 && r.terminated, `${bad}: penalized and ended`);
    assert.doesNotThrow(() => zoomTask.tokenizer().encode(r.observation));
  }
  // The crop is the pixels of the image.
  const full = decodeImage(prompt.media![0].bytes, 'png');
  assert.deepEqual(crop(full, 64, 0, 64, 64).data.subarray(0, 3), full.data.subarray(64 * 3, 64 * 3 + 3));
});

test('SFT demonstrations of the zoom task carry the prompt image and, when they zoom, the crop', async () => {
  const model = tinyModel('zoom');
  const engine = await RolloutEngine.create(model);
  try {
    const prompts = zoomTask.trainPrompts(4, 20);
    const seqs = await sftSequences(zoomTask, engine, prompts, () => 0.05); // every demonstration zooms (share 0.1)
    for (const s of seqs) {
      assert.equal(s.media?.images.length, 2, 'overview + crop');
      const img = model.vision!.tokenId!;
      const positions = Array.from(s.tokens).filter((t) => t === img).length;
      assert.equal(positions, 32);
      // No loss on image positions.
      Array.from(s.tokens).forEach((t, i) => {
        if (i > 0 && t === img) assert.equal(s.lossMask[i - 1], 0);
      });
    }
    const direct = await sftSequences(zoomTask, engine, prompts.slice(0, 2), () => 0.9);
    assert.equal(direct[0].media?.images.length, 1);
  } finally {
    await engine.release();
  }
});

test('train.trainable reaches the trainer options; the examples are the bench recipes', () => {
  const config = parseRunConfig({ task: 'vision-colour', train: { trainable: ['vision_encoder', 'vision_projector'] } });
  assert.deepEqual(trainerOptions(config, tinyModel('vision-colour'), {}).trainable, ['vision_encoder', 'vision_projector']);
  assert.throws(() => parseRunConfig({ task: 'vision-colour', train: { trainable: ['encoder'] } }), /train\.trainable/);
  const examples = path.resolve(__dirname, '..', '..', 'examples');
  for (const recipe of Object.values(MULTIMODAL_RECIPES)) {
    const file = path.join(examples, `${String(recipe.config.task)}.json`);
    assert.deepEqual(parseRunConfig(JSON.parse(fs.readFileSync(file, 'utf8'))), parseRunConfig(recipe.config), `${file} is the recipe`);
  }
});
