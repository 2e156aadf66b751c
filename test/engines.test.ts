// The trainer (tfjs) and the rollout engine (ONNX Runtime) run the same model definition: their
// log-probs must agree, before and after training and weight sync, and the policy must really learn.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { loadTfjsBackend } from '../engines/backends';
import { checkpointDir } from '../engines/checkpoint';
import { seededRandom } from '../config/seeds';
import { initWeights, TINY_MODEL, type ModelConfig, type PolicyWeights } from '../engines/model';
import { RolloutEngine, type GeneratedSample } from '../engines/rollout';
import { Trainer, trainSequenceFromSample } from '../engines/trainer';
import { policyLoss, sftLoss } from '../training/losses';
import { add2Tokenizer, add2TrainPrompts } from '../envs/add2';

const MODEL: ModelConfig = TINY_MODEL;
const TOLERANCE = 1e-5;
let root: string;

before(async () => {
  await loadTfjsBackend({ kind: 'cpu' });
  root = await mkdtemp(path.join(tmpdir(), 'relax-engines-'));
});

after(async () => {
  await rm(root, { recursive: true, force: true });
});

function randomPrompts(seed: number, count: number, maxLength: number): number[][] {
  const rand = seededRandom(seed);
  return Array.from({ length: count }, () => Array.from({ length: 1 + Math.floor(rand() * maxLength) }, () => Math.floor(rand() * MODEL.vocabSize)));
}

/** Max |rollout log-prob - trainer log-prob| over every generated token of every sample. */
async function maxLogprobDiff(trainer: Trainer, prompts: number[][], samples: GeneratedSample[]): Promise<number> {
  const rows = await trainer.logprobs(prompts.map((p, i) => [...p, ...samples[i].tokens]));
  let worst = 0;
  samples.forEach((s, i) => {
    assert.equal(s.logprobs.length, s.tokens.length);
    s.tokens.forEach((_, j) => {
      worst = Math.max(worst, Math.abs(s.logprobs[j] - rows[i][prompts[i].length - 1 + j]));
    });
  });
  return worst;
}

/** Init weights with every non-LayerNorm tensor multiplied by `scale` (sharper, less uniform distributions). */
function scaledInit(seed: number, scale: number): PolicyWeights {
  const w = initWeights(MODEL, seed);
  for (const [name, values] of Object.entries(w)) if (!name.includes('.ln') && !name.startsWith('ln_')) values.forEach((v, i) => (values[i] = v * scale));
  return w;
}

/** Rollout vs trainer log-probs at v0, after a PPO step synced through a checkpoint (v1), and after an in-process sync (v2). */
async function checkEqualityAcrossSync(label: string, scale: number): Promise<void> {
  const trainer = Trainer.create({ model: MODEL, weights: scaledInit(11, scale), optimizer: { lr: 3e-2 }, maxGradNorm: 10 });
  const reference = Trainer.create({ model: MODEL, weights: await trainer.exportWeights(), optimizer: { lr: 1e-3 } });
  const engine = await RolloutEngine.create(MODEL, { intraOpNumThreads: 1, maxBatchSize: 8 });
  try {
    engine.setWeights(0, await trainer.exportWeights());
    // Varied prompt lengths exercise left padding; stop token 2 ends some samples early, which
    // exercises dropping finished rows from the batch and its cache.
    const prompts = randomPrompts(5, 20, 12);
    const params = { maxNewTokens: 16, temperature: 1, stopTokens: [2], seed: 1 };
    const before = await engine.generate(prompts, params);
    assert.ok(before.every((s) => s.policyVersion === 0));
    assert.ok(before.some((s) => s.finishReason === 'stop') && before.some((s) => s.finishReason === 'length'), 'samples end both ways');
    const diffBefore = await maxLogprobDiff(trainer, prompts, before);
    console.log(`[engines] ${label}: max |logprob(onnx) - logprob(tfjs)| at v0: ${diffBefore.toExponential(2)}`);
    assert.ok(diffBefore <= TOLERANCE, `v0 max abs diff ${diffBefore}`);
    const lps = before.flatMap((s) => s.logprobs);
    console.log(`[engines] ${label}: sampled-token log-probs range ${Math.min(...lps).toFixed(2)} .. ${Math.max(...lps).toFixed(2)}`);

    // One PPO step on those samples, published as version 1 and loaded by the engine from disk.
    const rand = seededRandom(9);
    const batch = before.map((s, i) => trainSequenceFromSample(prompts[i], s, { advantage: rand() < 0.5 ? -1 : 1 }));
    const metrics = await trainer.trainStep(batch, policyLoss({ algorithm: 'ppo' }));
    assert.ok(Number.isFinite(metrics.loss) && metrics.gradNorm > 0);
    assert.ok(Math.abs(metrics.ratioMean! - 1) < 1e-4, `on-policy ratio is 1, got ${metrics.ratioMean}`);
    const info = await trainer.publish(path.join(root, label), 1);
    assert.equal(info.dir, checkpointDir(path.join(root, label), 1));
    const loaded = await engine.loadCheckpoint(info.dir, { sha256: info.sha256 });
    assert.equal(loaded.policyVersion, 1);
    assert.equal(engine.policyVersion, 1);

    const afterSync = await engine.generate(prompts, { ...params, seed: 2 });
    assert.ok(afterSync.every((s) => s.policyVersion === 1), 'every sample generated after the sync records version 1');
    const diffAfter = await maxLogprobDiff(trainer, prompts, afterSync);
    console.log(`[engines] ${label}: max |logprob(onnx) - logprob(tfjs)| at v1: ${diffAfter.toExponential(2)}`);
    assert.ok(diffAfter <= TOLERANCE, `v1 max abs diff ${diffAfter}`);
    // The engine really used v1: its log-probs are far from what v0 gives the same tokens.
    const underV0 = await maxLogprobDiff(reference, prompts, afterSync);
    assert.ok(underV0 > 1e-2, `v0 would give different log-probs (max diff ${underV0})`);

    // In-process sync (no files): another step, then the trainer's tensors straight into the engine.
    await trainer.trainStep(batch, policyLoss({ algorithm: 'ppo' }));
    engine.setWeights(2, await trainer.exportWeights());
    const inProcess = await engine.generate(prompts, { ...params, seed: 3 });
    assert.ok(inProcess.every((s) => s.policyVersion === 2));
    const diff2 = await maxLogprobDiff(trainer, prompts, inProcess);
    assert.ok(diff2 <= TOLERANCE, `v2 max abs diff ${diff2}`);
  } finally {
    await engine.release();
    trainer.dispose();
    reference.dispose();
  }
}

test('ONNX Runtime prefill + KV-cache decode log-probs equal the tfjs forward pass, before and after a train step + sync', () =>
  checkEqualityAcrossSync('default init', 1));

test('the same equality holds for sharp (non-uniform) policies: weights x8', () => checkEqualityAcrossSync('weights x8', 8));

test('a generation that started before a weight sync finishes with the version it started with', async () => {
  const trainer = Trainer.create({ model: MODEL, seed: 3, optimizer: { lr: 1e-3 } });
  const engine = await RolloutEngine.create(MODEL, { intraOpNumThreads: 1 });
  try {
    engine.setWeights(4, await trainer.exportWeights());
    const running = engine.generate(randomPrompts(2, 8, 6), { maxNewTokens: 20, seed: 0 });
    engine.setWeights(5, await trainer.exportWeights());
    assert.ok((await running).every((s) => s.policyVersion === 4));
    assert.ok((await engine.generate([[1]], { maxNewTokens: 2 })).every((s) => s.policyVersion === 5));
  } finally {
    await engine.release();
    trainer.dispose();
  }
});

test('SFT on a tiny fixed batch learns it: the loss falls and greedy rollouts reproduce the answers', async () => {
  const tokenizer = add2Tokenizer();
  const model: ModelConfig = { ...TINY_MODEL, vocabSize: tokenizer.vocabSize };
  const examples = add2TrainPrompts(7, 8).map((p) => {
    const prompt = [tokenizer.bosId, ...tokenizer.encode(p.text)];
    const answer = [...tokenizer.encode(p.answer), tokenizer.eosId];
    const tokens = [...prompt, ...answer];
    return { prompt, answer, sequence: { tokens, lossMask: tokens.slice(1).map((_, t) => (t >= prompt.length - 1 ? 1 : 0)) } };
  });
  const trainer = Trainer.create({ model, seed: 1, optimizer: { lr: 3e-3 }, schedule: { kind: 'constant', warmupSteps: 5 } });
  const engine = await RolloutEngine.create(model, { intraOpNumThreads: 1 });
  try {
    const losses: number[] = [];
    for (let step = 0; step < 120; step++) {
      losses.push((await trainer.trainStep(examples.map((e) => e.sequence), sftLoss())).loss);
      if (losses[losses.length - 1] < 0.02) break;
    }
    console.log(`[engines] SFT loss ${losses[0].toFixed(3)} -> ${losses[losses.length - 1].toFixed(4)} in ${losses.length} steps`);
    assert.ok(losses[losses.length - 1] < 0.1 * losses[0], `loss ${losses[0]} -> ${losses[losses.length - 1]}`);
    engine.setWeights(1, await trainer.exportWeights());
    const samples = await engine.generate(
      examples.map((e) => e.prompt),
      { maxNewTokens: 6, greedy: true, stopTokens: [tokenizer.eosId] },
    );
    samples.forEach((s, i) => assert.deepEqual(s.tokens, examples[i].answer, `example ${i}`));
  } finally {
    await engine.release();
    trainer.dispose();
  }
});
