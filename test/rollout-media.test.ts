// The rollout engine with images and audio in the prompt: on tiny random GPT and llama models with a
// vision and an audio encoder, a batch of prompts of different lengths (an image, a clip, both, two
// images, text only) generates, through the media prefill graph and the KV-cache decode graph, the
// greedy tokens and log-probs that the tfjs trainer's full-sequence forward gives for prompt +
// generated tokens; batching by one (every media combination in its own chunk) changes nothing;
// media the model cannot take are refused by name before anything runs; text-only calls are as before.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import * as tf from '@tensorflow/tfjs';
import { loadTfjsBackend } from '../engines/backends';
import { encodePng, encodeWav } from '../engines/media/decode';
import { batchMediaInputs, expandMediaTokens, modelMediaInput, type SequenceMedia } from '../engines/media/model-inputs';
import { attentionBias, forward, initWeights, parameterSpec, ropeTables, type ModelConfig, type PolicyWeights } from '../engines/model';
import { buildGenerationGraph } from '../engines/model-onnx';
import { createTfjsOps } from '../engines/model-tfjs';
import { RolloutEngine, type GeneratedSample } from '../engines/rollout';
import { registerWasmTrainingKernels } from '../engines/wasm-kernels';
import { randomWeights } from './model-fixtures';

const IMG = 20;
const AUD = 21;
const LM: ModelConfig = { vocabSize: 24, dModel: 32, nLayers: 2, nHeads: 4, dFF: 64, contextLength: 48 };
const GPT: ModelConfig = {
  ...LM,
  // 2 x 2 patches of 4 x 4 pixels per image; 20 log-mel frames (0.2 s) give 10 embeddings per clip.
  vision: { patchSize: 4, maxPatches: 4, tokenId: IMG, dModel: 16, nLayers: 1, nHeads: 2, dFF: 32 },
  audio: { nMels: 8, maxFrames: 20, tokenId: AUD, dModel: 16, nLayers: 1, nHeads: 2, dFF: 32 },
};
const LLAMA: ModelConfig = { ...GPT, architecture: 'llama', nKvHeads: 2, tieEmbeddings: true };
const MAX_NEW = 4;

let trainerBackend = 'cpu';
before(async () => {
  trainerBackend = (await loadTfjsBackend({ kind: 'cpu' })).backend;
  if (trainerBackend === 'wasm') registerWasmTrainingKernels();
});

const engines: RolloutEngine[] = [];
after(async () => {
  await Promise.all(engines.map((e) => e.release()));
});

async function engine(cfg: ModelConfig, weights: PolicyWeights, maxBatchSize = 16): Promise<RolloutEngine> {
  const e = await RolloutEngine.create(cfg, { intraOpNumThreads: 1, maxBatchSize });
  e.setWeights(1, weights);
  engines.push(e);
  return e;
}

/** A w x h RGB image of a colour gradient with a bright square: real PNG bytes, decoded and processed. */
function image(cfg: ModelConfig, seed: number, w = 12, h = 10): Float32Array {
  const data = new Uint8Array(w * h * 3);
  for (let y = 0; y < h; y++) {
    for (let x = 0; x < w; x++) {
      const i = (y * w + x) * 3;
      const square = x >= seed % 5 && x < (seed % 5) + 4 && y >= 2 && y < 6;
      data[i] = square ? 255 : (x * 20 + seed * 37) % 256;
      data[i + 1] = (y * 25 + seed * 11) % 256;
      data[i + 2] = square ? 30 : ((x + y) * 9 + seed * 53) % 256;
    }
  }
  const m = modelMediaInput(encodePng({ width: w, height: h, data }), 'png', cfg);
  assert.equal(m.kind, 'image');
  return m.data;
}

/** A tone of `hz` with a fade, as real WAV bytes at `rate` (resampled to 16 kHz when it is not), processed. */
function clip(cfg: ModelConfig, hz: number, seconds: number, rate = 16000): Float32Array {
  const samples = Float32Array.from({ length: Math.round(seconds * rate) }, (_, i) => 0.6 * Math.sin((2 * Math.PI * hz * i) / rate) * Math.min(1, i / 400));
  const m = modelMediaInput(encodeWav({ sampleRate: rate, samples }), 'wav', cfg);
  assert.equal(m.kind, 'audio');
  return m.data;
}

interface Case {
  prompts: number[][];
  media: Array<SequenceMedia | undefined>;
}

/** Prompts of different lengths: an image, a clip, both, text only, two images (placeholders expanded). */
function cases(cfg: ModelConfig): Case {
  const raw: Array<[number[], SequenceMedia | undefined]> = [
    [[1, 2, IMG, 3], { images: [image(cfg, 1)], audio: [] }],
    [[AUD, 5, 6], { images: [], audio: [clip(cfg, 440, 0.15)] }],
    [[1, IMG, 4, AUD, 7], { images: [image(cfg, 2, 9, 14)], audio: [clip(cfg, 1000, 0.18, 22050)] }],
    [[1, 8, 9], undefined],
    [[IMG, 2, IMG], { images: [image(cfg, 3), image(cfg, 4, 16, 16)], audio: [] }],
  ];
  return {
    prompts: raw.map(([tokens]) => expandMediaTokens(tokens, cfg, tokens.filter((t) => t === IMG || t === AUD).map((t) => (t === IMG ? 'image' : 'audio')))),
    media: raw.map(([, m]) => m),
  };
}

/** The trainer's view: tfjs forward over every prompt + generated sequence (right-padded, media at offset 0); per sample the log-prob and argmax at each generated token. */
function trainerLogprobs(cfg: ModelConfig, weights: PolicyWeights, c: Case, samples: GeneratedSample[]): Array<{ logprobs: number[]; argmax: number[] }> {
  const full = c.prompts.map((p, i) => [...p, ...samples[i].tokens]);
  const B = full.length;
  const T = Math.max(...full.map((f) => f.length));
  const V = cfg.vocabSize;
  const tokens = new Int32Array(B * T);
  full.forEach((f, b) => tokens.set(f, b * T));
  const positions = Int32Array.from({ length: B * T }, (_, i) => i % T);
  const media = batchMediaInputs(cfg, full.map((tokens, b) => ({ tokens, media: c.media[b], offset: 0 })), T);
  assert.ok(media?.images && media.audio);
  const ops = createTfjsOps({ explicitTransposeGrad: tf.getBackend() === 'wasm' });
  const logits = tf.tidy(() => {
    const w = Object.fromEntries(parameterSpec(cfg).map((p) => [p.name, tf.tensor(weights[p.name], p.shape)]));
    const rope = cfg.architecture === 'llama' ? ropeTables(cfg, positions, B, T) : undefined;
    const Dh = cfg.dModel / cfg.nHeads;
    return forward(ops, cfg, w, {
      tokens: tf.tensor2d(tokens, [B, T], 'int32'),
      positions: tf.tensor2d(positions, [B, T], 'int32'),
      attentionBias: tf.tensor4d(attentionBias(B, T, 0), [B, 1, T, T]),
      ...(rope ? { rope: { cos: tf.tensor4d(rope.cos, [B, 1, T, Dh]), sin: tf.tensor4d(rope.sin, [B, 1, T, Dh]) } } : {}),
      media: {
        images: tf.tensor3d(media.images!.data, media.images!.dims),
        audio: tf.tensor3d(media.audio!.data, media.audio!.dims),
        embeddingIndex: tf.tensor2d(media.embeddingIndex, [B, T], 'int32'),
      },
    }).logits.dataSync() as Float32Array;
  });
  return full.map((f, b) => {
    const out = { logprobs: [] as number[], argmax: [] as number[] };
    for (let t = c.prompts[b].length; t < f.length; t++) {
      const row = logits.subarray((b * T + t - 1) * V, (b * T + t) * V);
      let max = -Infinity;
      let best = 0;
      for (let v = 0; v < V; v++) if (row[v] > max) [max, best] = [row[v], v];
      const lse = max + Math.log(row.reduce((s, x) => s + Math.exp(x - max), 0));
      out.logprobs.push(row[f[t]] - lse);
      out.argmax.push(best);
    }
    return out;
  });
}

for (const [name, cfg, seed] of [['GPT', GPT, 5], ['llama (tied head, grouped KV)', LLAMA, 7]] as const) {
  test(`${name}: greedy generation with images and audio gives the trainer's tokens and log-probs; batching by one changes nothing`, async () => {
    const weights = randomWeights(cfg, seed);
    const c = cases(cfg);
    const e = await engine(cfg, weights);
    const samples = await e.generate(c.prompts, { maxNewTokens: MAX_NEW, greedy: true }, c.media);
    assert.equal(new Set(c.prompts.map((p) => p.length)).size, c.prompts.length, 'prompts of different lengths: left padding differs per row');
    for (const s of samples) {
      assert.equal(s.tokens.length, MAX_NEW);
      // A generated placeholder would be text to the rollout engine but a medium to the trainer's layout check.
      assert.ok(!s.tokens.includes(IMG) && !s.tokens.includes(AUD), `generated a placeholder token: ${s.tokens}`);
    }
    for (const backend of [...new Set([trainerBackend, 'cpu'])]) {
      await tf.setBackend(backend);
      const trainer = trainerLogprobs(cfg, weights, c, samples);
      let diff = 0;
      samples.forEach((s, i) => {
        assert.deepEqual(s.tokens, trainer[i].argmax, `${backend}: prompt ${i}: greedy tokens`);
        s.logprobs.forEach((lp, j) => (diff = Math.max(diff, Math.abs(lp - trainer[i].logprobs[j]))));
      });
      console.log(`# ${name}, ${backend}: max |log-prob diff| rollout (prefill with media + KV-cache decode) vs tfjs trainer = ${diff.toExponential(2)}`);
      assert.ok(diff <= 1e-5, `${backend}: ${diff}`);
    }
    await tf.setBackend(trainerBackend);
    // The media move the outputs: the same prompts without the media's embeddings generate differently.
    const text = await (await engine(cfg, weights)).generate(c.prompts.map((p) => p.map((t) => (t === IMG || t === AUD ? 0 : t))), { maxNewTokens: MAX_NEW, greedy: true });
    assert.ok(text.some((s, i) => s.logprobs.some((lp, j) => Math.abs(lp - samples[i].logprobs[j]) > 1e-3)), 'media changed nothing');
    // One prompt per chunk: image-only, audio-only, both and text-only prefill graphs in one call.
    const single = await (await engine(cfg, weights, 1)).generate(c.prompts, { maxNewTokens: MAX_NEW, greedy: true }, c.media);
    let batchDiff = 0;
    single.forEach((s, i) => {
      assert.deepEqual(s.tokens, samples[i].tokens, `prompt ${i} alone`);
      s.logprobs.forEach((lp, j) => (batchDiff = Math.max(batchDiff, Math.abs(lp - samples[i].logprobs[j]))));
    });
    console.log(`# ${name}: max |log-prob diff| batched vs one prompt per chunk = ${batchDiff.toExponential(2)}`);
    assert.ok(batchDiff <= 1e-5, `${batchDiff}`);
  });
}

test('media the model cannot take are refused by name, before anything runs', async () => {
  const cfg = GPT;
  const c = cases(cfg);
  const textOnly = await engine(LM, randomWeights(LM, 7));
  const gpt = await engine(cfg, randomWeights(cfg, 7));
  const params = { maxNewTokens: 2 };
  await assert.rejects(textOnly.generate([c.prompts[0]], params, [c.media[0]]), /prompt 0 has 1 images, but the model has no vision encoder: add model.vision/);
  await assert.rejects(textOnly.generate([[1], c.prompts[1]], params, [undefined, c.media[1]]), /prompt 1 has 1 audio clips, but the model has no audio encoder/);
  const noAudio = await engine({ ...cfg, audio: undefined }, randomWeights({ ...cfg, audio: undefined }, 7));
  await assert.rejects(noAudio.generate(c.prompts, params, c.media), /prompt 1 has 1 audio clips, but the model has no audio encoder/);
  const noTokenId = await engine({ ...cfg, vision: { ...cfg.vision!, tokenId: undefined } }, randomWeights(cfg, 7));
  await assert.rejects(noTokenId.generate([c.prompts[0]], params, [c.media[0]]), /model\.vision\.tokenId is not set/);
  await assert.rejects(gpt.generate(c.prompts, params, c.media.slice(1)), /4 media entries for 5 prompts/);
  await assert.rejects(gpt.generate([c.prompts[0]], params, [{ images: [new Float32Array(5)], audio: [] }]), /prompt 0: of its images, number 0 has 5 values, expected 192/);
  // Placeholder runs must match the media: a prompt's image with a short run, and a text-only prompt with placeholders in a media call.
  await assert.rejects(gpt.generate([c.prompts[0].filter((_, j) => j !== 2)], params, [c.media[0]]), /prompt 0: the sequence has 3 <image> positions but 1 images x 4 embeddings/);
  await assert.rejects(gpt.generate([c.prompts[1], c.prompts[0]], params, [c.media[1], undefined]), /prompt 1: the sequence has 4 <image> positions but 0 images/);
  assert.throws(() => buildGenerationGraph(cfg, true, { images: true }), /a decode graph \(withPast\) takes no media/);
  assert.throws(() => buildGenerationGraph(LM, false, { audio: true }), /needs an audio encoder/);
});

test('a text-only call on a model with encoders is the text model, except that placeholders are never sampled', async () => {
  const weights = randomWeights(GPT, 8);
  const lmWeights = Object.fromEntries(parameterSpec(LM).map((p) => [p.name, weights[p.name]]));
  const prompts = [[1, 2, 3], [4], [5, 6, 7, 8, 9, 10]];
  const withEncoders = await engine(GPT, weights);
  // No media list, an all-undefined one and all-empty media are the same call, bit for bit.
  const params = { maxNewTokens: 6, seed: 3 };
  const plain = await withEncoders.generate(prompts, params);
  assert.deepEqual(await withEncoders.generate(prompts, params, prompts.map(() => undefined)), plain);
  assert.deepEqual(await withEncoders.generate(prompts, params, prompts.map(() => ({ images: [], audio: [] }))), plain);
  // Greedy: the text model's tokens and log-probs up to where it picks a placeholder id; there the
  // model with encoders picks its best non-placeholder token instead.
  const greedy = { maxNewTokens: 6, greedy: true };
  const text = await (await engine(LM, lmWeights)).generate(prompts, greedy);
  const mine = await withEncoders.generate(prompts, greedy);
  let cut = 0;
  text.forEach((t, i) => {
    const first = t.tokens.findIndex((x) => x === IMG || x === AUD);
    const n = first < 0 ? t.tokens.length : first;
    assert.deepEqual(mine[i].tokens.slice(0, n), t.tokens.slice(0, n));
    assert.deepEqual(mine[i].logprobs.slice(0, n), t.logprobs.slice(0, n));
    if (first >= 0) {
      cut += 1;
      assert.ok(![IMG, AUD].includes(mine[i].tokens[first]), 'a placeholder is replaced by a text token');
    }
  });
  assert.ok(cut > 0 && cut < text.length, 'both cases occur with these weights');
  // Sampling never emits a placeholder (they would stand for media nobody gave); log-probs stay the policy's own.
  const many = await withEncoders.generate(Array.from({ length: 64 }, (_, i) => [1 + (i % 9)]), { maxNewTokens: 12, seed: 5 });
  assert.ok(many.every((s) => !s.tokens.includes(IMG) && !s.tokens.includes(AUD)), 'no placeholder sampled');
});
