// One train-engine measurement in its own process, for `relax bench engines --set model=...`
// (bench/real-engines.ts): TensorFlow reads its intra-op thread count once, when it loads, so each
// thread count is a process; and the process's peak RSS is then the train engine's alone (the
// trainer's tensors, the step's activations, the runtime), as a train worker holds them.
//
// Input (argv[2], a JSON file): { dir, contextLength, rank, mode: 'lora' | 'full', microBatchTokens,
// sharePrompts?, sequences: [{ tokens, lossMask, oldLogprobs, advantages }] }. Prints one JSON line:
// { tokensPerS, stepMs, microBatches, peakRssMb, backend }.
import fs from 'node:fs';
import { loadTfjsBackend } from '../engines/backends';
import { loadHfModel } from '../engines/hf-checkpoint';
import type { ModelConfig } from '../engines/model';
import { Trainer, type TrainSequence } from '../engines/trainer';
import { policyLoss } from '../training/losses';
import { peakRssMb, timeCalls } from './measure';

export interface TrainChildInput {
  dir: string;
  contextLength: number;
  rank: number;
  mode: 'lora' | 'full';
  microBatchTokens: number;
  /** The trainer's sharePrompts (default true: a group's prompt computed once). */
  sharePrompts?: boolean;
  /** The trainer's gradientCheckpointing (default false). */
  gradientCheckpointing?: boolean;
  sequences: TrainSequence[];
}

export interface TrainChildResult {
  tokensPerS: number;
  stepMs: number;
  microBatches: number;
  /** Tokens the step's forward passes computed, padding included (a shared prompt counted once). */
  paddedTokens: number;
  peakRssMb: number;
  backend: string;
}

/**
 * The trainer, from the weights read for it and then dropped: the process holds the trainer's copy
 * only, as a train worker does (training/policy-model.ts keeps no copy beside its engines).
 */
async function createTrainer(input: TrainChildInput): Promise<Trainer> {
  const base = await loadHfModel(input.dir, { contextLength: input.contextLength });
  const model: ModelConfig = input.mode === 'lora' ? { ...base.config, lora: { rank: input.rank, alpha: 2 * input.rank, targets: ['q', 'k', 'v', 'o', 'gate', 'up', 'down'] } } : base.config;
  return Trainer.create({ model, weights: base.weights, optimizer: { lr: input.mode === 'lora' ? 1e-4 : 1e-5 }, microBatchSize: input.sequences.length, microBatchTokens: input.microBatchTokens, sharePrompts: input.sharePrompts ?? true, gradientCheckpointing: input.gradientCheckpointing ?? false });
}

async function main(): Promise<void> {
  const input = JSON.parse(fs.readFileSync(process.argv[2], 'utf8')) as TrainChildInput;
  const backend = await loadTfjsBackend({ kind: 'cpu' });
  const trainer = await createTrainer(input);
  const loss = policyLoss({ algorithm: 'ppo' });
  let microBatches = 0;
  let paddedTokens = 0;
  const timing = await timeCalls(
    async () => {
      ({ microBatches, paddedTokens } = await trainer.trainStep(input.sequences, loss));
    },
    { warmup: 1, minCalls: 2, minMs: 0 },
  );
  const tokens = input.sequences.reduce((n, s) => n + s.tokens.length, 0);
  const result: TrainChildResult = { tokensPerS: tokens / (timing.medianMs / 1000), stepMs: timing.medianMs, microBatches, paddedTokens, peakRssMb: peakRssMb(), backend: backend.backend };
  process.stdout.write(`${JSON.stringify(result)}\n`);
}

if (require.main === module) {
  main().catch((err: Error) => {
    console.error(err.stack ?? err.message);
    process.exit(1);
  });
}
