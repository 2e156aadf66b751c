// PPO with a critic at the trainer level: the value head (engines/model.ts valueHead) is part of the
// policy's trained and published weights, its values before the update (Trainer.values) feed GAE
// (training/critic-step.ts), and the clipped value loss added to the policy loss makes the critic
// fit the returns: the value loss falls and the explained variance rises over a few steps.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadCheckpoint, publishCheckpoint } from '../engines/checkpoint';
import { before, test } from 'node:test';
import { loadTfjsBackend } from '../engines/backends';
import { initWeights, parameterSpec, TINY_MODEL, trainableParameterSpec, type ModelConfig } from '../engines/model';
import { RolloutEngine } from '../engines/rollout';
import { Trainer } from '../engines/trainer';
import { criticLearningRate, parseRunConfig } from '../config/run-config';
import { criticOf, criticSequences } from '../training/critic-step';
import { resolvePolicyLoss } from '../training/losses';
import type { TrainSample } from '../training/sample-buffer';

before(async () => {
  await loadTfjsBackend({ kind: 'cpu' });
});

const MODEL: ModelConfig = { ...TINY_MODEL, valueHead: true };

/** Eight responses to one prompt: those starting with token 5 earn 1, the others 0. */
function samples(logprobs: Float32Array[]): TrainSample[] {
  const responses = [[5, 6, 7], [5, 7, 6], [8, 6, 7], [9, 7, 6], [5, 9, 9], [8, 8, 8], [5, 5, 6], [9, 9, 7]];
  return responses.map((r, i) => ({
    iteration: 0, groupIndex: 0, sampleIndex: i, promptTokens: [1, 2, 3], responseTokens: r, lossMask: [1, 1, 1],
    rolloutLogprobs: Array.from(logprobs[i].slice(2)), refLogprobs: null, tokenVersions: null, policyVersion: 0, reward: r[0] === 5 ? 1 : 0,
  })) as unknown as TrainSample[];
}

test('the value head is a trained, published parameter of the policy (LoRA or not it is never frozen)', () => {
  const spec = parameterSpec(MODEL);
  assert.deepEqual(spec.slice(-2).map((p) => [p.name, p.shape, p.frozen ?? false]), [['value_head.weight', [64, 1], false], ['value_head.bias', [1], false]]);
  assert.ok(!parameterSpec(TINY_MODEL).some((p) => p.name.startsWith('value_head')));
});

test('with LoRA the value head trains beside the adapters: a step changes it and the frozen base stays', async () => {
  const lora: ModelConfig = { architecture: 'llama', vocabSize: 16, dModel: 32, nLayers: 1, nHeads: 4, dFF: 64, contextLength: 16, lora: { rank: 4, alpha: 8, targets: ['q', 'v'] }, valueHead: true };
  const trainable = trainableParameterSpec(lora).map((p) => p.name);
  assert.ok(trainable.includes('value_head.weight') && trainable.includes('value_head.bias'));
  assert.ok(!trainable.includes('tok_emb.weight'));
  const trainer = Trainer.create({ model: lora, seed: 1, optimizer: { lr: 1e-2 } });
  const algorithm = parseRunConfig({ task: 'add2', algorithm: { advantage: 'gae' } }).algorithm;
  const [old] = await trainer.values([[1, 2, 3, 4]]);
  const seq = { tokens: [1, 2, 3, 4], lossMask: [0, 1, 1], oldLogprobs: [0, -1, -1], advantages: [0, 1, 1], oldValues: Array.from(old), returns: [0, 1, 1] };
  await trainer.trainStep([seq], await resolvePolicyLoss(algorithm));
  const w = await trainer.exportWeights();
  assert.ok(w['value_head.bias'][0] > 0, 'the bias moved toward the return 1');
  assert.ok(!('tok_emb.weight' in w), 'a LoRA version holds the adapters and the value head only');
  trainer.dispose();
});

test('algorithm.critic.lr: the value head has its own learning rate (default 10x train.lr) under the same schedule; one step moves it by its lr, the rest by theirs', async () => {
  assert.equal(criticLearningRate(parseRunConfig({ task: 'add2', algorithm: { advantage: 'gae' }, train: { lr: 1e-3 } })), 1e-2);
  assert.equal(criticLearningRate(parseRunConfig({ task: 'add2', algorithm: { advantage: 'gae', critic: { lr: 3e-3 } } })), 3e-3);
  assert.equal(criticLearningRate(parseRunConfig({ task: 'add2' })), undefined);
  assert.throws(() => parseRunConfig({ task: 'add2', algorithm: { advantage: 'gae', critic: { lr: 0 } } }), /algorithm\.critic\.lr/);
  // Warmup over 2 steps: the first step runs at half of each peak (1e-3 -> 5e-4, 2e-2 -> 1e-2).
  const trainer = Trainer.create({ model: MODEL, seed: 2, optimizer: { lr: 1e-3 }, valueHeadLr: 2e-2, schedule: { kind: 'constant', warmupSteps: 2 } });
  const algorithm = parseRunConfig({ task: 'add2', algorithm: { advantage: 'gae' } }).algorithm;
  const [old] = await trainer.values([[1, 2, 3, 4]]);
  const before = await trainer.exportWeights();
  const seq = { tokens: [1, 2, 3, 4], lossMask: [0, 1, 1], oldLogprobs: [0, -1, -1], advantages: [0, 1, -1], oldValues: Array.from(old), returns: [0, 1, 1] };
  const m = await trainer.trainStep([seq], await resolvePolicyLoss(algorithm));
  assert.equal(m.lr, 5e-4);
  assert.equal(m.valueHeadLr, 1e-2);
  const after = await trainer.exportWeights();
  // Adam's first step moves every parameter with a gradient by lr * |g| / (|g| + eps): its lr, at most.
  const moved = (names: string[]) => Math.max(...names.flatMap((n) => Array.from(after[n], (x, i) => Math.abs(x - before[n][i]))));
  const head = ['value_head.weight', 'value_head.bias'];
  const rest = Object.keys(before).filter((n) => !head.includes(n));
  assert.ok(Math.abs(moved(head) - 1e-2) < 1e-5, `the value head moved by ${moved(head)}, expected its lr 1e-2`);
  assert.ok(Math.abs(moved(rest) - 5e-4) < 1e-6, `the policy moved by ${moved(rest)}, expected its lr 5e-4`);
  // A mid-run change of the learning rates (setHyperparameters) reaches the value head too.
  trainer.setLearningRate(1e-3, { kind: 'constant' }, 4e-2);
  assert.deepEqual(trainer.learningRateSchedule, { lr: 1e-3, schedule: { kind: 'constant' }, valueHeadLr: 4e-2 });
  assert.equal((await trainer.trainStep([seq], await resolvePolicyLoss(algorithm))).valueHeadLr, 4e-2);
  assert.throws(() => Trainer.create({ model: MODEL, optimizer: { lr: 1e-3 }, valueHeadLr: -1 }), /valueHeadLr must be > 0/);
  trainer.dispose();
});

test('PPO with a critic: GAE from the trainer\'s values, clipped value loss falls, explained variance rises', async () => {
  const trainer = Trainer.create({ model: MODEL, seed: 3, optimizer: { lr: 3e-3 }, valueHeadLr: 3e-2, maxGradNorm: 10 });
  const algorithm = parseRunConfig({ task: 'add2', algorithm: { advantage: 'gae', critic: { gamma: 1, lambda: 1, vf_coef: 1, value_clip: 10 } } }).algorithm;
  const critic = criticOf(algorithm)!;
  const loss = await resolvePolicyLoss(algorithm);
  assert.match(loss.name, /\+value$/);
  const history: Array<{ valueLoss: number; ev: number }> = [];
  for (let step = 0; step < 25; step++) {
    const tokens = samples(await trainer.logprobs(samples(Array.from({ length: 8 }, () => new Float32Array(5))).map((s) => [...s.promptTokens, ...s.responseTokens])));
    const { sequences, metrics } = await criticSequences((q) => trainer.values(q), critic, algorithm, tokens, 0);
    assert.equal(sequences.length, 8);
    // Per-token advantages [B, T]: one per target, not one per sample.
    assert.equal((sequences[0].advantages as Float32Array).length, 5);
    const m = await trainer.trainStep(sequences, loss);
    history.push({ valueLoss: m.lossMetrics.valueLoss, ev: metrics.critic_explained_var });
  }
  const first = history[0];
  const last = history[history.length - 1];
  // A fresh (zero) head predicts 0: the value loss starts at 0.5 * mean(R^2) = 0.5 * 4/8 = 0.25 with gamma = lambda = 1.
  assert.ok(Math.abs(first.valueLoss - 0.25) < 1e-6, `first value loss ${first.valueLoss}`);
  assert.ok(last.valueLoss < first.valueLoss * 0.5, `value loss ${first.valueLoss} -> ${last.valueLoss}`);
  assert.ok(last.ev > first.ev + 0.3, `explained variance ${first.ev} -> ${last.ev}`);
  const weights = await trainer.exportWeights();
  assert.ok(weights['value_head.weight'].some((x) => x !== 0), 'the value head trained and is in the exported (published) weights');
  trainer.dispose();
});

test('algorithm.critic is validated and only goes with advantage "gae"', () => {
  assert.throws(() => parseRunConfig({ task: 'add2', algorithm: { critic: {} } }), /critic.*set advantage to "gae"/s);
  assert.throws(() => parseRunConfig({ task: 'add2', algorithm: { advantage: 'gae', critic: { lambda: 2 } } }), /algorithm\.critic\.lambda: Too big/);
  assert.throws(() => parseRunConfig({ task: 'add2', algorithm: { advantage: 'gae', critic: { lamda: 0.9 } } }), /lamda/);
  assert.deepEqual(criticOf(parseRunConfig({ task: 'add2', algorithm: { advantage: 'gae' } }).algorithm), { gamma: 1, lambda: 0.95, vf_coef: 0.5, value_clip: 0.2, whiten: true });
});

test('the ONNX rollout engine generates from a policy with a value head the same tokens as without it', async () => {
  const withHead = await RolloutEngine.create({ ...MODEL, contextLength: 16 }, { intraOpNumThreads: 1, maxBatchSize: 2 });
  const without = await RolloutEngine.create({ ...TINY_MODEL, contextLength: 16 }, { intraOpNumThreads: 1, maxBatchSize: 2 });
  try {
    const weights = initWeights({ ...MODEL, contextLength: 16 }, 5);
    withHead.setWeights(1, weights);
    const { ['value_head.weight']: _w, ['value_head.bias']: _b, ...policy } = weights;
    without.setWeights(1, policy);
    const params = { maxNewTokens: 4, seed: 7 };
    assert.deepEqual(await withHead.generate([[1, 2, 3]], params), await without.generate([[1, 2, 3]], params));
  } finally {
    await withHead.release();
    await without.release();
  }
});

test('a policy checkpoint without a value head loads into a model with one: the head starts at zero, the rest as saved', async () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-critic-ckpt-'));
  try {
    const policy = initWeights(TINY_MODEL, 9);
    const info = await publishCheckpoint(root, 0, TINY_MODEL, policy);
    const loaded = await loadCheckpoint(info.dir, { model: MODEL });
    assert.deepEqual(loaded.info.model, MODEL);
    assert.deepEqual(Array.from(loaded.weights['value_head.weight']), new Array(64).fill(0));
    assert.deepEqual(Array.from(loaded.weights['value_head.bias']), [0]);
    assert.deepEqual(loaded.weights['tok_emb.weight'], policy['tok_emb.weight']);
    // The other way round is still a mismatch: a critic's checkpoint is not silently stripped.
    const critic = await publishCheckpoint(root, 1, MODEL, initWeights(MODEL, 9));
    await assert.rejects(loadCheckpoint(critic.dir, { model: TINY_MODEL }), /valueHead/);
  } finally {
    fs.rmSync(root, { recursive: true, force: true });
  }
});
