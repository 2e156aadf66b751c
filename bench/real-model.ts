// `relax bench real-model`: GRPO + LoRA on a pretrained model (default SmolLM2-135M-Instruct) through
// the trainingRun workflow on the local stack, on the shipped arithmetic word-problem dataset:
// reward and held-out accuracy per step, the wall time per step split into rollout and train, and
// peak memory. The recipe is training/recipes.ts REAL_MODEL_GRPO.
//
// Options (--set key=value): model (a named model, .gguf file or HF directory), steps, eval_every,
// prompts (per step), group (group size), lr, rank, max_new_tokens.
import { PLAINTEXT_TEMPORAL } from '../config/temporal-connection';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Pool } from 'pg';
import { plot } from 'asciichart';
import { RelaxClient } from '../client';
import { relaxEnvironment } from '../config/environment';
import { parseRunConfig } from '../config/run-config';
import { resolveModelSource } from '../engines/model-sources';
import { realModelRecipe } from '../training/recipes';
import { startEphemeralStack } from '../workers/local-stack';
import type { Bench } from './index';
import { median, peakRssMb } from './measure';

interface StepTimes {
  step: number;
  rolloutS: number;
  trainS: number;
}

/** Per step: the generate spans of its iteration (wall time from first start to last end) and its train span. */
async function stepTimes(databaseUrl: string, runId: string): Promise<StepTimes[]> {
  const pool = new Pool({ connectionString: databaseUrl, max: 1 });
  try {
    const { rows } = await pool.query<{ stage: string; step: number | null; iteration: number | null; started_at: Date; ended_at: Date }>(
      `SELECT stage, step, iteration, started_at, ended_at FROM stage_spans WHERE run_id = $1 AND stage IN ('generate', 'train') ORDER BY started_at`,
      [runId],
    );
    const rollout = new Map<number, { start: number; end: number }>();
    const train = new Map<number, number>();
    for (const r of rows) {
      const start = r.started_at.getTime();
      const end = r.ended_at.getTime();
      if (r.stage === 'generate' && r.iteration !== null) {
        const w = rollout.get(r.iteration);
        rollout.set(r.iteration, w ? { start: Math.min(w.start, start), end: Math.max(w.end, end) } : { start, end });
      } else if (r.stage === 'train' && r.step !== null) train.set(r.step, (end - start) / 1000);
    }
    // Sync mode: step s trains on iteration s - 1.
    return [...train.entries()].map(([step, trainS]) => {
      const w = rollout.get(step - 1);
      return { step, trainS, rolloutS: w ? (w.end - w.start) / 1000 : Number.NaN };
    });
  } finally {
    await pool.end();
  }
}

async function peakWorkerRssMb(): Promise<number> {
  // The stack's worker processes are children of this one: read their peak RSS (VmHWM) from /proc.
  let peak = 0;
  for (const pid of fs.readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
      const ppid = Number(/PPid:\s+(\d+)/.exec(status)?.[1]);
      const hwm = Number(/VmHWM:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024;
      if (ppid === process.pid) peak = Math.max(peak, hwm);
    } catch {
      // The process ended meanwhile.
    }
  }
  return peak;
}

export const realModelBench: Bench = async (ctx) => {
  const o = ctx.options;
  const num = (key: string, fallback: number) => (o[key] === undefined ? fallback : Number(o[key]));
  const home = relaxEnvironment().home;
  const modelDir = await resolveModelSource(o.model ?? 'smollm2-135m-instruct', { home, log: ctx.log });
  const input = realModelRecipe({
    modelFrom: modelDir,
    steps: num('steps', 30),
    evalEvery: num('eval_every', 5),
    promptsPerStep: num('prompts', 8),
    groupSize: num('group', 8),
    lr: num('lr', 3e-4),
    rank: num('rank', 16),
    maxNewTokens: num('max_new_tokens', 32),
  });
  const config = parseRunConfig(input);
  const stackHome = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-bench-real-model-'));
  ctx.log(`[bench] GRPO + LoRA (rank ${config.lora?.rank}) on ${modelDir}: ${config.train.steps} steps of ${config.rollout.prompts_per_step}x${config.algorithm.group_size} samples, through the workflow`);
  const stack = await startEphemeralStack(stackHome);
  const t0 = performance.now();
  let summary: Record<string, unknown>;
  try {
    const client = await RelaxClient.connect(stack.temporalAddress, undefined, PLAINTEXT_TEMPORAL);
    try {
      const runId = `bench-real-model-${Date.now().toString(36)}`;
      const handle = await client.startTraining({ ...input, run_id: runId, checkpoint: { ...input.checkpoint, dir: path.join(stackHome, 'checkpoints') } });
      const result = await handle.result();
      const wallS = (performance.now() - t0) / 1000;
      const times = await stepTimes(stack.databaseUrl, runId);
      const peak = Math.max(peakRssMb(), await peakWorkerRssMb());
      const rewards = new Map(result.rewards.map(([s, r]) => [s, r]));
      const accuracy = new Map(result.accuracies.map(([s, a]) => [s, a]));
      const curve = times.map((t) => ({ step: t.step, reward: rewards.get(t.step) ?? null, held_out_accuracy: accuracy.get(t.step) ?? null, rollout_s: t.rolloutS, train_s: t.trainS }));
      const evals = result.accuracies.map(([s, a]) => ({ step: s, accuracy: a }));
      ctx.log('');
      ctx.log('mean reward per step:');
      ctx.log(plot(result.rewards.map(([, r]) => r), { height: 8, format: (x: number) => x.toFixed(2).padStart(6) }));
      ctx.log(`held-out accuracy by evaluation: ${evals.map((e) => `step ${e.step}: ${(e.accuracy * 100).toFixed(1)}%`).join(', ')}`);
      summary = {
        model: o.model ?? 'smollm2-135m-instruct',
        model_dir: modelDir,
        lora_rank: config.lora?.rank,
        initial_accuracy: result.initialAccuracy ?? null,
        final_accuracy: result.evalAccuracy ?? null,
        steps: result.steps,
        samples_per_step: config.rollout.prompts_per_step * config.algorithm.group_size,
        step_s: median(times.map((t) => t.rolloutS + t.trainS).filter(Number.isFinite)),
        rollout_s: median(times.map((t) => t.rolloutS).filter(Number.isFinite)),
        train_s: median(times.map((t) => t.trainS)),
        wall_s: wallS,
        peak_rss_mb: peak,
        curve,
        evals,
      };
    } finally {
      await client.close();
    }
  } finally {
    await stack.stop();
    fs.rmSync(stackHome, { recursive: true, force: true });
  }
  const out = path.join(home, 'results', `real-model-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
  fs.mkdirSync(path.dirname(out), { recursive: true });
  fs.writeFileSync(out, `${JSON.stringify({ ...summary, config }, null, 2)}\n`);
  ctx.log(`[bench] saved to ${out}`);
  return { ...summary, saved_to: out };
};
