// `relax bench engines`: the policy engines on the default (add2) model, measured side by side in one
// run: rollout tokens/s by batch (ONNX Runtime), train tokens/s (tfjs), weight sync ms (in-process and
// through a checkpoint), peak RSS, a square-matmul roofline for both engines so the engine figures
// read as fractions of it, and how closely the two engines' log-probs agree before and after a
// train step + sync. Nothing here asserts a time: the bench measures and reports.
//
// Options (--set key=value): device (cpu | cuda:N), batches (e.g. 1,16,64,256), max_new_tokens,
// train_sequences, ort_threads (0 = ONNX Runtime's default), min_ms (timed wall time per figure),
// tfjs_cpu (1 also trains on the pure-JS tfjs `cpu` backend, a few steps only: it is ~50x slower),
// model (a pretrained model instead of the add2 policy: bench/real-engines.ts), multimodal (1 adds
// the media figures of bench/engines-media.ts under the `multimodal` key; 0 skips them),
// multimodal_batch / multimodal_train_sequences (their rollout batch and train batch).
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import * as tf from '@tensorflow/tfjs';
import * as ort from 'onnxruntime-node';
import { z } from 'zod';
import { parseRunConfig } from '../config/run-config';
import { loadTfjsBackend, onnxRuntimeInfo } from '../engines/backends';
import { deviceLabel, parseDevice } from '../engines/device';
import { seededRandom } from '../config/seeds';
import { parameterCount, type ModelConfig } from '../engines/model';
import { ONNX_OPSET } from '../engines/model-onnx';
import { encodeOnnxModel, OnnxDataType, type OnnxGraph } from '../engines/onnx-proto';
import { RolloutEngine, type GeneratedSample } from '../engines/rollout';
import { Trainer, trainSequenceFromSample, type TrainSequence } from '../engines/trainer';
import { policyLoss } from '../training/losses';
import { add2Tokenizer, add2TrainPrompts } from '../envs/add2';
import { ADD2_GRPO } from '../config/recipes';
import { promptTokens } from '../rollout/producers';
import { policyModelConfig } from '../training/options';
import type { Bench } from './index';
import { multimodalEnginesFigures, type MultimodalFigures } from './engines-media';
import { pretrainedEnginesBench } from './real-engines';
import { gcPauseMeter, median, peakRssMb, round, timeCalls } from './measure';
import { randomMatrix, tfjsMatmulGflops, trainOnEveryBackend, type BackendTrain } from './train-backends';

const ADD2_MICRO_BATCH = ADD2_GRPO.train?.micro_batch ?? 256;
const count = (min: number, fallback: number) => z.coerce.number().int().min(min).default(fallback);

const optionsSchema = z
  .object({
    device: z.string().default('cpu'),
    batches: z
      .string()
      .regex(/^[1-9]\d*(,[1-9]\d*)*$/, 'expected a comma-separated list of batch sizes such as 1,16,64,256')
      .default('1,16,64,256'),
    max_new_tokens: count(1, 16),
    /** Sequences per train step, one micro-batch: the add2 GRPO recipe's micro-batch (ADD2_GRPO.train.micro_batch). */
    train_sequences: count(1, ADD2_MICRO_BATCH),
    /** A second, small train batch (the figure before this bench followed the recipe): 0 skips it. */
    train_small_sequences: count(0, 64),
    ort_threads: count(0, 1),
    min_ms: count(0, 1000),
    tfjs_cpu: z.enum(['0', '1']).default('1'),
    /** A pretrained model (bench/real-engines.ts): a named model, a .gguf file or a Hugging Face directory. */
    model: z.string().min(1).optional(),
    /** The multimodal figures (bench/engines-media.ts): 1 measures them, 0 skips them. */
    multimodal: z.enum(['0', '1']).default('1'),
    multimodal_batch: count(1, 16),
    multimodal_train_sequences: count(1, 32),
    /** Pretrained (bench/real-engines.ts sets defaults): train new tokens, LoRA rank, token budgets, checkpointing. */
    train_new_tokens: z.coerce.number().int().min(1).optional(),
    train_rank: z.coerce.number().int().min(1).optional(),
    micro_batch_tokens: z.coerce.number().int().min(1).optional(),
    micro_batch_tokens_full: z.coerce.number().int().min(1).optional(),
    gradient_checkpointing: z.enum(['0', '1']).optional(),
  })
  .strict();

type BenchOptions = z.output<typeof optionsSchema>;

function parseOptions(raw: Record<string, string>): BenchOptions {
  const r = optionsSchema.safeParse(raw);
  if (r.success) return r.data;
  const problems = r.error.issues.map((i) =>
    i.code === 'unrecognized_keys'
      ? `unknown option ${i.keys.join(', ')} (known: ${Object.keys(optionsSchema.shape).join(', ')})`
      : `${i.path.join('.')}: ${i.message} (got "${raw[String(i.path[0])]}")`,
  );
  throw new Error(`bench engines --set: ${problems.join('; ')}`);
}

/** Prompts of the add2 task's real shape: bos + "a+b=" (5 to 7 tokens). */
function add2Prompts(seed: number, n: number): number[][] {
  const tokenizer = add2Tokenizer();
  return add2TrainPrompts(seed, n).map((p) => promptTokens(tokenizer, p));
}

/** Random token prompts of random length (1..maxLength), any id of the vocabulary. */
function randomPrompts(model: ModelConfig, seed: number, n: number, maxLength: number): number[][] {
  const rand = seededRandom(seed);
  return Array.from({ length: n }, () => Array.from({ length: 1 + Math.floor(rand() * maxLength) }, () => Math.floor(rand() * model.vocabSize)));
}


/** A square matmul's GFLOP/s (2 n^3 FLOPs per call) given the median call time. */
const matmulGflops = (n: number, ms: number) => (2 * n ** 3) / (ms * 1e6);

/** ONNX Runtime on a one-node MatMul graph, with the rollout engine's session options. */
async function ortMatmulGflops(n: number, sessionOptions: ort.InferenceSession.SessionOptions, minMs: number): Promise<number> {
  const square = { dataType: OnnxDataType.FLOAT, shape: [n, n] };
  const graph: OnnxGraph = {
    name: `matmul_${n}`,
    nodes: [{ opType: 'MatMul', inputs: ['a', 'b'], outputs: ['c'], name: 'matmul', attributes: {} }],
    inputs: [{ name: 'a', ...square }, { name: 'b', ...square }],
    outputs: [{ name: 'c', ...square }],
  };
  const session = await ort.InferenceSession.create(encodeOnnxModel(graph, ONNX_OPSET), sessionOptions);
  try {
    const feeds = { a: new ort.Tensor('float32', randomMatrix(n, 1), [n, n]), b: new ort.Tensor('float32', randomMatrix(n, 2), [n, n]) };
    return matmulGflops(n, (await timeCalls(() => session.run(feeds), { minCalls: 5, minMs })).medianMs);
  } finally {
    await session.release();
  }
}

/** Max |rollout log-prob - trainer log-prob| over every generated token (aligned as in test/engines.test.ts). */
async function maxLogprobDiff(trainer: Trainer, prompts: number[][], samples: GeneratedSample[]): Promise<number> {
  const rows = await trainer.logprobs(prompts.map((p, i) => [...p, ...samples[i].tokens]));
  let worst = 0;
  samples.forEach((s, i) => s.logprobs.forEach((lp, j) => (worst = Math.max(worst, Math.abs(lp - rows[i][prompts[i].length - 1 + j])))));
  return worst;
}

/** PPO training sequences from samples, with advantages +-1 drawn from `seed` (a real gradient, any sign). */
function ppoBatch(prompts: number[][], samples: GeneratedSample[], seed: number): TrainSequence[] {
  const rand = seededRandom(seed);
  return samples.map((s, i) => trainSequenceFromSample(prompts[i], s, { advantage: rand() < 0.5 ? -1 : 1 }));
}

/** Tokens of the training sequences (prompt + response) a step processes. */
const sequenceTokens = (batch: readonly TrainSequence[]) => batch.reduce((n, s) => n + s.tokens.length, 0);

/** Train tokens/s of PPO steps on `batch` after one warmup step. */
async function trainThroughput(trainer: Trainer, batch: TrainSequence[], options: { minCalls: number; minMs: number }): Promise<{ tokensPerS: number; stepMs: number; steps: number }> {
  const loss = policyLoss({ algorithm: 'ppo' });
  const timing = await timeCalls(() => trainer.trainStep(batch, loss), { warmup: 1, ...options });
  return { tokensPerS: sequenceTokens(batch) / (timing.medianMs / 1000), stepMs: timing.medianMs, steps: timing.calls };
}

const ROOFLINE_SIZES = [256, 512];
const ROLLOUT_ROUNDS = 3;
/** The pure-JS backend trains on this many sequences, for one timed step. */
const CPU_BACKEND_SEQUENCES = 16;

// Over 80 lines because it is one benchmark script, in order (engines, rollout rounds, train steps
// per backend, figures); not yet split (issue 33).
export const enginesBench: Bench = async (ctx) => {
  const started = performance.now();
  const options = parseOptions(ctx.options);
  const device = (() => {
    try {
      return parseDevice(options.device);
    } catch (err) {
      throw new Error(`bench engines --set device=${options.device}: expected cpu or cuda:N (N a GPU index such as 0)`, { cause: err });
    }
  })();
  const batches = [...new Set(options.batches.split(',').map(Number))];
  const runConfig = parseRunConfig({});
  const model = policyModelConfig(runConfig.model, add2Tokenizer().vocabSize);
  const parameters = parameterCount(model);
  const minMs = options.min_ms;

  const tfjsInfo = await loadTfjsBackend(device);
  const ortInfo = await onnxRuntimeInfo(device);
  const ortThreads = options.ort_threads === 0 ? undefined : options.ort_threads;
  const backend = {
    device: deviceLabel(device),
    tfjs: tfjsInfo.backend,
    tfjs_package: tfjsInfo.package,
    onnxruntime: ortInfo.executionProviders.join(','),
    onnxruntime_version: ortInfo.version,
    ort_threads: ortThreads ?? 'onnxruntime default (all cores)',
  };
  ctx.log(`engines bench: model ${JSON.stringify(model)} (${parameters} parameters)`);
  ctx.log(`backends: tfjs ${backend.tfjs} (${backend.tfjs_package}); onnxruntime ${backend.onnxruntime} ${backend.onnxruntime_version}, intra-op threads ${backend.ort_threads}`);

  // Roofline first, before the engines' allocations: what a large matmul reaches on each engine.
  const sessionOptions: ort.InferenceSession.SessionOptions = {
    executionProviders: ortInfo.executionProviders,
    graphOptimizationLevel: 'all',
    logSeverityLevel: 3,
    ...(ortThreads ? { intraOpNumThreads: ortThreads } : {}),
  };
  const roofline: { onnxruntime: Record<string, number>; tfjs: Record<string, number> } = { onnxruntime: {}, tfjs: {} };
  for (const n of ROOFLINE_SIZES) {
    roofline.onnxruntime[n] = await ortMatmulGflops(n, sessionOptions, minMs);
    roofline.tfjs[n] = await tfjsMatmulGflops(n, minMs);
    ctx.log(`roofline ${n}x${n} matmul: onnxruntime ${roofline.onnxruntime[n].toFixed(1)} GFLOP/s, tfjs ${backend.tfjs} ${roofline.tfjs[n].toFixed(1)} GFLOP/s`);
  }
  const ortPeak = Math.max(...Object.values(roofline.onnxruntime));
  const tfjsPeak = Math.max(...Object.values(roofline.tfjs));
  if (options.model) return pretrainedEnginesBench(ctx, options.model, { onnxruntime: ortPeak, tfjs: tfjsPeak }, device);

  const trainer = Trainer.create({ model, seed: runConfig.seed, optimizer: { lr: 1e-3 }, microBatchSize: runConfig.train.micro_batch });
  const engine = await RolloutEngine.create(model, { device, ...(ortThreads ? { intraOpNumThreads: ortThreads } : {}), maxBatchSize: Math.max(...batches, options.train_sequences) });
  const root = await mkdtemp(path.join(tmpdir(), 'relax-bench-engines-'));
  try {
    // Agreement: random prompts sampled at v0, one PPO step on those samples, sync through a
    // checkpoint (the cross-process path), sample again at v1.
    let version = 0;
    engine.setWeights(version, await trainer.exportWeights());
    const checkPrompts = randomPrompts(model, 5, 32, 12);
    const checkParams = { maxNewTokens: options.max_new_tokens, temperature: 1 };
    const v0Samples = await engine.generate(checkPrompts, { ...checkParams, seed: 1 });
    const diffBefore = await maxLogprobDiff(trainer, checkPrompts, v0Samples);
    await trainer.trainStep(ppoBatch(checkPrompts, v0Samples, 9), policyLoss({ algorithm: 'ppo' }));
    const stepShift = await maxLogprobDiff(trainer, checkPrompts, v0Samples);
    const v1 = await trainer.publish(root, ++version);
    await engine.loadCheckpoint(v1.dir, { sha256: v1.sha256 });
    const diffAfter = await maxLogprobDiff(trainer, checkPrompts, await engine.generate(checkPrompts, { ...checkParams, seed: 2 }));
    ctx.log(`logprob max |onnxruntime - tfjs|: before ${diffBefore.toExponential(2)}, after train step + sync ${diffAfter.toExponential(2)} (the step moved log-probs by up to ${stepShift.toExponential(2)})`);

    // Rollout: add2-shaped prompts, no stop tokens, so every sample generates max_new_tokens. The
    // batch sizes take turns over ROLLOUT_ROUNDS rounds, so a neighbour's burst of load lands on all
    // of them rather than on one, and the median of each batch's calls is compared.
    const rollout = batches.map((batch) => ({ batch, prompts: add2Prompts(100 + batch, batch), tokens: 0, timesMs: [] as number[] }));
    let rolloutSeed = 0;
    const rolloutGc = gcPauseMeter();
    for (let round = 0; round < ROLLOUT_ROUNDS; round++) {
      for (const r of rollout) {
        const timing = await timeCalls(
          async () => {
            const samples = await engine.generate(r.prompts, { maxNewTokens: options.max_new_tokens, seed: rolloutSeed++ });
            r.tokens = samples.reduce((n, s) => n + s.tokens.length, 0);
          },
          { warmup: round === 0 ? 1 : 0, minCalls: 1, minMs: minMs / ROLLOUT_ROUNDS },
        );
        r.timesMs.push(...timing.timesMs);
      }
    }
    const rolloutGcShare = rolloutGc.stop();
    const rolloutTokensPerS: Record<string, number> = {};
    for (const r of rollout) {
      const ms = median(r.timesMs);
      rolloutTokensPerS[r.batch] = r.tokens / (ms / 1000);
      ctx.log(`rollout batch ${String(r.batch).padStart(4)}: ${rolloutTokensPerS[r.batch].toFixed(0)} tokens/s (${r.tokens} tokens in ${ms.toFixed(1)} ms, median of ${r.timesMs.length})`);
    }

    // Train: a GRPO-sized batch of add2 sequences (prompt + rollout.max_new_tokens response tokens),
    // on every tfjs backend that loads here (bench/train-backends.ts), in interleaved rounds.
    const trainPrompts = add2Prompts(7, options.train_sequences);
    const trainSamples = await engine.generate(trainPrompts, { maxNewTokens: runConfig.rollout.max_new_tokens, seed: 3 });
    const trainBatch = ppoBatch(trainPrompts, trainSamples, 11);
    const trainGc = gcPauseMeter();
    const trainerFor = (batch: TrainSequence[]) => () => Trainer.create({ model, seed: runConfig.seed, optimizer: { lr: 1e-3 }, microBatchSize: batch.length });
    const trainOptions = { minMs, rooflineSizes: ROOFLINE_SIZES, flopsPerToken: 6 * parameters, log: ctx.log };
    const byBackend = await trainOnEveryBackend(device, tfjsInfo.backend, trainBatch, trainerFor(trainBatch), trainOptions);
    const smallBatch = trainBatch.slice(0, options.train_small_sequences);
    const smallByBackend = smallBatch.length > 0 ? await trainOnEveryBackend(device, tfjsInfo.backend, smallBatch, trainerFor(smallBatch), trainOptions) : undefined;
    const trainGcShare = trainGc.stop();
    const train = byBackend[tfjsInfo.backend];
    ctx.log(`train (${backend.tfjs}, ppo, ${trainBatch.length} sequences, ${sequenceTokens(trainBatch)} tokens): ${train.tokensPerS.toFixed(0)} tokens/s (${train.stepMs.toFixed(1)} ms/step, median of ${train.steps})`);

    // Weight sync: trainer -> rollout engine in one process, and through a checkpoint directory.
    const inProcess = await timeCalls(async () => engine.setWeights(++version, await trainer.exportWeights()), { minCalls: 5, minMs: minMs / 2, maxCalls: 50 });
    const viaCheckpoint = await timeCalls(
      async () => {
        const info = await trainer.publish(root, ++version);
        await engine.loadCheckpoint(info.dir, { sha256: info.sha256 });
      },
      { minCalls: 5, minMs: minMs / 2, maxCalls: 20 },
    );
    ctx.log(`weight sync: in-process ${inProcess.medianMs.toFixed(2)} ms, via checkpoint ${viaCheckpoint.medianMs.toFixed(2)} ms`);

    // Other tfjs backends that load here: the pure-JS one, briefly (a small batch, one timed step).
    const otherBackends: Record<string, { roofline_gflops_256: number; train_tokens_per_s: number; train_sequences: number; train_step_ms: number }> = {};
    if (options.tfjs_cpu === '1' && tfjsInfo.backend !== 'cpu' && (await tf.setBackend('cpu'))) {
      try {
        const gflops = await tfjsMatmulGflops(256, 0, 2);
        const cpuTrainer = Trainer.create({ model, seed: runConfig.seed, optimizer: { lr: 1e-3 }, microBatchSize: runConfig.train.micro_batch });
        try {
          const small = trainBatch.slice(0, CPU_BACKEND_SEQUENCES);
          const cpuTrain = await trainThroughput(cpuTrainer, small, { minCalls: 1, minMs: 0 });
          otherBackends.cpu = { roofline_gflops_256: round(gflops), train_tokens_per_s: round(cpuTrain.tokensPerS), train_sequences: small.length, train_step_ms: round(cpuTrain.stepMs) };
          ctx.log(`tfjs cpu (pure JS): matmul 256 ${gflops.toFixed(2)} GFLOP/s; train ${cpuTrain.tokensPerS.toFixed(0)} tokens/s (${small.length} sequences, ${cpuTrain.stepMs.toFixed(0)} ms/step)`);
        } finally {
          cpuTrainer.dispose();
        }
      } finally {
        await tf.setBackend(tfjsInfo.backend);
      }
    }

    // Estimated achieved GFLOP/s: ~2 FLOPs per parameter per generated token (forward only),
    // ~6 per trained token (forward + backward); attention's own FLOPs are small at this context.
    const rolloutFraction = Object.fromEntries(batches.map((b) => [b, round((rolloutTokensPerS[b] * 2 * parameters) / 1e9 / ortPeak)]));
    const trainFraction = round((train.tokensPerS * 6 * parameters) / 1e9 / tfjsPeak);
    const perBackend = <T>(f: (r: BackendTrain) => T) => Object.fromEntries(Object.entries(byBackend).map(([k, r]) => [k, f(r)]));
    const peakRss = peakRssMb(); // before the multimodal figures' own engine and trainer

    // Multimodal: the media tasks' tiny policy with its encoders, text / image / audio side by side.
    let multimodal: MultimodalFigures | undefined;
    if (options.multimodal === '1') {
      multimodal = await multimodalEnginesFigures({
        device,
        ortThreads,
        minMs,
        maxNewTokens: options.max_new_tokens,
        batch: options.multimodal_batch,
        trainSequences: options.multimodal_train_sequences,
        seed: runConfig.seed,
        log: ctx.log,
      });
    }
    const result = {
      bench: 'engines',
      backend,
      model: { ...model, parameters },
      rollout_tokens_per_s: Object.fromEntries(batches.map((b) => [b, round(rolloutTokensPerS[b])])),
      rollout_max_new_tokens: options.max_new_tokens,
      train_tokens_per_s: round(train.tokensPerS),
      train_step_ms: round(train.stepMs),
      train_sequences: trainBatch.length,
      train_tokens_per_step: sequenceTokens(trainBatch),
      train_tokens_per_s_by_backend: perBackend((r) => round(r.tokensPerS)),
      train_step_ms_by_backend: perBackend((r) => round(r.stepMs)),
      train_roofline_gflops_by_backend: perBackend((r) => Object.fromEntries(Object.entries(r.rooflineGflops).map(([n, g]) => [n, round(g)]))),
      train_fraction_of_roofline_by_backend: perBackend((r) => round(r.fractionOfRoofline)),
      ...(byBackend.tensorflow && byBackend.wasm ? { train_native_over_wasm: round(byBackend.tensorflow.tokensPerS / byBackend.wasm.tokensPerS) } : {}),
      ...(smallByBackend
        ? {
            train_small_batch: {
              sequences: smallBatch.length,
              tokens_per_step: sequenceTokens(smallBatch),
              tokens_per_s_by_backend: Object.fromEntries(Object.entries(smallByBackend).map(([k, r]) => [k, round(r.tokensPerS)])),
              ...(smallByBackend.tensorflow && smallByBackend.wasm ? { native_over_wasm: round(smallByBackend.tensorflow.tokensPerS / smallByBackend.wasm.tokensPerS) } : {}),
            },
          }
        : {}),
      sync_ms: { in_process: round(inProcess.medianMs), via_checkpoint: round(viaCheckpoint.medianMs) },
      peak_rss_mb: round(peakRss),
      gc_pause_share: { rollout: round(rolloutGcShare), train: round(trainGcShare) },
      roofline_gflops: {
        onnxruntime: Object.fromEntries(Object.entries(roofline.onnxruntime).map(([n, g]) => [n, round(g)])),
        tfjs: Object.fromEntries(Object.entries(roofline.tfjs).map(([n, g]) => [n, round(g)])),
      },
      rollout_fraction_of_roofline: rolloutFraction,
      train_fraction_of_roofline: trainFraction,
      fraction_of_roofline_note: 'an estimate: (tokens/s x 2 x parameters for rollout, x 6 for train) / the best roofline GFLOP/s of that engine',
      logprob_max_abs_diff: { before: round(diffBefore), after: round(diffAfter) },
      logprob_shift_from_train_step: round(stepShift),
      ...(Object.keys(otherBackends).length ? { other_tfjs_backends: otherBackends } : {}),
      ...(multimodal ? { multimodal } : {}),
      wall_s: round((performance.now() - started) / 1000),
    };
    logTable(ctx.log, result, rolloutTokensPerS, train.tokensPerS, multimodal);
    return result;
  } finally {
    trainer.dispose();
    await engine.release();
    await rm(root, { recursive: true, force: true });
  }
};

interface TableInputs {
  backend: { tfjs: string; onnxruntime: string; ort_threads: number | string };
  rollout_fraction_of_roofline: Record<string, number>;
  train_fraction_of_roofline: number;
  sync_ms: { in_process: number; via_checkpoint: number };
  roofline_gflops: { onnxruntime: Record<string, number>; tfjs: Record<string, number> };
  logprob_max_abs_diff: { before: number; after: number };
  peak_rss_mb: number;
  wall_s: number;
}

function logTable(log: (line: string) => void, r: TableInputs, rollout: Record<string, number>, trainTokensPerS: number, mm?: MultimodalFigures): void {
  const x = (v: number) => `${v.toFixed(2)}x`;
  const media: Array<[string, string, string]> = mm
    ? [
        ...(['text', 'image', 'audio'] as const).map((v): [string, string, string] => [`multimodal rollout ${v} (batch ${mm.rollout_batch})`, `${mm.rollout_tokens_per_s[v].toFixed(0)} tok/s`, v === 'text' ? '' : `${x(mm.ratios.rollout[`${v}_over_text`])} of text`]),
        ...(['text', 'image', 'audio'] as const).map((v): [string, string, string] => [`multimodal train ${v} (${mm.train_sequences} seq, all tokens)`, `${mm.train_tokens_per_s[v].toFixed(0)} tok/s`, v === 'text' ? '' : `${x(mm.ratios.train[`${v}_over_text`])} of text`]),
        ['image processor (64x64 png)', `${mm.image_processor_images_per_s.toFixed(0)} img/s`, ''],
        ['audio processor (wav to log-mel)', `${mm.audio_processor_audio_s_per_s.toFixed(0)} audio s/s`, ''],
        ['media store put / get (1 MiB)', `${mm.media_store.write_mib_per_s.toFixed(0)} / ${mm.media_store.read_mib_per_s.toFixed(0)} MiB/s`, ''],
      ]
    : [];
  const rows: Array<[string, string, string]> = [
    ...Object.entries(rollout).map(([b, t]): [string, string, string] => [`rollout batch ${b} (onnxruntime ${r.backend.onnxruntime})`, `${t.toFixed(0)} tok/s`, pct(r.rollout_fraction_of_roofline[b])]),
    [`train ppo (tfjs ${r.backend.tfjs})`, `${trainTokensPerS.toFixed(0)} tok/s`, pct(r.train_fraction_of_roofline)],
    ['weight sync in-process', `${r.sync_ms.in_process} ms`, ''],
    ['weight sync via checkpoint', `${r.sync_ms.via_checkpoint} ms`, ''],
    ...Object.keys(r.roofline_gflops.onnxruntime).map((n): [string, string, string] => [`roofline matmul ${n}: onnxruntime / tfjs`, `${r.roofline_gflops.onnxruntime[n]} / ${r.roofline_gflops.tfjs[n]} GFLOP/s`, '']),
    ['logprob max |diff| before / after', `${r.logprob_max_abs_diff.before.toExponential(1)} / ${r.logprob_max_abs_diff.after.toExponential(1)}`, ''],
    ...media,
    ['peak RSS', `${r.peak_rss_mb} MB`, ''],
    ['wall time', `${r.wall_s} s`, ''],
  ];
  const w0 = Math.max(...rows.map((x) => x[0].length));
  const w1 = Math.max(...rows.map((x) => x[1].length));
  log('');
  log(`${'measure'.padEnd(w0)}  ${'value'.padStart(w1)}  of roofline (est.) / vs text`);
  for (const [a, b, c] of rows) log(`${a.padEnd(w0)}  ${b.padStart(w1)}  ${c}`);
  log('');
}

const pct = (fraction: number) => `${(fraction * 100).toFixed(1)}%`;
