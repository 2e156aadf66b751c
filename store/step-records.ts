// What train steps recorded, read back for monitoring and the benchmarks (train_steps, and for the
// integrity checks of `relax bench chaos` train_step_samples and samples): when each step was
// applied, the intervals between steps, a step's metrics, and the counts that show a sample trained
// twice or never. Writes are the transfer queue's (store/transfer-queue.ts).
import type { Queryable } from './transfer-queue';

/** The run's applied steps in order, with when each was applied. */
export async function appliedStepTimes(db: Queryable, runId: string): Promise<Array<{ step: number; applied: Date }>> {
  const { rows } = await db.query<{ step: number; applied: Date }>(`SELECT step, applied_at AS applied FROM train_steps WHERE run_id = $1 AND status = 'applied' ORDER BY step`, [runId]);
  return rows;
}

/** Milliseconds between consecutive applied steps of the run, in step order (the first is NaN: no step before it). */
export async function appliedStepIntervalsMs(db: Queryable, runId: string): Promise<number[]> {
  const { rows } = await db.query<{ ms: number }>(
    `SELECT extract(epoch FROM applied_at - lag(applied_at) OVER (ORDER BY step)) * 1000 AS ms
         FROM train_steps WHERE run_id = $1 AND status = 'applied' ORDER BY step`,
    [runId],
  );
  return rows.map((r) => Number(r.ms));
}

/** Each recorded step of the run with the metrics its update recorded (null when none), unordered. */
export async function stepMetrics(db: Queryable, runId: string): Promise<Array<{ step: number; metrics: Record<string, number> | null }>> {
  const { rows } = await db.query<{ step: number; metrics: Record<string, number> | null }>(`SELECT step, metrics FROM train_steps WHERE run_id = $1`, [runId]);
  return rows;
}

/** How a running run's steps come: seconds since its newest applied step and the median gap over its last 20 (null with fewer than two). */
export interface StepCadence {
  runId: string;
  lastStepSecsAgo: number;
  medianStepSecs: number | null;
}

/** The step cadence of every running run with an applied step (the health check's stall detection). */
export async function runningStepCadence(db: Queryable): Promise<StepCadence[]> {
  const { rows } = await db.query<{ run_id: string; last_ago: number; median: number | null }>(
    `WITH recent AS (
         SELECT s.run_id, s.applied_at, s.applied_at - lag(s.applied_at) OVER (PARTITION BY s.run_id ORDER BY s.step) AS gap,
                row_number() OVER (PARTITION BY s.run_id ORDER BY s.step DESC) AS k
           FROM train_steps s JOIN runs r USING (run_id)
          WHERE r.status = 'running' AND s.applied_at IS NOT NULL)
       SELECT run_id, extract(epoch FROM now() - max(applied_at))::float8 AS last_ago,
              percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM gap))::float8 AS median
         FROM recent WHERE k <= 21 GROUP BY run_id`,
  );
  return rows.map((r) => ({ runId: r.run_id, lastStepSecsAgo: Number(r.last_ago), medianStepSecs: r.median === null ? null : Number(r.median) }));
}

/** One train step with its recorded sample set, counted (counts are bigint: strings). */
export interface StepSampleSet {
  step: number;
  status: string;
  sample_count: number;
  policy_version: number | null;
  /** Keys recorded in train_step_samples for the step. */
  recorded: string;
  /** Of those, the stored samples consumed by this step. */
  stored: string;
  /** The iterations its samples came from. */
  iterations: number[] | null;
}

/** Every train step of the run in order, with its recorded sample set counted. */
export async function stepSampleSets(db: Queryable, runId: string): Promise<StepSampleSet[]> {
  const { rows } = await db.query<StepSampleSet>(
    `SELECT t.step, t.status, t.sample_count, t.policy_version,
            (SELECT count(*) FROM train_step_samples k WHERE k.run_id = t.run_id AND k.step = t.step) AS recorded,
            (SELECT count(*) FROM train_step_samples k JOIN samples s USING (run_id, iteration, group_index, sample_index)
              WHERE k.run_id = t.run_id AND k.step = t.step AND s.status = 'consumed' AND s.consumed_by_step = t.step) AS stored,
            (SELECT array_agg(DISTINCT k.iteration) FROM train_step_samples k WHERE k.run_id = t.run_id AND k.step = t.step) AS iterations
       FROM train_steps t WHERE t.run_id = $1 ORDER BY t.step`,
    [runId],
  );
  return rows;
}

/** Samples of iterations before `iteration` still ready to train on (generated or scored): never consumed. */
export async function unconsumedSamplesBefore(db: Queryable, runId: string, iteration: number): Promise<number> {
  const { rows } = await db.query<{ n: string }>(
    `SELECT count(*) AS n FROM samples WHERE run_id = $1 AND status IN ('generated', 'scored') AND iteration < $2`,
    [runId, iteration],
  );
  return Number(rows[0].n);
}

/** Sample keys recorded in the sets of more than one step of the run. */
export async function keysInSeveralSteps(db: Queryable, runId: string): Promise<number> {
  const { rows } = await db.query<{ n: string }>(
    `SELECT count(*) AS n FROM (SELECT 1 FROM train_step_samples WHERE run_id = $1
       GROUP BY iteration, group_index, sample_index HAVING count(DISTINCT step) > 1) d`,
    [runId],
  );
  return Number(rows[0].n);
}
