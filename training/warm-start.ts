// The SFT warm start a GRPO run begins from, computed once and cached as a real checkpoint (keyed
// by everything that determines it), so repeated runs and benchmarks start from identical weights.
import { createHash } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { RunConfig } from '../config/run-config';
import { checkpointDir, loadCheckpoint, publishCheckpoint } from '../engines/checkpoint';
import type { PolicyWeights } from '../engines/model';
import { RolloutEngine } from '../engines/rollout';
import { Trainer } from '../engines/trainer';
import { loadTask } from '../envs/registry';
import { policyModelConfig } from './options';
import { sftWarmStart } from './sft';

export interface SftRecipe {
  lr: number;
  batchSize: number;
  maxSteps: number;
  evalEvery: number;
  /** The warm start's held-out greedy accuracy must land inside [low, high]... */
  band: [number, number];
  /** ...and training stops at the first evaluation at or above this (default: band[0]). */
  target?: number;
}

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

export async function loadOrTrainWarmStart(config: RunConfig, sft: SftRecipe, cacheRoot: string, log: (line: string) => void = () => undefined): Promise<WarmStart> {
  const task = await loadTask(config.task);
  const model = policyModelConfig(config.model, task.tokenizer().vocabSize, task);
  const key = createHash('sha256')
    .update(JSON.stringify({ format: WARM_START_FORMAT, task: config.task, model, seed: config.seed, sft, maxNewTokens: config.rollout.max_new_tokens }))
    .digest('hex')
    .slice(0, 16);
  const root = path.join(cacheRoot, `${config.task}-sft-${key}`);
  const dir = checkpointDir(root, 0);
  const metaFile = path.join(root, 'warm-start.json');
  try {
    const meta = JSON.parse(await readFile(metaFile, 'utf8')) as WarmStartMeta;
    const checkpoint = await loadCheckpoint(dir, { model });
    log(`[sft] warm start from cache ${dir}: held-out accuracy ${(meta.accuracy * 100).toFixed(1)}%`);
    return { weights: checkpoint.weights, ...meta, dir, cached: true };
  } catch {
    // Not cached yet (or unreadable): train it.
  }
  const started = performance.now();
  const trainer = Trainer.create({ model, seed: config.seed, optimizer: { lr: sft.lr }, microBatchSize: sft.batchSize });
  const engine = await RolloutEngine.create(model, { intraOpNumThreads: 1 });
  try {
    const r = await sftWarmStart({ task, trainer, engine, seed: config.seed, batchSize: sft.batchSize, maxSteps: sft.maxSteps, evalEvery: sft.evalEvery, band: sft.band, target: sft.target, maxNewTokens: config.rollout.max_new_tokens, log });
    const meta: WarmStartMeta = { accuracy: r.accuracy, sftSteps: r.steps, sftWallS: (performance.now() - started) / 1000 };
    await publishCheckpoint(root, 0, model, r.weights);
    await writeFile(metaFile, `${JSON.stringify(meta, null, 2)}\n`);
    log(`[sft] warm start: ${r.steps} steps, held-out accuracy ${(r.accuracy * 100).toFixed(1)}%, saved to ${dir}`);
    return { weights: r.weights, ...meta, dir, cached: false };
  } finally {
    trainer.dispose();
    await engine.release();
  }
}
