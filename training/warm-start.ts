// The SFT warm start a GRPO run begins from, computed once and cached as a real checkpoint (keyed
// by everything that determines it), so repeated runs and benchmarks start from identical weights.
// A run's `init.sft` (config/init-config.ts) is the same recipe in snake_case (sftRecipeOf); the
// workflow's warmStart activity (activities/train.ts) calls loadOrTrainWarmStart with it. The
// recipes themselves are data in config/recipes.ts; the calculator's warm start trains here too.
import { createHash } from 'node:crypto';
import { mkdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { SftInitConfig } from '../config/init-config';
import { ADD2_SFT_INIT, CALCULATOR_GRPO } from '../config/recipes';
import { parseRunConfig, type RunConfig } from '../config/run-config';
import { CheckpointOverwriteError, checkpointDir, loadCheckpoint, publishCheckpoint } from '../engines/checkpoint';
import { hasFrozenParameters, type ModelConfig, type PolicyWeights, type TrainablePart } from '../engines/model';
import { RolloutEngine } from '../engines/rollout';
import { Trainer } from '../engines/trainer';
import { calculatorTask } from '../envs/calculator';
import { loadTask } from '../envs/registry';
import type { Task } from '../envs/task';
import { evaluateGreedy } from '../rollout/evaluate';
import { policyModelConfig } from './options';
import { initialPolicyWeights, loadRunPolicy, withBaseWeights } from './policy-model';
import { sftWarmStart } from './sft';

export interface SftRecipe {
  /** The parts the supervised steps train (default: all the run trains). */
  trainable?: TrainablePart[];
  lr: number;
  batchSize: number;
  maxSteps: number;
  evalEvery: number;
  /** The warm start's held-out greedy accuracy must land inside [low, high]... */
  band: [number, number];
  /** ...and training stops at the first evaluation at or above this (default: band[0]). */
  target?: number;
}

/** A config's init.sft as the SftRecipe it names (same fields, same key order: the same cache key as the camelCase recipe). */
export function sftRecipeOf(sft: SftInitConfig): SftRecipe {
  return {
    ...(sft.trainable !== undefined ? { trainable: [...sft.trainable] } : {}),
    lr: sft.lr,
    batchSize: sft.batch_size,
    maxSteps: sft.max_steps,
    evalEvery: sft.eval_every,
    band: [sft.band[0], sft.band[1]],
    ...(sft.target !== undefined ? { target: sft.target } : {}),
  };
}

/** config/recipes.ts ADD2_SFT_INIT as the SftRecipe the quickstart and the benchmarks warm-start add2 with. */
export const ADD2_SFT: SftRecipe = sftRecipeOf(ADD2_SFT_INIT);

/**
 * An add2 teacher for on-policy distillation (algorithm.teacher): the same SFT run on to >= 99%
 * held-out, cached under its own key (measured: 99.0% after 3,300 steps, 335 s on 2 cores). A 95%
 * teacher is not enough: a student that matches it lands at about its accuracy, not over 95%.
 */
export const ADD2_TEACHER_SFT: SftRecipe = { ...ADD2_SFT, maxSteps: 20_000, evalEvery: 50, band: [0.99, 1], target: 0.99 };

export interface WarmStart {
  weights: PolicyWeights;
  /** Held-out greedy accuracy of the warm start. */
  accuracy: number;
  sftSteps: number;
  sftWallS: number;
  /** The checkpoint directory (policy version 0). */
  dir: string;
  cached: boolean;
}

interface WarmStartMeta {
  accuracy: number;
  sftSteps: number;
  sftWallS: number;
}

// Bump when the SFT procedure changes in a way the key below cannot see.
const WARM_START_FORMAT = 3;
const META_FILE = 'warm-start.json';

/** The SFT never landed in its band (training/sft.ts): a deterministic outcome of the recipe, not a passing fault. */
export class WarmStartBandError extends Error {
  override readonly name = 'WarmStartBandError';
}
const BAND_MISSED = /^SFT warm start (overshot its band|did not reach)/;

// Warm starts being computed in this process, by cache directory: a second caller (a retried
// activity whose first attempt still runs here) waits for the first instead of training again.
const training = new Map<string, Promise<WarmStart>>();

/** The cached warm start under `root`, or undefined when it is not (completely) there. */
async function cachedWarmStart(root: string, model: ModelConfig): Promise<WarmStart | undefined> {
  const dir = checkpointDir(root, 0);
  try {
    const meta = JSON.parse(await readFile(path.join(root, META_FILE), 'utf8')) as WarmStartMeta;
    const checkpoint = await loadCheckpoint(dir, { model });
    return { weights: checkpoint.weights, ...meta, dir, cached: true };
  } catch {
    return undefined; // not cached yet, or unreadable: train it
  }
}

/**
 * The warm start for `config` and `sft`: from the cache under cacheRoot (keyed by everything that
 * determines it), else trained (sftWarmStart) and published there as policy version 0. When another
 * process published it first with other bits (native backends do not reduce in a fixed order),
 * theirs is used.
 */
export async function loadOrTrainWarmStart(config: RunConfig, sft: SftRecipe, cacheRoot: string, log: (line: string) => void = () => undefined): Promise<WarmStart> {
  const setup = config.model.from === undefined ? await tinySetup(config, sft) : await pretrainedSetup(config, sft, log);
  const { task, model } = setup;
  const key = createHash('sha256')
    .update(JSON.stringify({ format: WARM_START_FORMAT, task: config.task, model, seed: config.seed, sft, maxNewTokens: config.rollout.max_new_tokens, ...setup.keyExtras }))
    .digest('hex')
    .slice(0, 16);
  const root = path.resolve(cacheRoot, `${setup.name}-sft-${key}`);
  const cached = await cachedWarmStart(root, model);
  if (cached) {
    log(`[sft] warm start from cache ${cached.dir}: held-out accuracy ${(cached.accuracy * 100).toFixed(1)}%`);
    return cached;
  }
  let running = training.get(root);
  if (!running) {
    running = underLock(root, model, log, () => trainWarmStart(config, sft, setup, root, log)).finally(() => training.delete(root));
    training.set(root, running);
  }
  return running;
}

/**
 * Trains under `${root}.lock` (a file created exclusively, naming this host and process), so two
 * processes that need the same warm start at once (two runs, two test lanes) train it once: the
 * second waits for the first and reads the cache. A lock whose process has gone (on this host) or
 * that is over two hours old is taken over.
 */
async function underLock(root: string, model: ModelConfig, log: (line: string) => void, train: () => Promise<WarmStart>): Promise<WarmStart> {
  const lock = `${root}.lock`;
  await mkdir(path.dirname(lock), { recursive: true });
  let told = false;
  for (;;) {
    const held = await writeFile(lock, JSON.stringify({ host: os.hostname(), pid: process.pid }), { flag: 'wx', mode: 0o600 }).then(
      () => false,
      (err: NodeJS.ErrnoException) => {
        if (err.code === 'EEXIST') return true;
        throw err;
      },
    );
    if (!held) {
      try {
        return (await cachedWarmStart(root, model)) ?? (await train());
      } finally {
        await rm(lock, { force: true });
      }
    }
    const found = await cachedWarmStart(root, model);
    if (found) return found;
    if (await staleLock(lock)) {
      await rm(lock, { force: true });
      continue;
    }
    if (!told) log(`[sft] warm start: another process is training it (${lock}); waiting for it`);
    told = true;
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

async function staleLock(lock: string): Promise<boolean> {
  try {
    const [text, info] = await Promise.all([readFile(lock, 'utf8'), stat(lock)]);
    if (Date.now() - info.mtimeMs > 2 * 3600_000) return true;
    const holder = JSON.parse(text) as { host?: string; pid?: number };
    if (holder.host !== os.hostname() || typeof holder.pid !== 'number') return false;
    try {
      process.kill(holder.pid, 0);
      return false;
    } catch (err) {
      return (err as NodeJS.ErrnoException).code === 'ESRCH';
    }
  } catch {
    return false; // released (or still being written) meanwhile: look again
  }
}

/** What a warm start trains: the task, the model, and its trainer and engine at version 0. */
interface WarmStartSetup {
  /** The cache directory's name prefix. */
  name: string;
  task: Task;
  model: ModelConfig;
  /** More of what determines the warm start (a pretrained model's sources, the data). */
  keyExtras: Record<string, unknown>;
  trainer(): Promise<Trainer>;
  engine(): Promise<RolloutEngine>;
}

/** The tiny GPT on a built-in task's demonstrations, from a seeded random start. */
async function tinySetup(config: RunConfig, sft: SftRecipe): Promise<WarmStartSetup> {
  const task = await loadTask(config.task);
  const model = policyModelConfig(config.model, task.tokenizer().vocabSize, task);
  return {
    name: config.task,
    task,
    model,
    keyExtras: {},
    trainer: async () => Trainer.create({ model, seed: config.seed, optimizer: { lr: sft.lr }, microBatchSize: sft.batchSize, ...(sft.trainable ? { trainable: sft.trainable } : {}) }),
    engine: () => RolloutEngine.create(model),
  };
}

/**
 * A pretrained model (model.from, and model.audio.from) on its dataset's answers, from the run's
 * version 0 (the pretrained weights, fresh adapters and projectors); frozen parts stay in the
 * engines, so the checkpoint holds what the run trains.
 */
async function pretrainedSetup(config: RunConfig, sft: SftRecipe, log: (line: string) => void): Promise<WarmStartSetup> {
  const policy = await loadRunPolicy(config, { log });
  const { model, task } = policy;
  // The data itself, as the task reads it: the held-out prompts and answers and a seeded train batch.
  const data = createHash('sha256').update(JSON.stringify([task.heldOut(), task.trainPrompts(config.seed, 64)])).digest('hex');
  return {
    name: 'dataset',
    task,
    model,
    keyExtras: { from: config.model.from, audioFrom: config.model.audio?.from, data: config.data, dataDigest: data },
    trainer: async () => {
      const weights = await withBaseWeights(policy, await initialPolicyWeights(policy, config.seed));
      const trainable = sft.trainable ?? config.train.trainable;
      return Trainer.create({ model, weights, seed: config.seed, optimizer: { lr: sft.lr }, microBatchSize: sft.batchSize, ...(trainable ? { trainable } : {}) });
    },
    engine: async () => {
      const engine = await RolloutEngine.create(model);
      if (hasFrozenParameters(model) && policy.baseWeights) engine.setFrozenWeights(await policy.baseWeights());
      return engine;
    },
  };
}

async function trainWarmStart(config: RunConfig, sft: SftRecipe, setup: WarmStartSetup, root: string, log: (line: string) => void): Promise<WarmStart> {
  const { task, model } = setup;
  const dir = checkpointDir(root, 0);
  const started = performance.now();
  const trainer = await setup.trainer();
  const engine = await setup.engine();
  try {
    const r = await sftWarmStart({ task, trainer, engine, seed: config.seed, batchSize: sft.batchSize, maxSteps: sft.maxSteps, evalEvery: sft.evalEvery, band: sft.band, target: sft.target, maxNewTokens: config.rollout.max_new_tokens, log }).catch((err: unknown) => {
      throw err instanceof Error && BAND_MISSED.test(err.message) ? new WarmStartBandError(err.message) : err;
    });
    const meta: WarmStartMeta = { accuracy: r.accuracy, sftSteps: r.steps, sftWallS: (performance.now() - started) / 1000 };
    try {
      await publishCheckpoint(root, 0, model, r.weights);
    } catch (err) {
      if (!(err instanceof CheckpointOverwriteError)) throw err;
      const theirs = await publishedByAnother(root, model);
      if (!theirs) throw err;
      log(`[sft] warm start: another process published ${dir} first; using it`);
      return theirs;
    }
    await writeFile(path.join(root, META_FILE), `${JSON.stringify(meta, null, 2)}\n`);
    log(`[sft] warm start: ${r.steps} steps, held-out accuracy ${(r.accuracy * 100).toFixed(1)}%, saved to ${dir}`);
    return { weights: r.weights, ...meta, dir, cached: false };
  } finally {
    trainer.dispose();
    await engine.release();
  }
}

/** The warm start another process published under `root`, once its meta file is written (it follows the checkpoint). */
async function publishedByAnother(root: string, model: ModelConfig, waitMs = 30_000): Promise<WarmStart | undefined> {
  const until = Date.now() + waitMs;
  for (;;) {
    const found = await cachedWarmStart(root, model);
    if (found || Date.now() >= until) return found;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

export interface CalculatorWarmStart {
  weights: PolicyWeights;
  accuracy: number;
  toolUse: number;
}

/** `sftSteps` supervised steps on the calculator's demonstrations (no accuracy band: a fixed budget). */
export async function calculatorWarmStart(config: RunConfig, sftSteps: number): Promise<CalculatorWarmStart> {
  const model = policyModelConfig(config.model, calculatorTask.tokenizer().vocabSize);
  const trainer = Trainer.create({ model, seed: config.seed, optimizer: { lr: 3e-3 }, microBatchSize: 64 });
  const engine = await RolloutEngine.create(model);
  try {
    // band [0, 1] with an unreachable target: train all sftSteps, keep the last evaluation's weights.
    const r = await sftWarmStart({ task: calculatorTask, trainer, engine, seed: config.seed, batchSize: 64, maxSteps: sftSteps, evalEvery: sftSteps, band: [0, 1], target: 2, maxNewTokens: config.rollout.max_new_tokens });
    engine.setWeights(0, r.weights);
    const evaluation = await evaluateGreedy(engine, calculatorTask, calculatorTask.heldOut(), config.rollout.max_new_tokens);
    return { weights: r.weights, accuracy: evaluation.accuracy, toolUse: evaluation.metrics?.tool_use ?? 0 };
  } finally {
    trainer.dispose();
    await engine.release();
  }
}

/** config/recipes.ts CALCULATOR_GRPO, parsed, with fewer steps or prompts per step. */
export function calculatorConfig(overrides: { steps?: number; promptsPerStep?: number } = {}): RunConfig {
  return parseRunConfig({
    ...CALCULATOR_GRPO,
    rollout: { ...CALCULATOR_GRPO.rollout, ...(overrides.promptsPerStep ? { prompts_per_step: overrides.promptsPerStep } : {}) },
    train: { ...CALCULATOR_GRPO.train, ...(overrides.steps ? { steps: overrides.steps } : {}) },
  });
}
