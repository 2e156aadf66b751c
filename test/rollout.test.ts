// The rollout engine's sampling contract on real ONNX Runtime sessions.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { seededRandom } from '../config/seeds';
import { initWeights, TINY_MODEL, type ModelConfig, type PolicyWeights } from '../engines/model';
import * as ort from 'onnxruntime-node';
import { GRAPH_NAMES } from '../engines/model-onnx';
import { RolloutEngine, sampleToken, sharedPrefixLength, type SamplingParams } from '../engines/rollout';
import { KvCache } from '../engines/rollout-cache';

const MODEL: ModelConfig = { ...TINY_MODEL, contextLength: 16 };
let engine: RolloutEngine;
let weights: PolicyWeights;

before(async () => {
  engine = await RolloutEngine.create(MODEL, { intraOpNumThreads: 1, maxBatchSize: 16 });
  // Larger-than-init weights give a peaked, non-uniform next-token distribution.
  weights = initWeights(MODEL, 21);
  for (const [name, values] of Object.entries(weights)) if (name.endsWith('.weight') && !name.includes('ln')) values.forEach((v, i) => (values[i] = v * 8));
  engine.setWeights(3, weights);
});

after(async () => {
  await engine.release();
});

const prompts = [[1, 4, 5], [1], [1, 7, 7, 7, 7, 8], [3, 3]];

test('the same seed reproduces samples; another seed changes them', async () => {
  const params: SamplingParams = { maxNewTokens: 8, seed: 42 };
  const a = await engine.generate(prompts, params);
  const b = await engine.generate(prompts, params);
  const c = await engine.generate(prompts, { ...params, seed: 43 });
  assert.deepEqual(a, b);
  assert.notDeepEqual(a.map((s) => s.tokens), c.map((s) => s.tokens));
  assert.ok(a.every((s) => s.policyVersion === 3));
});

test('a sample does not depend on how prompts are batched', async () => {
  const params: SamplingParams = { maxNewTokens: 8, seed: 7 };
  const batched = await engine.generate(prompts, params);
  const one = await RolloutEngine.create(MODEL, { intraOpNumThreads: 1, maxBatchSize: 1 });
  try {
    one.setWeights(3, weights);
    const single = await one.generate(prompts, params);
    single.forEach((s, i) => {
      assert.deepEqual(s.tokens, batched[i].tokens, `prompt ${i}`);
      s.logprobs.forEach((lp, j) => assert.ok(Math.abs(lp - batched[i].logprobs[j]) < 1e-5, `prompt ${i} token ${j}`));
    });
  } finally {
    await one.release();
  }
});

test('a batch whose prompts take several prefill runs (over 256 prompt tokens) samples what one prompt at a time does', async () => {
  const rand = seededRandom(5);
  // 40 distinct prompts padded to 8 tokens: 320 prompt tokens, prefilled 32 rows per run.
  const many = Array.from({ length: 40 }, (_, i) => [1, ...Array.from({ length: 6 + (i % 2) }, () => 2 + Math.floor(rand() * (MODEL.vocabSize - 2)))]);
  const params: SamplingParams = { maxNewTokens: 6, seed: 11 };
  const wide = await RolloutEngine.create(MODEL, { intraOpNumThreads: 1, maxBatchSize: 64 });
  const one = await RolloutEngine.create(MODEL, { intraOpNumThreads: 1, maxBatchSize: 1 });
  try {
    wide.setWeights(3, weights);
    one.setWeights(3, weights);
    const [batched, single] = [await wide.generate(many, params), await one.generate(many, params)];
    single.forEach((s, i) => {
      assert.deepEqual(batched[i].tokens, s.tokens, `prompt ${i}`);
      s.logprobs.forEach((lp, j) => assert.ok(Math.abs(lp - batched[i].logprobs[j]) < 1e-5, `prompt ${i} token ${j}`));
    });
  } finally {
    await Promise.all([wide.release(), one.release()]);
  }
});

test('a group prefills its prompt once: shared and unshared prefills give the same tokens and log-probs', async () => {
  // GRPO's layout: each prompt several times in a row, prompts of different lengths (so padded).
  const group = [[1, 4, 5], [1, 4, 5], [1, 4, 5], [3, 3], [3, 3], [1, 7, 7, 7, 7, 8], [1, 4, 5]];
  const unshared = await RolloutEngine.create(MODEL, { intraOpNumThreads: 1, maxBatchSize: 16, sharePrompts: false });
  try {
    unshared.setWeights(3, weights);
    for (const params of [{ maxNewTokens: 8, seed: 21 }, { maxNewTokens: 8, seed: 22, topK: 4, topP: 0.9, temperature: 0.7 }, { maxNewTokens: 8, greedy: true }] satisfies SamplingParams[]) {
      const shared = await engine.generate(group, params);
      assert.deepEqual(shared, await unshared.generate(group, params), JSON.stringify(params));
      if (!params.greedy) assert.notDeepEqual(shared[0].tokens, shared[1].tokens, 'samples of one prompt still draw their own tokens');
    }
  } finally {
    await unshared.release();
  }
});

test('a shared prompt prefix is prefilled once: the same tokens and log-probs as prefilling every prompt whole (GPT and llama)', async () => {
  // A chat template's system prompt: 9 tokens every prompt starts with, then prompts of their own
  // lengths (one repeated, as GRPO's groups are).
  const system = [1, 2, 3, 4, 5, 6, 7, 8, 9];
  const batch = [[...system, 4, 5], [...system, 7], [...system, 4, 5], [...system, 11, 12, 13, 14], [...system, 3, 3, 3]];
  assert.equal(sharedPrefixLength(batch), 9);
  assert.equal(sharedPrefixLength([[1, 2], [1, 2]]), 1, 'each prompt keeps a token of its own');
  assert.equal(sharedPrefixLength([[1, 2, 3]]), 0);
  const llama: ModelConfig = { architecture: 'llama', vocabSize: 16, dModel: 32, nLayers: 2, nHeads: 4, nKvHeads: 2, dFF: 48, contextLength: 48, ropeTheta: 10000, rmsNormEps: 1e-5, tieEmbeddings: true };
  for (const model of [{ ...TINY_MODEL, contextLength: 48 }, llama]) {
    const w = initWeights(model, 5);
    for (const [name, values] of Object.entries(w)) if (name.endsWith('.weight') && !name.includes('ln') && !name.includes('norm')) values.forEach((v, i) => (values[i] = v * 8));
    const [prefixed, whole] = await Promise.all([RolloutEngine.create(model, { intraOpNumThreads: 1 }), RolloutEngine.create(model, { intraOpNumThreads: 1, sharePrefix: false })]);
    try {
      for (const e of [prefixed, whole]) e.setWeights(1, w);
      for (const params of [{ maxNewTokens: 10, greedy: true }, { maxNewTokens: 10, seed: 3 }] satisfies SamplingParams[]) {
        const [a, b] = [await prefixed.generate(batch, params), await whole.generate(batch, params)];
        a.forEach((s, i) => {
          assert.deepEqual(s.tokens, b[i].tokens, `${model.architecture ?? 'gpt'} ${JSON.stringify(params)} prompt ${i}`);
          s.logprobs.forEach((lp, j) => assert.ok(Math.abs(lp - b[i].logprobs[j]) < 1e-4, `prompt ${i} token ${j}: ${lp} vs ${b[i].logprobs[j]}`));
        });
        if (!params.greedy) assert.notDeepEqual(a[0].tokens, a[2].tokens, 'a repeated prompt still draws its own tokens');
      }
    } finally {
      await Promise.all([prefixed.release(), whole.release()]);
    }
  }
});

test('greedy: temperature 0, the greedy flag, top-k 1 and a tiny top-p all pick the argmax', async () => {
  const base: SamplingParams = { maxNewTokens: 10 };
  const greedy = await engine.generate(prompts, { ...base, greedy: true, seed: 1 });
  const t0 = await engine.generate(prompts, { ...base, temperature: 0, seed: 2 });
  const k1 = await engine.generate(prompts, { ...base, topK: 1, seed: 3 });
  const p0 = await engine.generate(prompts, { ...base, topP: 1e-6, seed: 4 });
  for (const other of [t0, k1, p0]) assert.deepEqual(other.map((s) => s.tokens), greedy.map((s) => s.tokens));
  // The argmax is the most likely token, so its probability is at least 1/V.
  assert.ok(greedy.every((s) => s.logprobs.every((lp) => lp >= Math.log(1 / MODEL.vocabSize))));
  assert.ok(greedy.every((s) => s.samplingLogprobs.every((lp) => lp === 0)));
  assert.ok(k1.every((s) => s.samplingLogprobs.every((lp) => Math.abs(lp) < 1e-12)), 'top-k 1 samples with probability 1');
});

test('at temperature 1 without truncation the sampling log-probs are the policy log-probs; with it they are larger', async () => {
  const plain = await engine.generate(prompts, { maxNewTokens: 8, seed: 5 });
  plain.forEach((s) => s.logprobs.forEach((lp, j) => assert.ok(Math.abs(lp - s.samplingLogprobs[j]) < 1e-9)));
  const truncated = await engine.generate(prompts, { maxNewTokens: 8, seed: 5, topK: 3, topP: 0.9 });
  truncated.forEach((s) => s.logprobs.forEach((lp, j) => assert.ok(s.samplingLogprobs[j] >= lp - 1e-9, 'renormalized over fewer tokens')));
  const cold = await engine.generate(prompts, { maxNewTokens: 8, seed: 5, temperature: 0.5 });
  assert.ok(cold.some((s) => s.logprobs.some((lp, j) => Math.abs(lp - s.samplingLogprobs[j]) > 1e-3)), 'temperature changes the sampling distribution only');
});

test('first tokens are distributed as the policy says (empirical frequencies vs exp(logprob))', async () => {
  const N = 3000;
  const samples = await engine.generate(Array.from({ length: N }, () => [1, 4]), { maxNewTokens: 1, seed: 11 });
  const counts = new Map<number, number>();
  const prob = new Map<number, number>();
  for (const s of samples) {
    counts.set(s.tokens[0], (counts.get(s.tokens[0]) ?? 0) + 1);
    prob.set(s.tokens[0], Math.exp(s.logprobs[0]));
  }
  assert.ok(counts.size >= 2, 'the distribution is not degenerate');
  for (const [token, count] of counts) {
    const p = prob.get(token)!;
    const sd = Math.sqrt((p * (1 - p)) / N);
    assert.ok(Math.abs(count / N - p) < 5 * sd + 1e-3, `token ${token}: frequency ${count / N} vs probability ${p}`);
  }
});

test('top-k then top-p: samples come from the renormalized survivors only', async () => {
  const N = 2000;
  for (const params of [{ topK: 3 }, { topK: 4, topP: 0.6 }]) {
    const samples = await engine.generate(Array.from({ length: N }, () => [1, 4]), { maxNewTokens: 1, seed: 12, ...params });
    const prob = new Map<number, number>();
    const counts = new Map<number, number>();
    for (const s of samples) {
      prob.set(s.tokens[0], Math.exp(s.logprobs[0]));
      counts.set(s.tokens[0], (counts.get(s.tokens[0]) ?? 0) + 1);
    }
    assert.ok(prob.size <= params.topK, `${prob.size} distinct tokens with ${JSON.stringify(params)}`);
    const kept = [...prob.values()].reduce((a, b) => a + b, 0);
    for (const s of samples) assert.ok(Math.abs(s.samplingLogprobs[0] - (s.logprobs[0] - Math.log(kept))) < 1e-6);
    for (const [token, count] of counts) {
      const q = prob.get(token)! / kept;
      assert.ok(Math.abs(count / N - q) < 5 * Math.sqrt((q * (1 - q)) / N) + 1e-3, `token ${token}: ${count / N} vs ${q}`);
    }
  }
});

test('the sampler keeps exactly the top-k, then the nucleus, renormalized', () => {
  const probs = [0.05, 0.5, 0.15, 0.3];
  const logits = Float32Array.from(probs, (p) => Math.log(p));
  const draw = (topK: number, topP: number) => {
    const rand = seededRandom(1);
    const seen = new Map<number, number>();
    for (let i = 0; i < 4000; i++) {
      const { token, logq } = sampleToken(logits, 0, 4, 1, topK, topP, rand);
      seen.set(token, logq);
    }
    return seen;
  };
  const expectKept = (seen: Map<number, number>, kept: number[]) => {
    assert.deepEqual([...seen.keys()].sort(), [...kept].sort());
    const mass = kept.reduce((m, t) => m + probs[t], 0);
    for (const t of kept) assert.ok(Math.abs(seen.get(t)! - Math.log(probs[t] / mass)) < 1e-6, `token ${t}`);
  };
  expectKept(draw(0, 1), [0, 1, 2, 3]);
  expectKept(draw(2, 1), [1, 3]);
  expectKept(draw(0, 0.7), [1, 3]); // 0.5 < 0.7 <= 0.8
  expectKept(draw(0, 0.81), [1, 2, 3]);
  expectKept(draw(3, 0.9), [1, 2, 3]); // survivors 0.95: threshold 0.855 is reached at 0.95
  expectKept(draw(3, 0.84), [1, 3]); // threshold 0.798 is reached at 0.8
  // Temperature 0.5 squares and renormalizes the probabilities.
  const rand = seededRandom(2);
  const { token, logq } = sampleToken(logits, 0, 4, 0.5, 0, 1, rand);
  const z = probs.reduce((m, p) => m + p * p, 0);
  assert.ok(Math.abs(logq - Math.log(probs[token] ** 2 / z)) < 1e-6);
});

test('stop tokens end a sample with reason stop; maxNewTokens and the context end it with reason length', async () => {
  const free = await engine.generate(prompts, { maxNewTokens: 6, seed: 9 });
  const stopToken = free[0].tokens[2];
  const stopped = await engine.generate(prompts, { maxNewTokens: 6, seed: 9, stopTokens: [stopToken] });
  const cut = stopped[0].tokens.indexOf(stopToken);
  assert.ok(cut >= 0 && cut <= 2);
  assert.equal(stopped[0].finishReason, 'stop');
  assert.equal(stopped[0].tokens.length, cut + 1, 'the stop token is the last token');
  assert.deepEqual(stopped[0].tokens, free[0].tokens.slice(0, cut + 1));
  for (const s of free) {
    assert.equal(s.finishReason, 'length');
    assert.equal(s.tokens.length, 6);
  }
  const long = await engine.generate([[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [1]], { maxNewTokens: 50 });
  assert.equal(long[0].tokens.length, MODEL.contextLength - 10, 'prompt + response fills the context');
  assert.equal(long[1].tokens.length, MODEL.contextLength - 1);
  assert.ok(long.every((s) => s.finishReason === 'length'));
});

test('bad input gets an error naming what is wrong', async () => {
  const tooLong = Array.from({ length: MODEL.contextLength }, () => 1);
  await assert.rejects(engine.generate([[1], tooLong], { maxNewTokens: 1 }), /prompt 1 has 16 tokens, but the model's context is 16 tokens/);
  await assert.rejects(engine.generate([[1], []], { maxNewTokens: 1 }), /prompt 1 is empty/);
  await assert.rejects(engine.generate([[1, 99]], { maxNewTokens: 1 }), /prompt 0 contains token 99/);
  await assert.rejects(engine.generate([[1]], { maxNewTokens: 0 }), /maxNewTokens/);
  await assert.rejects(engine.generate([[1]], { maxNewTokens: 1, topP: 0 }), /topP/);
  await assert.rejects(engine.generate([[1]], { maxNewTokens: 1, stopTokens: [16] }), /stopTokens/);
  const fresh = await RolloutEngine.create(MODEL, { intraOpNumThreads: 1 });
  try {
    await assert.rejects(fresh.generate([[1]], { maxNewTokens: 1 }), /no policy weights/);
    const { ['lm_head.weight']: _dropped, ...partial } = weights;
    assert.throws(() => fresh.setWeights(1, partial), /missing tensor "lm_head.weight"/);
  } finally {
    await fresh.release();
  }
});

test('partial rollout (followUpdates): a version published mid-call generates the remaining tokens, recorded per token', async () => {
  const own = await RolloutEngine.create(MODEL, { intraOpNumThreads: 1, maxBatchSize: 16 });
  try {
    const other = initWeights(MODEL, 99);
    for (const [name, values] of Object.entries(other)) if (name.endsWith('.weight') && !name.includes('ln')) values.forEach((v, i) => (values[i] = v * 8));
    const params: SamplingParams = { maxNewTokens: 6, seed: 5, greedy: true };
    own.setWeights(3, weights);
    const plain = await own.generate(prompts, params);
    // The new version lands before decode step 2: tokens 1-2 come from v3, the rest from v4.
    const switchAt = (step: number) => {
      if (step === 2) own.setWeights(4, other);
    };
    own.setWeights(3, weights);
    const partial = await own.generate(prompts, { ...params, followUpdates: true, beforeDecodeStep: switchAt });
    for (const [i, s] of partial.entries()) {
      assert.deepEqual(s.tokenVersions, s.tokens.map((_, t) => (t < 2 ? 3 : 4)), `prompt ${i}`);
      assert.equal(s.policyVersion, 3, 'the oldest version that generated a token');
      assert.deepEqual(s.tokens.slice(0, 2), plain[i].tokens.slice(0, 2), 'tokens before the switch are the old version\'s');
    }
    assert.notDeepEqual(partial.map((s) => s.tokens), plain.map((s) => s.tokens), 'the new weights changed what came after');
    // Without followUpdates the call finishes under the version it started with.
    own.setWeights(3, weights);
    const finished = await own.generate(prompts, { ...params, beforeDecodeStep: switchAt });
    assert.deepEqual(finished.map((s) => s.tokens), plain.map((s) => s.tokens));
    assert.ok(finished.every((s) => s.policyVersion === 3 && s.tokenVersions === undefined));
  } finally {
    await own.release();
  }
});

test('the key/value cache keeps what was written across growth and row selection, and feeds it in place', () => {
  // 3 rows, 2 heads of width 2, room for 2 slots: write 2 prefill positions, then grow for a third.
  const H = 2;
  const Dh = 2;
  const cache = new KvCache(1, 3, H, Dh, 2);
  const present = (rows: number, T: number, base: number) => ({
    [GRAPH_NAMES.presentKey(0)]: new ort.Tensor('float32', Float32Array.from({ length: rows * H * Dh * T }, (_, i) => base + i), [rows, H, Dh, T]),
    [GRAPH_NAMES.presentValue(0)]: new ort.Tensor('float32', Float32Array.from({ length: rows * H * T * Dh }, (_, i) => -(base + i)), [rows, H, T, Dh]),
  });
  // One prefill row shared by cache rows 0 and 2, another for row 1.
  cache.write(present(2, 2, 100), 2, [[0, 2], [1]]);
  cache.advance(2);
  cache.reserve(1);
  assert.equal(cache.slots, 4, 'capacity doubles');
  cache.write(present(3, 1, 500), 1, [[0], [1], [2]]);
  cache.advance(1);
  cache.keepRows([2, 1]);
  const feeds = cache.feeds();
  const k = feeds[GRAPH_NAMES.pastKey(0)];
  const v = feeds[GRAPH_NAMES.pastValue(0)];
  assert.deepEqual(k.dims, [2, H, Dh, 4]);
  // Keys [row, h, d, slot]: cache row 2 (now 0) took prefill row 0, then decode row 2.
  const key = (r: number, h: number, d: number, s: number) => (k.data as Float32Array)[((r * H + h) * Dh + d) * 4 + s];
  const value = (r: number, h: number, s: number, d: number) => (v.data as Float32Array)[((r * H + h) * 4 + s) * Dh + d];
  for (const [row, prefillRow, decodeRow] of [[0, 0, 2], [1, 1, 1]]) {
    for (let h = 0; h < H; h++) {
      for (let d = 0; d < Dh; d++) {
        for (let s = 0; s < 2; s++) {
          assert.equal(key(row, h, d, s), 100 + ((prefillRow * H + h) * Dh + d) * 2 + s);
          assert.equal(value(row, h, s, d), -(100 + ((prefillRow * H + h) * 2 + s) * Dh + d));
        }
        assert.equal(key(row, h, d, 2), 500 + (decodeRow * H + h) * Dh + d);
        assert.equal(value(row, h, 2, d), -(500 + (decodeRow * H + h) * Dh + d));
        assert.equal(key(row, h, d, 3), 0, 'an unused slot');
      }
    }
  }
});

test('long samples (the cache grows past its first capacity) and rows that stop early: batched equals one prompt at a time', async () => {
  const model: ModelConfig = { ...TINY_MODEL, contextLength: 160 };
  const w = initWeights(model, 8);
  for (const [name, values] of Object.entries(w)) if (name.endsWith('.weight') && !name.includes('ln')) values.forEach((v, i) => (values[i] = v * 8));
  const [wide, one] = await Promise.all([RolloutEngine.create(model, { intraOpNumThreads: 1 }), RolloutEngine.create(model, { intraOpNumThreads: 1, maxBatchSize: 1 })]);
  try {
    for (const e of [wide, one]) e.setWeights(1, w);
    const params: SamplingParams = { maxNewTokens: 120, seed: 9, stopTokens: [15] };
    const long = [[1, 2, 3], [4], [1, 2, 3, 6, 7], [2, 2]];
    const [batched, single] = [await wide.generate(long, params), await one.generate(long, params)];
    assert.ok(batched.some((s) => s.tokens.length > 70), `a sample outgrows the first capacity (lengths ${batched.map((s) => s.tokens.length)})`);
    assert.ok(batched.some((s) => s.finishReason === 'stop'), 'a row stops early');
    single.forEach((s, i) => {
      assert.deepEqual(batched[i].tokens, s.tokens, `prompt ${i}`);
      s.logprobs.forEach((lp, j) => assert.ok(Math.abs(lp - batched[i].logprobs[j]) < 1e-4, `prompt ${i} token ${j}`));
    });
  } finally {
    await Promise.all([wide.release(), one.release()]);
  }
});
