// Images and audio on the OpenAI-compatible endpoint (serving/openai-server.ts): chat messages with
// `image_url` (data URL) and `input_audio` (base64 WAV) parts, through the official `openai` client,
// against a tiny GPT with a vision and an audio encoder. The greedy completion and its log-probs are
// what engine.generate gives for the same tokens and media directly; text-only requests are as
// before; network URLs, media a model has no encoder for, oversized media, other audio formats and
// placeholders typed into the text are 400s naming the part; a session with media records a sample
// whose media ids are the sha256 ids of the bytes, and a call that changes an earlier medium breaks
// its session; an agent rollout (rolloutSlice with rollout.agent) whose agent sends an image stores
// samples listing the image's id, with the bytes in the run's media store.
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { OpenAI } from 'openai';
import { parseRunConfig } from '../config/run-config';
import { encodePng, encodeWav } from '../engines/media/decode';
import { expandMediaTokens, modelMediaInput, type SequenceMedia } from '../engines/media/model-inputs';
import { mediaIdOf, MediaStore } from '../engines/media/store';
import { initWeights, type ModelConfig, type PolicyWeights } from '../engines/model';
import { RolloutEngine, type SamplingParams } from '../engines/rollout';
import { CharTokenizer } from '../engines/tokenizers/char';
import { withBos } from '../engines/tokenizers/tokenizer';
import type { Task } from '../envs/task';
import { MediaPrompts } from '../rollout/media-prompts';
import { modelNotFound, startOpenAIServer, type OpenAIServer, type ResolvedModel } from '../serving/openai-server';
import { rolloutSlice } from '../rollout/producers';

const tok = new CharTokenizer('0123456789+=?ab', { specials: ['<image>', '<audio>'] });
const IMAGE_ID = tok.specialId('<image>') as number;
const AUDIO_ID = tok.specialId('<audio>') as number;
const LM: ModelConfig = { vocabSize: tok.vocabSize, dModel: 32, nLayers: 2, nHeads: 4, dFF: 64, contextLength: 96 };
/** 4 x 4 patches of 8 x 8 pixels per image (16 embeddings); 100 log-mel frames (1 s) give 50 embeddings per clip. */
const MM: ModelConfig = {
  ...LM,
  vision: { patchSize: 8, maxPatches: 16, tokenId: IMAGE_ID, dModel: 16, nLayers: 1, nHeads: 2, dFF: 32 },
  audio: { nMels: 80, maxFrames: 100, tokenId: AUDIO_ID, dModel: 16, nLayers: 1, nHeads: 2, dFF: 32 },
};

/** Random weights scaled up (media then visibly move the distribution) that never emit pad or bos (as test/openai-server.test.ts's). */
function weights(cfg: ModelConfig, seed: number): PolicyWeights {
  const w = initWeights(cfg, seed);
  for (const [name, values] of Object.entries(w)) if (name.endsWith('.weight') && !name.includes('ln')) values.forEach((v, i) => (values[i] = v * 8));
  w['ln_f.bias'].fill(1);
  for (let d = 0; d < cfg.dModel; d++) for (const id of [tok.padId, tok.bosId]) w['lm_head.weight'][d * cfg.vocabSize + id] = -0.5;
  return w;
}

/** A w x h RGB gradient with a bright square at `seed`, as PNG bytes. */
function png(seed: number, w = 24, h = 20): Uint8Array {
  const data = new Uint8Array(w * h * 3);
  for (let y = 0; y < h; y++) {
    for (let x = 0; x < w; x++) {
      const i = (y * w + x) * 3;
      const square = x >= seed % 7 && x < (seed % 7) + 8 && y >= 4 && y < 12;
      data[i] = square ? 255 : (x * 10 + seed * 37) % 256;
      data[i + 1] = (y * 12 + seed * 11) % 256;
      data[i + 2] = square ? 30 : ((x + y) * 5 + seed * 53) % 256;
    }
  }
  return encodePng({ width: w, height: h, data });
}

/** A tone of `hz` for `seconds` as 16 kHz WAV bytes. */
function wav(hz: number, seconds: number): Uint8Array {
  const rate = 16000;
  return encodeWav({ sampleRate: rate, samples: Float32Array.from({ length: Math.round(seconds * rate) }, (_, i) => 0.6 * Math.sin((2 * Math.PI * hz * i) / rate)) });
}

const b64 = (bytes: Uint8Array) => Buffer.from(bytes).toString('base64');
const dataUrl = (bytes: Uint8Array, mime = 'image/png') => `data:${mime};base64,${b64(bytes)}`;
const imagePart = (bytes: Uint8Array) => ({ type: 'image_url' as const, image_url: { url: dataUrl(bytes) } });
const audioPart = (bytes: Uint8Array) => ({ type: 'input_audio' as const, input_audio: { data: b64(bytes), format: 'wav' as const } });
const textPart = (text: string) => ({ type: 'text' as const, text });

let mm: RolloutEngine;
let textOnly: RolloutEngine;
let server: OpenAIServer;
let client: OpenAI;

before(async () => {
  mm = await RolloutEngine.create(MM, { intraOpNumThreads: 1 });
  mm.setWeights(2, weights(MM, 5));
  textOnly = await RolloutEngine.create(LM, { intraOpNumThreads: 1 });
  textOnly.setWeights(0, weights(LM, 5));
  server = await startOpenAIServer({
    async resolveModel(model): Promise<ResolvedModel> {
      if (model === 'mm') return { engine: mm, tokenizer: tok, policyVersion: 2 };
      if (model === 'text') return { engine: textOnly, tokenizer: tok, policyVersion: 0 };
      throw modelNotFound(model, 'this test serves "mm" and "text"');
    },
    listModels: async () => ['mm', 'text'],
  });
  client = new OpenAI({ baseURL: server.baseURL, apiKey: 'unused', maxRetries: 0 });
});

after(async () => {
  await server?.close();
  await Promise.all([mm, textOnly].map((e) => e?.release()));
});

const greedy = (maxNewTokens: number): SamplingParams => ({ maxNewTokens, seed: 0, temperature: 0, topP: 1, topK: 0, stopTokens: [tok.eosId] });

/** What the engine itself generates for `text` (placeholders spelled out) with these media (PNG / WAV bytes, in order). */
async function direct(text: string, media: Array<{ bytes: Uint8Array; format: 'png' | 'jpeg' | 'wav' }>, maxNewTokens: number) {
  const kinds = media.map((m) => (m.format === 'wav' ? ('audio' as const) : ('image' as const)));
  const tokens = expandMediaTokens(withBos(tok, tok.encode(text)), MM, kinds);
  const inputs: SequenceMedia = { images: [], audio: [] };
  for (const m of media) {
    const p = modelMediaInput(m.bytes, m.format, MM);
    (p.kind === 'image' ? inputs.images : inputs.audio).push(p.data);
  }
  const [g] = await mm.generate([tokens], greedy(maxNewTokens), [inputs]);
  const shown = g.finishReason === 'stop' ? g.tokens.slice(0, -1) : g.tokens;
  return { tokens, g, text: tok.decode(shown), logprobs: g.logprobs.slice(0, shown.length) };
}

async function rawChat(body: unknown, bodyText?: string): Promise<{ status: number; json: any }> {
  const res = await fetch(`${server.baseURL}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: bodyText ?? JSON.stringify(body) });
  return { status: res.status, json: await res.json() };
}

async function rejects(call: () => Promise<unknown>, status: number): Promise<InstanceType<typeof OpenAI.APIError>> {
  try {
    await call();
  } catch (err) {
    assert.ok(err instanceof OpenAI.APIError, `expected an OpenAI APIError, got ${err}`);
    assert.equal(err.status, status, err.message);
    return err;
  }
  assert.fail(`expected HTTP ${status}`);
}

describe('media in chat messages', () => {
  test('an image_url data URL: the greedy completion and log-probs are engine.generate\'s for the same tokens and media', async () => {
    const image = png(1);
    const res = await client.chat.completions.create({
      model: 'mm',
      messages: [{ role: 'user', content: [textPart('12'), imagePart(image), textPart('+3=')] }],
      max_completion_tokens: 6,
      temperature: 0,
      logprobs: true,
    });
    const expected = await direct('12<image>+3=', [{ bytes: image, format: 'png' }], 6);
    assert.equal(res.choices[0].message.content, expected.text);
    assert.equal(res.choices[0].finish_reason, expected.g.finishReason);
    assert.deepEqual(res.choices[0].logprobs?.content?.map((c) => c.logprob), expected.logprobs);
    assert.equal(res.usage?.prompt_tokens, expected.tokens.length, 'the prompt counts one token per image embedding');
    assert.equal(expected.tokens.filter((t) => t === IMAGE_ID).length, 16);

    // The image matters: another image gives other log-probs, and the same text without it others again.
    const other = await client.chat.completions.create({ model: 'mm', messages: [{ role: 'user', content: [textPart('12'), imagePart(png(4)), textPart('+3=')] }], max_completion_tokens: 6, temperature: 0, logprobs: true });
    assert.notDeepEqual(other.choices[0].logprobs?.content?.map((c) => c.logprob), expected.logprobs);
  });

  test('input_audio (base64 WAV) and an image in one prompt, across messages, in order', async () => {
    const clip = wav(700, 0.6);
    const image = png(2, 16, 30);
    const res = await client.chat.completions.create({
      model: 'mm',
      messages: [
        { role: 'system', content: 'a' },
        { role: 'user', content: [audioPart(clip), textPart('?')] },
        { role: 'user', content: [imagePart(image)] },
      ],
      max_completion_tokens: 5,
      temperature: 0,
      logprobs: true,
    });
    const expected = await direct('a<audio>?<image>', [{ bytes: clip, format: 'wav' }, { bytes: image, format: 'png' }], 5);
    assert.equal(res.choices[0].message.content, expected.text);
    assert.deepEqual(res.choices[0].logprobs?.content?.map((c) => c.logprob), expected.logprobs);
    assert.equal(res.usage?.prompt_tokens, 1 + 1 + 50 + 1 + 16);
  });

  test('a JPEG data URL; the format is read from the bytes, not the MIME type', async () => {
    // jpeg-js is the decoder's own dependency; an 8 x 8 grey JPEG.
    const jpeg = require('jpeg-js') as { encode(img: { width: number; height: number; data: Uint8Array }, q: number): { data: Buffer } };
    const bytes = new Uint8Array(jpeg.encode({ width: 8, height: 8, data: new Uint8Array(8 * 8 * 4).fill(128) }, 90).data);
    const res = await client.chat.completions.create({ model: 'mm', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: dataUrl(bytes, 'image/jpeg') } }, textPart('=')] }], max_completion_tokens: 4, temperature: 0 });
    assert.equal(res.choices[0].message.content, (await direct('<image>=', [{ bytes, format: 'jpeg' }], 4)).text);
    const mislabelled = await client.chat.completions.create({ model: 'mm', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: dataUrl(png(1), 'image/jpeg') } }, textPart('=')] }], max_completion_tokens: 4, temperature: 0 });
    assert.equal(mislabelled.choices[0].message.content, (await direct('<image>=', [{ bytes: png(1), format: 'png' }], 4)).text);
  });

  test('text-only requests to a model with encoders are as before', async () => {
    const res = await client.chat.completions.create({ model: 'mm', messages: [{ role: 'user', content: [textPart('12+')] }, { role: 'user', content: '3=' }], max_completion_tokens: 5, temperature: 0, logprobs: true });
    const [g] = await mm.generate([withBos(tok, tok.encode('12+3='))], greedy(5));
    const shown = g.finishReason === 'stop' ? g.tokens.slice(0, -1) : g.tokens;
    assert.equal(res.choices[0].message.content, tok.decode(shown));
    assert.deepEqual(res.choices[0].logprobs?.content?.map((c) => c.logprob), g.logprobs.slice(0, shown.length));
  });
});

describe('refusals', () => {
  test('an http(s) image URL is a 400 naming the part and asking for a data URL', async () => {
    const err = await rejects(() => client.chat.completions.create({ model: 'mm', messages: [{ role: 'user', content: [textPart('1'), { type: 'image_url', image_url: { url: 'https://example.com/cat.png' } }] }] }), 400);
    assert.match(err.message, /messages\[0\]\.content\[1\]\.image_url\.url is the network URL "https:\/\/example\.com\/cat\.png"/);
    assert.match(err.message, /never fetches media from the network: send the image inline as a data URL/);
    assert.equal(err.param, 'messages[0].content[1].image_url.url');
    assert.equal(err.code, 'media_url_refused');
  });

  test('a model without the encoder is a 400 saying so', async () => {
    const image = await rejects(() => client.chat.completions.create({ model: 'text', messages: [{ role: 'user', content: [imagePart(png(1))] }] }), 400);
    assert.match(image.message, /model "text" has no vision encoder, so it cannot take messages\[0\]\.content\[0\]\.image_url\.url \(an image\)/);
    assert.equal(image.code, 'unsupported_media');
    const audio = await rejects(() => client.chat.completions.create({ model: 'text', messages: [{ role: 'user', content: [textPart('1'), audioPart(wav(400, 0.2))] }] }), 400);
    assert.match(audio.message, /model "text" has no audio encoder/);
  });

  test('oversized media are 400s naming the limit: bytes, pixels, the audio encoder\'s window, the request body', async () => {
    const huge = new Uint8Array(9 * 1024 * 1024);
    huge.set(png(1).subarray(0, 8));
    const bytes = await rejects(() => client.chat.completions.create({ model: 'mm', messages: [{ role: 'user', content: [imagePart(huge)] }] }), 400);
    assert.match(bytes.message, /messages\[0\]\.content\[0\]\.image_url\.url: .*is 9\.00 MiB .*over the limit of 8\.00 MiB/);
    assert.equal(bytes.code, 'media_too_large');

    // A PNG whose header declares 5000 x 5000 pixels: refused from the header, before decoding.
    const bomb = png(1);
    new DataView(bomb.buffer, bomb.byteOffset).setUint32(16, 5000);
    new DataView(bomb.buffer, bomb.byteOffset).setUint32(20, 5000);
    const pixels = await rejects(() => client.chat.completions.create({ model: 'mm', messages: [{ role: 'user', content: [imagePart(bomb)] }] }), 400);
    assert.match(pixels.message, /declares 5000x5000 = 25000000 pixels, over the limit of 16777216 pixels/);
    assert.equal(pixels.code, 'media_too_large');

    const long = await rejects(() => client.chat.completions.create({ model: 'mm', messages: [{ role: 'user', content: [audioPart(wav(500, 2))] }] }), 400);
    assert.match(long.message, /messages\[0\]\.content\[0\]\.input_audio\.data: the WAV audio is 2\.00 s long, over the limit of 1 s/);

    const small = await startOpenAIServer({ resolveModel: async () => ({ engine: mm, tokenizer: tok, policyVersion: 2 }), listModels: async () => ['mm'], bodyLimit: 4096 });
    try {
      const res = await fetch(`${small.baseURL}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'mm', messages: [{ role: 'user', content: [imagePart(png(3)), textPart('1'.repeat(8000))] }] }) });
      assert.equal(res.status, 413);
      assert.match(((await res.json()) as { error: { message: string } }).error.message, /the request body is over this endpoint's limit of 4096 bytes: send fewer or smaller images and clips \(each medium is limited to 8 MiB\)/);
    } finally {
      await small.close();
    }
  });

  test('too many media for the context is context_length_exceeded, counting their tokens', async () => {
    const err = await rejects(() => client.chat.completions.create({ model: 'mm', messages: [{ role: 'user', content: [audioPart(wav(300, 0.3)), imagePart(png(1)), imagePart(png(2)), imagePart(png(3)), textPart('1')] }] }), 400);
    assert.match(err.message, /the prompt is 100 tokens \(bos \+ 1 of text \+ 98 for its media: 3 images of 16 tokens each and 1 clip of 50 tokens each\), but this model's context is 96 tokens/);
    assert.equal(err.code, 'context_length_exceeded');
  });

  test('malformed parts: another audio format, unknown part types, detail, a placeholder typed into the text', async () => {
    const mp3 = await rawChat({ model: 'mm', messages: [{ role: 'user', content: [{ type: 'input_audio', input_audio: { data: b64(wav(300, 0.1)), format: 'mp3' } }] }] });
    assert.equal(mp3.status, 400);
    assert.match(mp3.json.error.message, /messages\[0\]\.content\[0\]\.input_audio\.format is "mp3", but only "wav" audio is supported/);
    assert.equal(mp3.json.error.param, 'messages[0].content[0].input_audio.format');

    const file = await rawChat({ model: 'mm', messages: [{ role: 'user', content: [{ type: 'file', file: { file_id: 'x' } }] }] });
    assert.equal(file.status, 400);
    assert.match(file.json.error.message, /messages\[0\]\.content\[0\] is .*the supported content parts are/);

    const detail = await rawChat({ model: 'mm', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: dataUrl(png(1)), detail: 'high' } }] }] });
    assert.equal(detail.status, 400);
    assert.equal(detail.json.error.code, 'unsupported_parameter');

    const notImage = await rawChat({ model: 'mm', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: dataUrl(wav(300, 0.1), 'image/png') } }] }] });
    assert.equal(notImage.status, 400);
    assert.match(notImage.json.error.message, /WAV audio, but image was expected/);

    const typed = await rejects(() => client.chat.completions.create({ model: 'mm', messages: [{ role: 'user', content: [textPart('1<image>'), imagePart(png(1))] }] }), 400);
    assert.match(typed.message, /contains this model's image placeholder "<image>" 1 time without an image for it/);
    const completion = await rejects(() => client.completions.create({ model: 'mm', prompt: '<audio>1' }), 400);
    assert.match(completion.message, /audio placeholder "<audio>" 1 time without a clip/);
  });
});

describe('sessions with media', () => {
  test('a session with an image and a clip records one sample whose media are the sha256 ids of the bytes', async () => {
    const image = png(5);
    const clip = wav(900, 0.4);
    const first = [{ role: 'user' as const, content: [textPart('1'), imagePart(image), textPart('+')] }];
    const c1 = await client.chat.completions.create({ model: 'mm', messages: first, max_completion_tokens: 2, temperature: 0, user: 'media-session' });
    const reply = c1.choices[0].message.content ?? '';
    const second = [...first, { role: 'assistant' as const, content: reply }, { role: 'user' as const, content: [audioPart(clip), textPart('=')] }];
    const c2 = await client.chat.completions.create({ model: 'mm', messages: second, max_completion_tokens: 3, temperature: 0, user: 'media-session' });
    const take = server.sessions.take('media-session');
    assert.equal(take.error, null);
    const s = take.sample;
    assert.ok(s);
    assert.deepEqual(s.mediaIds, [mediaIdOf(image), mediaIdOf(clip)]);
    assert.deepEqual(s.media?.map((m) => [m.kind, m.format, Buffer.from(m.bytes).equals(Buffer.from(m.kind === 'image' ? image : clip))]), [['image', 'png', true], ['audio', 'wav', true]]);
    assert.deepEqual(s.promptTokens, expandMediaTokens(withBos(tok, tok.encode('1<image>+')), MM, ['image']));
    const full = [...s.promptTokens, ...s.responseTokens];
    assert.equal(full.filter((t) => t === IMAGE_ID).length, 16);
    assert.equal(full.filter((t) => t === AUDIO_ID).length, 50);
    // The first completion (as the agent sent it back) and the second are the policy's; the clip's 50 placeholders and "=" are context.
    const shown1 = tok.encode(reply);
    const agent = [...Array<number>(50).fill(AUDIO_ID), ...tok.encode('=')];
    const n2 = c2.usage?.completion_tokens ?? 0;
    assert.deepEqual(s.responseTokens.slice(0, shown1.length + agent.length), [...shown1, ...agent]);
    assert.equal(s.responseTokens.length, shown1.length + agent.length + n2);
    assert.deepEqual(s.lossMask, [...shown1.map(() => 1), ...agent.map(() => 0), ...Array<number>(n2).fill(1)]);
    assert.equal(s.policyVersion, 2);
  });

  test('a call that replaces an earlier image breaks its session', async () => {
    const first = [{ role: 'user' as const, content: [imagePart(png(1)), textPart('1')] }];
    const c1 = await client.chat.completions.create({ model: 'mm', messages: first, max_completion_tokens: 2, temperature: 0, user: 'swapped' });
    const err = await rejects(
      () =>
        client.chat.completions.create({
          model: 'mm',
          messages: [{ role: 'user', content: [imagePart(png(2)), textPart('1')] }, { role: 'assistant', content: c1.choices[0].message.content ?? '' }, { role: 'user', content: '2' }],
          max_completion_tokens: 2,
          temperature: 0,
          user: 'swapped',
        }),
      400,
    );
    assert.equal(err.code, 'invalid_session');
    assert.match(err.message, /call 2's medium 1 is an image \(sha256:.*\), but the session's medium 1 is an image .*resend the conversation's earlier images and clips unchanged/);
    const take = server.sessions.take('swapped');
    assert.equal(take.sample, undefined);
    assert.match(take.error ?? '', /medium 1/);
  });
});

test('agent rollouts: an agent that sends an image yields samples whose media ids are in the run\'s media store', async () => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'relax-openai-media-'));
  // This process plays the rollout worker: it must allow agent commands (envs/module-policy.ts).
  const allowed = process.env.RELAX_ALLOW_AGENT_COMMANDS;
  process.env.RELAX_ALLOW_AGENT_COMMANDS = '1';
  try {
    // The agent sends its prompt with an image (from its environment) in one chat call, and reports reward 1.
    const agent = path.join(dir, 'agent.cjs');
    await writeFile(
      agent,
      `const body = { model: process.env.RELAX_MODEL, user: process.env.RELAX_SESSION_ID, max_tokens: 2, temperature: 0,
        messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: process.env.FIXTURE_IMAGE } }, { type: 'text', text: process.env.RELAX_PROMPT }] }] };
      fetch(process.env.RELAX_BASE_URL + '/chat/completions', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
        .then(async (r) => { if (!r.ok) throw new Error(await r.text()); console.log(JSON.stringify({ reward: 1 })); })
        .catch((e) => { console.error(e.message); process.exit(1); });`,
    );
    const image = png(6);
    process.env.FIXTURE_IMAGE = dataUrl(image);
    const config = parseRunConfig({ task: 'add2', rollout: { prompts_per_step: 1, agent: { command: [process.execPath, agent], timeout_ms: 30_000 } }, algorithm: { group_size: 2 } });
    const prompt = { text: '1+2=', answer: '3' };
    const task: Task = { name: 'media-agent', tokenizer: () => tok, trainPrompts: (_seed, n) => Array.from({ length: n }, () => prompt), heldOut: () => [prompt], reward: () => 0 };
    const store = new MediaStore(path.join(dir, 'media'));
    const samples = await rolloutSlice(
      { config, task, engine: mm, media: new MediaPrompts(MM, store), agentEndpoint: async () => ({ url: server.url, sessions: server.sessions, model: 'mm' }) },
      { iteration: 0, firstGroup: 0, groups: 1 },
    );
    assert.equal(samples.length, 2);
    for (const s of samples) {
      assert.equal(s.status, 'scored', s.error ?? undefined);
      assert.equal(s.reward, 1);
      assert.deepEqual(s.media, [mediaIdOf(image)]);
      assert.deepEqual(s.promptTokens, expandMediaTokens(withBos(tok, tok.encode('<image>1+2=')), MM, ['image']));
    }
    const stored = await store.get(mediaIdOf(image));
    assert.ok(Buffer.from(stored.bytes).equals(Buffer.from(image)), 'the bytes are in the run\'s media store');
  } finally {
    if (allowed === undefined) delete process.env.RELAX_ALLOW_AGENT_COMMANDS;
    else process.env.RELAX_ALLOW_AGENT_COMMANDS = allowed;
    delete process.env.FIXTURE_IMAGE;
    await rm(dir, { recursive: true, force: true });
  }
});
