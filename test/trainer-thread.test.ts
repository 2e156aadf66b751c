// The trainer thread (training/trainer-thread.ts): a RemoteTrainer computes what a Trainer in the
// same process computes (metrics, weights, log-probs, optimizer state), keeps the caller's event
// loop free while it computes, brings the trainer's errors back as their class, and a dead thread
// fails its handles with TrainerThreadExitedError while the next trainer starts a new one.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { parseRunConfig } from '../config/run-config';
import { loadTfjsBackend } from '../engines/backends';
import { seededRandom } from '../config/seeds';
import { TINY_MODEL, type ModelConfig } from '../engines/model';
import { NonFiniteUpdateError, Trainer, type TrainSequence } from '../engines/trainer';
import { resolvePolicyLoss } from '../training/losses';
import { RemoteTrainer, stopTrainerThread, trainerThreadInfo, TrainerThreadExitedError } from '../training/trainer-thread';

const MODEL: ModelConfig = { ...TINY_MODEL, contextLength: 16 };
const ALGORITHM = parseRunConfig({ task: 'add2' }).algorithm;

before(async () => {
  await loadTfjsBackend({ kind: 'cpu' });
});

after(async () => {
  await stopTrainerThread();
});

function batch(seed: number, count: number): TrainSequence[] {
  const rand = seededRandom(seed);
  return Array.from({ length: count }, (_, i) => {
    const n = 6 + Math.floor(rand() * 8);
    const tokens = Array.from({ length: n }, () => Math.floor(rand() * MODEL.vocabSize));
    return { tokens, lossMask: tokens.slice(1).map((_, t) => (t >= 2 ? 1 : 0)), advantages: i % 2 ? 1 : -1, oldLogprobs: new Float32Array(n - 1).fill(-2.5) };
  });
}

test('a RemoteTrainer computes what a local Trainer computes', async () => {
  const options = { model: MODEL, seed: 3, optimizer: { lr: 1e-3 }, microBatchSize: 8 };
  const local = Trainer.create(options);
  const remote = await RemoteTrainer.create(options);
  const info = await trainerThreadInfo();
  assert.ok(info && info.intraOpThreads === 1, 'a tiny model gets one intra-op thread');
  try {
    const loss = await resolvePolicyLoss(ALGORITHM);
    for (let s = 0; s < 3; s++) {
      const seqs = batch(s, 12);
      const a = await local.trainStep(seqs, loss);
      const b = await remote.trainStep(seqs, ALGORITHM);
      assert.equal(b.step, s + 1);
      assert.equal(remote.step, s + 1);
      assert.ok(Math.abs(a.loss - b.loss) < 1e-5, `step ${s}: loss ${a.loss} vs ${b.loss}`);
      assert.equal(a.microBatches, b.microBatches);
    }
    const [wa, wb] = [await local.exportWeights(), await remote.exportWeights()];
    for (const name of Object.keys(wa)) wa[name].forEach((v, i) => assert.ok(Math.abs(v - wb[name][i]) < 1e-5, `${name}[${i}]`));
    const [la, lb] = [await local.logprobs([[1, 2, 3, 4], [5, 6]]), await remote.logprobs([[1, 2, 3, 4], [5, 6]])];
    assert.deepEqual(lb.map((r) => r.length), [3, 1]);
    la.forEach((row, i) => row.forEach((v, t) => assert.ok(Math.abs(v - lb[i][t]) < 1e-5)));
    // Optimizer state round-trips through the thread: a new trainer resumes at the same step.
    const state = await remote.exportOptimizerState();
    const resumed = await RemoteTrainer.create({ ...options, weights: wb });
    await resumed.importOptimizerState(state);
    assert.equal(resumed.step, 3);
    await resumed.dispose();
  } finally {
    local.dispose();
    await remote.dispose();
  }
});

test('the caller\'s event loop runs while the thread computes; errors come back as their class', async () => {
  const remote = await RemoteTrainer.create({ model: { ...MODEL, dModel: 256, dFF: 1024, nLayers: 4 }, seed: 1, optimizer: { lr: 1e-3 }, microBatchSize: 256 });
  try {
    let ticks = 0;
    const timer = setInterval(() => (ticks += 1), 5);
    const started = performance.now();
    await remote.trainStep(batch(7, 256), ALGORITHM);
    const ms = performance.now() - started;
    clearInterval(timer);
    // A blocked loop would tick once at most; a free one about every 5 ms.
    assert.ok(ticks >= Math.min(10, ms / 20), `${ticks} timer ticks during a ${ms.toFixed(0)} ms step`);
    await assert.rejects(remote.trainStep([{ tokens: [1, 2], lossMask: [0] }], ALGORITHM), /no sequence has a loss token/);
    const bad = batch(8, 2).map((s) => ({ ...s, advantages: Number.NaN }));
    await assert.rejects(remote.trainStep(bad, ALGORITHM), (err: Error) => err instanceof NonFiniteUpdateError);
  } finally {
    await remote.dispose();
  }
});

test('a dead thread fails its trainers with TrainerThreadExitedError; the next trainer starts a new thread', async () => {
  const before = await RemoteTrainer.create({ model: MODEL, seed: 1, optimizer: { lr: 1e-3 } });
  await stopTrainerThread();
  assert.ok(before.lost);
  await assert.rejects(before.exportWeights(), TrainerThreadExitedError);
  await before.dispose();
  const next = await RemoteTrainer.create({ model: MODEL, seed: 1, optimizer: { lr: 1e-3 } });
  assert.ok(!next.lost);
  assert.equal((await next.trainStep(batch(9, 4), ALGORITHM)).step, 1);
  await next.dispose();
});
