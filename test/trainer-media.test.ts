// The trainer on sequences with images and audio (engines/trainer.ts, engines/trainer-batch.ts), on a
// tiny GPT with both encoders:
//  - Trainer.logprobs and forwardLogits of sequences with media equal a direct forward
//    (engines/model.ts forward on createTfjsOps, the gather index built by engines/encoders.ts)
//    within 1e-5, and a micro-batch mixing images, audio, both and none gives each sequence its
//    log-probs alone;
//  - a train step reaches every encoder parameter, and micro-batches (some without any medium)
//    accumulate to the whole batch's gradient; a few SFT steps learn an answer only the image tells;
//  - options.trainable: the parts left out stay bit-identical while the chosen ones train, the
//    export still holds every parameter, bad lists are refused by name;
//  - SmolLM2-135M with a small vision encoder takes one step on a prompt with an image, training the
//    encoder and projector only.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { before, test } from 'node:test';
import * as tf from '@tensorflow/tfjs';
import { relaxEnvironment } from '../config/environment';
import { loadTfjsBackend } from '../engines/backends';
import { embeddingIndex, expandPlaceholders, type MediumKind } from '../engines/encoders';
import { loadHfModel } from '../engines/hf-checkpoint';
import { batchMediaInputs, expandMediaTokens, imageInput, mediumEmbeddings, type SequenceMedia } from '../engines/media/model-inputs';
import { attentionBias, forward, initWeights, parameterPart, parameterSpec, TRAINABLE_PARTS, type ModelConfig, type PolicyWeights } from '../engines/model';
import { IMPORT_MARKER, MODEL_SHORTCUTS, resolveModelSource } from '../engines/model-sources';
import { createTfjsOps } from '../engines/model-tfjs';
import { decodeSafetensors } from '../engines/safetensors';
import { HfTokenizer } from '../engines/tokenizers/hf';
import { Trainer, type TrainSequence } from '../engines/trainer';
import { sftLoss } from '../training/losses';
import { lcg, randomWeights } from './model-fixtures';

const IMG = 20;
const AUD = 21;
const CFG: ModelConfig = {
  vocabSize: 24,
  dModel: 32,
  nLayers: 2,
  nHeads: 4,
  dFF: 64,
  contextLength: 96,
  vision: { patchSize: 4, maxPatches: 16, tokenId: IMG, dModel: 16, nLayers: 1, nHeads: 2, dFF: 32 },
  audio: { nMels: 8, maxFrames: 20, tokenId: AUD, dModel: 16, nLayers: 1, nHeads: 2, dFF: 32 },
};
const IMAGE_VALUES = 16 * 4 * 4 * 3; // a 4 x 4 grid of 4 x 4 x 3 patches
const CLIP_VALUES = 20 * 8; // maxFrames x nMels

before(async () => {
  await loadTfjsBackend({ kind: 'cpu' });
});

/** A sequence before expansion: text with one placeholder per medium, and the media in that order. */
interface MediaPrompt {
  text: number[];
  kinds: MediumKind[];
  media: SequenceMedia;
}

function randomMedia(seed: number, kinds: readonly MediumKind[]): SequenceMedia {
  const rand = lcg(seed);
  const fill = (n: number) => Float32Array.from({ length: n }, () => 2 * rand());
  return { images: kinds.filter((k) => k === 'image').map(() => fill(IMAGE_VALUES)), audio: kinds.filter((k) => k === 'audio').map(() => fill(CLIP_VALUES)) };
}

/** Text only, an image, a clip, and a clip with two images (different lengths, media anywhere but last). */
function mixedPrompts(): MediaPrompt[] {
  const make = (text: number[], seed: number): MediaPrompt => {
    const kinds = text.filter((t) => t === IMG || t === AUD).map((t): MediumKind => (t === IMG ? 'image' : 'audio'));
    return { text, kinds, media: randomMedia(seed, kinds) };
  };
  return [make([1, 2, 3, 4, 5, 6, 7], 1), make([1, IMG, 3, 4, 5], 2), make([2, AUD, 6, 7, 8, 9, 10, 11], 3), make([AUD, 3, IMG, 8, 9, IMG, 10, 12], 4)];
}

function expanded(p: MediaPrompt): { tokens: number[]; media?: SequenceMedia } {
  return { tokens: expandMediaTokens(p.text, CFG, p.kinds), ...(p.kinds.length ? { media: p.media } : {}) };
}

/** Logits [n, V] of the expanded prompt's tokens by a direct forward: its own gather index, its own tensors. */
function directLogits(weights: PolicyWeights, p: MediaPrompt): { tokens: number[]; logits: Float32Array } {
  const layout = expandPlaceholders(p.text, { image: IMG, audio: AUD }, p.kinds.map((kind) => ({ kind, embeddings: mediumEmbeddings(CFG, kind) })));
  const T = layout.tokens.length;
  const ops = createTfjsOps({ explicitTransposeGrad: tf.getBackend() === 'wasm' });
  const logits = tf.tidy(() => {
    const w = Object.fromEntries(parameterSpec(CFG).map((s) => [s.name, tf.tensor(weights[s.name], s.shape)]));
    const stack = (parts: Float32Array[], rows: number, width: number) => tf.tensor3d(Float32Array.from(parts.flatMap((x) => Array.from(x))), [parts.length, rows, width]);
    const out = forward(ops, CFG, w, {
      tokens: tf.tensor2d(layout.tokens, [1, T], 'int32'),
      positions: tf.tensor2d(Array.from({ length: T }, (_, t) => t), [1, T], 'int32'),
      attentionBias: tf.tensor4d(attentionBias(1, T, 0), [1, 1, T, T]),
      media: p.kinds.length
        ? {
            ...(p.media.images.length ? { images: stack(p.media.images, 16, 48) } : {}),
            ...(p.media.audio.length ? { audio: stack(p.media.audio, 20, 8) } : {}),
            embeddingIndex: tf.tensor2d(embeddingIndex([layout], T), [1, T], 'int32'),
          }
        : undefined,
    });
    return out.logits.dataSync() as Float32Array;
  });
  return { tokens: layout.tokens, logits };
}

/** log softmax(logits[t])[tokens[t + 1]] for t < n - 1, in float64. */
function targetLogprobs(logits: Float32Array, tokens: readonly number[], V: number): number[] {
  return tokens.slice(1).map((target, t) => {
    const row = logits.subarray(t * V, (t + 1) * V);
    const max = Math.max(...row);
    const lse = max + Math.log(row.reduce((s, x) => s + Math.exp(x - max), 0));
    return row[target] - lse;
  });
}

function maxDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  assert.equal(a.length, b.length);
  let worst = 0;
  for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i] - b[i]));
  return worst;
}

/** SFT on every target that is not a placeholder. */
function sftSequence(s: { tokens: number[]; media?: SequenceMedia }): TrainSequence {
  return { ...s, lossMask: s.tokens.slice(1).map((t) => (t === IMG || t === AUD ? 0 : 1)) };
}

const changed = (a: Float32Array, b: Float32Array) => a.some((x, i) => x !== b[i]);

test('logprobs and forwardLogits with images and audio equal a direct forward (<= 1e-5), and a mixed micro-batch gives each sequence its log-probs alone', async () => {
  const weights = randomWeights(CFG, 1, 5);
  const trainer = Trainer.create({ model: CFG, weights, optimizer: { lr: 1e-3 } });
  try {
    const prompts = mixedPrompts();
    const batched = await trainer.logprobs(prompts.map((p, i) => (i === 0 ? expanded(p).tokens : expanded(p)))); // a bare token array too
    let worstDirect = 0;
    let worstBatch = 0;
    let worstLogits = 0;
    for (const [i, p] of prompts.entries()) {
      const direct = directLogits(weights, p);
      assert.deepEqual(direct.tokens, expanded(p).tokens);
      const reference = targetLogprobs(direct.logits, direct.tokens, CFG.vocabSize);
      const [alone] = await trainer.logprobs([expanded(p)]);
      assert.equal(batched[i].length, direct.tokens.length - 1);
      worstDirect = Math.max(worstDirect, maxDiff(alone, reference));
      worstBatch = Math.max(worstBatch, maxDiff(batched[i], alone));
      worstLogits = Math.max(worstLogits, maxDiff(await trainer.forwardLogits(expanded(p).tokens, expanded(p).media), direct.logits));
    }
    console.log(`max |trainer - direct forward| log-prob ${worstDirect.toExponential(2)}, logits ${worstLogits.toExponential(2)}; max |mixed micro-batch - alone| ${worstBatch.toExponential(2)}`);
    assert.ok(worstDirect <= 1e-5, `trainer vs direct forward: ${worstDirect}`);
    assert.ok(worstLogits <= 1e-5, `forwardLogits vs direct forward: ${worstLogits}`);
    assert.ok(worstBatch <= 1e-5, `mixed micro-batch vs alone: ${worstBatch}`);
    // The media matter: another image changes the log-probs after it.
    const p = prompts[1];
    const [other] = await trainer.logprobs([expanded({ ...p, media: randomMedia(9, p.kinds) })]);
    assert.ok(maxDiff(other, batched[1]) > 1e-2, 'a different image changes the log-probs');
    // A placeholder run without its medium (or the wrong length) is refused, naming the sequence.
    await assert.rejects(trainer.logprobs([[1, 2, 3], expanded(p).tokens]), /sequence 1: the sequence has 16 <image> positions but 0 images/);
    await assert.rejects(trainer.logprobs([{ tokens: [1, IMG, IMG, 3], media: randomMedia(1, ['image']) }]), /sequence 0: the sequence has 2 <image> positions but 1 images x 16 embeddings/);
  } finally {
    trainer.dispose();
  }
});

test('a train step with media reaches every encoder parameter, and micro-batches without some media accumulate to the whole batch', async () => {
  const weights = randomWeights(CFG, 2, 5);
  const sequences = mixedPrompts().map((p) => sftSequence(expanded(p)));
  // lr / eps makes the first AdamW step ~ -g (lr g / (|g| + eps) with |g| << eps): weight deltas are gradients.
  const optimizer = { lr: 1e6, eps: 1e6, weightDecay: 0 };
  const whole = Trainer.create({ model: CFG, weights, optimizer, maxGradNorm: Infinity, microBatchSize: 4 });
  const split = Trainer.create({ model: CFG, weights, optimizer, maxGradNorm: Infinity, microBatchSize: 1 });
  try {
    const a = await whole.trainStep(sequences, sftLoss());
    const b = await split.trainStep(sequences, sftLoss());
    assert.equal(b.microBatches, 4);
    assert.ok(Math.abs(a.loss - b.loss) < 1e-5, `loss ${a.loss} vs ${b.loss}`);
    const wa = await whole.exportWeights();
    const wb = await split.exportWeights();
    let worst = 0;
    let largest = 0;
    for (const spec of parameterSpec(CFG)) {
      const name = spec.name;
      if (parameterPart(name) !== 'language_model') assert.ok(changed(wa[name], weights[name]), `${name} got a gradient`);
      wa[name].forEach((x, i) => {
        largest = Math.max(largest, Math.abs(x - weights[name][i]));
        worst = Math.max(worst, Math.abs(x - weights[name][i] - (wb[name][i] - weights[name][i])));
      });
    }
    console.log(`largest gradient element ${largest.toExponential(2)}; max |whole - micro-batched| ${worst.toExponential(2)}`);
    assert.ok(worst <= 1e-5 * largest + 1e-7, `whole vs micro-batched gradients differ by ${worst} (largest ${largest})`);
  } finally {
    whole.dispose();
    split.dispose();
  }
});

test('a medium shared by several sequences (a group sharing its prompt) is encoded once, with the log-probs and gradients of separate copies', async () => {
  const weights = randomWeights(CFG, 3, 5);
  const p = mixedPrompts().find((q) => q.kinds.includes('audio') && q.kinds.includes('image'))!;
  const one = expanded(p);
  const shared = [0, 1, 2].map((i) => sftSequence({ tokens: [...one.tokens, 5 + i], media: one.media }));
  const copies = shared.map((s) => ({ ...s, media: { images: s.media!.images.map((x) => x.slice()), audio: s.media!.audio.map((x) => x.slice()) } }));
  const batch = batchMediaInputs(CFG, shared, one.tokens.length + 1)!;
  assert.equal(batch.audio!.dims[0], 1, 'one clip for three sequences');
  assert.equal(batch.images!.dims[0], one.media!.images.length);
  assert.equal(batchMediaInputs(CFG, copies, one.tokens.length + 1)!.audio!.dims[0], 3, 'copies are three clips');
  const optimizer = { lr: 1e6, eps: 1e6, weightDecay: 0 };
  const a = Trainer.create({ model: CFG, weights, optimizer, maxGradNorm: Infinity });
  const b = Trainer.create({ model: CFG, weights, optimizer, maxGradNorm: Infinity });
  try {
    const flat = (xs: Float32Array[]) => xs.flatMap((x) => [...x]);
    assert.ok(maxDiff(flat(await a.logprobs(shared)), flat(await b.logprobs(copies))) <= 1e-6);
    await a.trainStep(shared, sftLoss());
    await b.trainStep(copies, sftLoss());
    const [wa, wb] = [await a.exportWeights(), await b.exportWeights()];
    let worst = 0;
    for (const spec of parameterSpec(CFG)) worst = Math.max(worst, maxDiff(wa[spec.name], wb[spec.name]));
    assert.ok(worst <= 1e-4, `shared vs copied media: weights after a step differ by ${worst}`);
    assert.ok(changed(wa['audio.conv1.weight'], weights['audio.conv1.weight']), 'the shared clip still trains the encoder');
  } finally {
    a.dispose();
    b.dispose();
  }
});

test('SFT learns an answer only the image tells (its colour) within a few steps', async () => {
  const RED = 3;
  const BLUE = 4;
  // Solid images with some pixel noise; the text is the same for both answers.
  const image = (colour: 'red' | 'blue', seed: number) => {
    const rand = lcg(seed);
    const data = new Uint8Array(16 * 16 * 3);
    for (let i = 0; i < 16 * 16; i++) {
      const jitter = () => Math.round(40 * (rand() + 0.5));
      data.set(colour === 'red' ? [215 + jitter(), jitter(), jitter()] : [jitter(), jitter(), 215 + jitter()], 3 * i);
    }
    return imageInput({ width: 16, height: 16, data }, CFG.vision!);
  };
  const prompt = expandMediaTokens([1, IMG, 2], CFG, ['image']);
  const sample = (colour: 'red' | 'blue', seed: number): TrainSequence => {
    const tokens = [...prompt, colour === 'red' ? RED : BLUE];
    return { tokens, lossMask: tokens.slice(1).map((_, t) => (t === tokens.length - 2 ? 1 : 0)), media: { images: [image(colour, seed)], audio: [] } };
  };
  const train = Array.from({ length: 8 }, (_, i) => sample(i % 2 ? 'blue' : 'red', i));
  const heldOut = Array.from({ length: 4 }, (_, i) => sample(i % 2 ? 'blue' : 'red', 100 + i));
  const trainer = Trainer.create({ model: CFG, seed: 3, optimizer: { lr: 1e-2 } });
  try {
    const heldOutLoss = async () => {
      const rows = await trainer.logprobs(heldOut);
      return -rows.reduce((s, row) => s + row[row.length - 1], 0) / rows.length;
    };
    const first = await heldOutLoss();
    const losses: number[] = [];
    for (let step = 0; step < 30; step++) losses.push((await trainer.trainStep(train, sftLoss())).loss);
    const last = await heldOutLoss();
    console.log(`colour task: train loss ${losses[0].toFixed(3)} -> ${losses[losses.length - 1].toFixed(3)}; held-out answer loss ${first.toFixed(3)} -> ${last.toFixed(3)} (ln 2 = 0.693 without the image)`);
    assert.ok(last < 0.2, `held-out answer loss ${last}: below ln 2 only by reading the image`);
  } finally {
    trainer.dispose();
  }
});

test('trainable parts: only the vision projector trains, the rest stays bit-identical and is still exported; bad lists are refused by name', async () => {
  const weights = randomWeights(CFG, 4, 5);
  const trainer = Trainer.create({ model: CFG, weights, optimizer: { lr: 1e-2, weightDecay: 0.1 }, trainable: ['vision_projector'], microBatchSize: 2 });
  try {
    const sequences = mixedPrompts().map((p) => sftSequence(expanded(p)));
    const m = await trainer.trainStep(sequences, sftLoss());
    assert.ok(m.gradNorm > 0);
    const after = await trainer.exportWeights();
    assert.deepEqual(Object.keys(after), parameterSpec(CFG).map((p) => p.name), 'every parameter is exported, in spec order');
    for (const p of parameterSpec(CFG)) {
      if (p.name.startsWith('vision.proj.')) assert.ok(changed(after[p.name], weights[p.name]), `${p.name} trained`);
      else assert.ok(Buffer.from(after[p.name].buffer).equals(Buffer.from(weights[p.name].buffer)), `${p.name} is bit-identical`);
    }
    const state = decodeSafetensors(await trainer.exportOptimizerState());
    assert.deepEqual([...state.tensors.keys()].sort(), ['m.vision.proj.bias', 'm.vision.proj.weight', 'v.vision.proj.bias', 'v.vision.proj.weight']);
    // A step whose batch has no image reaches no trained parameter: it runs, the rest still holds.
    await trainer.trainStep([sequences[0], sequences[2]], sftLoss());
    const later = await trainer.exportWeights();
    for (const p of parameterSpec(CFG)) if (!p.name.startsWith('vision.proj.')) assert.ok(!changed(later[p.name], weights[p.name]), `${p.name} still bit-identical`);
    // loadWeights takes the held parts back unchanged, and refuses to change them.
    trainer.loadWeights(after);
    const tampered = { ...after, 'audio.proj.bias': after['audio.proj.bias'].map((x) => x + 1) };
    assert.throws(() => trainer.loadWeights(tampered), /"audio.proj.bias" differs from the value this trainer holds constant \(its audio_projector is not in options.trainable\)/);
  } finally {
    trainer.dispose();
  }

  assert.deepEqual(new Set(parameterSpec(CFG).map((p) => parameterPart(p.name))), new Set(TRAINABLE_PARTS), 'the model with both encoders has every part');
  const visionOnly: ModelConfig = { ...CFG, audio: undefined };
  assert.throws(() => Trainer.create({ model: visionOnly, optimizer: { lr: 1e-3 }, trainable: ['vision_encoder', 'audio_encoder'] }), /trainer options: trainable: the model has no audio_encoder \(add model.audio or remove "audio_encoder"\)/);
  assert.throws(() => Trainer.create({ model: CFG, optimizer: { lr: 1e-3 }, trainable: [] }), /trainer options: trainable is empty: list at least one of language_model, vision_encoder/);
  assert.throws(() => Trainer.create({ model: CFG, optimizer: { lr: 1e-3 }, trainable: ['decoder' as never] }), /trainable: unknown part "decoder"/);
  const lora: ModelConfig = { architecture: 'llama', vocabSize: 24, dModel: 32, nLayers: 1, nHeads: 4, dFF: 64, contextLength: 64, vision: CFG.vision, lora: { rank: 2, alpha: 4, targets: ['q', 'v'] } };
  assert.throws(() => Trainer.create({ model: lora, optimizer: { lr: 1e-3 }, trainable: ['language_model', 'vision_projector'] }), /vision_projector cannot train with LoRA/);
  // With LoRA, 'language_model' is the adapters.
  const adapters = Trainer.create({ model: lora, optimizer: { lr: 1e-3 }, trainable: ['language_model'] });
  try {
    assert.ok(Object.keys(await adapters.exportWeights()).every((name) => /lora_[ab]$/.test(name)));
  } finally {
    adapters.dispose();
  }
});

/** The imported SmolLM2 directory, or why it is absent (the test is then skipped). */
function smollm2Present(home: string): { present: true } | { present: false; reason: string } {
  const name = 'smollm2-135m-instruct';
  if (fs.existsSync(path.join(home, 'models', name, IMPORT_MARKER))) return { present: true };
  const wheel = path.join(home, 'models', 'downloads', MODEL_SHORTCUTS[name].wheel);
  if (fs.existsSync(wheel)) return { present: true };
  return { present: false, reason: `SmolLM2-135M is not here (neither ${path.join(home, 'models', name)} nor ${wheel}): \`npm run setup\` installs it` };
}

const home = relaxEnvironment().home;
const smollm2 = smollm2Present(home);

test('SmolLM2-135M with a small vision encoder: one step on a prompt with an image trains the encoder and projector only', { skip: smollm2.present ? false : smollm2.reason }, async () => {
  const started = performance.now();
  const dir = await resolveModelSource('smollm2-135m-instruct', { home, log: (l) => console.log(l) });
  const model = await loadHfModel(dir, { contextLength: 64 });
  const tokenId = model.config.vocabSize - 1;
  const cfg: ModelConfig = { ...model.config, vision: { patchSize: 8, maxPatches: 16, tokenId, dModel: 64, nLayers: 1, nHeads: 4, dFF: 128 } };
  const encoder = parameterSpec(cfg).filter((p) => parameterPart(p.name) !== 'language_model');
  const weights = { ...model.weights, ...initWeights(cfg, 5, encoder) };
  const trainer = Trainer.create({ model: cfg, weights, optimizer: { lr: 1e-3 }, trainable: ['vision_encoder', 'vision_projector'] });
  try {
    // A chat prompt with the image in the user turn (the placeholder id, the vocabulary's last, appears nowhere else), and its answer.
    const tokenizer = HfTokenizer.fromFile(path.join(dir, 'tokenizer.json'));
    const text = [...tokenizer.encode('<|im_start|>user\n'), tokenId, ...tokenizer.encode('What colour is this?<|im_end|>\n<|im_start|>assistant\n')];
    const answer = tokenizer.encode('Red.<|im_end|>');
    assert.equal([...text, ...answer].filter((t) => t === tokenId).length, 1);
    const prompt = expandMediaTokens(text, cfg, ['image']);
    const tokens = [...prompt, ...answer];
    const rand = lcg(6);
    const pixels = Uint8Array.from({ length: 32 * 32 * 3 }, () => Math.floor(256 * (rand() + 0.5)));
    const media = { images: [imageInput({ width: 32, height: 32, data: pixels }, cfg.vision!)], audio: [] };
    const lossMask = tokens.slice(1).map((_, t) => (t >= prompt.length - 1 ? 1 : 0));
    const projector = weights['vision.proj.weight'];
    const m = await trainer.trainStep([{ tokens, lossMask, media }], sftLoss());
    const after = await trainer.exportWeights();
    console.log(`SmolLM2 + vision: ${tokens.length} tokens (16 image positions), step ${m.durationMs.toFixed(0)} ms, loss ${m.loss.toFixed(3)}, grad norm ${m.gradNorm.toExponential(2)}; ${((performance.now() - started) / 1000).toFixed(1)} s with the load`);
    assert.ok(Number.isFinite(m.loss) && m.gradNorm > 0);
    assert.ok(changed(after['vision.proj.weight'], projector), 'the projector trained');
    assert.ok(changed(after['vision.patch_embed.weight'], weights['vision.patch_embed.weight']), 'the encoder trained');
    for (const name of ['tok_emb.weight', 'blocks.0.attn.q.weight', 'blocks.29.mlp.down.weight', 'norm_f.weight']) assert.ok(!changed(after[name], weights[name]), `${name} is held`);
  } finally {
    trainer.dispose();
  }
});
