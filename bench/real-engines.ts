// `relax bench engines --set model=<pretrained>`: the engines on a pretrained model (e.g.
// smollm2-135m-instruct), side by side in one run: rollout tokens/s at batch 1/8/32 (distinct
// prompts) and for a GRPO group batch (8 prompts x 4 samples, each prompt prefilled once), with LoRA
// adapters as separate low-rank matmuls (at 1 thread and at the thread count the rollout workers
// use, engines/backends.ts ortThreads) and with the adapters merged into the weights, train
// tokens/s for LoRA and for full fine-tuning (and LoRA on a GRPO group batch, the group's prompt
// computed once vs per sample: `train_group`), weight sync ms for adapters vs full weights (in one
// process, and through a checkpoint as between processes), peak RSS,
// the group batch again with gradient checkpointing in one micro-batch (`train_group.*_checkpointed`;
// `--set gradient_checkpointing=1` trains the LoRA and full runs that way too),
// and each figure as a fraction of its engine's matmul roofline (bench/engines.ts measures that).
import { execFile } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { relaxEnvironment } from '../config/environment';
import { loadCheckpoint, publishCheckpoint } from '../engines/checkpoint';
import { seededRandom } from '../config/seeds';
import { engineThreads, loadTfjsBackend, ortThreads } from '../engines/backends';
import type { Device } from '../engines/device';
import { loadHfModel } from '../engines/hf-checkpoint';
import { mergeLoraWeights, withoutLora } from '../engines/lora';
import { parameterCount, trainableParameterSpec, type ModelConfig, type PolicyWeights } from '../engines/model';
import { resolveModelSource } from '../engines/model-sources';
import { RolloutEngine } from '../engines/rollout';
import { trainSequenceFromSample, type TrainSequence } from '../engines/trainer';
import { ChatTemplate } from '../engines/tokenizers/chat-template';
import { HfTokenizer } from '../engines/tokenizers/hf';
import { FULL_FINETUNE_MICRO_BATCH_TOKENS, REAL_MODEL_MICRO_BATCH_TOKENS } from '../config/recipes';
import type { BenchContext } from './index';
import type { TrainChildInput, TrainChildResult } from './train-engine-child';
import { median, peakRssMb, round, timeCalls } from './measure';

const BATCHES = [1, 8, 32];
/** The GRPO shape of `rollout_tokens_per_s.group`: this many distinct prompts, each sampled GROUP_SIZE times. */
const GROUP_PROMPTS = 8;
const GROUP_SIZE = 4;
const COUNTRIES = ['Italy', 'France', 'Spain', 'Japan', 'Peru', 'Egypt', 'Canada', 'Norway'];
/** Question templates; the i-th prompt fills one with i, so every prompt of a batch is distinct (they share only the chat template's system prompt). */
const QUESTIONS = [(i: number) => `What is ${12 + i} + 7?`, (i: number) => `Name a prime number above ${20 + i}.`, (i: number) => `What is the capital of ${COUNTRIES[i % COUNTRIES.length]}?`, (i: number) => `Count from ${1 + i} to ${5 + i}.`];

/** `n` distinct chat prompts of the model's own template. */
function chatPrompts(dir: string, n: number): number[][] {
  const tokenizer = HfTokenizer.fromFile(`${dir}/tokenizer.json`);
  const chat = ChatTemplate.fromTokenizerConfig(dir);
  return Array.from({ length: n }, (_, i) => tokenizer.encode(chat.render([{ role: 'user', content: QUESTIONS[i % QUESTIONS.length](Math.floor(i / QUESTIONS.length)) }])));
}

/** Adapters with nonzero B (a trained-looking adapter), seeded. */
function randomAdapters(cfg: ModelConfig, seed: number): PolicyWeights {
  const rand = seededRandom(seed);
  return Object.fromEntries(trainableParameterSpec(cfg).map((p) => [p.name, Float32Array.from({ length: p.shape.reduce((a, b) => a * b, 1) }, () => (rand() - 0.5) * 0.02)]));
}

async function rolloutTokensPerS(engine: RolloutEngine, prompts: number[][], maxNewTokens: number, minMs: number): Promise<number> {
  let tokens = 0;
  const timing = await timeCalls(
    async () => {
      const samples = await engine.generate(prompts, { maxNewTokens, temperature: 1, seed: 1 });
      tokens = samples.reduce((n, s) => n + s.tokens.length, 0);
    },
    { warmup: 1, minCalls: 2, minMs },
  );
  return tokens / (timing.medianMs / 1000);
}

/** Runs bench/train-engine-child.ts on `file` with `threads` TensorFlow intra-op threads. */
function trainInChild(file: string, threads: number): Promise<TrainChildResult> {
  return new Promise((resolve, reject) => {
    const env = { ...process.env, TF_NUM_INTRAOP_THREADS: String(threads), RELAX_ENGINE_THREADS: String(threads) };
    execFile(process.execPath, [path.join(__dirname, 'train-engine-child.js'), file], { env, maxBuffer: 16 * 2 ** 20 }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`${err.message.split('\n')[0]}: ${stderr.trim().split('\n').slice(-3).join(' | ')}`));
      try {
        resolve(JSON.parse(stdout.trim().split('\n').at(-1) ?? '') as TrainChildResult);
      } catch {
        reject(new Error(`the train child printed no result: ${stdout.slice(-300)}`));
      }
    });
  });
}

// Over 80 lines because it is one benchmark script, in order (model import, each engine's rollout
// and train timings against the roofline, report); not yet split (issue 33).
export async function pretrainedEnginesBench(ctx: BenchContext, from: string, roofline: { onnxruntime: number; tfjs: number }, device: Device = { kind: 'cpu' }): Promise<Record<string, unknown>> {
  const maxNewTokens = Number(ctx.options.max_new_tokens ?? 32);
  const minMs = Number(ctx.options.min_ms ?? 1000);
  const trainSequences = Number(ctx.options.train_sequences ?? 8);
  const backend = await loadTfjsBackend(device);
  const dir = await resolveModelSource(from, { home: relaxEnvironment().home, log: ctx.log });
  const base = await loadHfModel(dir, { contextLength: 512 });
  const cfg: ModelConfig = { ...base.config, lora: { rank: 8, alpha: 16, targets: ['q', 'k', 'v', 'o', 'gate', 'up', 'down'] } };
  // As the rollout workers run (ortThreads: every core for a real model; ort_threads overrides).
  const threads = Number(ctx.options.ort_threads ?? ortThreads(cfg));
  if (!Number.isInteger(threads) || threads < 1) throw new Error(`ort_threads: expected a whole number of threads >= 1, got ${ctx.options.ort_threads}`);
  const engineOptions = { device, maxBatchSize: 64, intraOpNumThreads: threads };
  const parameters = parameterCount(base.config);
  const adapters = randomAdapters(cfg, 3);
  ctx.log(`engines bench on ${from}: ${parameters.toLocaleString('en-US')} parameters, LoRA rank 8 on all projections (${Object.values(adapters).reduce((n, w) => n + w.length, 0).toLocaleString('en-US')} adapter parameters); tfjs ${backend.backend}`);

  // Rollout: the LoRA graph (adapters as inputs, the base built in) and the plain graph fed merged
  // weights; the LoRA graph at 1 thread as well, for the side-by-side of thread counts.
  const loraEngine = await RolloutEngine.create(cfg, engineOptions);
  const oneThreadEngine = threads === 1 ? loraEngine : await RolloutEngine.create(cfg, { ...engineOptions, intraOpNumThreads: 1 });
  const mergedEngine = await RolloutEngine.create(withoutLora(cfg), engineOptions);
  const rollout: Record<string, Record<string, number>> = { lora_adapters: {}, lora_one_thread: {}, merged: {}, whole_prompts: {} };
  const syncMs: Record<string, number> = {};
  try {
    for (const engine of new Set([loraEngine, oneThreadEngine])) {
      engine.setFrozenWeights(base.weights);
      engine.setWeights(0, adapters);
    }
    mergedEngine.setWeights(0, mergeLoraWeights(cfg, base.weights, adapters));
    const distinct = chatPrompts(dir, Math.max(...BATCHES, GROUP_PROMPTS));
    const cases: Array<[string, number[][]]> = [...BATCHES.map((b): [string, number[][]] => [String(b), distinct.slice(0, b)]), ['group', distinct.slice(0, GROUP_PROMPTS).flatMap((p) => Array.from({ length: GROUP_SIZE }, () => p))]];
    for (const [name, prompts] of cases) {
      rollout.lora_adapters[name] = await rolloutTokensPerS(loraEngine, prompts, maxNewTokens, minMs);
      rollout.lora_one_thread[name] = threads === 1 ? rollout.lora_adapters[name] : await rolloutTokensPerS(oneThreadEngine, prompts, maxNewTokens, minMs);
      rollout.merged[name] = await rolloutTokensPerS(mergedEngine, prompts, maxNewTokens, minMs);
      ctx.log(`rollout ${name === 'group' ? `group (${GROUP_PROMPTS} prompts x ${GROUP_SIZE})` : `batch ${name.padStart(3)}`}: ${rollout.lora_adapters[name].toFixed(0)} tokens/s with adapters as matmuls on ${threads} thread${threads === 1 ? '' : 's'} (${rollout.lora_one_thread[name].toFixed(0)} on 1), ${rollout.merged[name].toFixed(0)} merged`);
    }
    // The same LoRA engine prefilling every prompt whole (the chat template's system prompt too),
    // side by side with the shared prefix the figures above use.
    const wholeEngine = await RolloutEngine.create(cfg, { ...engineOptions, sharePrefix: false });
    try {
      wholeEngine.setFrozenWeights(base.weights);
      wholeEngine.setWeights(0, adapters);
      for (const [name, prompts] of cases.filter(([name]) => name === '8' || name === '32')) {
        rollout.whole_prompts[name] = await rolloutTokensPerS(wholeEngine, prompts, maxNewTokens, minMs);
        ctx.log(`rollout batch ${name.padStart(3)} prefilling each prompt whole: ${rollout.whole_prompts[name].toFixed(0)} tokens/s (${rollout.lora_adapters[name].toFixed(0)} with the shared prefix once)`);
      }
    } finally {
      await wholeEngine.release();
    }
    // Weight sync in one process: a version's adapters, the adapters merged into full weights, full weights.
    let version = 1;
    syncMs.adapters = (await timeCalls(() => loraEngine.setWeights(version++, adapters), { minCalls: 5, minMs: 200 })).medianMs;
    syncMs.merged = (await timeCalls(() => mergedEngine.setWeights(version++, mergeLoraWeights(cfg, base.weights, adapters)), { minCalls: 2, minMs: 0 })).medianMs;
    syncMs.full = (await timeCalls(() => mergedEngine.setWeights(version++, base.weights), { minCalls: 5, minMs: 200 })).medianMs;
    // Across processes a version travels as a checkpoint: write it, read and verify it back.
    const root = await mkdtemp(path.join(tmpdir(), 'relax-bench-sync-'));
    try {
      const viaCheckpoint = async (model: ModelConfig, weights: PolicyWeights) =>
        (
          await timeCalls(
            async () => {
              const info = await publishCheckpoint(root, version++, model, weights);
              await loadCheckpoint(info.dir, { model, sha256: info.sha256 });
            },
            { minCalls: 2, minMs: 0 },
          )
        ).medianMs;
      syncMs.adapters_checkpoint = await viaCheckpoint(cfg, adapters);
      syncMs.full_checkpoint = await viaCheckpoint(base.config, base.weights);
    } finally {
      await rm(root, { recursive: true, force: true });
    }
    ctx.log(`weight sync in process: adapters ${syncMs.adapters.toFixed(1)} ms, merge + full ${syncMs.merged.toFixed(0)} ms, full weights ${syncMs.full.toFixed(1)} ms; through a checkpoint: adapters ${syncMs.adapters_checkpoint.toFixed(0)} ms, full ${syncMs.full_checkpoint.toFixed(0)} ms`);
  } finally {
    await Promise.all([...new Set([loraEngine, oneThreadEngine, mergedEngine])].map((e) => e.release()));
  }

  // Train: PPO steps on chat prompts + sampled responses (8 x ~96 tokens, as the peer figures of
  // docs/benchmarks.md), LoRA rank 16 then full fine-tuning, each in its own process per thread
  // count (bench/train-engine-child.ts): TensorFlow fixes its threads when it loads, and the child's
  // peak RSS is the train engine's alone.
  const trainNewTokens = Number(ctx.options.train_new_tokens ?? 56);
  const trainRank = Number(ctx.options.train_rank ?? 16);
  const microBatchTokens = Number(ctx.options.micro_batch_tokens ?? REAL_MODEL_MICRO_BATCH_TOKENS);
  const microBatchTokensFull = Number(ctx.options.micro_batch_tokens_full ?? FULL_FINETUNE_MICRO_BATCH_TOKENS);
  const budgetOf = (mode: 'lora' | 'full') => (mode === 'full' ? microBatchTokensFull : microBatchTokens);
  const gradientCheckpointing = ctx.options.gradient_checkpointing === '1';
  const prompts = chatPrompts(dir, trainSequences);
  const sampler = await RolloutEngine.create(base.config, engineOptions);
  let batch: TrainSequence[];
  try {
    sampler.setWeights(0, base.weights);
    const samples = await sampler.generate(prompts, { maxNewTokens: trainNewTokens, temperature: 1, seed: 2 });
    const rand = seededRandom(9);
    batch = samples.map((s, i) => trainSequenceFromSample(prompts[i], s, { advantage: rand() < 0.5 ? -1 : 1 }));
  } finally {
    await sampler.release();
  }
  const trainThreads = [...new Set([1, engineThreads(base.config)])];
  const byThreads: Record<string, Record<string, number | string>> = {};
  const stepMsByThreads: Record<string, Record<string, number>> = {};
  const peakByMode: Record<string, number> = {};
  const scratch = await mkdtemp(path.join(tmpdir(), 'relax-bench-train-'));
  try {
    const inputFile = (mode: 'lora' | 'full') => {
      const file = path.join(scratch, `${mode}.json`);
      const input: TrainChildInput = { dir, contextLength: 512, rank: trainRank, mode, microBatchTokens: budgetOf(mode), gradientCheckpointing, sequences: batch.map((q) => ({ ...q, lossMask: Array.from(q.lossMask), oldLogprobs: Array.from(q.oldLogprobs ?? []) })) };
      writeFileSync(file, JSON.stringify(input));
      return file;
    };
    const files = { lora: inputFile('lora'), full: inputFile('full') };
    for (const n of trainThreads) {
      byThreads[n] = {};
      stepMsByThreads[n] = {};
      for (const mode of ['lora', 'full'] as const) {
        try {
          const r = await trainInChild(files[mode], n);
          byThreads[n][mode] = r.tokensPerS;
          stepMsByThreads[n][mode] = r.stepMs;
          peakByMode[mode] = Math.max(peakByMode[mode] ?? 0, r.peakRssMb);
          ctx.log(`train ${mode} (${r.backend}, ${n} thread${n === 1 ? '' : 's'}, ${batch.length} sequences, micro-batches of <= ${budgetOf(mode)} tokens: ${r.microBatches}${gradientCheckpointing ? ', gradient checkpointing' : ''}): ${r.tokensPerS.toFixed(1)} tokens/s, ${(r.stepMs / 1000).toFixed(1)} s a step, peak RSS ${r.peakRssMb.toFixed(0)} MB`);
        } catch (err) {
          byThreads[n][mode] = `failed: ${(err as Error).message.split('\n')[0]}`;
        }
      }
    }
  } finally {
    await rm(scratch, { recursive: true, force: true });
  }
  const threadsUsed = trainThreads[trainThreads.length - 1];
  const train = byThreads[threadsUsed];
  const stepMs = stepMsByThreads[threadsUsed];

  // A GRPO group batch (GROUP_PROMPTS prompts x GROUP_SIZE samples of max_new_tokens), LoRA, at the
  // workers' thread count: with each prompt computed once per micro-batch (the trainer's default)
  // and, side by side, every sequence whole. Tokens/s count every sequence's tokens in both (the
  // update is the same); `padded_tokens` is what each computed.
  const groupPrompts = chatPrompts(dir, GROUP_PROMPTS).flatMap((p) => Array.from({ length: GROUP_SIZE }, () => p));
  const groupSampler = await RolloutEngine.create(base.config, engineOptions);
  let groupBatch: TrainSequence[];
  try {
    groupSampler.setWeights(0, base.weights);
    const samples = await groupSampler.generate(groupPrompts, { maxNewTokens, temperature: 1, seed: 3 });
    const rand = seededRandom(10);
    groupBatch = samples.map((s, i) => trainSequenceFromSample(groupPrompts[i], s, { advantage: rand() < 0.5 ? -1 : 1 }));
  } finally {
    await groupSampler.release();
  }
  const groupTokens = groupBatch.reduce((n, s) => n + s.tokens.length, 0);
  const trainGroup: Record<string, number | string> = { sequences: groupBatch.length, tokens: groupTokens };
  const groupScratch = await mkdtemp(path.join(tmpdir(), 'relax-bench-train-group-'));
  try {
    // Shared and unshared prompts at the token budget, then shared with gradient checkpointing and
    // the whole batch in one micro-batch (its peak RSS reported apart, `peak_rss_mb_checkpointed`).
    const variants = [
      { key: 'shared', sharePrompts: true, checkpointed: gradientCheckpointing, budget: microBatchTokens },
      { key: 'unshared', sharePrompts: false, checkpointed: gradientCheckpointing, budget: microBatchTokens },
      { key: 'checkpointed', sharePrompts: true, checkpointed: true, budget: Math.max(microBatchTokens, groupTokens) },
    ];
    for (const { key, sharePrompts, checkpointed, budget } of variants) {
      const file = path.join(groupScratch, `group-${key}.json`);
      const input: TrainChildInput = { dir, contextLength: 512, rank: trainRank, mode: 'lora', microBatchTokens: budget, sharePrompts, gradientCheckpointing: checkpointed, sequences: groupBatch.map((q) => ({ ...q, lossMask: Array.from(q.lossMask), oldLogprobs: Array.from(q.oldLogprobs ?? []) })) };
      writeFileSync(file, JSON.stringify(input));
      try {
        const r = await trainInChild(file, threadsUsed);
        trainGroup[`tokens_per_s_${key}`] = round(r.tokensPerS);
        trainGroup[`step_ms_${key}`] = round(r.stepMs);
        trainGroup[`padded_tokens_${key}`] = r.paddedTokens;
        trainGroup[`micro_batches_${key}`] = r.microBatches;
        if (key === 'checkpointed') trainGroup.peak_rss_mb_checkpointed = round(r.peakRssMb);
        else peakByMode.lora = Math.max(peakByMode.lora ?? 0, r.peakRssMb);
        ctx.log(`train lora, group batch ${GROUP_PROMPTS} x ${GROUP_SIZE} (${groupTokens} tokens), prompts ${sharePrompts ? 'shared' : 'unshared'}${checkpointed ? ', gradient checkpointing' : ''}, ${r.microBatches} micro-batch(es) of <= ${budget} tokens: ${r.tokensPerS.toFixed(1)} tokens/s, ${(r.stepMs / 1000).toFixed(1)} s a step, ${r.paddedTokens} tokens computed, peak RSS ${r.peakRssMb.toFixed(0)} MB`);
      } catch (err) {
        trainGroup[`tokens_per_s_${key}`] = `failed: ${(err as Error).message.split('\n')[0]}`;
      }
    }
  } finally {
    await rm(groupScratch, { recursive: true, force: true });
  }
  if (typeof trainGroup.tokens_per_s_shared === 'number') train.lora_group = trainGroup.tokens_per_s_shared;
  if (typeof trainGroup.step_ms_shared === 'number' && typeof trainGroup.step_ms_unshared === 'number') trainGroup.speedup = round(trainGroup.step_ms_unshared / trainGroup.step_ms_shared);

  // Roofline fractions: 2 FLOPs per parameter per generated token; a train token costs ~6 per
  // parameter in full fine-tuning (forward + both backward products) and ~4 with LoRA (no weight gradients).
  const rolloutFraction = Object.fromEntries(BATCHES.map((b) => [b, round((rollout.lora_adapters[b] * 2 * parameters) / (roofline.onnxruntime * 1e9))]));
  const trainFraction = {
    lora: typeof train.lora === 'number' ? round((train.lora * 4 * parameters) / (roofline.tfjs * 1e9)) : null,
    full: typeof train.full === 'number' ? round((train.full * 6 * parameters) / (roofline.tfjs * 1e9)) : null,
  };
  return {
    bench: 'engines',
    model: from,
    parameters,
    tfjs_backend: backend.backend,
    ort_threads: threads,
    threads: { onnxruntime: threads, tensorflow: threadsUsed },
    rollout_tokens_per_s: rollout.lora_adapters,
    rollout_tokens_per_s_one_thread: rollout.lora_one_thread,
    rollout_tokens_per_s_merged: rollout.merged,
    rollout_tokens_per_s_whole_prompts: rollout.whole_prompts,
    train_tokens_per_s: train,
    train_tokens_per_s_by_threads: byThreads,
    train_group: trainGroup,
    train_step_ms: stepMs,
    train_micro_batch_tokens: microBatchTokens,
    train_micro_batch_tokens_full: microBatchTokensFull,
    train_gradient_checkpointing: gradientCheckpointing,
    train_lora_rank: trainRank,
    train_sequences: batch.length,
    train_tokens: batch.reduce((n, s) => n + s.tokens.length, 0),
    sync_ms: syncMs,
    adapter_mb: round(Object.values(adapters).reduce((n, w) => n + w.byteLength, 0) / 2 ** 20),
    base_mb: round(Object.values(base.weights).reduce((n, w) => n + w.byteLength, 0) / 2 ** 20),
    // The train engine's own peak (its child process), as a train worker holds it: the larger of
    // LoRA and full fine-tuning, each by mode; the bench process's (rollout engines) beside it.
    peak_rss_mb: round(Math.max(0, ...Object.values(peakByMode))),
    peak_rss_mb_by_mode: Object.fromEntries(Object.entries(peakByMode).map(([k, v]) => [k, round(v)])),
    bench_process_peak_rss_mb: round(peakRssMb()),
    roofline_gflops: roofline,
    rollout_roofline_fraction: rolloutFraction,
    train_roofline_fraction: trainFraction,
    median_rollout_tokens_per_s: round(median(BATCHES.map((b) => rollout.lora_adapters[b]))),
  };
}
