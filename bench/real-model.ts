// `relax bench real-model`: GRPO + LoRA on a pretrained model (default SmolLM2-135M-Instruct) through
// the trainingRun workflow on the local stack, on the shipped arithmetic word-problem dataset:
// reward and held-out accuracy per step, the wall time per step (the median over steps with and
// without an evaluation running beside them), split into rollout and train, peak memory, and how
// the activities fared: their most attempts, timeouts, and every worker's worst event-loop lag
// (scraped from its /metrics). The recipe is config/recipes.ts realModelRecipe.
//
// Options (--set key=value): model (a named model, .gguf file or HF directory), steps, eval_every,
// prompts (per step), group (or group_size), lr, rank, max_new_tokens, micro_batch_tokens, mode
// (sync | async), max_staleness (async), contention (1: one CPU-spinning process per core beside
// the run, a busy machine), loss_aggregation (algorithm.loss_aggregation, e.g. dapo), level (only
// the dataset's problems of this difficulty, train and eval: 1 is one-digit addition and
// subtraction, the simple arithmetic task of the learning check).
import { PLAINTEXT_TEMPORAL } from '../security/temporal-connection';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Pool } from 'pg';
import { plot } from 'asciichart';
import { RelaxClient } from '../client';
import { relaxEnvironment } from '../config/environment';
import { parseRunConfig } from '../config/run-config';
import { resolveModelSource } from '../engines/model-sources';
import { stepStageSpans } from '../store/spans';
import { stepMetrics } from '../store/step-records';
import { EXAMPLE_DATA_DIR, realModelRecipe } from '../config/recipes';
import { startEphemeralStack } from '../workers/local-stack';
import type { Bench } from './index';
import { median, peakRssMb } from './measure';

export interface StepTimes {
  step: number;
  /** Wall time from the previous step's train end (the run's first span for step 1) to this one's. */
  wallS: number;
  rolloutS: number;
  trainS: number;
  /** Whether an evaluation ran during the step's wall-time window. */
  withEval: boolean;
  /** The trainer's own step (train_steps metrics duration_ms), the sequences it trained and the tokens its passes computed. */
  computeS: number;
  trainedSamples: number;
  paddedTokens: number;
}

/** Per step: its wall time, the generate spans of its iteration (first start to last end), its train span, and whether an evaluation overlapped it. */
export async function stepTimes(databaseUrl: string, runId: string): Promise<StepTimes[]> {
  const pool = new Pool({ connectionString: databaseUrl, max: 1 });
  try {
    const rows = await stepStageSpans(pool, runId);
    const rollout = new Map<number, { start: number; end: number }>();
    const train = new Map<number, { start: number; end: number }>();
    const evals: Array<{ start: number; end: number }> = [];
    for (const r of rows) {
      const span = { start: r.started_at.getTime(), end: r.ended_at.getTime() };
      if (r.stage === 'generate' && r.iteration !== null) {
        const w = rollout.get(r.iteration);
        rollout.set(r.iteration, w ? { start: Math.min(w.start, span.start), end: Math.max(w.end, span.end) } : span);
      } else if (r.stage === 'train' && r.step !== null) train.set(r.step, span);
      else if (r.stage === 'evaluate') evals.push(span);
    }
    const steps = await stepMetrics(pool, runId);
    const metricsOf = new Map(steps.map((r) => [r.step, r.metrics ?? {}]));
    const first = rows.length ? Math.min(...rows.filter((r) => r.stage !== 'evaluate').map((r) => r.started_at.getTime())) : 0;
    // Step s trains on iteration s - 1 (in async mode the rollout ran earlier, beside other steps).
    return [...train.entries()]
      .sort(([a], [b]) => a - b)
      .map(([step, t]) => {
        const w = rollout.get(step - 1);
        const from = train.get(step - 1)?.end ?? first;
        const m = metricsOf.get(step) ?? {};
        return {
          step,
          wallS: (t.end - from) / 1000,
          trainS: (t.end - t.start) / 1000,
          rolloutS: w ? (w.end - w.start) / 1000 : Number.NaN,
          withEval: evals.some((e) => e.start < t.end && e.end > from),
          computeS: (m.duration_ms ?? Number.NaN) / 1000,
          trainedSamples: m.trained_samples ?? 0,
          paddedTokens: m.padded_tokens ?? 0,
        };
      });
  } finally {
    await pool.end();
  }
}

/** The worst event-loop lag each worker's /metrics reports now (prom-client resets it at every scrape), by role. */
async function eventLoopLags(workers: Array<{ role: string; metricsUrls?: string[] }>): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  await Promise.all(
    workers.map(async (w) => {
      const url = w.metricsUrls?.[0];
      if (!url) return;
      const text = await (await fetch(url)).text().catch(() => '');
      const m = /^relax_worker_nodejs_eventloop_lag_max_seconds(?:\{[^}]*\})? (\S+)$/m.exec(text);
      if (m) out[w.role] = Math.max(out[w.role] ?? 0, Number(m[1]));
    }),
  );
  return out;
}

/** The most attempts any activity of the run took, and how many timed out (Temporal's history). */
async function activityAttempts(handle: { fetchHistory(): Promise<{ events?: Array<{ activityTaskStartedEventAttributes?: { attempt?: number | null } | null; activityTaskTimedOutEventAttributes?: unknown }> | null }> }): Promise<{ maxAttempt: number; timeouts: number }> {
  const events = (await handle.fetchHistory()).events ?? [];
  const attempts = events.filter((e) => e.activityTaskStartedEventAttributes).map((e) => e.activityTaskStartedEventAttributes?.attempt ?? 1);
  return { maxAttempt: Math.max(1, ...attempts), timeouts: events.filter((e) => e.activityTaskTimedOutEventAttributes).length };
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

/** The shipped dataset's problems of difficulty `level`, written to `dir` (refused when there are none). */
function levelFile(name: string, level: number, dir: string): string {
  const rows = fs.readFileSync(path.join(EXAMPLE_DATA_DIR, name), 'utf8').split('\n').filter((l) => l.trim() && (JSON.parse(l) as { level?: number }).level === level);
  if (rows.length === 0) throw new Error(`--set level=${level}: ${name} has no problems of that level (it has levels 1, 2 and 3)`);
  const out = path.join(dir, `level${level}-${name}`);
  fs.writeFileSync(out, `${rows.join('\n')}\n`);
  return out;
}

type BenchResult = { rewards: Array<[number, number]>; accuracies: Array<[number, number]> };

/** Per step: its reward, held-out accuracy (where evaluated) and times. */
function stepCurve(times: StepTimes[], result: BenchResult) {
  const rewards = new Map(result.rewards.map(([s, r]) => [s, r]));
  const accuracy = new Map(result.accuracies.map(([s, a]) => [s, a]));
  return times.map((t) => ({ step: t.step, reward: rewards.get(t.step) ?? null, held_out_accuracy: accuracy.get(t.step) ?? null, step_s: t.wallS, with_eval: t.withEval, rollout_s: t.rolloutS, train_s: t.trainS, train_compute_s: t.computeS, trained_samples: t.trainedSamples, padded_tokens: t.paddedTokens }));
}

/** The median step times: all steps, without and with an evaluation, and the rollout, train and train-compute parts. */
export function stepTimeFigures(times: StepTimes[]) {
  const medianOf = (ts: StepTimes[]) => (ts.length ? median(ts.map((t) => t.wallS)) : null);
  return {
    step_s: medianOf(times),
    step_s_without_eval: medianOf(times.filter((t) => !t.withEval)),
    step_s_with_eval: medianOf(times.filter((t) => t.withEval)),
    rollout_s: median(times.map((t) => t.rolloutS).filter(Number.isFinite)),
    train_s: median(times.map((t) => t.trainS)),
    train_compute_s: median(times.map((t) => t.computeS).filter(Number.isFinite)),
  };
}

/** Logs the mean reward per step as a plot and the held-out accuracy of each evaluation. */
function logCurves(log: (line: string) => void, result: BenchResult, evals: Array<{ step: number; accuracy: number }>): void {
  log('');
  log('mean reward per step:');
  log(plot(result.rewards.map(([, r]) => r), { height: 8, format: (x: number) => x.toFixed(2).padStart(6) }));
  log(`held-out accuracy by evaluation: ${evals.map((e) => `step ${e.step}: ${(e.accuracy * 100).toFixed(1)}%`).join(', ')}`);
}

/** The run config of the bench from its --set options (the real-model recipe, a curriculum level's files, sync or async). */
function benchInput(o: Record<string, string>, num: (key: string, fallback: number) => number, modelDir: string, level: number | undefined, stackHome: string): ReturnType<typeof realModelRecipe> {
  const input = realModelRecipe({
    ...(level !== undefined ? { train: levelFile('arith-train.jsonl', level, stackHome), eval: levelFile('arith-eval.jsonl', level, stackHome) } : {}),
    modelFrom: modelDir,
    steps: num('steps', 30),
    evalEvery: num('eval_every', 5),
    promptsPerStep: num('prompts', 8),
    groupSize: num('group', num('group_size', 8)),
    lr: num('lr', 3e-4),
    rank: num('rank', 16),
    maxNewTokens: num('max_new_tokens', 32),
    ...(o.micro_batch_tokens !== undefined ? { microBatchTokens: num('micro_batch_tokens', 0) } : {}),
  });
  if (o.loss_aggregation !== undefined) input.algorithm = { ...input.algorithm, loss_aggregation: o.loss_aggregation as never };
  if (o.mode === 'async') Object.assign(input, { mode: 'async', max_staleness: num('max_staleness', 1) });
  else if (o.mode !== undefined && o.mode !== 'sync') throw new Error(`--set mode: expected sync or async, got "${o.mode}"`);
  return input;
}

export const realModelBench: Bench = async (ctx) => {
  const o = ctx.options;
  const num = (key: string, fallback: number) => (o[key] === undefined ? fallback : Number(o[key]));
  const home = relaxEnvironment().home;
  const modelDir = await resolveModelSource(o.model ?? 'smollm2-135m-instruct', { home, log: ctx.log });
  const stackHome = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-bench-real-model-'));
  const level = o.level === undefined ? undefined : num('level', 0);
  const input = benchInput(o, num, modelDir, level, stackHome);
  const contention = num('contention', 0) > 0;
  let config: ReturnType<typeof parseRunConfig>;
  try {
    config = parseRunConfig(input);
  } catch (err) {
    fs.rmSync(stackHome, { recursive: true, force: true });
    throw err;
  }
  ctx.log(`[bench] GRPO + LoRA (rank ${config.lora?.rank}) on ${modelDir}: ${config.train.steps} steps of ${config.rollout.prompts_per_step}x${config.algorithm.group_size} samples, through the workflow`);
  const stack = await startEphemeralStack(stackHome);
  // The busy neighbour: one spinning process per core for the run (at most an hour).
  const burners = contention ? Array.from({ length: os.availableParallelism() }, () => spawn(process.execPath, ['-e', 'const end = Date.now() + 3600000; while (Date.now() < end) {}'], { stdio: 'ignore' })) : [];
  if (contention) ctx.log(`[bench] contention: ${burners.length} CPU-spinning processes beside the run`);
  const t0 = performance.now();
  let summary: Record<string, unknown>;
  const lags: Record<string, number> = {};
  const scraping = setInterval(() => {
    eventLoopLags(stack.workers()).then(
      (now) => Object.entries(now).forEach(([role, lag]) => (lags[role] = Math.max(lags[role] ?? 0, lag))),
      () => undefined,
    );
  }, 2_000);
  try {
    const client = await RelaxClient.connect(stack.temporalAddress, undefined, PLAINTEXT_TEMPORAL);
    try {
      const runId = `bench-real-model-${Date.now().toString(36)}`;
      const handle = await client.startTraining({ ...input, run_id: runId, checkpoint: { ...input.checkpoint, dir: path.join(stackHome, 'checkpoints') } });
      const result = await handle.result();
      const wallS = (performance.now() - t0) / 1000;
      const attempts = await activityAttempts(client.client.workflow.getHandle(runId));
      const times = await stepTimes(stack.databaseUrl, runId);
      const peak = Math.max(peakRssMb(), await peakWorkerRssMb());
      const curve = stepCurve(times, result);
      const evals = result.accuracies.map(([s, a]) => ({ step: s, accuracy: a }));
      logCurves(ctx.log, result, evals);
      summary = {
        model: o.model ?? 'smollm2-135m-instruct',
        model_dir: modelDir,
        lora_rank: config.lora?.rank,
        initial_accuracy: result.initialAccuracy ?? null,
        final_accuracy: result.evalAccuracy ?? null,
        steps: result.steps,
        samples_per_step: config.rollout.prompts_per_step * config.algorithm.group_size,
        mode: config.mode,
        loss_aggregation: config.algorithm.loss_aggregation,
        level: level ?? null,
        contention,
        train_micro_batch_tokens: config.train.micro_batch_tokens ?? null,
        ...stepTimeFigures(times),
        wall_s: wallS,
        peak_rss_mb: peak,
        activity_attempts_max: attempts.maxAttempt,
        activity_timeouts: attempts.timeouts,
        eventloop_lag_max_s: lags,
        curve,
        evals,
      };
    } finally {
      await client.close();
    }
  } finally {
    clearInterval(scraping);
    for (const b of burners) b.kill('SIGKILL');
    await stack.stop();
    fs.rmSync(stackHome, { recursive: true, force: true });
  }
  const out = path.join(home, 'results', `real-model-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
  fs.mkdirSync(path.dirname(out), { recursive: true });
  fs.writeFileSync(out, `${JSON.stringify({ ...summary, config }, null, 2)}\n`);
  ctx.log(`[bench] saved to ${out}`);
  return { ...summary, saved_to: out };
};
