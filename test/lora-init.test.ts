// LoRA adapters start as PEFT's do by default (init_lora_weights=True): A from torch's
// kaiming_uniform_(a = sqrt(5)), B zeros; model.lora.init "normal" keeps Relax's earlier A.
// The bound is computed here from torch's formula, not taken from engines/model.ts.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { initWeights, loraParameterSpec, modelConfigDifference, parseModelConfig, type ModelConfig } from '../engines/model';
import { parseRunConfig } from '../config/run-config';

const BASE: ModelConfig = { architecture: 'llama', vocabSize: 40, dModel: 96, nLayers: 1, nHeads: 4, nKvHeads: 2, dFF: 160, contextLength: 32 };
const LORA: ModelConfig = { ...BASE, lora: { rank: 16, alpha: 32, targets: ['q', 'k', 'v', 'o', 'gate', 'up', 'down'] } };

/**
 * torch.nn.init.kaiming_uniform_(w, a) on nn.Linear(in, r).weight ([r, in]): fan_in = in,
 * gain = calculate_gain('leaky_relu', a) = sqrt(2 / (1 + a^2)), std = gain / sqrt(fan_in),
 * bound = sqrt(3) * std. With a = sqrt(5): bound = sqrt(1/3) * sqrt(3 / in) = 1 / sqrt(in).
 */
function kaimingUniformBound(fanIn: number, a: number): number {
  const gain = Math.sqrt(2 / (1 + a * a));
  return Math.sqrt(3) * (gain / Math.sqrt(fanIn));
}

function stats(values: Float32Array): { mean: number; std: number; maxAbs: number } {
  let sum = 0;
  let maxAbs = 0;
  for (const v of values) {
    sum += v;
    maxAbs = Math.max(maxAbs, Math.abs(v));
  }
  const mean = sum / values.length;
  let sq = 0;
  for (const v of values) sq += (v - mean) ** 2;
  return { mean, std: Math.sqrt(sq / values.length), maxAbs };
}

test('LoRA A is kaiming-uniform with a = sqrt(5) as in PEFT (bound 1/sqrt(in), std bound/sqrt(3)), B is zeros', () => {
  const spec = loraParameterSpec(LORA);
  const weights = initWeights(LORA, 3, spec);
  const as = spec.filter((p) => p.name.endsWith('.lora_a'));
  assert.equal(as.length, 7);
  const fanIns = new Set<number>();
  for (const p of as) {
    const [fanIn, rank] = p.shape;
    fanIns.add(fanIn);
    assert.equal(rank, 16);
    const bound = kaimingUniformBound(fanIn, Math.sqrt(5));
    assert.ok(Math.abs(bound - 1 / Math.sqrt(fanIn)) < 1e-12, 'a = sqrt(5) makes the bound 1/sqrt(fan_in)');
    const a = weights[p.name];
    assert.equal(a.length, fanIn * rank);
    const s = stats(a);
    // float32 storage may round a value next to the bound onto it, hence the relative 1e-6.
    assert.ok(s.maxAbs <= bound * (1 + 1e-6), `${p.name}: max |A| ${s.maxAbs} within the bound ${bound}`);
    assert.ok(s.maxAbs > 0.95 * bound, `${p.name}: the draws reach near the bound (${s.maxAbs} of ${bound})`);
    // Uniform on [-b, b]: mean 0, std b / sqrt(3). With n >= 1,536 draws the std's relative error is ~2%.
    assert.ok(Math.abs(s.mean) < 0.1 * bound, `${p.name}: mean ${s.mean}`);
    assert.ok(Math.abs(s.std / (bound / Math.sqrt(3)) - 1) < 0.06, `${p.name}: std ${s.std} vs ${bound / Math.sqrt(3)}`);
    // Not a normal draw: |x| > b never happens, and the mass is flat (about half of |x| below b/2).
    const inner = a.filter((v) => Math.abs(v) < bound / 2).length / a.length;
    assert.ok(Math.abs(inner - 0.5) < 0.06, `${p.name}: ${inner} of the values within b/2 (uniform: 0.5)`);
  }
  assert.deepEqual([...fanIns].sort((x, y) => x - y), [96, 160], 'q/k/v/o/gate/up read d_model, down reads d_ff');
  for (const p of spec.filter((q) => q.name.endsWith('.lora_b'))) assert.ok(weights[p.name].every((v) => v === 0), `${p.name} is all zeros`);
});

test('LoRA init is deterministic by seed, and differs between seeds and between tensors', () => {
  const spec = loraParameterSpec(LORA);
  const once = initWeights(LORA, 42, spec);
  const again = initWeights(LORA, 42, spec);
  const other = initWeights(LORA, 43, spec);
  for (const p of spec) assert.deepEqual(once[p.name], again[p.name], `${p.name}: same seed, same values`);
  const a = 'blocks.0.attn.q.lora_a';
  assert.notDeepEqual(once[a], other[a], 'another seed draws other values');
  assert.notDeepEqual(once[a].slice(0, 64), once['blocks.0.attn.k.lora_a'].slice(0, 64), 'each tensor has its own stream');
});

test('lora.init "normal" keeps the earlier normal(0, 1/sqrt(in)) A, sqrt(3) times the PEFT std', () => {
  const normal: ModelConfig = { ...LORA, lora: { ...LORA.lora!, init: 'normal' } };
  const spec = loraParameterSpec(normal);
  const weights = initWeights(normal, 3, spec);
  const a = weights['blocks.0.mlp.gate.lora_a'];
  const std = 1 / Math.sqrt(96);
  const s = stats(a);
  assert.ok(Math.abs(s.std / std - 1) < 0.06, `std ${s.std} vs ${std}`);
  assert.ok(s.maxAbs > kaimingUniformBound(96, Math.sqrt(5)), 'a normal draw exceeds the uniform bound');
  assert.ok(Math.abs(s.std / stats(initWeights(LORA, 3, loraParameterSpec(LORA))['blocks.0.mlp.gate.lora_a']).std - Math.sqrt(3)) < 0.15);
  for (const p of spec.filter((q) => q.name.endsWith('.lora_b'))) assert.ok(weights[p.name].every((v) => v === 0));
});

test('lora.init: run configs default to "peft", accept "normal", refuse others; model configs without it (old checkpoints) still validate and compare equal', () => {
  const run = (lora: Record<string, unknown>) => parseRunConfig({ model: { from: 'smollm2-135m-instruct' }, lora });
  assert.equal(run({}).lora!.init, 'peft');
  assert.equal(run({ init: 'normal' }).lora!.init, 'normal');
  assert.throws(() => run({ init: 'xavier' }), /lora\.init/);
  const old = parseModelConfig({ ...BASE, lora: { rank: 16, alpha: 32, targets: ['q', 'v'] } });
  assert.equal(old.lora!.init, undefined);
  assert.equal(loraParameterSpec(old)[0].init.kind, 'uniform', 'absent means PEFT');
  assert.throws(() => parseModelConfig({ ...BASE, lora: { rank: 16, alpha: 32, targets: ['q'], init: 'xavier' } }), /lora\.init/);
  // How fresh adapters are drawn is not what trained weights mean: a checkpoint loads whichever.
  assert.equal(modelConfigDifference(old, { ...old, lora: { ...old.lora!, init: 'normal' } }), undefined);
  assert.match(modelConfigDifference(old, { ...old, lora: { ...old.lora!, init: 'normal', rank: 8 } }) ?? '', /model\.lora is .*"rank":16/);
});
