// The vision and audio encoders of the one model definition (engines/encoders.ts): on a tiny random
// config with an image and an audio clip in each prompt, the tfjs forward (cpu backend and the
// trainer's backend) gives ONNX Runtime's log-probs at every position; media influence only later
// positions; gradients reach the encoders; configs without encoders keep their parameters; bad
// configs and mismatched placeholders are refused by name.
import assert from 'node:assert/strict';
import { before, test } from 'node:test';
import * as tf from '@tensorflow/tfjs';
import * as ort from 'onnxruntime-node';
import { loadTfjsBackend } from '../engines/backends';
import { audioEmbeddingCount, embeddingIndex, expandPlaceholders, type ExpandedPrompt } from '../engines/encoders';
import { attentionBias, forward, initWeights, parameterSpec, parseModelConfig, ropeTables, TINY_MODEL, type ModelConfig, type PolicyWeights } from '../engines/model';
import { buildForwardModel, GRAPH_NAMES } from '../engines/model-onnx';
import { createTfjsOps } from '../engines/model-tfjs';
import { registerWasmTrainingKernels } from '../engines/wasm-kernels';
import { lcg, randomWeights } from './model-fixtures';

const IMG = 20;
const AUD = 21;
const LM: ModelConfig = { vocabSize: 24, dModel: 32, nLayers: 2, nHeads: 4, dFF: 64, contextLength: 64 };
const CFG: ModelConfig = {
  ...LM,
  vision: { patchSize: 4, maxPatches: 16, dModel: 16, nLayers: 1, nHeads: 2, dFF: 32 },
  audio: { nMels: 8, maxFrames: 20, dModel: 16, nLayers: 1, nHeads: 2, dFF: 32 },
};
const PATCHES = 8; // a 2 x 4 grid
const FRAMES = 15; // odd: conv2 (stride 2, padding 1) pads on the right
const P = 4 * 4 * 3;

let trainerBackend = 'cpu';
before(async () => {
  trainerBackend = (await loadTfjsBackend({ kind: 'cpu' })).backend;
  if (trainerBackend === 'wasm') registerWasmTrainingKernels();
});

interface Batch {
  B: number;
  T: number;
  tokens: Int32Array;
  positions: Int32Array;
  bias: Float32Array;
  images: Float32Array;
  audio: Float32Array;
  index: Int32Array;
  prompts: ExpandedPrompt[];
}

/** Two prompts: [1, 2, <image>, 3, <audio>, 4, 5] and [<audio>, 6, <image>, 7], padded to one length. */
function makeBatch(audioEmbeddings = audioEmbeddingCount(FRAMES)): Batch {
  const media = [
    { kind: 'image' as const, embeddings: PATCHES },
    { kind: 'audio' as const, embeddings: audioEmbeddings },
  ];
  const prompts = [
    expandPlaceholders([1, 2, IMG, 3, AUD, 4, 5], { image: IMG, audio: AUD }, media),
    expandPlaceholders([AUD, 6, IMG, 7], { image: IMG, audio: AUD }, [media[1], media[0]]),
  ];
  const B = prompts.length;
  const T = Math.max(...prompts.map((p) => p.tokens.length));
  const tokens = new Int32Array(B * T);
  prompts.forEach((p, b) => tokens.set(p.tokens, b * T));
  const positions = Int32Array.from({ length: B * T }, (_, i) => i % T);
  const rand = lcg(99);
  const images = Float32Array.from({ length: B * PATCHES * P }, () => 2 * rand());
  const audio = Float32Array.from({ length: B * FRAMES * 8 }, () => 2 * rand());
  return { B, T, tokens, positions, bias: attentionBias(B, T, 0), images, audio, index: embeddingIndex(prompts, T), prompts };
}

function logSoftmaxRows(logits: Float32Array, V: number): Float64Array {
  const out = new Float64Array(logits.length);
  for (let r = 0; r < logits.length / V; r++) {
    let max = -Infinity;
    for (let v = 0; v < V; v++) max = Math.max(max, logits[r * V + v]);
    let sum = 0;
    for (let v = 0; v < V; v++) sum += Math.exp(logits[r * V + v] - max);
    const lse = max + Math.log(sum);
    for (let v = 0; v < V; v++) out[r * V + v] = logits[r * V + v] - lse;
  }
  return out;
}

function tfjsLogits(cfg: ModelConfig, weights: PolicyWeights, batch: Batch, images = batch.images): Float32Array {
  const ops = createTfjsOps({ explicitTransposeGrad: tf.getBackend() === 'wasm' });
  return tf.tidy(() => {
    const w = Object.fromEntries(parameterSpec(cfg).map((p) => [p.name, tf.tensor(weights[p.name], p.shape)]));
    const out = forward(ops, cfg, w, {
      tokens: tf.tensor2d(batch.tokens, [batch.B, batch.T], 'int32'),
      positions: tf.tensor2d(batch.positions, [batch.B, batch.T], 'int32'),
      attentionBias: tf.tensor4d(batch.bias, [batch.B, 1, batch.T, batch.T]),
      media: {
        images: tf.tensor3d(images, [batch.B, PATCHES, P]),
        audio: tf.tensor3d(batch.audio, [batch.B, FRAMES, 8]),
        embeddingIndex: tf.tensor2d(batch.index, [batch.B, batch.T], 'int32'),
      },
    });
    assert.deepEqual(out.logits.shape, [batch.B, batch.T, cfg.vocabSize]);
    return out.logits.dataSync() as Float32Array;
  });
}

async function onnxLogits(cfg: ModelConfig, weights: PolicyWeights, batch: Batch): Promise<Float32Array> {
  const session = await ort.InferenceSession.create(buildForwardModel(cfg, { images: true, audio: true }));
  try {
    const feeds: Record<string, ort.Tensor> = {};
    for (const p of parameterSpec(cfg)) feeds[p.name] = new ort.Tensor('float32', weights[p.name], p.shape);
    feeds[GRAPH_NAMES.tokens] = new ort.Tensor('int32', batch.tokens, [batch.B, batch.T]);
    feeds[GRAPH_NAMES.positions] = new ort.Tensor('int32', batch.positions, [batch.B, batch.T]);
    feeds[GRAPH_NAMES.attentionBias] = new ort.Tensor('float32', batch.bias, [batch.B, 1, batch.T, batch.T]);
    feeds[GRAPH_NAMES.images] = new ort.Tensor('float32', batch.images, [batch.B, PATCHES, P]);
    feeds[GRAPH_NAMES.audio] = new ort.Tensor('float32', batch.audio, [batch.B, FRAMES, 8]);
    feeds[GRAPH_NAMES.embeddingIndex] = new ort.Tensor('int32', batch.index, [batch.B, batch.T]);
    const out = await session.run(feeds);
    return out[GRAPH_NAMES.logits].data as Float32Array;
  } finally {
    await session.release();
  }
}

function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  assert.equal(a.length, b.length);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

test('placeholders expand to one position per embedding; the index points at text rows, then images, then audio', () => {
  const e = expandPlaceholders([5, IMG, 6, AUD], { image: IMG, audio: AUD }, [{ kind: 'image', embeddings: 2 }, { kind: 'audio', embeddings: 3 }]);
  assert.deepEqual(e.tokens, [5, IMG, IMG, 6, AUD, AUD, AUD]);
  assert.deepEqual(e.media, [null, { kind: 'image', row: 0 }, { kind: 'image', row: 1 }, null, { kind: 'audio', row: 0 }, { kind: 'audio', row: 1 }, { kind: 'audio', row: 2 }]);
  const f = expandPlaceholders([AUD, IMG], { image: IMG, audio: AUD }, [{ kind: 'audio', embeddings: 1 }, { kind: 'image', embeddings: 2 }]);
  // B = 2, T = 8: 16 text rows, then 2 + 2 image rows (prompt 0's, prompt 1's), then 3 + 1 audio rows.
  assert.deepEqual(Array.from(embeddingIndex([e, f], 8)), [0, 16, 17, 3, 20, 21, 22, 7, 23, 18, 19, 11, 12, 13, 14, 15]);
  assert.throws(() => expandPlaceholders([IMG], { image: IMG }, [{ kind: 'audio', embeddings: 1 }]), /placeholder 1 is <image> but medium 1 is audio/);
  assert.throws(() => expandPlaceholders([IMG, IMG], { image: IMG }, [{ kind: 'image', embeddings: 1 }]), /placeholder 2 \(<image>\) has no medium/);
  assert.throws(() => expandPlaceholders([1], { image: IMG }, [{ kind: 'image', embeddings: 1 }]), /1 media given but the prompt has 0 placeholders/);
  assert.throws(() => embeddingIndex([e], 4), /more than T = 4/);
  assert.equal(audioEmbeddingCount(15), 8);
  assert.equal(audioEmbeddingCount(20), 10);
});

test('config: encoders validated by name; the spec without them is unchanged; init covers them', () => {
  assert.deepEqual(parseModelConfig(CFG), CFG);
  assert.deepEqual(parseModelConfig({ ...CFG, architecture: 'llama' }).vision, CFG.vision);
  assert.throws(() => parseModelConfig({ ...CFG, vision: { ...CFG.vision, dModel: 15 } }), /vision\.dModel: vision\.dModel \(15\) must be a multiple of vision\.nHeads \(2\)/);
  assert.throws(() => parseModelConfig({ ...CFG, audio: { ...CFG.audio, nMels: 0 } }), /audio\.nMels/);
  assert.throws(() => parseModelConfig({ ...CFG, vision: { ...CFG.vision, patchSize: 2.5 } }), /vision\.patchSize/);
  assert.throws(() => parseModelConfig({ ...CFG, audio: { ...CFG.audio, stride: 2 } }), /audio.*(unrecognized|stride)/i);
  assert.throws(() => parseModelConfig({ ...CFG, vision: { patchSize: 4 } }), /vision\.maxPatches/);

  const lmNames = parameterSpec(LM).map((p) => p.name);
  assert.deepEqual(parameterSpec(TINY_MODEL), parameterSpec({ ...TINY_MODEL, vision: undefined, audio: undefined }));
  assert.ok(!parameterSpec(TINY_MODEL).some((p) => p.name.startsWith('vision.') || p.name.startsWith('audio.')));
  const full = parameterSpec(CFG);
  assert.deepEqual(full.slice(0, lmNames.length).map((p) => p.name), lmNames, 'the language model keeps its order, encoders come after');
  const shapes = Object.fromEntries(full.map((p) => [p.name, p.shape]));
  assert.deepEqual(shapes['vision.patch_embed.weight'], [48, 16]);
  assert.deepEqual(shapes['vision.pos_emb.weight'], [16, 16]);
  assert.deepEqual(shapes['vision.blocks.0.attn.qkv.weight'], [16, 48]);
  assert.deepEqual(shapes['vision.proj.weight'], [16, 32]);
  assert.deepEqual(shapes['audio.conv1.weight'], [3, 8, 16]);
  assert.deepEqual(shapes['audio.conv2.weight'], [3, 16, 16]);
  assert.deepEqual(shapes['audio.pos_emb.weight'], [10, 16]);
  assert.deepEqual(shapes['audio.proj.bias'], [32]);
  assert.equal(new Set(full.map((p) => p.name)).size, full.length);
  const w = initWeights(CFG, 3);
  const pe = w['vision.patch_embed.weight'];
  const std = Math.sqrt(pe.reduce((s, v) => s + v * v, 0) / pe.length);
  assert.ok(Math.abs(std - 0.02) < 0.004, `patch embedding std ${std}`);
  assert.ok(w['audio.ln_f.weight'].every((v) => v === 1) && w['audio.conv1.bias'].every((v) => v === 0));
  assert.ok(w['audio.conv1.weight'].some((v) => v !== 0));
});

test("Whisper's encoder options (exact GELU, 2 positions stacked per embedding, a two-layer projector): tfjs equals ONNX Runtime", async () => {
  const cfg = parseModelConfig({ ...CFG, audio: { ...CFG.audio, gelu: 'erf', stack: 2, projectorHidden: 24 } });
  const shapes = Object.fromEntries(parameterSpec(cfg).map((p) => [p.name, p.shape]));
  assert.deepEqual(shapes['audio.proj.weight'], [32, 24], 'two 16-wide positions in, the hidden width out');
  assert.deepEqual(shapes['audio.proj.out.weight'], [24, 32]);
  assert.throws(() => parseModelConfig({ ...CFG, audio: { ...CFG.audio, stack: 3 } }), /audio\.stack \(3\) must divide the encoder's 10 positions/);
  const w = randomWeights(cfg, 2);
  const batch = makeBatch(audioEmbeddingCount(FRAMES) / 2);
  const onnx = logSoftmaxRows(await onnxLogits(cfg, w, batch), cfg.vocabSize);
  const diff = maxAbsDiff(logSoftmaxRows(tfjsLogits(cfg, w, batch), cfg.vocabSize), onnx);
  assert.ok(diff <= 1e-5, `tfjs vs ONNX: ${diff}`);
  // The exact GELU differs from the tanh one: the same weights give other log-probs.
  const tanh = logSoftmaxRows(tfjsLogits({ ...cfg, audio: { ...cfg.audio!, gelu: undefined } }, w, batch), cfg.vocabSize);
  assert.ok(maxAbsDiff(tanh, onnx) > 1e-6, 'gelu: "erf" changes the output');
});

test('tfjs conv1d (im2col) equals tf.conv1d, stride 1 and 2, even and odd lengths', () => {
  const ops = createTfjsOps({ explicitTransposeGrad: false });
  for (const [T, stride] of [[15, 1], [15, 2], [16, 2], [1, 2]]) {
    tf.tidy(() => {
      const x = tf.randomNormal([2, T, 5], 0, 1, 'float32', T);
      const w = tf.randomNormal([3, 5, 7], 0, 1, 'float32', 7);
      const bias = tf.randomNormal([7], 0, 1, 'float32', 8);
      const ours = ops.conv1d(x, w, bias, stride, 1);
      const ref = tf.add(tf.conv1d(tf.pad(x, [[0, 0], [1, 1], [0, 0]]) as tf.Tensor3D, w as tf.Tensor3D, stride, 'valid'), bias);
      assert.deepEqual(ours.shape, ref.shape);
      assert.ok(maxAbsDiff(ours.dataSync(), ref.dataSync()) < 1e-5, `T ${T} stride ${stride}`);
    });
  }
});

test('tfjs forward with an image and a clip (cpu and trainer backends) gives ONNX Runtime log-probs at every position', async () => {
  const w = randomWeights(CFG, 1);
  const batch = makeBatch();
  const onnx = logSoftmaxRows(await onnxLogits(CFG, w, batch), CFG.vocabSize);
  for (const backend of [...new Set([trainerBackend, 'cpu'])]) {
    await tf.setBackend(backend);
    const diff = maxAbsDiff(logSoftmaxRows(tfjsLogits(CFG, w, batch), CFG.vocabSize), onnx);
    console.log(`# ${backend}: max |log-prob diff| tfjs vs ONNX = ${diff.toExponential(2)}`);
    assert.ok(diff <= 1e-5, `${backend}: ${diff}`);
  }
  await tf.setBackend(trainerBackend);
});

test('llama with encoders: tfjs and ONNX agree too', async () => {
  const cfg: ModelConfig = { ...CFG, architecture: 'llama', nKvHeads: 2 };
  const w = randomWeights(cfg, 2);
  const batch = makeBatch();
  const rope = ropeTables(cfg, batch.positions, batch.B, batch.T);
  const Dh = cfg.dModel / cfg.nHeads;
  const ops = createTfjsOps({ explicitTransposeGrad: tf.getBackend() === 'wasm' });
  const ours = tf.tidy(() => {
    const wt = Object.fromEntries(parameterSpec(cfg).map((p) => [p.name, tf.tensor(w[p.name], p.shape)]));
    return forward(ops, cfg, wt, {
      tokens: tf.tensor2d(batch.tokens, [batch.B, batch.T], 'int32'),
      positions: tf.tensor2d(batch.positions, [batch.B, batch.T], 'int32'),
      attentionBias: tf.tensor4d(batch.bias, [batch.B, 1, batch.T, batch.T]),
      rope: { cos: tf.tensor4d(rope.cos, [batch.B, 1, batch.T, Dh]), sin: tf.tensor4d(rope.sin, [batch.B, 1, batch.T, Dh]) },
      media: { images: tf.tensor3d(batch.images, [batch.B, PATCHES, P]), audio: tf.tensor3d(batch.audio, [batch.B, FRAMES, 8]), embeddingIndex: tf.tensor2d(batch.index, [batch.B, batch.T], 'int32') },
    }).logits.dataSync() as Float32Array;
  });
  const session = await ort.InferenceSession.create(buildForwardModel(cfg, { images: true, audio: true }));
  try {
    const feeds: Record<string, ort.Tensor> = {};
    for (const p of parameterSpec(cfg)) feeds[p.name] = new ort.Tensor('float32', w[p.name], p.shape);
    feeds[GRAPH_NAMES.tokens] = new ort.Tensor('int32', batch.tokens, [batch.B, batch.T]);
    feeds[GRAPH_NAMES.positions] = new ort.Tensor('int32', batch.positions, [batch.B, batch.T]);
    feeds[GRAPH_NAMES.attentionBias] = new ort.Tensor('float32', batch.bias, [batch.B, 1, batch.T, batch.T]);
    feeds[GRAPH_NAMES.ropeCos] = new ort.Tensor('float32', rope.cos, [batch.B, 1, batch.T, Dh]);
    feeds[GRAPH_NAMES.ropeSin] = new ort.Tensor('float32', rope.sin, [batch.B, 1, batch.T, Dh]);
    feeds[GRAPH_NAMES.images] = new ort.Tensor('float32', batch.images, [batch.B, PATCHES, P]);
    feeds[GRAPH_NAMES.audio] = new ort.Tensor('float32', batch.audio, [batch.B, FRAMES, 8]);
    feeds[GRAPH_NAMES.embeddingIndex] = new ort.Tensor('int32', batch.index, [batch.B, batch.T]);
    const onnx = (await session.run(feeds))[GRAPH_NAMES.logits].data as Float32Array;
    const diff = maxAbsDiff(logSoftmaxRows(ours, cfg.vocabSize), logSoftmaxRows(onnx, cfg.vocabSize));
    console.log(`# llama: max |log-prob diff| tfjs vs ONNX = ${diff.toExponential(2)}`);
    assert.ok(diff <= 1e-5, `${diff}`);
  } finally {
    await session.release();
  }
});

test('one pixel changes the logits from the image on, not before it, and not in the other prompt', () => {
  const w = randomWeights(CFG, 1);
  const batch = makeBatch();
  const before = tfjsLogits(CFG, w, batch);
  const images = batch.images.slice();
  images[5] += 1; // prompt 0's image, patch 0
  const after = tfjsLogits(CFG, w, batch, images);
  const V = CFG.vocabSize;
  const row = (logits: Float32Array, b: number, t: number) => logits.subarray((b * batch.T + t) * V, (b * batch.T + t + 1) * V);
  const imageStart = batch.prompts[0].media.findIndex((m) => m?.kind === 'image');
  assert.equal(imageStart, 2);
  for (let t = 0; t < batch.T; t++) {
    const d = maxAbsDiff(row(before, 0, t), row(after, 0, t));
    if (t < imageStart) assert.ok(d <= 1e-6, `position ${t} before the image moved by ${d}`);
    else assert.ok(d > 1e-4, `position ${t} from the image on did not move (${d})`);
    assert.ok(maxAbsDiff(row(before, 1, t), row(after, 1, t)) <= 1e-6, `prompt 1 position ${t} moved`);
  }
});

test('gradients of the log-probs reach the patch embedding and the first audio convolution', async () => {
  const w = randomWeights(CFG, 4);
  const batch = makeBatch();
  for (const backend of [...new Set([trainerBackend, 'cpu'])]) {
    await tf.setBackend(backend);
    const ops = createTfjsOps({ explicitTransposeGrad: backend === 'wasm' });
    const vars = Object.fromEntries(parameterSpec(CFG).map((p) => [p.name, tf.variable(tf.tensor(w[p.name], p.shape), true, `${backend}_${p.name}`)]));
    const inputs = {
      tokens: tf.tensor2d(batch.tokens, [batch.B, batch.T], 'int32'),
      positions: tf.tensor2d(batch.positions, [batch.B, batch.T], 'int32'),
      attentionBias: tf.tensor4d(batch.bias, [batch.B, 1, batch.T, batch.T]),
      media: { images: tf.tensor3d(batch.images, [batch.B, PATCHES, P]), audio: tf.tensor3d(batch.audio, [batch.B, FRAMES, 8]), embeddingIndex: tf.tensor2d(batch.index, [batch.B, batch.T], 'int32') },
    };
    const { grads } = tf.variableGrads(() => {
      const logits = forward(ops, CFG, vars, inputs).logits;
      return tf.sum(tf.mul(tf.logSoftmax(logits), tf.oneHot(tf.reshape(inputs.tokens, [batch.B, batch.T]), CFG.vocabSize))) as tf.Scalar;
    }, Object.values(vars));
    for (const name of ['vision.patch_embed.weight', 'audio.conv1.weight', 'audio.conv2.weight', 'vision.proj.weight', 'audio.pos_emb.weight']) {
      const g = grads[`${backend}_${name}`].dataSync();
      assert.ok(g.every(Number.isFinite), `${backend}: ${name} gradient not finite`);
      assert.ok(g.some((v) => Math.abs(v) > 1e-6), `${backend}: ${name} gradient is zero`);
    }
    tf.dispose([...Object.values(vars), ...Object.values(grads), inputs.tokens, inputs.positions, inputs.attentionBias, inputs.media.images, inputs.media.audio, inputs.media.embeddingIndex]);
  }
  await tf.setBackend(trainerBackend);
});

test('media without an encoder in the config are refused by name', () => {
  const ops = createTfjsOps({ explicitTransposeGrad: false });
  tf.tidy(() => {
    const w = Object.fromEntries(parameterSpec(LM).map((p) => [p.name, tf.zeros(p.shape)]));
    const inputs = {
      tokens: tf.zeros([1, 2], 'int32'),
      positions: tf.zeros([1, 2], 'int32'),
      attentionBias: tf.zeros([1, 1, 2, 2]),
      media: { images: tf.zeros([1, 1, P]), embeddingIndex: tf.zeros([1, 2], 'int32') },
    };
    assert.throws(() => forward(ops, LM, w, inputs), /images given but the model config has no vision encoder/);
  });
  assert.throws(() => buildForwardModel(LM, { audio: true }), /needs an audio encoder/);
});
