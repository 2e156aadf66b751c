// `relax bench async`: the same GRPO work (steps, samples, seed, warm start) in sync and in async
// mode on one local stack, the rollout (and reference) worker pinned to one core and the train
// worker to another. Prints both wall times, the speedup, the ideal speedup from the measured stage
// times, the efficiency (speedup / ideal) and the trainer's idle fraction in each mode.
import { PLAINTEXT_TEMPORAL } from '../security/temporal-connection';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { Pool } from 'pg';
import { RelaxClient } from '../client';
import { parseRunConfig, type RunConfig, type RunConfigInput } from '../config/run-config';
import type { Role } from '../config/task-queues';
import { loadTfjsBackend } from '../engines/backends';
import { listSpans, utilization, type Span } from '../store/spans';
import { ADD2_GRPO } from '../config/recipes';
import { loadOrTrainWarmStart, ADD2_SFT } from '../training/warm-start';
import { relaxEnvironment } from '../config/environment';
import { startEphemeralStack } from '../workers/local-stack';
import type { Bench } from './index';

/**
 * The configuration: the quickstart recipe with the KL term on (a reference stage next to rollout),
 * so the rollout side (generate + reference, on one core) and the trainer (on the other) take
 * comparable time per step on this machine.
 */
export const ASYNC_BENCH: RunConfigInput = {
  ...ADD2_GRPO,
  algorithm: { ...ADD2_GRPO.algorithm, kl_coef: 0.001 },
};

interface ModeRun {
  mode: 'sync' | 'async';
  /** Steady state: from the end of step 1 to the end of the last step. */
  windowS: number;
  trainerIdle: number;
  rolloutIdle: number;
  /** Mean per step, ms: the rollout side (generate + reference of one iteration) and the train step. */
  rolloutStageMs: number;
  trainStageMs: number;
  finalAccuracy: number | undefined;
}

function tasksetWorks(): boolean {
  try {
    execFileSync('taskset', ['-c', '0', 'true'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

function stageTimes(spans: Span[], steps: number): { rolloutStageMs: number; trainStageMs: number } {
  const ms = (s: Span) => s.endedAt.getTime() - s.startedAt.getTime();
  // Per iteration, the rollout side's critical path: its generate activities (in parallel) then reference.
  let rollout = 0;
  for (let it = 1; it < steps; it++) {
    const gen = spans.filter((s) => s.stage === 'generate' && s.iteration === it);
    const ref = spans.filter((s) => s.stage === 'reference' && s.iteration === it);
    rollout += Math.max(0, ...gen.map(ms)) + ref.reduce((a, s) => a + ms(s), 0);
  }
  const train = spans.filter((s) => s.stage === 'train' && (s.step ?? 0) > 1).reduce((a, s) => a + ms(s), 0);
  return { rolloutStageMs: rollout / (steps - 1), trainStageMs: train / (steps - 1) };
}

/** One mode's steady-state figures from its run's spans: the window from step 1's end to the last step's, idle fractions, stage times. */
function modeRun(mode: 'sync' | 'async', spans: Span[], steps: number, finalAccuracy: number | undefined): ModeRun {
  const train = spans.filter((s) => s.stage === 'train').sort((a, b) => (a.step ?? 0) - (b.step ?? 0));
  const from = train[0].endedAt.getTime();
  const to = train[train.length - 1].endedAt.getTime();
  const u = utilization(spans, { from, to });
  return {
    mode,
    windowS: (to - from) / 1000,
    trainerIdle: u.train?.idleFraction ?? 1,
    rolloutIdle: u.rollout?.idleFraction ?? 1,
    ...stageTimes(spans, steps),
    finalAccuracy,
  };
}

export const asyncBench: Bench = async (ctx) => {
  const steps = Number(ctx.options.steps ?? 30);
  const staleness = Number(ctx.options.staleness ?? 1);
  if (!(steps >= 3)) throw new Error(`--set steps=${ctx.options.steps}: use 3 or more steps (the first is left out of the steady state)`);
  const config = parseRunConfig({ ...ASYNC_BENCH, train: { ...ASYNC_BENCH.train, steps, eval_every: steps } });
  await loadTfjsBackend({ kind: 'cpu' });
  const warm = await loadOrTrainWarmStart(config, ADD2_SFT, relaxEnvironment().warmStartCache, ctx.log);

  const cores = os.availableParallelism();
  const pinned = cores >= 2 && tasksetWorks();
  const cpuAffinity: Partial<Record<Role, string>> = pinned ? { rollout: '0', reference: '0', train: '1' } : {};
  ctx.log(`[bench] ${steps} steps of ${config.rollout.prompts_per_step}x${config.algorithm.group_size} samples per mode; ${pinned ? 'rollout + reference pinned to core 0, train to core 1' : 'NOT pinned (taskset or a second core missing)'}`);
  const home = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-bench-async-'));
  const stack = await startEphemeralStack(home, { cpuAffinity });
  const pool = new Pool({ connectionString: stack.databaseUrl, max: 1 });
  const runs: ModeRun[] = [];
  try {
    const client = await RelaxClient.connect(stack.temporalAddress, undefined, PLAINTEXT_TEMPORAL);
    try {
      for (const mode of ['sync', 'async'] as const) {
        const runConfig: RunConfig = { ...config, mode, max_staleness: mode === 'async' ? staleness : 0, run_id: `bench-${mode}-${Date.now().toString(36)}`, checkpoint: { ...config.checkpoint, init_from: warm.dir, dir: path.join(home, 'checkpoints', mode) } };
        ctx.log(`[bench] ${mode}${mode === 'async' ? ` (max_staleness ${staleness})` : ''}...`);
        const result = await (await client.startTraining(runConfig)).result();
        runs.push(modeRun(mode, await listSpans(pool, result.runId), steps, result.evalAccuracy));
        const r = runs[runs.length - 1];
        ctx.log(`[bench] ${mode}: ${r.windowS.toFixed(2)} s for steps 2..${steps}; per step rollout side ${r.rolloutStageMs.toFixed(0)} ms, train ${r.trainStageMs.toFixed(0)} ms; trainer idle ${(r.trainerIdle * 100).toFixed(0)}%`);
      }
    } finally {
      await client.close();
    }
  } finally {
    await pool.end();
    await stack.stop();
    fs.rmSync(home, { recursive: true, force: true });
  }
  const [sync, asyncRun] = runs;
  // A perfect pipeline costs, per step, only its slowest stage (measured in the async run, where it
  // runs), while a sync step costs everything in turn (both stages plus the orchestration between
  // them, as measured). The classic (rollout + train) / max(rollout, train) leaves the orchestration
  // out of the sync side; it is reported too.
  const syncStepMs = (sync.windowS * 1000) / (steps - 1);
  const bottleneckMs = Math.max(asyncRun.rolloutStageMs, asyncRun.trainStageMs);
  const ideal = syncStepMs / bottleneckMs;
  const idealFromStageSum = (sync.rolloutStageMs + sync.trainStageMs) / Math.max(sync.rolloutStageMs, sync.trainStageMs);
  const speedup = sync.windowS / asyncRun.windowS;
  const summary = {
    bench: 'async',
    steps,
    samples_per_step: config.rollout.prompts_per_step * config.algorithm.group_size,
    max_staleness: staleness,
    pinned,
    sync_s: sync.windowS,
    async_s: asyncRun.windowS,
    speedup,
    ideal_speedup: ideal,
    ideal_speedup_stage_sum: idealFromStageSum,
    efficiency: speedup / ideal,
    sync_step_ms: syncStepMs,
    async_step_ms: (asyncRun.windowS * 1000) / (steps - 1),
    bottleneck_stage_ms: bottleneckMs,
    trainer_idle_sync: sync.trainerIdle,
    trainer_idle_async: asyncRun.trainerIdle,
    rollout_idle_sync: sync.rolloutIdle,
    rollout_idle_async: asyncRun.rolloutIdle,
    stage_ms: { sync: { rollout: sync.rolloutStageMs, train: sync.trainStageMs }, async: { rollout: asyncRun.rolloutStageMs, train: asyncRun.trainStageMs } },
    final_accuracy: { sync: sync.finalAccuracy, async: asyncRun.finalAccuracy },
    note: 'times cover steps 2..N (steady state: the first step, worker warm-up and the initial evaluation are left out); ideal_speedup = sync step time / the slowest stage per step in the async run (a pipeline cannot beat its bottleneck); ideal_speedup_stage_sum = (rollout + train) / max(rollout, train) from the sync run, which leaves orchestration out',
  };
  ctx.log(`[bench] sync step ${syncStepMs.toFixed(0)} ms, async step ${summary.async_step_ms.toFixed(0)} ms, slowest stage ${bottleneckMs.toFixed(0)} ms`);
  ctx.log(`[bench] speedup ${speedup.toFixed(2)}x of an ideal ${ideal.toFixed(2)}x (stage-sum formula: ${idealFromStageSum.toFixed(2)}x): efficiency ${(summary.efficiency * 100).toFixed(0)}%; trainer idle ${(sync.trainerIdle * 100).toFixed(0)}% sync, ${(asyncRun.trainerIdle * 100).toFixed(0)}% async`);
  return summary;
};
