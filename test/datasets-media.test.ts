// Datasets with images and audio (envs/datasets.ts): JSONL and Parquet rows whose media are file
// paths relative to the dataset file, data URLs, or (Parquet) bytes and Hugging Face {bytes, path}
// structs, read when the dataset loads and carried in order of their placeholders as
// TaskPrompt.media; every unusable medium or placeholder mismatch is an error naming the file, the
// row and the field; a text dataset is read as before. And a pretrained model (model.from) with
// model.vision / model.audio: encoders added with the tokenizer's placeholder ids, or a clear error
// when the tokenizer has no single <image> / <audio> token (SmolLM2's case). The media files are
// generated here, into a temp directory.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { parseDataConfig } from '../config/data-config';
import { relaxEnvironment } from '../config/environment';
import { parseRunConfig } from '../config/run-config';
import { writeHfModel } from '../engines/hf-checkpoint';
import { encodePng, encodeWav } from '../engines/media/decode';
import { expandMediaTokens, MEDIA_LIMITS, mediumEmbeddings, modelMediaInput } from '../engines/media/model-inputs';
import { initWeights, parameterPart, parameterSpec, type ModelConfig } from '../engines/model';
import { resolveModelSource } from '../engines/model-sources';
import { CharTokenizer } from '../engines/tokenizers/char';
import { loadDatasetTask, readDatasetRows, type ChatMessage } from '../envs/datasets';
import type { PromptMedium } from '../envs/task';
import { loadRunPolicy, RunModelError } from '../training/policy-model';

const tokenizer = new CharTokenizer('0123456789');
const chatml = (messages: ChatMessage[]): string =>
  messages.map((m) => `<|im_start|>${m.role}\n${m.content}<|im_end|>\n`).join('') + '<|im_start|>assistant\n';
const STOPS = ['<|im_end|>'];
const jsonl = (rows: unknown[]) => rows.map((r) => JSON.stringify(r)).join('\n') + '\n';

let dir: string;
let red: Uint8Array;
let blue: Uint8Array;
let tone: Uint8Array;
const dataUrl = (bytes: Uint8Array, mime = 'image/png') => `data:${mime};base64,${Buffer.from(bytes).toString('base64')}`;

function png(w: number, h: number, rgb: [number, number, number]): Uint8Array {
  const data = new Uint8Array(w * h * 3);
  for (let i = 0; i < w * h; i++) data.set(rgb, i * 3);
  return encodePng({ width: w, height: h, data });
}

before(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'relax-datasets-media-'));
  red = png(4, 4, [255, 0, 0]);
  blue = png(3, 2, [0, 0, 255]);
  tone = encodeWav({ sampleRate: 16000, samples: Float32Array.from({ length: 1600 }, (_, i) => 0.5 * Math.sin((2 * Math.PI * 440 * i) / 16000)) });
  await mkdir(path.join(dir, 'ds', 'img'), { recursive: true });
  await mkdir(path.join(dir, 'ds', 'clips'), { recursive: true });
  await mkdir(path.join(dir, 'ds', 'eval', 'img'), { recursive: true });
  await writeFile(path.join(dir, 'ds', 'img', 'red.png'), red);
  await writeFile(path.join(dir, 'ds', 'eval', 'img', 'blue.png'), blue);
  await writeFile(path.join(dir, 'ds', 'clips', 'tone.wav'), tone);
  await writeFile(path.join(dir, 'ds', 'notes.txt'), 'not an image');
  // Over the size limit: a PNG signature followed by zeros, one byte too many.
  const big = new Uint8Array(MEDIA_LIMITS.maxBytes + 1);
  big.set(red.subarray(0, 8));
  await writeFile(path.join(dir, 'ds', 'img', 'huge.png'), big);
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function file(rel: string, content: string | Uint8Array): Promise<string> {
  const p = path.join(dir, rel);
  await mkdir(path.dirname(p), { recursive: true });
  await writeFile(p, content);
  return p;
}

const image = (bytes: Uint8Array): PromptMedium => ({ kind: 'image', format: 'png', bytes });
const clip = (bytes: Uint8Array): PromptMedium => ({ kind: 'audio', format: 'wav', bytes });
/** Media as comparable values (bytes as plain arrays). */
const plain = (media: PromptMedium[] | undefined) => media?.map((m) => ({ kind: m.kind, format: m.format, bytes: [...m.bytes] }));

const mediaRows = () => [
  // interleaved placeholders: the media follow them in order (image, clip, image)
  { prompt: 'Compare <image> with <audio> and then <image>.', images: ['img/red.png', dataUrl(blue)], audio: 'clips/tone.wav', answer: 'red' },
  // a single "image" string and no placeholder: one is put before the prompt
  { prompt: 'What colour is it?', image: 'img/red.png', answer: 'red' },
  // messages: the placeholder goes into the first user message
  { messages: [{ role: 'system', content: 'Listen.' }, { role: 'user', content: 'What do you hear?' }], audio: ['clips/tone.wav'], answer: 'tone' },
  // a text row in a media file
  { prompt: 'What is 2 + 2?', answer: 4 },
  // an absolute path, and an empty media list
  { prompt: '<image> Again?', images: [path.join(dir, 'ds', 'img', 'red.png')], audio: [], answer: 'red' },
];

test('JSONL: image paths relative to the file, data URLs and a WAV clip reach the prompts in placeholder order', async () => {
  const train = await file('ds/train.jsonl', jsonl(mediaRows()));
  const evalFile = await file('ds/eval/eval.jsonl', jsonl([{ prompt: '<image>Which colour?', images: 'img/blue.png', answer: 'blue' }]));

  const read = await readDatasetRows(train);
  assert.equal(read[0].prompt, 'Compare <image> with <audio> and then <image>.');
  assert.deepEqual(plain(read[0].images), plain([image(red), image(blue)]));
  assert.deepEqual(plain(read[0].audio), plain([clip(tone)]));
  assert.equal(read[1].prompt, '<image>\nWhat colour is it?');
  assert.deepEqual(read[2].messages, [{ role: 'system', content: 'Listen.' }, { role: 'user', content: '<audio>\nWhat do you hear?' }]);
  assert.deepEqual(read[3], { prompt: 'What is 2 + 2?', answer: '4', source: `${train} line 4` }, 'a text row has no media keys');
  assert.equal(read[4].audio, undefined);

  const task = await loadDatasetTask({ train, eval: evalFile }, { tokenizer, renderChat: chatml, stopStrings: STOPS });
  assert.deepEqual(task.mediaKinds, ['image', 'audio']);
  const held = task.heldOut();
  assert.equal(held[0].text, '<|im_start|>user\n<image>Which colour?<|im_end|>\n<|im_start|>assistant\n');
  assert.deepEqual(plain(held[0].media), plain([image(blue)]), 'the eval file resolves paths against its own directory');

  const raw = await loadDatasetTask({ train, eval: evalFile, prompt_format: 'raw' }, { tokenizer, renderChat: chatml, stopStrings: STOPS });
  const first = raw.trainPrompts(3, 5).find((p) => p.text.startsWith('Compare'))!;
  assert.deepEqual(plain(first.media), plain([image(red), clip(tone), image(blue)]));
  assert.ok(!('media' in raw.trainPrompts(3, 5).find((p) => p.answer === '4')!), 'a text row has no media');
  const colour = raw.trainPrompts(3, 5).find((p) => p.text === '<image>\nWhat colour is it?')!;
  assert.deepEqual(plain(colour.media), plain([image(red)]));
  const chat = task.trainPrompts(0, 5).find((p) => p.answer === 'tone')!;
  assert.equal(chat.text, '<|im_start|>system\nListen.<|im_end|>\n<|im_start|>user\n<audio>\nWhat do you hear?<|im_end|>\n<|im_start|>assistant\n');
  assert.deepEqual(plain(chat.media), plain([clip(tone)]));
  // the same file's bytes are read once and shared; a returned prompt's media list is a copy
  assert.equal(first.media![0].bytes, colour.media![0].bytes);
  first.media!.pop();
  assert.equal(raw.trainPrompts(3, 5).find((p) => p.text.startsWith('Compare'))!.media!.length, 3);

  // without data.eval the held-out tail keeps its media
  const split = await loadDatasetTask({ train, eval_size: 1, prompt_format: 'raw' }, { tokenizer, renderChat: chatml, stopStrings: STOPS });
  assert.deepEqual(plain(split.heldOut()[0].media), plain([image(red)]));
});

test('Parquet: path lists, inline binary and Hugging Face {bytes, path} structs; text columns stay text', async () => {
  const { parquetWriteFile } = await import('hyparquet-writer');
  const pq = path.join(dir, 'ds', 'media.parquet');
  parquetWriteFile({
    filename: pq,
    columnData: [
      { name: 'prompt', data: ['<image><image>Same colour?', 'Hear it?', 'Plain text?'] },
      // an unannotated binary column outside the media fields reads as text, as before
      { name: 'answer', data: [new TextEncoder().encode('no'), new TextEncoder().encode('yes'), new TextEncoder().encode('ok')] },
      { name: 'images', data: [[{ bytes: blue, path: 'ignored.png' }, { bytes: null, path: 'img/red.png' }], null, null] },
      { name: 'audio', data: [null, tone, null] },
    ],
    schema: [
      { name: 'root', num_children: 4 },
      { name: 'prompt', type: 'BYTE_ARRAY', converted_type: 'UTF8', repetition_type: 'OPTIONAL' },
      { name: 'answer', type: 'BYTE_ARRAY', repetition_type: 'OPTIONAL' },
      { name: 'images', repetition_type: 'OPTIONAL', converted_type: 'LIST', num_children: 1 },
      { name: 'list', repetition_type: 'REPEATED', num_children: 1 },
      { name: 'element', repetition_type: 'OPTIONAL', num_children: 2 },
      { name: 'bytes', type: 'BYTE_ARRAY', repetition_type: 'OPTIONAL' },
      { name: 'path', type: 'BYTE_ARRAY', converted_type: 'UTF8', repetition_type: 'OPTIONAL' },
      { name: 'audio', type: 'BYTE_ARRAY', repetition_type: 'OPTIONAL' },
    ],
  });
  const rows = await readDatasetRows(pq);
  assert.deepEqual(rows.map((r) => [r.prompt, r.answer]), [['<image><image>Same colour?', 'no'], ['<audio>\nHear it?', 'yes'], ['Plain text?', 'ok']]);
  assert.deepEqual(plain(rows[0].images), plain([image(blue), image(red)]), 'bytes win over the path; a path alone is read relative to the file');
  assert.deepEqual(plain(rows[1].audio), plain([clip(tone)]));
  assert.equal(rows[2].images, undefined);

  const task = await loadDatasetTask({ train: pq, eval: pq, prompt_format: 'raw' }, { tokenizer, stopStrings: STOPS });
  assert.deepEqual(plain(task.heldOut()[1].media), plain([clip(tone)]));

  // Parquet errors name the 0-based row and the field
  const bad = path.join(dir, 'ds', 'bad-media.parquet');
  parquetWriteFile({ filename: bad, columnData: [{ name: 'prompt', data: ['a', 'b'], type: 'STRING' }, { name: 'answer', data: ['1', '2'], type: 'STRING' }, { name: 'image', data: [null, 'img/missing.png'], type: 'STRING' }] });
  await assert.rejects(readDatasetRows(bad), (err: Error) => {
    assert.match(err.message, /bad-media\.parquet row 1 \(0-based\): field "image": the media file .*img[/\\]missing\.png cannot be read \(ENOENT\)/);
    return true;
  });
});

test('media errors name the file, the row and the field', async () => {
  const cases: Array<[string, unknown, RegExp]> = [
    ['missing.jsonl', { prompt: 'x', images: ['img/red.png', 'img/nope.png'], answer: 'a' }, /missing\.jsonl line 1: field "images"\[1\]: the media file .*nope\.png cannot be read \(ENOENT\): check the path \(relative paths are resolved against .*ds\)/],
    ['format.jsonl', { prompt: 'x', image: 'notes.txt', answer: 'a' }, /format\.jsonl line 1: field "image": the media file .*notes\.txt starts with bytes .* which is no supported media format/],
    ['kind.jsonl', { prompt: 'x', images: ['clips/tone.wav'], answer: 'a' }, /kind\.jsonl line 1: field "images"\[0\]: the media file .*tone\.wav is WAV audio, but image was expected/],
    ['kind-audio.jsonl', { prompt: 'x', audio: dataUrl(red), answer: 'a' }, /kind-audio\.jsonl line 1: field "audio": the data URL is PNG image, but audio was expected/],
    ['http.jsonl', { prompt: 'x', images: ['https://example.com/cat.png'], answer: 'a' }, /http\.jsonl line 1: field "images"\[0\]: the media source "https:\/\/example\.com\/cat\.png" is a network URL, and media are never fetched/],
    ['s3.jsonl', { prompt: 'x', image: 's3://bucket/cat.png', answer: 'a' }, /s3\.jsonl line 1: field "image" is the URL "s3:\/\/bucket\/cat\.png": media are read from files/],
    ['huge.jsonl', { prompt: 'x', image: 'img/huge.png', answer: 'a' }, /huge\.jsonl line 1: field "image": the media file .*huge\.png is 8\.00 MiB \(8388609 bytes\), over the limit of 8\.00 MiB/],
    ['bad-base64.jsonl', { prompt: 'x', image: 'data:image/png;base64,%%%', answer: 'a' }, /bad-base64\.jsonl line 1: field "image": the data URL \(image\/png\) is not valid base64/],
    ['not-source.jsonl', { prompt: 'x', images: [3], answer: 'a' }, /not-source\.jsonl line 1: field "images"\[0\] must be a file path \(relative to the dataset file\) or a data URL .*, got 3/],
    ['empty-source.jsonl', { prompt: 'x', images: [' '], answer: 'a' }, /empty-source\.jsonl line 1: field "images"\[0\] is an empty string/],
    ['both.jsonl', { prompt: 'x', images: ['img/red.png'], image: 'img/red.png', answer: 'a' }, /both\.jsonl line 1: has both fields "images" and "image"/],
    ['too-few.jsonl', { prompt: '<image> vs <image>', images: ['img/red.png'], answer: 'a' }, /too-few\.jsonl line 1: field "images" has 1 image but the prompt has 2 <image> placeholders: put one <image> where each goes/],
    ['too-many-audio.jsonl', { prompt: '<audio>?', audio: ['clips/tone.wav', 'clips/tone.wav'], answer: 'a' }, /too-many-audio\.jsonl line 1: field "audio" has 2 audio clips but the prompt has 1 <audio> placeholder/],
  ];
  for (const [name, row, re] of cases) {
    const p = await file(`ds/${name}`, jsonl([row]));
    await assert.rejects(readDatasetRows(p), (err: Error) => {
      assert.match(err.message, re, name);
      assert.ok(err.message.includes(p), `${name}: the error names the file: ${err.message}`);
      return true;
    });
  }
  // a placeholder without media, in a file that has media
  const orphan = await file('ds/orphan.jsonl', jsonl([{ prompt: 'x', image: 'img/red.png', answer: 'a' }, { prompt: '<image> what?', answer: 'b' }]));
  await assert.rejects(readDatasetRows(orphan), /orphan\.jsonl line 2: the prompt has 1 <image> placeholder but the row has no images \(field "images" or "image"\)/);
  // several bad rows: one error listing them in row order
  const many = await file('ds/many.jsonl', jsonl([{ prompt: 'a', image: 'img/x.png', answer: 1 }, { prompt: 'b', answer: 2 }, { prompt: 'c', audio: 'y.wav', answer: 3 }]));
  await assert.rejects(readDatasetRows(many), /many\.jsonl: 2 bad rows: .*many\.jsonl line 1: field "image": .*x\.png cannot be read.*; .*many\.jsonl line 3: field "audio": .*y\.wav cannot be read/);
  // the eval file is checked the same way, when the task loads
  const train = await file('ds/ok.jsonl', jsonl([{ prompt: 'x', image: 'img/red.png', answer: 'a' }]));
  const evalBad = await file('ds/eval/bad.jsonl', jsonl([{ prompt: 'y', image: 'img/red.png', answer: 'b' }]));
  await assert.rejects(loadDatasetTask({ train, eval: evalBad }, { tokenizer, renderChat: chatml, stopStrings: STOPS }), /eval[/\\]bad\.jsonl line 1: field "image": the media file .*eval[/\\]img[/\\]red\.png cannot be read \(ENOENT\)/);
  // a system prompt that adds a placeholder breaks the count
  await assert.rejects(
    loadDatasetTask({ train, eval: train, system_prompt: 'Look at <image>.' }, { tokenizer, renderChat: chatml, stopStrings: STOPS }),
    /ok\.jsonl line 1: the rendered prompt has 2 <image> placeholders but the row has 1 image: data\.system_prompt or the chat template must not add <image>/,
  );
});

test('a text-only dataset is unchanged: no media keys, literal placeholders kept as text', async () => {
  const rows = [{ prompt: 'What does <image> mean in HTML?', answer: 'img' }, { prompt: 'What is 1 + 1?', answer: 2 }];
  const p = await file('text/plain.jsonl', jsonl(rows));
  assert.deepEqual(await readDatasetRows(p), [
    { prompt: 'What does <image> mean in HTML?', answer: 'img', source: `${p} line 1` },
    { prompt: 'What is 1 + 1?', answer: '2', source: `${p} line 2` },
  ]);
  const task = await loadDatasetTask({ train: p, eval: p, prompt_format: 'raw' }, { tokenizer, stopStrings: STOPS });
  assert.deepEqual(task.mediaKinds, []);
  assert.deepEqual(task.heldOut(), [{ text: 'What does <image> mean in HTML?', answer: 'img' }, { text: 'What is 1 + 1?', answer: '2' }]);
  assert.deepEqual(parseDataConfig({ train: 'a.jsonl' }), { train: 'a.jsonl', eval_size: 64, prompt_field: 'prompt', messages_field: 'messages', prompt_format: 'chat', reward: { kind: 'exact', extract: 'none' } });
});

test('data.image_field / audio_field name the media fields; clashes are config errors', async () => {
  const p = await file('ds/custom.jsonl', jsonl([{ q: 'Colour?', pics: ['img/red.png'], sounds: 'clips/tone.wav', gold: 'red', images: 'not read' }]));
  const [row] = await readDatasetRows(p, { prompt_field: 'q', answer_field: 'gold', image_field: 'pics', audio_field: 'sounds' });
  assert.equal(row.prompt, '<image><audio>\nColour?');
  assert.deepEqual(plain(row.images), plain([image(red)]));
  assert.deepEqual(plain(row.audio), plain([clip(tone)]));
  const task = await loadDatasetTask({ train: p, eval: p, prompt_field: 'q', answer_field: 'gold', image_field: 'pics', audio_field: 'sounds', prompt_format: 'raw' }, { tokenizer, stopStrings: STOPS });
  assert.deepEqual(plain(task.heldOut()[0].media), plain([image(red), clip(tone)]));
  assert.throws(() => parseDataConfig({ train: 'a.jsonl', image_field: 'prompt' }), /data\.image_field: must differ from prompt_field \(both are "prompt"\)/);
  assert.throws(() => parseDataConfig({ train: 'a.jsonl', audio_field: 'image' }), /data\.audio_field: the image and audio fields must differ \(both are "image"\)/);
  assert.throws(() => parseDataConfig({ train: 'a.jsonl', image_field: 'audio' }), /data\.image_field: the image and audio fields must differ/);
});

// --- a pretrained model with encoders (training/policy-model.ts, model.from) ---

const TINY_LLAMA: ModelConfig = { architecture: 'llama', vocabSize: 49160, dModel: 32, nLayers: 1, nHeads: 2, nKvHeads: 1, dFF: 64, contextLength: 512, ropeTheta: 100000, rmsNormEps: 1e-5, tieEmbeddings: true };

test('model.from with model.vision / model.audio: SmolLM2 has no <image> token (a clear error); a tokenizer with the placeholders gets the encoders', async () => {
  const smollm2 = await resolveModelSource('smollm2-135m-instruct', { home: relaxEnvironment().home });
  const home = path.join(dir, 'home');
  const plainDir = path.join(dir, 'tiny-smollm2-tokenizer');
  await writeHfModel(plainDir, TINY_LLAMA, initWeights(TINY_LLAMA, 0), { tokenizerDir: smollm2 });
  const train = await file('ds/policy.jsonl', jsonl([{ prompt: 'Colour?', image: 'img/red.png', audio: 'clips/tone.wav', answer: 'red' }]));
  const textTrain = await file('text/policy.jsonl', jsonl([{ prompt: 'What is 1 + 1?', answer: 2 }]));
  const config = (from: string, model: Record<string, unknown>, data: string) =>
    parseRunConfig({ model: { from, context_length: 64, ...model }, data: { train: data, eval: data }, rollout: { max_new_tokens: 4 } });

  // SmolLM2's vocabulary: "<image>" is three tokens, and no token is invented unasked (model.add_special_tokens adds one: test/special-tokens.test.ts)
  await assert.rejects(loadRunPolicy(config(plainDir, { vision: { patch_size: 4, max_patches: 4 } }, textTrain), { home }), (err: Error) => {
    assert.ok(err instanceof RunModelError);
    assert.match(err.message, /^model\.vision: the tokenizer of model\.from \(.*tokenizer\.json\) has no single <image> token to place the image embeddings at \(it encodes "<image>" as 3 tokens \[44,5028,46\]\): add it with model\.add_special_tokens: \["<image>"\]/);
    return true;
  });
  await assert.rejects(loadRunPolicy(config(plainDir, { audio: {} }, textTrain), { home }), /^RunModelError: model\.audio: .*has no single <audio> token.*\(it encodes "<audio>" as 3 tokens/);
  // a media dataset without the encoder
  await assert.rejects(loadRunPolicy(config(plainDir, {}, train), { home }), /model\.vision: the dataset's prompts have images, and the model has no vision encoder: add model\.vision/);
  // a text dataset on the plain model is as before: no encoders
  const text = await loadRunPolicy(config(plainDir, {}, textTrain), { home });
  assert.equal(text.model.vision, undefined);

  // the same model with <image> and <audio> added to its tokenizer as single tokens
  const mediaDir = path.join(dir, 'tiny-media-tokenizer');
  await writeHfModel(mediaDir, TINY_LLAMA, initWeights(TINY_LLAMA, 0), { tokenizerDir: smollm2 });
  const tok = JSON.parse(fs.readFileSync(path.join(mediaDir, 'tokenizer.json'), 'utf8')) as { added_tokens: Array<Record<string, unknown>> };
  const added = (id: number, content: string) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
  tok.added_tokens.push(added(49152, '<image>'), added(49153, '<audio>'));
  fs.writeFileSync(path.join(mediaDir, 'tokenizer.json'), JSON.stringify(tok));
  await assert.rejects(loadRunPolicy(config(mediaDir, { vision: {} }, train), { home }), /model\.audio: the dataset's prompts have audio clips, and the model has no audio encoder/);
  const policy = await loadRunPolicy(config(mediaDir, { vision: { patch_size: 4, max_patches: 4, d_model: 16, n_heads: 2 }, audio: { max_frames: 20 } }, train), { home });
  assert.equal(policy.model.vision?.tokenId, 49152);
  assert.equal(policy.model.vision?.patchSize, 4);
  assert.equal(policy.model.audio?.tokenId, 49153);
  assert.equal(policy.model.audio?.maxFrames, 20);
  assert.equal(policy.model.dModel, 32, 'the language model is the pretrained one');
  const [prompt] = policy.task.heldOut();
  assert.deepEqual(prompt.media?.map((m) => m.kind), ['image', 'audio']);
  const ids = policy.task.tokenizer().encode(prompt.text);
  assert.equal(ids.filter((id) => id === 49152).length, 1);
  assert.equal(ids.filter((id) => id === 49153).length, 1);
  // the model's media inputs take the prompt as is: each placeholder expanded to its medium's embeddings
  const expanded = expandMediaTokens(ids, policy.model, prompt.media!.map((m) => m.kind));
  assert.equal(expanded.length, ids.length - 2 + mediumEmbeddings(policy.model, 'image') + mediumEmbeddings(policy.model, 'audio'));
  for (const m of prompt.media!) assert.equal(modelMediaInput(m.bytes, m.format, policy.model).kind, m.kind);
  // the base weights gain freshly initialised encoders (no encoder is in the checkpoint), the same on every call
  const weights = await policy.baseWeights!();
  const encoderNames = parameterSpec(policy.model).filter((p) => parameterPart(p.name) !== 'language_model').map((p) => p.name);
  assert.ok(encoderNames.some((n) => n.startsWith('vision.')) && encoderNames.some((n) => n.startsWith('audio.')));
  for (const name of parameterSpec(policy.model).map((p) => p.name)) assert.ok(weights[name], `${name} is in the base weights`);
  assert.equal((await policy.baseWeights!())[encoderNames[0]], weights[encoderNames[0]]);
});
