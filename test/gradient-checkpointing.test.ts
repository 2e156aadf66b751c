// Gradient checkpointing (train.gradient_checkpointing): a trainer that computes each decoder layer
// again in the backward pass gives the same loss, gradient norm and update as one that keeps every
// activation, for the GPT and llama layouts and with LoRA dropout (whose masks must be drawn again
// identically), and leaves no tensor behind. Without it, a train step's forward pass keeps per layer
// what the backward pass reads, not every intermediate.
import assert from 'node:assert/strict';
import { before, test } from 'node:test';
import * as tf from '@tensorflow/tfjs';
import { loadTfjsBackend } from '../engines/backends';
import { seededRandom } from '../config/seeds';
import { initWeights, parameterSpec, TINY_MODEL, type ModelConfig, type PolicyWeights } from '../engines/model';
import { Trainer, type TrainSequence } from '../engines/trainer';
import { policyLoss } from '../training/losses';

before(async () => {
  await loadTfjsBackend({ kind: 'cpu' });
});

function maxAbsDiff(a: PolicyWeights, b: PolicyWeights): number {
  let worst = 0;
  for (const n of Object.keys(a)) a[n].forEach((v, i) => (worst = Math.max(worst, Math.abs(v - b[n][i]))));
  return worst;
}

test('gradientCheckpointing: layers computed again in the backward pass give the same loss and update (LoRA dropout masks too)', async () => {
  const llama: ModelConfig = { architecture: 'llama', vocabSize: 40, dModel: 16, nLayers: 3, nHeads: 4, nKvHeads: 2, dFF: 24, contextLength: 32, ropeTheta: 10000, rmsNormEps: 1e-5, tieEmbeddings: true };
  const loraModel: ModelConfig = { ...llama, lora: { rank: 4, alpha: 8, targets: ['q', 'k', 'v', 'o', 'gate', 'up', 'down'] } };
  const cases = [['gpt', { ...TINY_MODEL, contextLength: 32 }, 0], ['llama', llama, 0], ['llama + LoRA, dropout 0.2', loraModel, 0.2]] as const;
  for (const [name, model, loraDropout] of cases) {
    const rand = seededRandom(5);
    const sequences: TrainSequence[] = Array.from({ length: 6 }, (_, i) => {
      const tokens = Array.from({ length: 6 + (i % 4) * 3 }, () => 1 + Math.floor(rand() * (model.vocabSize - 1)));
      return { tokens, lossMask: tokens.slice(1).map((_, t) => (t >= 2 ? 1 : 0)), oldLogprobs: Array(tokens.length - 1).fill(-3), advantages: rand() - 0.5 };
    });
    const spec = parameterSpec(model);
    const weights = initWeights(model, 3, spec);
    for (const p of spec) if (p.name.endsWith('.lora_b')) weights[p.name] = Float32Array.from(weights[p.name], () => (rand() - 0.5) * 0.2);
    const run = async (gradientCheckpointing: boolean) => {
      // The same dropout masks in both runs: each pass's seed comes from Math.random.
      const random = Math.random;
      const seeded = seededRandom(9);
      Math.random = seeded;
      const before = tf.memory().numTensors;
      let left = 0;
      const trainer = Trainer.create({ model, weights, optimizer: { lr: 1e-3, weightDecay: 0 }, maxGradNorm: Infinity, microBatchSize: 4, loraDropout, gradientCheckpointing });
      try {
        const m = await trainer.trainStep(sequences, policyLoss({ algorithm: 'ppo' }));
        return { m, weights: await trainer.exportWeights(), left: () => left };
      } finally {
        Math.random = random;
        trainer.dispose();
        left = tf.memory().numTensors - before;
      }
    };
    const kept = await run(false);
    const recomputed = await run(true);
    assert.ok(Math.abs(recomputed.m.loss - kept.m.loss) < 1e-6, `${name}: loss ${recomputed.m.loss} vs ${kept.m.loss}`);
    assert.ok(Math.abs(recomputed.m.gradNorm - kept.m.gradNorm) < 1e-5 * kept.m.gradNorm, `${name}: gradient norm ${recomputed.m.gradNorm} vs ${kept.m.gradNorm}`);
    const worst = maxAbsDiff(kept.weights, recomputed.weights);
    assert.ok(worst < 1e-6, `${name}: max weight difference after the step ${worst} (lr 1e-3)`);
    assert.equal(recomputed.left(), kept.left(), `${name}: the recomputation leaves no tensor behind (tensors left by a disposed trainer)`);
  }
});

test('a train step holds per decoder layer what its backward pass reads, not every intermediate (llama + LoRA)', async () => {
  // Bytes alive when the loss is computed (the forward pass done, the backward not begun), per
  // decoder layer and token: the difference between 4 and 2 layers, so the weights, the embedding
  // and the vocabulary head cancel. D = 64, dFF = 256, 4 heads of 16 (2 key heads), 6 rows of 24.
  const perLayerToken = async (nLayers: number) => {
    const model: ModelConfig = { architecture: 'llama', vocabSize: 64, dModel: 64, nLayers, nHeads: 4, nKvHeads: 2, dFF: 256, contextLength: 32, ropeTheta: 10000, rmsNormEps: 1e-5, tieEmbeddings: true, lora: { rank: 4, alpha: 8, targets: ['q', 'k', 'v', 'o', 'gate', 'up', 'down'] } };
    const rand = seededRandom(11);
    const sequences: TrainSequence[] = Array.from({ length: 6 }, () => {
      const tokens = Array.from({ length: 24 }, () => 1 + Math.floor(rand() * 63));
      return { tokens, lossMask: tokens.slice(1).map(() => 1), oldLogprobs: Array(23).fill(-3), advantages: rand() - 0.5 };
    });
    const trainer = Trainer.create({ model, weights: initWeights(model, 3), optimizer: { lr: 1e-3 }, microBatchSize: 6 });
    try {
      const loss = policyLoss({ algorithm: 'ppo' });
      let atLoss = 0;
      const before = tf.memory().numBytes;
      await trainer.trainStep(sequences, { ...loss, compute: (inputs) => ((atLoss = tf.memory().numBytes - before), loss.compute(inputs)) });
      return atLoss;
    } finally {
      trainer.dispose();
    }
  };
  const tokens = 6 * 23;
  const floatsPerLayerToken = ((await perLayerToken(4)) - (await perLayerToken(2))) / 2 / tokens / 4;
  // What the backward pass reads, per token: each RMSNorm's normalized input and the adapters'
  // input (2 x (2 D + 1)), the rank-wide adapter products (7 x 4), the attention's q, k, v and
  // probabilities (D + 2 x 32 + 4 heads x 24 keys), the output projection's input (D), gate and up
  // (2 dFF), the down projection's input (dFF), and the layer's output (D).
  const D = 64;
  const F = 256;
  const read = 2 * (2 * D + 1) + 7 * 4 + (D + 2 * 32 + 4 * 24) + D + 2 * F + F + D;
  console.log(`# floats alive per layer and token at the loss: ${floatsPerLayerToken.toFixed(0)}; read by the backward pass: ${read}`);
  // Every intermediate kept (no per-layer scope; reshapes keeping their inputs) held 7,150 here on
  // native TensorFlow. wasm keeps the attention and LoRA compositions (their scores and adapter
  // outputs too, model-tfjs.ts): 3,786 with the scope.
  const factor = tf.getBackend() === 'tensorflow' ? 1.5 : 3;
  assert.ok(floatsPerLayerToken < factor * read, `${floatsPerLayerToken.toFixed(0)} floats per layer and token alive at the loss, more than ${factor} x the ${read} the backward pass reads`);
});
