// `relax bench pipeline`: the same N GRPO steps (a) in process (training/in-process.ts) and (b)
// through the trainingRun workflow on the local stack (Temporal, Postgres, worker processes), side
// by side in one run. Both sides call the same RL core with the same seeds (prompts, sampling,
// advantages, loss), so they compute the same thing and the difference is the orchestration
// overhead; the bench checks it by comparing the two runs' per-step rewards and final accuracy.
// Both sides are measured warm by default, as a deployment's long-lived workers are: a short
// warm-up run (`--set warmup_run=N` steps, default 2; 0 measures cold processes) first goes through the
// same code on each side (the bench's process; the stack's workers), untimed.
import { PLAINTEXT_TEMPORAL } from '../security/temporal-connection';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { RelaxClient } from '../client';
import { parseRunConfig, type RunConfig } from '../config/run-config';
import { loadTfjsBackend } from '../engines/backends';
import { runInProcess, type InProcessResult } from '../training/in-process';
import { ADD2_GRPO } from '../config/recipes';
import { loadOrTrainWarmStart, ADD2_SFT } from '../training/warm-start';
import { relaxEnvironment } from '../config/environment';
import { startEphemeralStack } from '../workers/local-stack';
import type { TrainingResult } from '../workflows/training-run';
import type { Bench } from './index';
import { median, medianBy } from './measure';
import { cpuMeter } from './process-cpu';
import { measureMonitoringOverhead, stepIntervals } from './monitoring-overhead';

// Over 80 lines because it is one benchmark script, in order (stack, runs, CPU meters, step
// intervals, report); not yet split (issue 33).
export const pipelineBench: Bench = async (ctx) => {
  const steps = Number(ctx.options.steps ?? 20);
  // The add2 GRPO recipe, `n` steps long, evaluated at its start and end.
  const recipe = (n: number) => parseRunConfig({ ...ADD2_GRPO, train: { ...ADD2_GRPO.train, steps: n, eval_every: n, warmup_steps: Math.min(ADD2_GRPO.train?.warmup_steps ?? 0, n) } });
  const config = recipe(steps);
  await loadTfjsBackend({ kind: 'cpu' });
  const warm = await loadOrTrainWarmStart(config, ADD2_SFT, relaxEnvironment().warmStartCache, ctx.log);
  const samplesPerStep = config.rollout.prompts_per_step * config.algorithm.group_size;
  const warmupSteps = Number(ctx.options.warmup_run ?? 2);
  if (!Number.isInteger(warmupSteps) || warmupSteps < 0) throw new Error(`--set warmup_run=${ctx.options.warmup_run}: expected a whole number of steps (0: measure cold processes)`);
  const warmup = warmupSteps ? recipe(warmupSteps) : undefined;

  // The in-process loop runs before the first placement and again after each one: each placement
  // is compared with the mean of the runs on either side of it, so the machine's drift between
  // them cancels (its speed varies by more than the overhead measured here from minute to minute).
  const placements = placementsOf(ctx.options.placement);
  const repeats = Number(ctx.options.repeats ?? 1);
  if (!Number.isInteger(repeats) || repeats < 1) throw new Error(`--set repeats=${ctx.options.repeats}: expected a whole number of bracketed runs per placement, at least 1`);
  // Each in-process run with its CPU per step (this process: every thread of the trainer and the engine).
  const inProcess = async (when: string): Promise<LocalRun> => {
    ctx.log(`[bench] (a) in-process loop, ${when}: ${steps} steps of ${samplesPerStep} samples`);
    const meter = cpuMeter({ in_process: [process.pid] });
    const run = await runInProcess(config, warm.weights, { evalEvery: steps });
    return { ...run, cpuMsPerStep: meter.stop(steps).in_process };
  };
  ctx.log(`[bench] (a) in-process warm-up: ${warmup ? `an untimed ${warmupSteps}-step run` : 'none (cold)'}`);
  if (warmup) await runInProcess(warmup, warm.weights, { evalEvery: warmupSteps });
  const locals = [await inProcess('before the workflow runs')];

  // (b) through the workflow, once per placement and repeat; the first placement named gives the top-level figures.
  const through: Partial<Record<Placement, Bracketed[]>> = {};
  for (let r = 1; r <= repeats; r++) {
    for (const placement of placements) {
      const which = `placement "${placement}"${repeats > 1 ? ` (repeat ${r} of ${repeats})` : ''}`;
      ctx.log(`[bench] (b) the trainingRun workflow on the local stack, ${which} (starting it${warmup ? ` and a ${warmupSteps}-step warm-up run on it` : ''}; not timed)`);
      const w = await workflowRun({ ...config, placement }, warm.dir, warmup && { ...warmup, placement });
      locals.push(await inProcess(`after ${which}`));
      (through[placement] ??= []).push({ ...w, baseline: baselineOf(locals.slice(-2), steps) });
    }
  }
  // With repeats, each figure is the median repeat's (wall-clock figures: the repeat with the median
  // overhead on the wall clock; steady-state figures: the one with the median steady-state overhead).
  const chosen = Object.fromEntries(Object.entries(through).map(([p, all]) => [p, { wall: medianBy(all, (x) => overheadOf(x, steps)), steady: medianBy(all, steadyOverheadOf) }]));
  const { wall: first, steady: firstSteady } = chosen[placements[0]];
  const { wallS: workflowWallS, result } = first;
  const { stepMs: localStepMs, wallS: localWallS } = first.baseline;
  const { steadyMs: workflowSteadyMs } = firstSteady;
  const { steadyMs: localSteadyMs } = firstSteady.baseline;
  const local = locals[0];

  // Monitoring (metrics endpoints scraped, the health manager checking) on vs off, same workflow run.
  const seconds = (k: string) => (ctx.options[k] === undefined ? undefined : Number(ctx.options[k]));
  const monitoring = ctx.options.monitoring === 'skip' ? undefined : await measureMonitoringOverhead(config, warm.dir, ctx.log, { healthIntervalS: seconds('health_interval'), scrapeIntervalS: seconds('scrape_interval') });

  // Each placement's figures side by side, against the in-process runs on either side of it.
  const byPlacement = Object.fromEntries(
    Object.entries(through).map(([placement, all]) => {
      const { wall: w, steady } = chosen[placement];
      const stepMs = (w.wallS * 1000) / steps;
      const b = w.baseline;
      return [
        placement,
        {
          wall_s: w.wallS,
          step_ms: stepMs,
          step_intervals_ms: w.intervals.map(Math.round),
          in_process_step_ms: b.stepMs,
          overhead_fraction_of_step: overheadOf(w, steps),
          steady_state_step_ms: steady.steadyMs,
          in_process_steady_state_step_ms: steady.baseline.steadyMs,
          steady_state_overhead_fraction_of_step: steadyOverheadOf(steady),
          overhead_fraction_of_step_by_repeat: all.map((x) => overheadOf(x, steps)),
          steady_state_overhead_fraction_of_step_by_repeat: all.map(steadyOverheadOf),
          final_accuracy: w.result.evalAccuracy,
          ...(Object.keys(w.cpuMsPerStep).length ? { cpu_ms_per_step: w.cpuMsPerStep } : {}),
          ...(b.cpuMsPerStep !== undefined ? { in_process_cpu_ms_per_step: b.cpuMsPerStep } : {}),
        },
      ];
    }),
  );
  const workflowStepMs = (workflowWallS * 1000) / steps;
  const overheadMs = workflowStepMs - localStepMs;
  // Steady state: the median step, without the one-time costs at either end (engines and trainers
  // built in each worker, the first and last evaluations) that the wall times include.
  const steadyOverheadMs = workflowSteadyMs - localSteadyMs;
  // The same computation on both sides: identical per-step mean rewards and final accuracy (every in-process run, every placement).
  const runs = Object.values(through).flat() as WorkflowRun[];
  const maxRewardDifference = Math.max(...runs.flatMap((w) => locals.flatMap((l) => l.curve.map((r, i) => Math.abs(r.rewardMean - (w.result.rewards[i]?.[1] ?? Number.NaN))))));
  const sameComputation = maxRewardDifference < 1e-9 && runs.every((w) => locals.every((l) => l.finalAccuracy === w.result.evalAccuracy));
  const summary = {
    bench: 'pipeline',
    steps,
    samples_per_step: samplesPerStep,
    warmup_run_steps: warmupSteps,
    repeats,
    placement: placements[0],
    in_process: { wall_s: localWallS, step_ms: localStepMs, samples_per_s: (steps * samplesPerStep) / localWallS, final_accuracy: local.finalAccuracy, runs_wall_s: locals.map((l) => l.wallS) },
    workflow: { wall_s: workflowWallS, step_ms: workflowStepMs, samples_per_s: (steps * samplesPerStep) / workflowWallS, final_accuracy: result.evalAccuracy },
    overhead_ms_per_step: overheadMs,
    overhead_fraction_of_step: overheadMs / localStepMs,
    steady_state: { in_process_step_ms: localSteadyMs, workflow_step_ms: workflowSteadyMs, overhead_ms_per_step: steadyOverheadMs, overhead_fraction_of_step: steadyOverheadMs / localSteadyMs },
    by_placement: byPlacement,
    same_computation: sameComputation,
    ...(monitoring ? { monitoring } : {}),
    max_step_reward_difference: maxRewardDifference,
    note: `both paths run the same RL core with the same seeds, and include one held-out evaluation at the start and one at the end; each placement is compared with the mean of the in-process runs before and after it (in_process: those around the first placement); the workflow path also writes every sample to Postgres and publishes a checkpoint per step. ${warmup ? `Both sides are warm: each ran an untimed ${warmupSteps}-step run first (the bench's process; the stack's workers)` : 'Cold: the timed runs are the first of their processes (--set warmup_run=0)'}. The top-level workflow figures are placement "${placements[0]}"'s; by_placement has each one measured${repeats > 1 ? `. Each placement ran ${repeats} times, each bracketed by in-process runs: the figures are the median repeat's (wall clock and steady state each by its own overhead; *_by_repeat lists every repeat's)` : ''}`,
  };
  ctx.log(`[bench] same computation on both sides: ${sameComputation ? 'yes' : 'NO'} (per-step mean rewards differ by at most ${maxRewardDifference}; final accuracy ${local.finalAccuracy} in process, ${result.evalAccuracy} through the workflow)`);
  ctx.log(`[bench] placement "${placements[0]}", steady state (median step): in-process ${localSteadyMs.toFixed(0)} ms, workflow ${workflowSteadyMs.toFixed(0)} ms: overhead ${steadyOverheadMs.toFixed(0)} ms (${((steadyOverheadMs / localSteadyMs) * 100).toFixed(0)}%)`);
  ctx.log(`[bench] in-process ${localStepMs.toFixed(0)} ms/step, workflow ${workflowStepMs.toFixed(0)} ms/step: overhead ${overheadMs.toFixed(0)} ms/step (${(summary.overhead_fraction_of_step * 100).toFixed(0)}% of a step)`);
  const percents = (fractions: number[]) => fractions.map((f) => `${(f * 100).toFixed(1)}%`).join(', ');
  for (const [placement, p] of Object.entries(byPlacement)) {
    ctx.log(`[bench] placement "${placement}": ${p.step_ms.toFixed(0)} ms/step (overhead ${(p.overhead_fraction_of_step * 100).toFixed(0)}%), steady state ${p.steady_state_step_ms.toFixed(0)} ms (overhead ${(p.steady_state_overhead_fraction_of_step * 100).toFixed(0)}%)`);
    if (repeats > 1) ctx.log(`[bench] placement "${placement}", each repeat's overhead: wall ${percents(p.overhead_fraction_of_step_by_repeat)}; steady state ${percents(p.steady_state_overhead_fraction_of_step_by_repeat)}`);
    if (p.cpu_ms_per_step && p.in_process_cpu_ms_per_step !== undefined) {
      const each = Object.entries(p.cpu_ms_per_step).map(([k, v]) => `${k} ${v.toFixed(0)}`);
      ctx.log(`[bench] placement "${placement}", CPU per step: in-process loop ${p.in_process_cpu_ms_per_step.toFixed(0)} ms; through the workflow (ms): ${each.join(', ')}`);
    }
  }
  if (monitoring) {
    ctx.log(`[bench] monitoring off ${monitoring.off_step_ms.toFixed(0)} ms/step, on ${monitoring.on_step_ms.toFixed(0)} ms/step (health checks every ${monitoring.health_interval_s} s: ${monitoring.health_checks}; scrapes every ${monitoring.scrape_interval_s} s: ${monitoring.scrapes}): overhead ${monitoring.overhead_ms_per_step.toFixed(1)} ms (${(monitoring.overhead_fraction_of_step * 100).toFixed(2)}% of a step; runs of the same mode differ by ${(monitoring.noise_fraction * 100).toFixed(1)}%)`);
  }
  return summary;
};

type Placement = RunConfig['placement'];

/** The in-process figures a placement is compared with: the mean wall of the runs around it, the median of their pooled steps after the first. */
interface Baseline {
  wallS: number;
  stepMs: number;
  steadyMs: number;
  /** CPU per step of the in-process loop (every thread of its process), when /proc could say. */
  cpuMsPerStep?: number;
}

/** A workflow run with the in-process runs around it. */
type Bracketed = WorkflowRun & { baseline: Baseline };

const overheadOf = (w: Bracketed, steps: number) => ((w.wallS * 1000) / steps - w.baseline.stepMs) / w.baseline.stepMs;
const steadyOverheadOf = (w: Bracketed) => (w.steadyMs - w.baseline.steadyMs) / w.baseline.steadyMs;

/** An in-process run, with its CPU per step when /proc could say. */
type LocalRun = InProcessResult & { cpuMsPerStep?: number };

function baselineOf(pair: LocalRun[], steps: number): Baseline {
  const wallS = pair.reduce((n, l) => n + l.wallS, 0) / pair.length;
  const cpu = pair.map((l) => l.cpuMsPerStep).filter((c): c is number => c !== undefined);
  return {
    wallS,
    stepMs: (wallS * 1000) / steps,
    steadyMs: median(pair.flatMap((l) => l.curve.map((r) => r.stepMs).slice(1))),
    ...(cpu.length ? { cpuMsPerStep: cpu.reduce((a, b) => a + b, 0) / cpu.length } : {}),
  };
}

interface WorkflowRun {
  wallS: number;
  steadyMs: number;
  intervals: number[];
  result: TrainingResult;
  /**
   * CPU per step of each of the stack's processes over the timed run, by role; `bench_process` is
   * this process, which also serves the embedded database (PGlite) when DATABASE_URL is not set.
   */
  cpuMsPerStep: Record<string, number>;
}

/** `--set placement=colocated|stages|both` (default both, colocated first: the sync fast path). */
function placementsOf(option: string | undefined): Placement[] {
  const value = option ?? 'both';
  if (value === 'both') return ['colocated', 'stages'];
  if (value === 'colocated' || value === 'stages') return [value];
  throw new Error(`--set placement=${value}: expected colocated, stages or both`);
}

/** The run through the trainingRun workflow on a fresh local stack (after `warmup` on it, untimed); wall time from start to result. */
async function workflowRun(config: RunConfig, warmDir: string, warmup: RunConfig | undefined): Promise<WorkflowRun> {
  const home = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-bench-pipeline-'));
  const stack = await startEphemeralStack(home);
  try {
    const client = await RelaxClient.connect(stack.temporalAddress, undefined, PLAINTEXT_TEMPORAL);
    try {
      const start = (c: RunConfig, name: string) =>
        client.startTraining({ ...c, run_id: `bench-pipeline-${name}-${Date.now().toString(36)}`, checkpoint: { ...c.checkpoint, init_from: warmDir, dir: path.join(home, `checkpoints-${name}`) } });
      if (warmup) await (await start(warmup, `${config.placement}-warmup`)).result();
      const temporal = stack.temporalPid();
      const meter = cpuMeter({ bench_process: [process.pid], ...(temporal ? { temporal: [temporal] } : {}), ...stack.childPids().workers });
      const t0 = performance.now();
      const handle = await start(config, config.placement);
      const result = await handle.result();
      const wallS = (performance.now() - t0) / 1000;
      const cpuMsPerStep = meter.stop(config.train.steps);
      const intervals = await stepIntervals(stack.databaseUrl, result.runId);
      return { wallS, steadyMs: median(intervals), intervals, result, cpuMsPerStep };
    } finally {
      await client.close();
    }
  } finally {
    await stack.stop();
    fs.rmSync(home, { recursive: true, force: true });
  }
}

