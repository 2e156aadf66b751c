// `relax bench scale`: one local stack, rollout workers grown 1 -> 2 -> 4 -> ... -> 32 (one process
// each, tiny model) the way a scale-out grows them (LocalStack.addWorkers), and at each size one
// sync run whose rollout is split into as many slices as there are workers, the same total work
// per step. Per step (steps 2..N, from Postgres): the step's wall time (between consecutive train
// steps' applied_at) and the time inside its activities (the union of the iteration's generate
// spans, plus the train step's span, from stage_spans). The rest is control-plane time: Temporal
// dispatching the activities and the workflow tasks, and the workers' gaps between them. The
// database work of an activity (writing and claiming samples) is inside its span, so it counts as
// activity time here; `relax bench pipeline` measures that part.
// Keys: overhead_fraction_by_workers, overhead_ms_by_workers, step_ms_by_workers (objects keyed by
// worker count), steps, samples_per_step.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Pool } from 'pg';
import { RelaxClient } from '../client';
import { relaxEnvironment } from '../config/environment';
import { PLAINTEXT_TEMPORAL } from '../security/temporal-connection';
import { generateAndTrainSpans } from '../store/spans';
import { appliedStepTimes } from '../store/step-records';
import { startEphemeralStack } from '../workers/local-stack';
import type { Bench } from './index';

/** Rollout workers the bench runs against the embedded PGlite at most (it caps connections at 64; each worker holds a few). */
const EMBEDDED_MAX_WORKERS = 16;

interface Interval { start: number; end: number }

/** Total length of the union of intervals. */
export function unionLength(intervals: Interval[]): number {
  const sorted = [...intervals].sort((a, b) => a.start - b.start);
  let total = 0;
  let cur: Interval | undefined;
  for (const i of sorted) {
    if (!cur || i.start > cur.end) {
      if (cur) total += cur.end - cur.start;
      cur = { ...i };
    } else cur.end = Math.max(cur.end, i.end);
  }
  if (cur) total += cur.end - cur.start;
  return total;
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? (s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2) : NaN;
};

/** Median step wall time and median time outside the step's activities, steps 2..N (sync: step s trains iteration s - 1). */
async function stepBreakdown(pool: Pool, runId: string): Promise<{ stepMs: number; overheadMs: number }> {
  const steps = await appliedStepTimes(pool, runId);
  const spans = await generateAndTrainSpans(pool, runId);
  const walls: number[] = [];
  const overheads: number[] = [];
  for (let k = 1; k < steps.length; k++) {
    const s = steps[k].step;
    const wall = steps[k].applied.getTime() - steps[k - 1].applied.getTime();
    const generate = spans.filter((x) => x.stage === 'generate' && x.iteration === s - 1).map((x) => ({ start: x.s.getTime(), end: x.e.getTime() }));
    const train = spans.filter((x) => x.stage === 'train' && x.step === s).map((x) => ({ start: x.s.getTime(), end: x.e.getTime() }));
    walls.push(wall);
    overheads.push(Math.max(0, wall - unionLength(generate) - unionLength(train)));
  }
  return { stepMs: median(walls), overheadMs: median(overheads) };
}

export const scaleBench: Bench = async (ctx) => {
  const sizes = (ctx.options.workers ?? '1,2,4,8,16,32').split(',').map(Number);
  if (sizes.some((n, i) => !Number.isInteger(n) || n < 1 || (i > 0 && n <= sizes[i - 1]))) throw new Error(`--set workers=${ctx.options.workers}: give increasing worker counts, e.g. 1,2,4,8`);
  if (!relaxEnvironment().databaseUrl && sizes[sizes.length - 1] > EMBEDDED_MAX_WORKERS) {
    throw new Error(`--set workers=${sizes.join(',')}: the embedded database (PGlite) serves too few connections for ${sizes[sizes.length - 1]} worker processes; set DATABASE_URL to a PostgreSQL server, or stop at ${EMBEDDED_MAX_WORKERS} workers`);
  }
  const steps = Number(ctx.options.steps ?? 8);
  const promptsPerStep = Number(ctx.options.prompts ?? 64);
  const groupSize = 4;
  const home = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-bench-scale-'));
  ctx.log(`[bench] starting a local stack (not timed); then ${sizes.join(', ')} rollout workers, ${steps} sync steps of ${promptsPerStep * groupSize} samples at each`);
  // A worker that dies and its restarts are worth seeing: they would distort the figures.
  const stack = await startEphemeralStack(home, { workers: { control: 1, rollout: 1, train: 1, reference: 0 }, notice: (line) => ctx.log(line) });
  const fraction: Record<string, number> = {};
  const overhead: Record<string, number> = {};
  const stepMs: Record<string, number> = {};
  const pool = new Pool({ connectionString: stack.databaseUrl, max: 2 });
  const client = await RelaxClient.connect(stack.temporalAddress, undefined, PLAINTEXT_TEMPORAL);
  try {
    for (const n of sizes) {
      const have = stack.workers('rollout').length;
      if (n > have) await stack.addWorkers('rollout', n - have);
      const runId = `bench-scale-${n}-${Date.now().toString(36)}`;
      const handle = await client.startTraining({
        run_id: runId,
        task: 'add2',
        model: { context_length: 16 },
        algorithm: { group_size: groupSize },
        rollout: { prompts_per_step: promptsPerStep, max_new_tokens: 4, parallelism: n },
        train: { steps, eval_every: 1000 },
        checkpoint: { dir: path.join(home, 'checkpoints', runId) },
      });
      await handle.result();
      const b = await stepBreakdown(pool, runId);
      fraction[n] = Number((b.overheadMs / b.stepMs).toFixed(3));
      overhead[n] = Math.round(b.overheadMs);
      stepMs[n] = Math.round(b.stepMs);
      ctx.log(`[bench] ${String(n).padStart(2)} rollout workers: step ${stepMs[n]} ms, outside activities ${overhead[n]} ms (${(fraction[n] * 100).toFixed(1)}%)`);
    }
  } finally {
    await client.close();
    await pool.end();
    await stack.stop();
    fs.rmSync(home, { recursive: true, force: true });
  }
  return { steps, samples_per_step: promptsPerStep * groupSize, overhead_fraction_by_workers: fraction, overhead_ms_by_workers: overhead, step_ms_by_workers: stepMs };
};
