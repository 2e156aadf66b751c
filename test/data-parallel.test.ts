// Data-parallel training simulated on the CPU (training/data-parallel.ts, docs/scaling.md): a step's
// batch split across ranks, each rank's gradient weighted by the whole batch's totals, a ring
// all-reduce, the same AdamW update on every rank. Checked against one trainer's full-batch step on
// the tiny model: the reduced gradient and the weights after the update agree within float32 noise
// (bitwise when the single trainer's micro-batches are the shards), and the ranks end identical.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { loadTfjsBackend } from '../engines/backends';
import { seededRandom } from '../config/seeds';
import { initWeights, TINY_MODEL, type ModelConfig, type PolicyWeights } from '../engines/model';
import { Trainer, type TrainerOptions, type TrainingLoss, type TrainSequence } from '../engines/trainer';
import { contiguousPartition, dataParallelStep, localRank, ringAllReduce, shardBounds, type ShardBounds } from '../training/data-parallel';
import { ThreadRank } from '../training/data-parallel-thread';
import { policyLoss, sftLoss } from '../training/losses';

const MODEL: ModelConfig = { ...TINY_MODEL, contextLength: 24 };
const WEIGHTS = initWeights(MODEL, 7);
const OPTIONS: TrainerOptions = { model: MODEL, weights: WEIGHTS, optimizer: { lr: 1e-3, weightDecay: 0.01 }, maxGradNorm: 0.5 };
// Float32 noise: the same sums taken in another order (other micro-batches, other padding).
const GRADIENT_TOLERANCE = 1e-5; // relative to the gradient's largest entry
// Absolute, after one AdamW step of lr 1e-3: Adam's first step moves a weight by lr * g / (|g| + eps),
// which turns a noise d in a gradient entry near 0 into up to lr * d / eps (eps 1e-8): 2% of lr
// (measured: up to 2e-6 on native TensorFlow, 5.4e-6 on wasm).
const WEIGHT_TOLERANCE = 2e-5;

before(async () => {
  await loadTfjsBackend({ kind: 'cpu' });
});

const trainers: Trainer[] = [];
after(() => trainers.forEach((t) => t.dispose()));
function trainer(extra: Partial<TrainerOptions> = {}): Trainer {
  const t = Trainer.create({ ...OPTIONS, ...extra });
  trainers.push(t);
  return t;
}

/** `count` sequences of 4-20 tokens, loss from target 2 on, with advantages and old log-probs (PPO). */
function batch(seed: number, count: number, lengths?: number[]): TrainSequence[] {
  const rand = seededRandom(seed);
  return Array.from({ length: count }, (_, i) => {
    const n = lengths?.[i] ?? 4 + Math.floor(rand() * 17);
    const tokens = Array.from({ length: n }, () => Math.floor(rand() * MODEL.vocabSize));
    return { tokens, lossMask: tokens.slice(1).map((_, t) => (t >= 2 ? 1 : 0)), advantages: rand() * 2 - 1, oldLogprobs: tokens.slice(1).map(() => -2.8 + rand() * 0.4) };
  });
}

function maxAbs(a: PolicyWeights): number {
  return Math.max(...Object.values(a).map((v) => v.reduce((m, x) => Math.max(m, Math.abs(x)), 0)));
}
function maxAbsDiff(a: PolicyWeights, b: PolicyWeights): number {
  let worst = 0;
  for (const n of Object.keys(a)) a[n].forEach((v, i) => (worst = Math.max(worst, Math.abs(v - b[n][i]))));
  return worst;
}

/** The ranks' reduced gradient of `sequences` split by `shards` (what dataParallelStep applies). */
async function reducedGradient(ranks: Trainer[], loss: TrainingLoss, sequences: TrainSequence[], shards: ShardBounds): Promise<PolicyWeights> {
  const totals = { sequences: sequences.length, lossTokens: sequences.reduce((n, s) => n + Array.from(s.lossMask).filter((m) => m > 0).length, 0) };
  const parts = await Promise.all(ranks.map((r, i) => r.gradients(sequences.slice(shards[i].start, shards[i].end), loss, { batch: totals })));
  const names = Object.keys(parts[0].gradients);
  const { reduced } = ringAllReduce(names.length ? parts.map((p) => Float32Array.from(names.flatMap((n) => Array.from(p.gradients[n])))) : []);
  const out: PolicyWeights = {};
  let offset = 0;
  for (const n of names) {
    out[n] = reduced[0].slice(offset, offset + parts[0].gradients[n].length);
    offset += out[n].length;
  }
  return out;
}

test('shards: whole prompt groups, contiguous, balanced by tokens, the same on every call', () => {
  assert.deepEqual(contiguousPartition([1, 1, 1, 1], 2), [0, 2, 4]);
  assert.deepEqual(contiguousPartition([5, 1, 1, 1, 1, 1], 2), [0, 1, 6]);
  assert.deepEqual(contiguousPartition([3], 3), [0, 0, 1, 1]);
  const sequences = batch(1, 12);
  const groups = sequences.map((_, i) => Math.floor(i / 4)); // 3 prompts x 4 samples
  const shards = shardBounds(sequences, 2, groups);
  assert.deepEqual(shards, shardBounds(sequences, 2, groups), 'a pure function: a retried rank gets its shard again');
  assert.equal(shards[0].start, 0);
  assert.equal(shards[1].end, 12);
  assert.equal(shards[0].end % 4, 0, 'a prompt group is never split');
  assert.deepEqual(shardBounds(sequences.slice(0, 1), 3), [{ start: 0, end: 0 }, { start: 0, end: 1 }, { start: 1, end: 1 }]);
});

test('ring all-reduce: every rank ends with the same sum, each sending 2(R-1)/R of the vector', () => {
  for (const R of [2, 3, 4]) {
    const rand = seededRandom(R);
    const n = 1200;
    const vectors = Array.from({ length: R }, () => Float32Array.from({ length: n }, () => rand() * 2 - 1));
    const { reduced, bytesSent } = ringAllReduce(vectors);
    for (let i = 0; i < n; i++) {
      const exact = vectors.reduce((s, v) => s + v[i], 0);
      assert.ok(Math.abs(reduced[0][i] - exact) < 1e-6, `R=${R} [${i}]`);
    }
    for (const r of reduced) assert.deepEqual(r, reduced[0], 'the ranks hold identical results');
    for (const b of bytesSent) assert.equal(b, (2 * (R - 1)) / R * n * 4);
  }
});

test('2 ranks, even split: the reduced gradient and the weights after one AdamW step match one trainer on the whole batch; the ranks end identical', async (t) => {
  const sequences = batch(2, 8);
  for (const loss of [sftLoss(), policyLoss({ algorithm: 'ppo' })]) {
    const shards = [{ start: 0, end: 4 }, { start: 4, end: 8 }];
    const full = await trainer().gradients(sequences, loss);
    const reduced = await reducedGradient([trainer(), trainer()], loss, sequences, shards);
    const gradientDiff = maxAbsDiff(full.gradients, reduced);
    // A single trainer whose micro-batches are the shards sums the same parts in the same order: bitwise.
    const sameMicroBatches = await trainer({ microBatchSize: 4 }).gradients(sequences, loss);
    const bitwise = maxAbsDiff(sameMicroBatches.gradients, reduced);
    const [single, singleSame] = [trainer(), trainer({ microBatchSize: 4 })];
    const ranks = [trainer(), trainer()];
    const singleStep = await single.trainStep(sequences, loss);
    await singleSame.trainStep(sequences, loss);
    const step = await dataParallelStep(ranks.map((r) => localRank(r, loss)), sequences, { shards });
    const [w, wSame] = await Promise.all([single.exportWeights(), singleSame.exportWeights()]);
    const [w0, w1] = await Promise.all(ranks.map((r) => r.exportWeights()));
    const weightDiff = maxAbsDiff(w, w0);
    t.diagnostic(`${loss.name}: max |grad| ${maxAbs(full.gradients).toExponential(2)}, 2-rank vs full-batch max |diff| ${gradientDiff.toExponential(2)} (same micro-batches: ${bitwise}); weights after AdamW max |diff| ${weightDiff.toExponential(2)} (same micro-batches: ${maxAbsDiff(wSame, w0)}); loss ${step.loss.toFixed(6)} vs ${singleStep.loss.toFixed(6)}; grad norm ${step.gradNorm.toFixed(6)} vs ${singleStep.gradNorm.toFixed(6)}`);
    assert.ok(gradientDiff <= GRADIENT_TOLERANCE * maxAbs(full.gradients), `${loss.name}: gradient differs by ${gradientDiff}`);
    assert.equal(bitwise, 0, `${loss.name}: the shards as micro-batches give the same bits`);
    assert.ok(weightDiff <= WEIGHT_TOLERANCE, `${loss.name}: weights differ by ${weightDiff}`);
    assert.equal(maxAbsDiff(wSame, w0), 0, `${loss.name}: the same update, bit for bit, as one trainer whose micro-batches are the shards`);
    assert.equal(maxAbsDiff(w0, w1), 0, 'both ranks hold the same weights');
    assert.ok(Math.abs(step.loss - singleStep.loss) < 1e-5 && Math.abs(step.gradNorm - singleStep.gradNorm) < 1e-5 * singleStep.gradNorm);
    assert.equal(step.step, 1);
    assert.ok(singleStep.gradClipped, 'the global norm is clipped after the all-reduce, as one trainer clips its own');
  }
});

test('uneven split: 2 short sequences on one rank, 5 long ones on the other, weighted by their tokens', async (t) => {
  const sequences = batch(3, 7, [5, 6, 18, 20, 19, 17, 20]);
  const shards = [{ start: 0, end: 2 }, { start: 2, end: 7 }];
  const loss = policyLoss({ algorithm: 'ppo' });
  const full = await trainer().gradients(sequences, loss);
  const reduced = await reducedGradient([trainer(), trainer()], loss, sequences, shards);
  const gradientDiff = maxAbsDiff(full.gradients, reduced);
  const single = trainer();
  const ranks = [trainer(), trainer()];
  await single.trainStep(sequences, loss);
  const step = await dataParallelStep(ranks.map((r) => localRank(r, loss)), sequences, { shards });
  const w = await single.exportWeights();
  const [w0, w1] = await Promise.all(ranks.map((r) => r.exportWeights()));
  const weightDiff = maxAbsDiff(w, w0);
  t.diagnostic(`loss tokens per rank ${step.shards.map((s) => s.lossTokens).join(' / ')}; gradient max |diff| ${gradientDiff.toExponential(2)} of max |grad| ${maxAbs(full.gradients).toExponential(2)}; weights max |diff| ${weightDiff.toExponential(2)}`);
  assert.deepEqual(step.shards.map((s) => s.lossTokens), [2 + 3, 15 + 17 + 16 + 14 + 17]);
  assert.ok(gradientDiff <= GRADIENT_TOLERANCE * maxAbs(full.gradients), `gradient differs by ${gradientDiff}`);
  assert.ok(weightDiff <= WEIGHT_TOLERANCE, `weights differ by ${weightDiff}`);
  assert.equal(maxAbsDiff(w0, w1), 0);
  // Averaging the shards' own mean gradients unweighted would be wrong by far more than noise.
  const [a, b] = await Promise.all(shards.map(({ start, end }) => trainer().gradients(sequences.slice(start, end), loss)));
  const unweighted: PolicyWeights = Object.fromEntries(Object.keys(a.gradients).map((n) => [n, a.gradients[n].map((x, i) => (x + b.gradients[n][i]) / 2)]));
  assert.ok(maxAbsDiff(full.gradients, unweighted) > 100 * GRADIENT_TOLERANCE * maxAbs(full.gradients));
});

test('ranks on worker threads: two steps equal one trainer\'s, and a retried rank recomputes the same shard and gradient', async (t) => {
  const loss = { kind: 'policy' as const, options: { algorithm: 'ppo' as const } };
  const ranks = await Promise.all([ThreadRank.start(OPTIONS, loss), ThreadRank.start(OPTIONS, loss)]);
  try {
    const single = trainer();
    let worst = 0;
    for (const seed of [4, 5]) {
      const sequences = batch(seed, 9);
      const groups = sequences.map((_, i) => Math.floor(i / 3));
      await single.trainStep(sequences, policyLoss(loss.options));
      const step = await dataParallelStep(ranks, sequences, { groups });
      assert.equal(step.shards.length, 2);
      const [w0, w1] = await Promise.all(ranks.map((r) => r.exportWeights()));
      assert.equal(maxAbsDiff(w0, w1), 0, 'both ranks hold the same weights');
      worst = Math.max(worst, maxAbsDiff(await single.exportWeights(), w0));
    }
    t.diagnostic(`threads, 2 steps: weights max |diff| vs one trainer ${worst.toExponential(2)}`);
    assert.ok(worst <= 2 * WEIGHT_TOLERANCE, `weights differ by ${worst}`);
    // A rank that died after its gradient and is retried: the same shard from the same recorded batch,
    // the same gradient bit for bit, so the all-reduce (and the version) comes out the same.
    const sequences = batch(6, 9);
    const shard = shardBounds(sequences, 2)[1];
    const part = sequences.slice(shard.start, shard.end);
    const options = { batch: { sequences: 9, lossTokens: sequences.reduce((n, s) => n + Array.from(s.lossMask).filter((m) => m > 0).length, 0) } };
    const first = await ranks[1].gradients(part, options);
    const retried = await ranks[1].gradients(sequences.slice(shardBounds(sequences, 2)[1].start), options);
    assert.equal(maxAbsDiff(first.gradients, retried.gradients), 0);
  } finally {
    await Promise.all(ranks.map((r) => r.close()));
  }
});
