// The llama layout of the one model definition on a tiny random config (grouped-query attention,
// RoPE, SwiGLU, tied embeddings, q/k/v biases, LoRA): the tfjs forward equals a plain-JS scalar
// implementation written independently here, the ONNX prefill + KV-cache decode graphs give the
// trainer's log-probs, and a LoRA train step moves only the adapters.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { loadTfjsBackend } from '../engines/backends';
import * as tf from '@tensorflow/tfjs';
import { attentionBias, forward, fuseFrozenProjections, initWeights, parameterSpec, parseModelConfig, ropeTables, trainableParameterSpec, type LoraTarget, type ModelConfig, type PolicyWeights } from '../engines/model';
import { createTfjsOps } from '../engines/model-tfjs';
import { RolloutEngine } from '../engines/rollout';
import { Trainer } from '../engines/trainer';
import { mergeLoraWeights, withoutLora } from '../engines/lora';
import { sftLoss } from '../training/losses';
import { checkTrainerFitsWasm } from '../training/options';
import { parseRunConfig } from '../config/run-config';

const LLAMA: ModelConfig = {
  architecture: 'llama',
  vocabSize: 40,
  dModel: 32,
  nLayers: 2,
  nHeads: 4,
  nKvHeads: 2,
  dFF: 48,
  contextLength: 32,
  ropeTheta: 500,
  ropeScalingFactor: 2,
  rmsNormEps: 1e-5,
  tieEmbeddings: true,
  attentionBias: true,
};
const WITH_LORA: ModelConfig = { ...LLAMA, lora: { rank: 4, alpha: 8, targets: ['q', 'k', 'v', 'o', 'gate', 'up', 'down'] } };

/** Random weights where every tensor matters: norms and biases perturbed, LoRA B nonzero. */
function randomWeights(cfg: ModelConfig, seed: number): PolicyWeights {
  const w = initWeights(cfg, seed);
  let s = seed * 7919 + 1;
  const rand = () => ((s = (s * 16807) % 2147483647) / 2147483647) - 0.5;
  for (const p of parameterSpec(cfg)) {
    const values = w[p.name];
    if (p.name.endsWith('norm.weight') || p.name === 'norm_f.weight') for (let i = 0; i < values.length; i++) values[i] = 1 + 0.5 * rand();
    else if (p.name.endsWith('.bias') || p.name.endsWith('.lora_b')) for (let i = 0; i < values.length; i++) values[i] = 0.2 * rand();
    // A as large as the other matrices (std 0.2), whatever lora.init draws it from.
    else if (p.name.endsWith('.lora_a')) for (let i = 0; i < values.length; i++) values[i] = 0.7 * rand();
    else for (let i = 0; i < values.length; i++) values[i] *= 10; // std 0.2: logits far from uniform
  }
  return w;
}

/** Logits [T][V] of one sequence, computed with scalars and loops (Hugging Face's Llama semantics). */
function scalarLlama(cfg: ModelConfig, w: PolicyWeights, tokens: number[]): number[][] {
  const D = cfg.dModel;
  const H = cfg.nHeads;
  const Hkv = cfg.nKvHeads ?? H;
  const Dh = D / H;
  const T = tokens.length;
  const mat = (x: number[], name: string, inDim: number, outDim: number): number[] => {
    const W = w[`${name}.weight`];
    const b = w[`${name}.bias`];
    const y = Array.from({ length: outDim }, (_, o) => (b ? b[o] : 0));
    for (let i = 0; i < inDim; i++) for (let o = 0; o < outDim; o++) y[o] += x[i] * W[i * outDim + o];
    const A = w[`${name}.lora_a`];
    if (A && cfg.lora) {
      const r = cfg.lora.rank;
      const B = w[`${name}.lora_b`];
      const low = Array.from({ length: r }, (_, k) => x.reduce((acc, xi, i) => acc + xi * A[i * r + k], 0));
      for (let o = 0; o < outDim; o++) y[o] += (cfg.lora.alpha / r) * low.reduce((acc, lk, k) => acc + lk * B[k * outDim + o], 0);
    }
    return y;
  };
  const rms = (x: number[], g: Float32Array) => {
    const ms = x.reduce((a, v) => a + v * v, 0) / x.length;
    return x.map((v, i) => (v / Math.sqrt(ms + (cfg.rmsNormEps ?? 1e-5))) * g[i]);
  };
  const rope = (x: number[], pos: number) => {
    const out = x.slice();
    const p = pos / (cfg.ropeScalingFactor ?? 1);
    for (let i = 0; i < Dh / 2; i++) {
      const a = p * (cfg.ropeTheta ?? 10000) ** ((-2 * i) / Dh);
      out[i] = x[i] * Math.cos(a) - x[i + Dh / 2] * Math.sin(a);
      out[i + Dh / 2] = x[i + Dh / 2] * Math.cos(a) + x[i] * Math.sin(a);
    }
    return out;
  };
  const emb = w['tok_emb.weight'];
  let xs = tokens.map((t) => Array.from(emb.subarray(t * D, (t + 1) * D)));
  for (let l = 0; l < cfg.nLayers; l++) {
    const p = `blocks.${l}.`;
    const hs = xs.map((x) => rms(x, w[`${p}attn_norm.weight`]));
    const q = hs.map((h) => mat(h, `${p}attn.q`, D, H * Dh));
    const k = hs.map((h) => mat(h, `${p}attn.k`, D, Hkv * Dh));
    const v = hs.map((h) => mat(h, `${p}attn.v`, D, Hkv * Dh));
    const head = (row: number[], h: number) => row.slice(h * Dh, (h + 1) * Dh);
    const attnOut = xs.map((_, t) => {
      const merged: number[] = [];
      for (let h = 0; h < H; h++) {
        const kvHead = Math.floor(h / (H / Hkv));
        const qh = rope(head(q[t], h), t);
        const scores = Array.from({ length: t + 1 }, (_, s) => rope(head(k[s], kvHead), s).reduce((a, ki, i) => a + ki * qh[i], 0) / Math.sqrt(Dh));
        const max = Math.max(...scores);
        const e = scores.map((sc) => Math.exp(sc - max));
        const z = e.reduce((a, b) => a + b, 0);
        const o = new Array(Dh).fill(0);
        e.forEach((ei, s) => head(v[s], kvHead).forEach((vi, i) => (o[i] += (ei / z) * vi)));
        merged.push(...o);
      }
      return mat(merged, `${p}attn.o`, H * Dh, D);
    });
    xs = xs.map((x, t) => x.map((xi, i) => xi + attnOut[t][i]));
    xs = xs.map((x) => {
      const h = rms(x, w[`${p}mlp_norm.weight`]);
      const gate = mat(h, `${p}mlp.gate`, D, cfg.dFF);
      const up = mat(h, `${p}mlp.up`, D, cfg.dFF);
      const down = mat(gate.map((g, i) => (g / (1 + Math.exp(-g))) * up[i]), `${p}mlp.down`, cfg.dFF, D);
      return x.map((xi, i) => xi + down[i]);
    });
  }
  return xs.map((x) => {
    const h = rms(x, w['norm_f.weight']);
    return Array.from({ length: cfg.vocabSize }, (_, t) => h.reduce((a, hi, i) => a + hi * emb[t * D + i], 0));
  });
}

test('llama config: validation names the field', () => {
  assert.deepEqual(parseModelConfig(WITH_LORA), WITH_LORA);
  assert.throws(() => parseModelConfig({ ...LLAMA, nKvHeads: 3 }), /nKvHeads \(3\) must divide nHeads/);
  assert.throws(() => parseModelConfig({ ...LLAMA, architecture: undefined }), /nKvHeads is a llama setting/);
  assert.throws(() => parseModelConfig({ ...LLAMA, lora: { rank: 0, alpha: 1, targets: ['q'] } }), /lora\.rank/);
  const names = parameterSpec(WITH_LORA).map((p) => p.name);
  assert.ok(!names.includes('lm_head.weight'), 'tied: no lm_head');
  assert.ok(names.includes('blocks.1.attn.q.bias') && names.includes('blocks.1.mlp.down.lora_b'));
  assert.deepEqual(trainableParameterSpec(WITH_LORA).map((p) => p.name).filter((n) => !n.includes('.lora_')), [], 'with LoRA only adapters train');
});

test('llama forward (tfjs) equals an independent scalar implementation', async () => {
  await loadTfjsBackend({ kind: 'cpu' });
  const weights = randomWeights(WITH_LORA, 3);
  const trainer = Trainer.create({ model: WITH_LORA, weights, optimizer: { lr: 1e-3 } });
  try {
    const tokens = [1, 7, 3, 22, 39, 0, 12, 5, 5, 18];
    const [lp] = await trainer.logprobs([tokens]);
    const logits = scalarLlama(WITH_LORA, weights, tokens);
    let maxDiff = 0;
    for (let t = 0; t < tokens.length - 1; t++) {
      const row = logits[t];
      const m = Math.max(...row);
      const lse = m + Math.log(row.reduce((a, v) => a + Math.exp(v - m), 0));
      maxDiff = Math.max(maxDiff, Math.abs(row[tokens[t + 1]] - lse - lp[t]));
    }
    assert.ok(maxDiff < 1e-4, `max log-prob difference ${maxDiff}`);
  } finally {
    trainer.dispose();
  }
});

test('llama on ONNX Runtime (prefill + KV-cache decode, LoRA as graph inputs) gives the trainer\'s log-probs', async () => {
  await loadTfjsBackend({ kind: 'cpu' });
  const weights = randomWeights(WITH_LORA, 5);
  const trainer = Trainer.create({ model: WITH_LORA, weights, optimizer: { lr: 1e-3 } });
  const engine = await RolloutEngine.create(WITH_LORA, { intraOpNumThreads: 1 });
  try {
    engine.setFrozenWeights(weights);
    engine.setWeights(0, Object.fromEntries(trainableParameterSpec(WITH_LORA).map((p) => [p.name, weights[p.name]])));
    const prompts = [[1, 2, 3], [4, 5, 6, 7, 8, 9], [10]];
    const samples = await engine.generate(prompts, { maxNewTokens: 8, seed: 11 });
    const rows = await trainer.logprobs(prompts.map((p, i) => [...p, ...samples[i].tokens]));
    let maxDiff = 0;
    samples.forEach((s, i) => s.logprobs.forEach((l, j) => (maxDiff = Math.max(maxDiff, Math.abs(l - rows[i][prompts[i].length - 1 + j])))));
    assert.ok(maxDiff < 1e-5, `max |rollout - trainer| log-prob ${maxDiff}`);
    assert.throws(() => engine.setWeights(1, {}), /missing tensor "blocks.0.attn.q.lora_a"/);
  } finally {
    trainer.dispose();
    await engine.release();
  }
});

test('a LoRA train step moves the adapters only; a version holds only adapters', async () => {
  await loadTfjsBackend({ kind: 'cpu' });
  const base = randomWeights(LLAMA, 9);
  const trainer = Trainer.create({ model: WITH_LORA, weights: base, seed: 1, optimizer: { lr: 1e-2 } });
  try {
    const before = await trainer.exportWeights();
    assert.deepEqual(Object.keys(before).sort(), trainableParameterSpec(WITH_LORA).map((p) => p.name).sort());
    assert.ok(before['blocks.0.attn.q.lora_b'].every((v) => v === 0), 'fresh adapters start at B = 0');
    const seq = { tokens: [1, 2, 3, 4, 5, 6], lossMask: [0, 0, 1, 1, 1], advantages: 1 };
    const lpBefore = (await trainer.logprobs([seq.tokens]))[0];
    await trainer.trainStep([seq], sftLoss());
    const after = await trainer.exportWeights();
    assert.ok(after['blocks.0.attn.q.lora_b'].some((v) => v !== 0), 'B moved');
    const lpAfter = (await trainer.logprobs([seq.tokens]))[0];
    assert.ok(lpAfter[4] > lpBefore[4], `the rewarded token's log-prob rose: ${lpBefore[4]} -> ${lpAfter[4]}`);
  } finally {
    trainer.dispose();
  }
});

test('merged LoRA weights are the same model as base + adapters', async () => {
  await loadTfjsBackend({ kind: 'cpu' });
  const weights = randomWeights(WITH_LORA, 13);
  const merged = mergeLoraWeights(WITH_LORA, weights, weights);
  const withAdapters = Trainer.create({ model: WITH_LORA, weights, optimizer: { lr: 1e-3 } });
  const plain = Trainer.create({ model: withoutLora(WITH_LORA), weights: merged, optimizer: { lr: 1e-3 } });
  try {
    const tokens = [3, 1, 4, 1, 5, 9, 2, 6];
    const [a] = await withAdapters.logprobs([tokens]);
    const [b] = await plain.logprobs([tokens]);
    const maxDiff = Math.max(...Array.from(a, (v, i) => Math.abs(v - b[i])));
    assert.ok(maxDiff < 1e-5, `max log-prob difference ${maxDiff} (log-probs ${Math.min(...a).toFixed(2)} .. ${Math.max(...a).toFixed(2)})`);
  } finally {
    withAdapters.dispose();
    plain.dispose();
  }
});

test('a trainer that cannot fit the wasm heap is refused with the estimate', () => {
  const smollm2: ModelConfig = { architecture: 'llama', vocabSize: 49152, dModel: 576, nLayers: 30, nHeads: 9, nKvHeads: 3, dFF: 1536, contextLength: 256, tieEmbeddings: true, ropeTheta: 100000 };
  const config = (microBatch: number) => parseRunConfig({ model: { from: 'x' }, train: { micro_batch: microBatch } });
  const lora = { ...smollm2, contextLength: 128, lora: { rank: 16, alpha: 32, targets: ['q', 'k', 'v', 'o', 'gate', 'up', 'down'] as LoraTarget[] } };
  assert.throws(() => checkTrainerFitsWasm(config(2), smollm2), /train\.micro_batch: the trainer needs about \d+\.\d\d GiB .* heap holds 4 GiB: lower train\.micro_batch/);
  assert.throws(() => checkTrainerFitsWasm(config(2), lora), /activations of 2 x 128 tokens/);
  assert.doesNotThrow(() => checkTrainerFitsWasm(config(1), lora), 'the real-model recipe (LoRA, micro-batch 1, 128 tokens) fits');
});

test('a LoRA base fuses q/k/v (with their biases) and gate/up into one matmul each: same logits as the separate projections', async () => {
  await tf.setBackend('cpu');
  const weights = initWeights(WITH_LORA, 11);
  const frozen = new Map(parameterSpec(WITH_LORA).filter((p) => p.frozen).map((p) => [p.name, tf.tensor(weights[p.name], p.shape)]));
  const { fused, replaced } = fuseFrozenProjections(WITH_LORA, frozen, (ws) => tf.concat(ws, ws[0].rank - 1));
  assert.deepEqual([...fused.keys()].sort(), ['blocks.0.attn.qkv_fused.bias', 'blocks.0.attn.qkv_fused.weight', 'blocks.0.mlp.gate_up_fused.weight', 'blocks.1.attn.qkv_fused.bias', 'blocks.1.attn.qkv_fused.weight', 'blocks.1.mlp.gate_up_fused.weight']);
  assert.equal(replaced.length, 2 * (6 + 2));
  assert.deepEqual(fused.get('blocks.0.attn.qkv_fused.weight')!.shape, [32, 32 + 16 + 16]);
  // Adapters with B != 0, so the LoRA terms after the split are exercised too.
  for (const p of parameterSpec(WITH_LORA).filter((q) => q.adapter)) weights[p.name] = weights[p.name].map((_, i) => Math.sin(i + p.name.length) * 0.05);
  const ops = createTfjsOps({ explicitTransposeGrad: false });
  const tokens = tf.tensor2d([[1, 5, 9, 3, 7]], [1, 5], 'int32');
  const tables = ropeTables(WITH_LORA, Int32Array.from([0, 1, 2, 3, 4]), 1, 5);
  const Dh = tables.cos.length / 5;
  const inputs = { tokens, positions: tf.tensor2d([[0, 1, 2, 3, 4]], [1, 5], 'int32'), attentionBias: tf.tensor(attentionBias(1, 5, 0), [1, 1, 5, 5]), rope: { cos: tf.tensor(tables.cos, [1, 1, 5, Dh]), sin: tf.tensor(tables.sin, [1, 1, 5, Dh]) } };
  const all = Object.fromEntries(Object.entries(weights).map(([k, v]) => [k, tf.tensor(v, parameterSpec(WITH_LORA).find((p) => p.name === k)!.shape)]));
  const separate = forward(ops, WITH_LORA, all, inputs).logits as tf.Tensor;
  const withFused = { ...Object.fromEntries(Object.entries(all).filter(([k]) => !replaced.includes(k))), ...Object.fromEntries(fused) };
  const once = forward(ops, WITH_LORA, withFused, inputs).logits as tf.Tensor;
  const diff = (await tf.max(tf.abs(tf.sub(separate, once))).data())[0];
  assert.ok(diff < 1e-5, `max |separate - fused| logit ${diff}`);
});

test('the fused SwiGLU and rotary ops have the values and gradients of the ops they replace', async () => {
  await loadTfjsBackend({ kind: 'cpu' });
  for (const explicitTransposeGrad of [false, true]) {
    const ops = createTfjsOps({ explicitTransposeGrad });
    const composed = { ...ops, swiglu: undefined, rotary: undefined };
    const rand = (shape: number[], seed: number) => tf.randomUniform(shape, -3, 3, 'float32', seed);
    tf.tidy(() => {
      const gate = rand([2, 5, 12], 1);
      const up = rand([2, 5, 12], 2);
      const dy = rand([2, 5, 12], 3);
      const swigluOf = (o: typeof ops) => (g: tf.Tensor, u: tf.Tensor) => tf.sum(tf.mul(o.swiglu ? o.swiglu(g, u) : o.mul(o.mul(g, o.sigmoid(g)), u), dy));
      const [fg, fu] = tf.grads(swigluOf(ops))([gate, up]);
      const [cg, cu] = tf.grads(swigluOf(composed))([gate, up]);
      const close = (a: tf.Tensor, b: tf.Tensor, what: string) => {
        const worst = tf.max(tf.abs(tf.sub(a, b))).dataSync()[0];
        assert.ok(worst < 1e-5, `${what} (explicitTransposeGrad ${explicitTransposeGrad}): max difference ${worst}`);
      };
      close(ops.swiglu!(gate, up), ops.mul(ops.mul(gate, ops.sigmoid(gate)), up), 'swiglu value');
      close(fg, cg, 'swiglu d gate');
      close(fu, cu, 'swiglu d up');
      // rotary on [B, H, T, Dh] with [1, 1, T, Dh] tables.
      const tables = ropeTables(LLAMA, [0, 1, 2, 3, 4], 1, 5);
      const Dh = tables.cos.length / 5;
      const cos = tf.tensor(tables.cos, [1, 1, 5, Dh]);
      const sin = tf.tensor(tables.sin, [1, 1, 5, Dh]);
      const x = rand([2, 3, 5, Dh], 4);
      const dr = rand([2, 3, 5, Dh], 5);
      const rotate = (t: tf.Tensor) => {
        const [x1, x2] = tf.split(t, 2, -1);
        return tf.concat([tf.neg(x2), x1], -1);
      };
      const byHand = (t: tf.Tensor) => tf.add(tf.mul(t, cos), tf.mul(rotate(t), sin));
      close(ops.rotary!(x, cos, sin), byHand(x), 'rotary value');
      close(tf.grad((t: tf.Tensor) => tf.sum(tf.mul(ops.rotary!(t, cos, sin), dr)))(x), tf.grad((t: tf.Tensor) => tf.sum(tf.mul(byHand(t), dr)))(x), 'rotary dx');
    });
  }
});

test('the fused attention core and LoRA projection have the values and gradients of the compositions they replace', async () => {
  await loadTfjsBackend({ kind: 'cpu' });
  const ops = createTfjsOps({ explicitTransposeGrad: false });
  assert.ok(ops.attention && ops.loraLinear, 'native TensorFlow ops fuse them');
  const composed = { ...ops, attention: undefined, loraLinear: undefined };
  const close = (a: tf.Tensor, b: tf.Tensor, what: string) => {
    assert.deepEqual(a.shape, b.shape, `${what}: shape`);
    const worst = tf.max(tf.abs(tf.sub(a, b))).dataSync()[0];
    assert.ok(worst < 1e-4, `${what}: max difference ${worst}`);
  };
  const rand = (shape: number[], seed: number, r = 1) => tf.randomUniform(shape, -r, r, 'float32', seed);
  tf.tidy(() => {
    // The attention core by hand, with a causal bias and with none (an encoder).
    const [q, kT, v] = [rand([2, 3, 5, 4], 1, 2), rand([2, 3, 4, 5], 2, 2), rand([2, 3, 5, 4], 3)];
    const dO = rand([2, 3, 5, 4], 4);
    const causal = tf.tensor(attentionBias(1, 5, 0), [1, 1, 5, 5]);
    for (const bias of [causal, undefined]) {
      const byHand = (a: tf.Tensor, b: tf.Tensor, c: tf.Tensor) => tf.matMul(tf.softmax(bias ? tf.add(tf.matMul(a, b), bias) : tf.matMul(a, b)), c);
      close(ops.attention!(q, kT, v, bias), byHand(q, kT, v), `attention value (bias ${bias ? 'causal' : 'none'})`);
      const fused = tf.grads((a: tf.Tensor, b: tf.Tensor, c: tf.Tensor) => tf.sum(tf.mul(ops.attention!(a, b, c, bias), dO)))([q, kT, v]);
      const hand = tf.grads((a: tf.Tensor, b: tf.Tensor, c: tf.Tensor) => tf.sum(tf.mul(byHand(a, b, c), dO)))([q, kT, v]);
      ['dq', 'dkT', 'dv'].forEach((name, i) => close(fused[i], hand[i], `attention ${name}`));
    }
    // A frozen projection of three column blocks, two with adapters, the adapters reading x or a
    // different (dropped-out) input.
    const [x, xDrop, w, b] = [rand([2, 3, 6], 5), rand([2, 3, 6], 6), rand([6, 7], 7), rand([7], 8)];
    const [a0, b0, a2, b2] = [rand([6, 2], 9), rand([2, 3], 10), rand([6, 2], 11), rand([2, 2], 12)];
    const dy = rand([2, 3, 7], 13);
    const sizes = [3, 2, 2];
    for (const dropped of [false, true]) {
      const byHand = (xx: tf.Tensor, xl: tf.Tensor, A0: tf.Tensor, B0: tf.Tensor, A2: tf.Tensor, B2: tf.Tensor) => {
        const [y0, y1, y2] = tf.split(tf.add(tf.matMul(tf.reshape(xx, [-1, 6]), w), b), sizes, 1);
        const lx = tf.reshape(xl, [-1, 6]);
        const delta = (A: tf.Tensor, B: tf.Tensor) => tf.mul(tf.matMul(tf.matMul(lx, A), B), tf.scalar(2.5));
        return tf.reshape(tf.concat([tf.add(y0, delta(A0, B0)), y1, tf.add(y2, delta(A2, B2))], 1), [2, 3, 7]);
      };
      const viaOp = (xx: tf.Tensor, xl: tf.Tensor, A0: tf.Tensor, B0: tf.Tensor, A2: tf.Tensor, B2: tf.Tensor) =>
        ops.loraLinear!(xx, w, b, dropped ? xl : xx, [{ size: 3, a: A0, b: B0 }, { size: 2 }, { size: 2, a: A2, b: B2 }], 2.5);
      const args = [x, dropped ? xDrop : x, a0, b0, a2, b2];
      close(viaOp(...(args as [tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor])), byHand(...(args as [tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor])), `loraLinear value (dropout ${dropped})`);
      const loss = (f: typeof byHand) => (xx: tf.Tensor, A0: tf.Tensor, B0: tf.Tensor, A2: tf.Tensor, B2: tf.Tensor) => tf.sum(tf.mul(f(xx, dropped ? xDrop : xx, A0, B0, A2, B2), dy));
      const fused = tf.grads(loss(viaOp))([x, a0, b0, a2, b2]);
      const hand = tf.grads(loss(byHand))([x, a0, b0, a2, b2]);
      ['dx', 'da0', 'db0', 'da2', 'db2'].forEach((name, i) => close(fused[i], hand[i], `loraLinear ${name} (dropout ${dropped})`));
    }
  });
  // The whole llama forward with LoRA (q/k/v and gate/up fused): logits and the adapters' gradients agree.
  const weights = randomWeights(WITH_LORA, 21);
  const spec = parameterSpec(WITH_LORA);
  const frozen = new Map(spec.filter((p) => p.frozen).map((p) => [p.name, tf.tensor(weights[p.name], p.shape)]));
  const { fused, replaced } = fuseFrozenProjections(WITH_LORA, frozen, (ws) => tf.concat(ws, ws[0].rank - 1));
  const base = { ...Object.fromEntries([...frozen].filter(([k]) => !replaced.includes(k))), ...Object.fromEntries(fused) };
  const adapters = spec.filter((p) => !p.frozen).map((p) => [p.name, tf.variable(tf.tensor(weights[p.name], p.shape))] as const);
  const T = 6;
  const tables = ropeTables(WITH_LORA, Int32Array.from({ length: T }, (_, i) => i), 1, T);
  const Dh = tables.cos.length / T;
  const inputs = { tokens: tf.tensor2d([[1, 5, 9, 3, 7, 2], [4, 4, 8, 0, 1, 6]], [2, T], 'int32'), positions: tf.tensor2d([[0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 4, 5]], [2, T], 'int32'), attentionBias: tf.tensor(attentionBias(1, T, 0), [1, 1, T, T]), rope: { cos: tf.tensor(tables.cos, [1, 1, T, Dh]), sin: tf.tensor(tables.sin, [1, 1, T, Dh]) } };
  const r = tf.randomUniform([2, T, WITH_LORA.vocabSize], -1, 1, 'float32', 17);
  const run = (o: typeof ops) => tf.variableGrads(() => tf.sum(tf.mul(forward(o, WITH_LORA, { ...base, ...Object.fromEntries(adapters) }, inputs).logits as tf.Tensor, r)) as tf.Scalar, adapters.map(([, v]) => v));
  const f = run(ops);
  const c = run(composed);
  close(f.value, c.value, 'the loss');
  for (const [name, v] of adapters) close(f.grads[v.name], c.grads[v.name], `d ${name}`);
});
