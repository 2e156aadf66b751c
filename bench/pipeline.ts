// `relax bench pipeline`: the same N GRPO steps (a) in process (training/in-process.ts) and (b)
// through the trainingRun workflow on the local stack (Temporal, Postgres, worker processes), side
// by side in one run. Both sides call the same RL core with the same seeds (prompts, sampling,
// advantages, loss), so they compute the same thing and the difference is the orchestration
// overhead; the bench checks it by comparing the two runs' per-step rewards and final accuracy.
import { PLAINTEXT_TEMPORAL } from '../config/temporal-connection';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { RelaxClient } from '../client';
import { parseRunConfig } from '../config/run-config';
import { loadTfjsBackend } from '../engines/backends';
import { runInProcess } from '../training/in-process';
import { ADD2_GRPO, ADD2_SFT } from '../training/recipes';
import { loadOrTrainWarmStart } from '../training/warm-start';
import { relaxEnvironment } from '../config/environment';
import { startEphemeralStack } from '../workers/local-stack';
import type { TrainingResult } from '../workflows/training-run';
import type { Bench } from './index';
import { median } from './measure';
import { measureMonitoringOverhead, stepIntervals } from './monitoring-overhead';

export const pipelineBench: Bench = async (ctx) => {
  const steps = Number(ctx.options.steps ?? 20);
  const config = parseRunConfig({ ...ADD2_GRPO, train: { ...ADD2_GRPO.train, steps, eval_every: steps, warmup_steps: Math.min(ADD2_GRPO.train?.warmup_steps ?? 0, steps) } });
  await loadTfjsBackend({ kind: 'cpu' });
  const warm = await loadOrTrainWarmStart(config, ADD2_SFT, relaxEnvironment().warmStartCache, ctx.log);
  const samplesPerStep = config.rollout.prompts_per_step * config.algorithm.group_size;

  ctx.log(`[bench] (a) in-process loop: ${steps} steps of ${samplesPerStep} samples`);
  const local = await runInProcess(config, warm.weights, { evalEvery: steps });

  ctx.log('[bench] (b) the trainingRun workflow on the local stack (starting it; not timed)');
  const home = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-bench-pipeline-'));
  const stack = await startEphemeralStack(home);
  let workflowWallS: number;
  let workflowSteadyMs: number;
  let result: TrainingResult;
  try {
    const client = await RelaxClient.connect(stack.temporalAddress, undefined, PLAINTEXT_TEMPORAL);
    try {
      const t0 = performance.now();
      const handle = await client.startTraining({ ...config, run_id: `bench-pipeline-${Date.now().toString(36)}`, checkpoint: { ...config.checkpoint, init_from: warm.dir, dir: path.join(home, 'checkpoints') } });
      result = await handle.result();
      workflowWallS = (performance.now() - t0) / 1000;
      workflowSteadyMs = await steadyStepMs(stack.databaseUrl, result.runId);
    } finally {
      await client.close();
    }
  } finally {
    await stack.stop();
    fs.rmSync(home, { recursive: true, force: true });
  }

  // Monitoring (metrics endpoints scraped, the health manager checking) on vs off, same workflow run.
  const seconds = (k: string) => (ctx.options[k] === undefined ? undefined : Number(ctx.options[k]));
  const monitoring = ctx.options.monitoring === 'skip' ? undefined : await measureMonitoringOverhead(config, warm.dir, ctx.log, { healthIntervalS: seconds('health_interval'), scrapeIntervalS: seconds('scrape_interval') });

  const localStepMs = (local.wallS * 1000) / steps;
  const workflowStepMs = (workflowWallS * 1000) / steps;
  const overheadMs = workflowStepMs - localStepMs;
  // Steady state: the median step, without the one-time costs at either end (engines and trainers
  // built in each worker, the first and last evaluations) that the wall times include.
  const localSteadyMs = median(local.curve.map((r) => r.stepMs).slice(1));
  const steadyOverheadMs = workflowSteadyMs - localSteadyMs;
  // The same computation on both sides: identical per-step mean rewards and final accuracy.
  const maxRewardDifference = Math.max(...local.curve.map((r, i) => Math.abs(r.rewardMean - (result.rewards[i]?.[1] ?? Number.NaN))));
  const sameComputation = maxRewardDifference < 1e-9 && local.finalAccuracy === result.evalAccuracy;
  const summary = {
    bench: 'pipeline',
    steps,
    samples_per_step: samplesPerStep,
    in_process: { wall_s: local.wallS, step_ms: localStepMs, samples_per_s: (steps * samplesPerStep) / local.wallS, final_accuracy: local.finalAccuracy },
    workflow: { wall_s: workflowWallS, step_ms: workflowStepMs, samples_per_s: (steps * samplesPerStep) / workflowWallS, final_accuracy: result.evalAccuracy },
    overhead_ms_per_step: overheadMs,
    overhead_fraction_of_step: overheadMs / localStepMs,
    steady_state: { in_process_step_ms: localSteadyMs, workflow_step_ms: workflowSteadyMs, overhead_ms_per_step: steadyOverheadMs, overhead_fraction_of_step: steadyOverheadMs / localSteadyMs },
    same_computation: sameComputation,
    ...(monitoring ? { monitoring } : {}),
    max_step_reward_difference: maxRewardDifference,
    note: 'both paths run the same RL core with the same seeds, and include one held-out evaluation at the start and one at the end; the workflow path also writes every sample to Postgres and publishes a checkpoint per step',
  };
  ctx.log(`[bench] same computation on both sides: ${sameComputation ? 'yes' : 'NO'} (per-step mean rewards differ by at most ${maxRewardDifference}; final accuracy ${local.finalAccuracy} in process, ${result.evalAccuracy} through the workflow)`);
  ctx.log(`[bench] steady state (median step): in-process ${localSteadyMs.toFixed(0)} ms, workflow ${workflowSteadyMs.toFixed(0)} ms: overhead ${steadyOverheadMs.toFixed(0)} ms (${((steadyOverheadMs / localSteadyMs) * 100).toFixed(0)}%)`);
  ctx.log(`[bench] in-process ${localStepMs.toFixed(0)} ms/step, workflow ${workflowStepMs.toFixed(0)} ms/step: overhead ${overheadMs.toFixed(0)} ms/step (${(summary.overhead_fraction_of_step * 100).toFixed(0)}% of a step)`);
  if (monitoring) {
    ctx.log(`[bench] monitoring off ${monitoring.off_step_ms.toFixed(0)} ms/step, on ${monitoring.on_step_ms.toFixed(0)} ms/step (health checks every ${monitoring.health_interval_s} s: ${monitoring.health_checks}; scrapes every ${monitoring.scrape_interval_s} s: ${monitoring.scrapes}): overhead ${monitoring.overhead_ms_per_step.toFixed(1)} ms (${(monitoring.overhead_fraction_of_step * 100).toFixed(2)}% of a step; runs of the same mode differ by ${(monitoring.noise_fraction * 100).toFixed(1)}%)`);
  }
  return summary;
};

/** Median interval between consecutive train steps' applied_at (steps 2..N: one full iteration each). */
async function steadyStepMs(databaseUrl: string, runId: string): Promise<number> {
  return median(await stepIntervals(databaseUrl, runId));
}
