// The trainer on the tfjs backend this machine loads (wasm here): optimizer math, schedules,
// clipping, refusal of non-finite updates, micro-batching, optimizer-state resume, event-loop yields.
import assert from 'node:assert/strict';
import { before, test } from 'node:test';
import * as tf from '@tensorflow/tfjs';
import { loadTfjsBackend } from '../engines/backends';
import { seededRandom } from '../config/seeds';
import { initWeights, parameterSpec, TINY_MODEL, type ModelConfig, type PolicyWeights } from '../engines/model';
import { decodeSafetensors } from '../engines/safetensors';
import { learningRate, NonFiniteUpdateError, planMicroBatches, Trainer, type TrainSequence, type TrainingLoss } from '../engines/trainer';
import { packGroups, padBatch, sharedPrefixes } from '../engines/trainer-batch';
import { policyLoss, sftLoss } from '../training/losses';

const MODEL: ModelConfig = { ...TINY_MODEL, contextLength: 16 };

before(async () => {
  await loadTfjsBackend({ kind: 'cpu' });
});

function batch(seed: number, count: number, length = 12): Array<TrainSequence & { tokens: number[]; lossMask: number[] }> {
  const rand = seededRandom(seed);
  return Array.from({ length: count }, () => {
    const n = 4 + Math.floor(rand() * (length - 3));
    const tokens = Array.from({ length: n }, () => Math.floor(rand() * MODEL.vocabSize));
    return { tokens, lossMask: tokens.slice(1).map((_, t) => (t >= 2 ? 1 : 0)) };
  });
}

function maxAbsDiff(a: PolicyWeights, b: PolicyWeights, names = Object.keys(a)): number {
  let worst = 0;
  for (const n of names) a[n].forEach((v, i) => (worst = Math.max(worst, Math.abs(v - b[n][i]))));
  return worst;
}

test('learning-rate schedules: warmup, then constant / linear / cosine decay to the floor', () => {
  const peak = 1e-3;
  assert.equal(learningRate(peak, { kind: 'constant', warmupSteps: 4 }, 0), peak / 4);
  assert.equal(learningRate(peak, { kind: 'constant', warmupSteps: 4 }, 3), peak);
  assert.equal(learningRate(peak, { kind: 'constant', warmupSteps: 4 }, 100), peak);
  const linear = { kind: 'linear' as const, warmupSteps: 10, totalSteps: 110, minLrRatio: 0.1 };
  assert.equal(learningRate(peak, linear, 10), peak);
  assert.ok(Math.abs(learningRate(peak, linear, 60) - 0.55 * peak) < 1e-12);
  assert.ok(Math.abs(learningRate(peak, linear, 500) - 0.1 * peak) < 1e-12);
  const cosine = { kind: 'cosine' as const, totalSteps: 100 };
  assert.ok(Math.abs(learningRate(peak, cosine, 50) - 0.5 * peak) < 1e-12);
  assert.ok(learningRate(peak, cosine, 100) < 1e-12);
  assert.throws(() => Trainer.create({ model: MODEL, optimizer: { lr: 1e-3 }, schedule: { kind: 'cosine' } }), /schedule.totalSteps is required/);
  assert.throws(() => Trainer.create({ model: MODEL, optimizer: { lr: 0 } }), /optimizer.lr/);
});

test('AdamW: the first step moves each parameter by ~lr, and weight decay is decoupled and skips biases and norms', async () => {
  const lr = 1e-3;
  const weights = initWeights(MODEL, 1);
  const sequences = batch(1, 16);
  const plain = Trainer.create({ model: MODEL, weights, optimizer: { lr }, maxGradNorm: Infinity });
  const decayed = Trainer.create({ model: MODEL, weights, optimizer: { lr, weightDecay: 0.1 }, maxGradNorm: Infinity });
  try {
    await plain.trainStep(sequences, sftLoss());
    await decayed.trainStep(sequences, sftLoss());
    const a = await plain.exportWeights();
    const b = await decayed.exportWeights();
    // Adam's first step is lr * g / (|g| + eps): magnitude lr wherever |g| >> eps.
    let atLr = 0;
    let total = 0;
    for (const p of parameterSpec(MODEL)) {
      a[p.name].forEach((v, i) => {
        const step = Math.abs(v - weights[p.name][i]);
        assert.ok(step <= lr * 1.0001, `${p.name}[${i}] moved ${step}`);
        total += 1;
        if (Math.abs(step - lr) < lr * 1e-3) atLr += 1;
      });
    }
    assert.ok(atLr / total > 0.9, `${atLr}/${total} parameters moved by lr`);
    for (const p of parameterSpec(MODEL)) {
      const decays = p.shape.length >= 2;
      b[p.name].forEach((v, i) => {
        const expected = a[p.name][i] - (decays ? lr * 0.1 * weights[p.name][i] : 0);
        assert.ok(Math.abs(v - expected) < 1e-8, `${p.name}[${i}]: ${v} vs ${expected}`);
      });
    }
  } finally {
    plain.dispose();
    decayed.dispose();
  }
});

test('global-norm clipping: reported norm is pre-clip; a tiny bound clips, a large one does not', async () => {
  const sequences = batch(2, 8);
  const tight = Trainer.create({ model: MODEL, seed: 2, optimizer: { lr: 1e-3 }, maxGradNorm: 1e-3 });
  const loose = Trainer.create({ model: MODEL, seed: 2, optimizer: { lr: 1e-3 }, maxGradNorm: 1e6 });
  try {
    const t = await tight.trainStep(sequences, sftLoss());
    const l = await loose.trainStep(sequences, sftLoss());
    assert.equal(t.gradClipped, true);
    assert.equal(l.gradClipped, false);
    assert.ok(t.gradNorm > 1e-3);
    assert.ok(Math.abs(t.gradNorm - l.gradNorm) < 1e-5 * l.gradNorm, 'same weights, same batch: same norm');
    // Adam's first moment after one step is (1 - beta1) * the applied gradient: its global norm is
    // the clip bound when clipped, the raw norm when not.
    const applied = async (trainer: Trainer) => {
      const state = decodeSafetensors(await trainer.exportOptimizerState());
      let sq = 0;
      for (const [name, t] of state.tensors) if (name.startsWith('m.')) t.data.forEach((v) => (sq += v * v));
      return Math.sqrt(sq) / (1 - 0.9);
    };
    assert.ok(Math.abs((await applied(tight)) - 1e-3) < 1e-3 * 1e-4, `clipped norm ${await applied(tight)}`);
    assert.ok(Math.abs((await applied(loose)) - l.gradNorm) < l.gradNorm * 1e-4, `unclipped norm ${await applied(loose)} vs ${l.gradNorm}`);
  } finally {
    tight.dispose();
    loose.dispose();
  }
});

test('a non-finite loss or gradient is refused: error names it, weights and step are untouched', async () => {
  const trainer = Trainer.create({ model: MODEL, seed: 3, optimizer: { lr: 1e-3 } });
  try {
    const before = await trainer.exportWeights();
    const sequences = batch(4, 4).map((s) => ({ ...s, oldLogprobs: s.lossMask.map(() => -1), advantages: Number.NaN }));
    await assert.rejects(trainer.trainStep(sequences, policyLoss({ algorithm: 'ppo' })), (err: Error) => err instanceof NonFiniteUpdateError && /ppo loss is not finite \(NaN\)/.test(err.message));
    // Finite loss (0) whose gradient is NaN: d sqrt(x)/dx at 0 is infinite, times 0.
    const nanGradient: TrainingLoss = {
      name: 'sqrt-at-zero',
      microBatchWeighting: 'tokens',
      compute: ({ logprobs }) => ({ loss: tf.sum(tf.sqrt(tf.mul(logprobs, tf.scalar(0)))) as tf.Scalar }),
    };
    await assert.rejects(trainer.trainStep(batch(4, 4), nanGradient), /the gradient of "[a-z_.0-9]+" is not finite \(sqrt-at-zero loss\); the update was not applied/);
    assert.equal(trainer.step, 0);
    assert.equal(maxAbsDiff(before, await trainer.exportWeights()), 0);
    // The trainer still works afterwards.
    const ok = await trainer.trainStep(batch(4, 4), sftLoss());
    assert.equal(ok.step, 1);
  } finally {
    trainer.dispose();
  }
});

test('micro-batching accumulates to the same update as one big batch', async () => {
  const sequences = batch(5, 24);
  const whole = Trainer.create({ model: MODEL, seed: 4, optimizer: { lr: 1e-3 }, microBatchSize: 24 });
  const split = Trainer.create({ model: MODEL, seed: 4, optimizer: { lr: 1e-3 }, microBatchSize: 5 });
  try {
    const a = await whole.trainStep(sequences, sftLoss());
    const b = await split.trainStep(sequences, sftLoss());
    assert.ok(Math.abs(a.loss - b.loss) < 1e-5, `loss ${a.loss} vs ${b.loss}`);
    assert.ok(Math.abs(a.gradNorm - b.gradNorm) < 1e-4 * a.gradNorm, `grad norm ${a.gradNorm} vs ${b.gradNorm}`);
    assert.ok(Math.abs(a.entropy - b.entropy) < 1e-5);
    // Parameters whose gradient is ~0 can flip Adam's sign, so compare the well-conditioned ones.
    assert.ok(maxAbsDiff(await whole.exportWeights(), await split.exportWeights(), ['lm_head.weight', 'blocks.1.mlp.fc.weight']) < 1e-5);
  } finally {
    whole.dispose();
    split.dispose();
  }
});

test('PPO on-policy: ratio 1, no clipping, zero KL to an identical reference; the step reports every metric', async () => {
  const trainer = Trainer.create({ model: MODEL, seed: 6, optimizer: { lr: 1e-3 } });
  try {
    const base = batch(6, 8);
    const lp = await trainer.logprobs(base.map((s) => s.tokens));
    base.forEach((s, i) => assert.equal(lp[i].length, s.tokens.length - 1));
    const sequences = base.map((s, i) => ({ ...s, oldLogprobs: lp[i], refLogprobs: lp[i], advantages: i % 2 ? 1 : -1 }));
    const m = await trainer.trainStep(sequences, policyLoss({ algorithm: 'ppo', klCoef: 0.1 }));
    assert.ok(Math.abs(m.ratioMean! - 1) < 1e-5 && Math.abs(m.ratioMin! - 1) < 1e-5 && Math.abs(m.ratioMax! - 1) < 1e-5);
    assert.ok(Math.abs(m.kl!) < 1e-6);
    assert.equal(m.clipFraction, 0);
    assert.ok(m.entropy > 0 && m.entropy <= Math.log(MODEL.vocabSize) + 1e-5);
    assert.ok(m.gradNorm > 0 && Number.isFinite(m.loss));
    assert.equal(m.lossTokens, base.reduce((n, s) => n + s.lossMask.reduce((a, b) => a + b, 0), 0));
    // After the update the same samples are off-policy: ratios spread around 1.
    const m2 = await trainer.trainStep(sequences, policyLoss({ algorithm: 'ppo', klCoef: 0.1 }));
    assert.ok(m2.ratioMin! < 1 && m2.ratioMax! > 1 && m2.kl! > 0);
  } finally {
    trainer.dispose();
  }
});

test('resuming from exported weights + optimizer state continues bit-identically', async () => {
  const a = Trainer.create({ model: MODEL, seed: 7, optimizer: { lr: 1e-3, weightDecay: 0.01 }, schedule: { kind: 'cosine', warmupSteps: 1, totalSteps: 10 } });
  try {
    await a.trainStep(batch(7, 8), sftLoss());
    await a.trainStep(batch(8, 8), sftLoss());
    const b = Trainer.create({ model: MODEL, weights: await a.exportWeights(), optimizer: { lr: 1e-3, weightDecay: 0.01 }, schedule: { kind: 'cosine', warmupSteps: 1, totalSteps: 10 } });
    try {
      b.importOptimizerState(await a.exportOptimizerState());
      assert.equal(b.step, 2);
      const ma = await a.trainStep(batch(9, 8), sftLoss());
      const mb = await b.trainStep(batch(9, 8), sftLoss());
      assert.equal(ma.lr, mb.lr);
      assert.equal(maxAbsDiff(await a.exportWeights(), await b.exportWeights()), 0);
    } finally {
      b.dispose();
    }
  } finally {
    a.dispose();
  }
});

test('the event loop keeps turning during a train step (timers fire between micro-batches)', async () => {
  const trainer = Trainer.create({ model: MODEL, seed: 8, optimizer: { lr: 1e-3 }, microBatchSize: 4 });
  try {
    let ticks = 0;
    const timer = setInterval(() => (ticks += 1), 0);
    await trainer.trainStep(batch(10, 32), sftLoss());
    clearInterval(timer);
    assert.ok(ticks >= 4, `timer fired ${ticks} times during 8 micro-batches`);
  } finally {
    trainer.dispose();
  }
});

test('bad batches get errors naming the sequence and field', async () => {
  const trainer = Trainer.create({ model: MODEL, seed: 9, optimizer: { lr: 1e-3 } });
  try {
    const long = Array.from({ length: 17 }, () => 1);
    await assert.rejects(trainer.logprobs([[1, 2], long]), /sequence 1 has 17 tokens, more than the model's context of 16/);
    await assert.rejects(trainer.trainStep([{ tokens: [1, 2, 3], lossMask: [1] }], sftLoss()), /sequence 0: lossMask has 1 entries, expected 2/);
    await assert.rejects(trainer.trainStep([{ tokens: [1, 2, 3], lossMask: [0, 0] }], sftLoss()), /no sequence has a loss token/);
    await assert.rejects(trainer.trainStep([{ tokens: [1, 2, 3], lossMask: [1, 1] }], policyLoss({ algorithm: 'ppo' })), /ppo loss needs oldLogprobs/);
    await assert.rejects(trainer.trainStep([{ tokens: [1, 20], lossMask: [1] }], sftLoss()), /sequence 0 token 1 is 20, outside the vocabulary/);
    await assert.rejects(
      trainer.trainStep([{ tokens: [1, 2], lossMask: [1], advantages: 1 }, { tokens: [1, 2], lossMask: [1] }], sftLoss()),
      /sequence 1: advantages is missing but sequence 0 has it/,
    );
  } finally {
    trainer.dispose();
  }
});

test('no tensors leak across steps and log-prob passes', async () => {
  const trainer = Trainer.create({ model: MODEL, seed: 10, optimizer: { lr: 1e-3 }, microBatchSize: 3 });
  try {
    const sequences = batch(11, 7).map((s) => ({ ...s, oldLogprobs: s.lossMask.map(() => -2), refLogprobs: s.lossMask.map(() => -2), advantages: 1 }));
    await trainer.trainStep(sequences, policyLoss({ algorithm: 'gspo', klCoef: 0.1, entropyCoef: 0.01 }));
    const count = tf.memory().numTensors;
    await trainer.trainStep(sequences, policyLoss({ algorithm: 'gspo', klCoef: 0.1, entropyCoef: 0.01 }));
    await trainer.logprobs(sequences.map((s) => s.tokens));
    await assert.rejects(trainer.trainStep(sequences.map((s) => ({ ...s, advantages: Number.NaN })), policyLoss({ algorithm: 'ppo' })));
    assert.equal(tf.memory().numTensors, count);
  } finally {
    trainer.dispose();
  }
});

test('planMicroBatches: by count in order, or by a token budget longest first', () => {
  assert.deepEqual(planMicroBatches([3, 9, 4, 8, 2], 2), [[0, 1], [2, 3], [4]]);
  // Budget 18: [9, 8] (2 x 9 = 18), [4, 3, 2] (3 x 4 = 12; a fourth would not fit anyway), a 20-token sequence alone.
  assert.deepEqual(planMicroBatches([3, 9, 4, 8, 2, 20], 8, 18), [[5], [1, 3], [2, 0, 4]]);
  assert.deepEqual(planMicroBatches([5, 5, 5], 2, 100), [[0, 1], [2]], 'never more than maxSequences');
});

test('micro_batch_tokens: packing by length gives the same update with less padding', async () => {
  const model = { vocabSize: 13, dModel: 16, nLayers: 1, nHeads: 2, dFF: 32, contextLength: 24 };
  // Lengths alternate long and short, so count-based micro-batches pad every short sequence to the long one.
  const batch = Array.from({ length: 8 }, (_, i) => {
    const n = i % 2 ? 20 : 4;
    const tokens = Array.from({ length: n }, (_, j) => (i * 5 + j * 3) % 13);
    return { tokens, lossMask: Array.from({ length: n - 1 }, (_, t) => (t >= 1 ? 1 : 0)), oldLogprobs: Array(n - 1).fill(-2.5), advantages: i % 3 ? 1 : -1 };
  });
  const run = async (microBatchTokens?: number) => {
    const trainer = Trainer.create({ model, seed: 5, optimizer: { lr: 1e-2 }, microBatchSize: 2, ...(microBatchTokens ? { microBatchTokens } : {}) });
    try {
      const m = await trainer.trainStep(batch, policyLoss({ algorithm: 'ppo' }));
      return { m, weights: await trainer.exportWeights() };
    } finally {
      trainer.dispose();
    }
  };
  const byCount = await run();
  const packed = await run(48);
  assert.equal(byCount.m.paddedTokens, 4 * 2 * 19, 'four micro-batches of [short, long], padded to 19');
  assert.equal(packed.m.paddedTokens, 2 * 2 * 19 + 2 * 2 * 3, 'longs together, shorts together');
  assert.ok(Math.abs(byCount.m.loss - packed.m.loss) < 1e-5, `loss ${byCount.m.loss} vs ${packed.m.loss}`);
  let worst = 0;
  for (const [name, w] of Object.entries(byCount.weights)) w.forEach((x, i) => (worst = Math.max(worst, Math.abs(x - packed.weights[name][i]))));
  assert.ok(worst < 1e-5, `max weight difference ${worst}`);
});

test('sharePrompts: a group computes its prompt once, with the same loss and update as the unshared computation', async () => {
  const llama: ModelConfig = { architecture: 'llama', vocabSize: 40, dModel: 16, nLayers: 2, nHeads: 4, nKvHeads: 2, dFF: 24, contextLength: 32, ropeTheta: 10000, rmsNormEps: 1e-5, tieEmbeddings: true };
  const loraModel: ModelConfig = { ...llama, lora: { rank: 4, alpha: 8, targets: ['q', 'k', 'v', 'o', 'gate', 'up', 'down'] } };
  for (const [name, model] of [['gpt', { ...TINY_MODEL, contextLength: 32 }], ['llama', llama], ['llama + LoRA', loraModel]] as const) {
    // Three prompts of different lengths, 3 samples each with completions of different lengths, and
    // one prompt with a single sample (nothing to share).
    const rand = seededRandom(11);
    const token = () => 1 + Math.floor(rand() * (model.vocabSize - 1));
    const sequences: TrainSequence[] = [];
    for (const [promptLength, samples] of [[7, 3], [5, 3], [9, 3], [6, 1]]) {
      const prompt = Array.from({ length: promptLength }, token);
      for (let s = 0; s < samples; s++) {
        const completion = Array.from({ length: 2 + Math.floor(rand() * 6) }, token);
        const tokens = [...prompt, ...completion];
        sequences.push({ tokens, lossMask: tokens.slice(1).map((_, t) => (t >= promptLength - 1 ? 1 : 0)), oldLogprobs: Array(tokens.length - 1).fill(-3), advantages: rand() - 0.5 });
      }
    }
    // LoRA B starts at zero (no gradient reaches A then): start from a random B so every path counts.
    const spec = parameterSpec(model);
    const weights = initWeights(model, 3, spec);
    for (const p of spec) if (p.name.endsWith('.lora_b')) weights[p.name] = Float32Array.from(weights[p.name], () => (rand() - 0.5) * 0.2);
    const run = async (sharePrompts: boolean, microBatchTokens?: number) => {
      const trainer = Trainer.create({ model, weights, optimizer: { lr: 1e-3, weightDecay: 0 }, maxGradNorm: Infinity, microBatchSize: 16, sharePrompts, ...(microBatchTokens ? { microBatchTokens } : {}) });
      try {
        const m = await trainer.trainStep(sequences, policyLoss({ algorithm: 'ppo' }));
        return { m, weights: await trainer.exportWeights() };
      } finally {
        trainer.dispose();
      }
    };
    // Log-probs (the reference policy's): with promptLength the group's prompt is packed once, every target the same.
    const scorer = Trainer.create({ model, weights, optimizer: { lr: 1e-3 } });
    try {
      const plain = await scorer.logprobs(sequences.map((q) => ({ tokens: q.tokens })));
      const withPrompts = await scorer.logprobs(sequences.map((q) => ({ tokens: q.tokens, promptLength: Array.from(q.lossMask).indexOf(1) + 1 })));
      withPrompts.forEach((row, i) => {
        assert.equal(row.length, plain[i].length);
        row.forEach((v, t) => assert.ok(Math.abs(v - plain[i][t]) < 1e-5, `${name}: log-prob of sequence ${i} target ${t}: ${v} vs ${plain[i][t]}`));
      });
    } finally {
      scorer.dispose();
    }
    const unshared = await run(false);
    for (const budget of [undefined, 60]) {
      const shared = await run(true, budget);
      const label = `${name}, ${budget ? `micro-batches of <= ${budget} tokens` : 'one micro-batch'}`;
      assert.ok(shared.m.paddedTokens < unshared.m.paddedTokens, `${label}: the shared prompts made fewer padded tokens (${shared.m.paddedTokens} vs ${unshared.m.paddedTokens})`);
      assert.ok(Math.abs(shared.m.loss - unshared.m.loss) < 1e-5, `${label}: loss ${shared.m.loss} vs ${unshared.m.loss}`);
      assert.ok(Math.abs(shared.m.gradNorm - unshared.m.gradNorm) < 1e-4 * unshared.m.gradNorm, `${label}: gradient norm ${shared.m.gradNorm} vs ${unshared.m.gradNorm}`);
      assert.ok(Math.abs(shared.m.entropy - unshared.m.entropy) < 1e-5, `${label}: entropy`);
      const worst = maxAbsDiff(unshared.weights, shared.weights);
      // AdamW's first step is lr x g / (|g| + eps): float noise on near-zero gradients moves it by < 1% of lr.
      assert.ok(worst < 1e-5, `${label}: max weight difference after the step ${worst} (lr 1e-3)`);
    }
  }
});

test('planMicroBatches with prompts keeps a prompt\'s sequences together and counts its packed rows', () => {
  const prompts = ['a', 'b', 'a', 'b', 'c', 'a'].map((key) => ({ key, length: key === 'c' ? 10 : 6 }));
  const lengths = [10, 9, 12, 8, 16, 11];
  // Order: c (longest 16), then a's (12, 11, 10), then b's (9, 8). A micro-batch costs one packed row
  // per prompt: the prompt up to the shortest (6 once c has company), then each sequence's
  // length - 1 - 6 inputs; rows padded to the longest.
  // Budget 30: c + a's first two = rows c (6 + 9) and a (6 + 5 + 4): 2 x 15 = 30; a's third would make a 18.
  assert.deepEqual(planMicroBatches(lengths, 8, 30, prompts), [[4, 2, 5], [0, 1, 3]]);
  // Budget 42: c + all of a (2 x 18 = 36); a b row would make 3 x 18 = 54.
  assert.deepEqual(planMicroBatches(lengths, 8, 42, prompts), [[4, 2, 5, 0], [1, 3]]);
  assert.deepEqual(planMicroBatches(lengths, 2, 1000, prompts), [[4, 2], [5, 0], [1, 3]], 'never more than maxSequences');
});

test('packGroups: one row per prompt, each sequence after it at its own positions, gathered back column by column', () => {
  // Two sequences of prompt [5, 6, 7] and one of prompt [5, 6, 9]: shared columns 0..1 (from 2).
  const sequences = [
    { tokens: [5, 6, 7, 1, 2], lossMask: [0, 0, 1, 1] },
    { tokens: [5, 6, 7, 3], lossMask: [0, 0, 1] },
    { tokens: [5, 6, 9, 4, 4], lossMask: [0, 1, 1, 1] },
  ];
  const batch = padBatch(MODEL, sequences, true);
  const from = 1; // the batch's first loss column
  const shared = sharedPrefixes(batch, from)!;
  assert.equal(shared.count, 1, 'one prompt token in common: one row');
  const packed = packGroups(batch, from, sequences.map((s) => s.tokens.length - 1), shared, 0);
  // Row: prompt [5], then inputs 1.. of each: [6, 7, 1], [6, 7], [6, 9, 4].
  assert.deepEqual(Array.from(packed.tokens), [5, 6, 7, 1, 6, 7, 6, 9, 4]);
  assert.deepEqual(Array.from(packed.positions), [0, 1, 2, 3, 1, 2, 1, 2, 3]);
  const L = packed.length;
  const sees = (q: number) => Array.from(packed.bias.subarray(q * L, (q + 1) * L)).map((b, k) => (b === 0 ? k : -1)).filter((k) => k >= 0);
  assert.deepEqual(sees(5), [0, 4, 5], 'the second sequence\'s 2nd input sees the prompt and itself, not the first sequence');
  // Columns 0..3 of each padded row: column 0 reads the prompt; past a row's end, its first packed position.
  assert.deepEqual(Array.from(packed.gather), [0, 1, 2, 3, 0, 4, 5, 4, 0, 6, 7, 8]);
  assert.equal(sharedPrefixes(padBatch(MODEL, sequences.slice(0, 1), true), 1), undefined, 'nothing to share in one row');
});
