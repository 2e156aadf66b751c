// The shared model definition: config validation, parameter spec, seeded init, attention bias, the
// ONNX graphs it builds, and the wasm kernel that lets its embeddings train.
import assert from 'node:assert/strict';
import { before, test } from 'node:test';
import * as tf from '@tensorflow/tfjs';
import * as ort from 'onnxruntime-node';
import { loadTfjsBackend } from '../engines/backends';
import { attentionBias, initWeights, MASKED_BIAS, parameterCount, parameterSpec, parseModelConfig, TINY_MODEL } from '../engines/model';
import { buildGenerationModel, GRAPH_NAMES } from '../engines/model-onnx';
import { createTfjsOps } from '../engines/model-tfjs';
import { registerWasmTrainingKernels } from '../engines/wasm-kernels';

before(async () => {
  await loadTfjsBackend({ kind: 'cpu' });
});

test('model config validation names the field', () => {
  assert.deepEqual(parseModelConfig(TINY_MODEL), TINY_MODEL);
  assert.throws(() => parseModelConfig({ ...TINY_MODEL, nHeads: 5 }), /dModel: dModel must be a multiple of nHeads/);
  assert.throws(() => parseModelConfig({ ...TINY_MODEL, nLayers: 0 }), /nLayers/);
  assert.throws(() => parseModelConfig({ ...TINY_MODEL, dropout: 0.1 }), /dropout|unrecognized/i);
});

test('parameter spec: GPT-2 layout, untied head, count matches the formula', () => {
  const { vocabSize: V, dModel: D, dFF: F, contextLength: C, nLayers: L } = TINY_MODEL;
  const perLayer = 4 * D + (D * 3 * D + 3 * D) + (D * D + D) + (D * F + F) + (F * D + D);
  assert.equal(parameterCount(TINY_MODEL), V * D + C * D + L * perLayer + 2 * D + D * V);
  const names = parameterSpec(TINY_MODEL).map((p) => p.name);
  assert.equal(new Set(names).size, names.length);
  assert.ok(names.includes('lm_head.weight') && names.includes('tok_emb.weight'));
});

test('init is a pure function of the seed', () => {
  const a = initWeights(TINY_MODEL, 1);
  const b = initWeights(TINY_MODEL, 1);
  const c = initWeights(TINY_MODEL, 2);
  assert.deepEqual(a['blocks.0.attn.qkv.weight'], b['blocks.0.attn.qkv.weight']);
  assert.notDeepEqual(a['blocks.0.attn.qkv.weight'], c['blocks.0.attn.qkv.weight']);
  assert.ok(a['blocks.1.ln2.weight'].every((v) => v === 1) && a['blocks.1.ln2.bias'].every((v) => v === 0));
  const w = a['tok_emb.weight'];
  const std = Math.sqrt(w.reduce((s, v) => s + v * v, 0) / w.length);
  assert.ok(Math.abs(std - 0.02) < 0.002, `embedding std ${std}`);
});

test('attention bias: causal over past + new slots, padding keys masked', () => {
  // 1 row, 2 new queries after 2 cached slots, slot 0 is padding.
  const bias = attentionBias(1, 2, 2, (_, s) => s === 0);
  const M = MASKED_BIAS;
  assert.deepEqual(Array.from(bias), [M, 0, 0, M, M, 0, 0, 0]);
});

test('both ONNX graphs load in ONNX Runtime with every weight as an input and the cache as outputs', async () => {
  for (const withPast of [false, true]) {
    const session = await ort.InferenceSession.create(buildGenerationModel(TINY_MODEL, withPast));
    try {
      for (const p of parameterSpec(TINY_MODEL)) assert.ok(session.inputNames.includes(p.name), p.name);
      assert.equal(session.inputNames.includes(GRAPH_NAMES.pastKey(0)), withPast);
      assert.deepEqual(session.outputNames, [GRAPH_NAMES.logits, GRAPH_NAMES.expLogits, GRAPH_NAMES.logitMax, GRAPH_NAMES.expSum, ...[0, 1].flatMap((l) => [GRAPH_NAMES.presentKey(l), GRAPH_NAMES.presentValue(l)])]);
    } finally {
      await session.release();
    }
  }
});

test('weights given as constants are built into the graph (initializers), not inputs', async () => {
  const weights = initWeights(TINY_MODEL, 1);
  const constant = parameterSpec(TINY_MODEL)[0].name;
  const session = await ort.InferenceSession.create(buildGenerationModel(TINY_MODEL, true, {}, { [constant]: weights[constant] }));
  try {
    assert.ok(!session.inputNames.includes(constant));
    assert.ok(parameterSpec(TINY_MODEL).slice(1).every((p) => session.inputNames.includes(p.name)));
  } finally {
    await session.release();
  }
  assert.throws(() => buildGenerationModel(TINY_MODEL, true, {}, { 'no.such.weight': new Float32Array(1) }), /"no\.such\.weight" is not a weight/);
  assert.throws(() => buildGenerationModel(TINY_MODEL, true, {}, { [constant]: new Float32Array(1) }), /has 1 values, expected shape/);
});

test('wasm: embedding gradients train through the registered UnsortedSegmentSum kernel and match one-hot matmul', (t) => {
  if (tf.getBackend() !== 'wasm') {
    t.skip(`backend is ${tf.getBackend()}, not wasm`);
    return;
  }
  registerWasmTrainingKernels();
  const table = tf.tensor2d([1, 2, 3, 4, 5, 6, 7, 8], [4, 2]);
  const ids = tf.tensor2d([[3, 1, 3]], [1, 3], 'int32');
  const upstream = tf.tensor3d([[[1, 10], [2, 20], [3, 30]]]);
  const viaGather = tf.grad((t: tf.Tensor) => tf.sum(tf.mul(createTfjsOps({ explicitTransposeGrad: true }).embed(t, ids), upstream)))(table);
  const viaOneHot = tf.grad((t: tf.Tensor) => tf.sum(tf.mul(tf.reshape(tf.matMul(tf.oneHot(tf.reshape(ids, [-1]), 4), t), [1, 3, 2]), upstream)))(table);
  assert.deepEqual(Array.from(viaGather.dataSync()), [0, 0, 2, 20, 0, 0, 4, 40]);
  assert.deepEqual(Array.from(viaGather.dataSync()), Array.from(viaOneHot.dataSync()));
  tf.dispose([table, ids, upstream, viaGather, viaOneHot]);
});

test('tfjs ops: reshape 0 copies the input dimension, matmul gradients match tfjs', () => {
  const ops = createTfjsOps({ explicitTransposeGrad: true });
  const x = tf.zeros([2, 3, 8]);
  assert.deepEqual(ops.reshape(x, [0, 0, 2, 4]).shape, [2, 3, 2, 4]);
  const a = tf.randomNormal([2, 3, 4, 5], 0, 1, 'float32', 1);
  const b = tf.randomNormal([2, 3, 5, 6], 0, 1, 'float32', 2);
  const [ga, gb] = tf.grads((p: tf.Tensor, q: tf.Tensor) => tf.sum(tf.square(ops.matmul(p, q))))([a, b]);
  const [ra, rb] = tf.grads((p: tf.Tensor, q: tf.Tensor) => tf.sum(tf.square(tf.matMul(p, q))))([a, b]);
  assert.ok(tf.max(tf.abs(tf.sub(ga, ra))).dataSync()[0] < 1e-4);
  assert.ok(tf.max(tf.abs(tf.sub(gb, rb))).dataSync()[0] < 1e-4);
  tf.dispose([x, a, b, ga, gb, ra, rb]);
});
