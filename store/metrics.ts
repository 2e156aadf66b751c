// Per-step metrics of a run: (run, step, name) -> value, written by the stage that measured them
// (the train step its loss and the rollout's reward statistics, an evaluation its accuracy).
import type { Queryable } from './transfer-queue';

/** Upserts `metrics` for one step; non-finite values are left out (a NaN is not a measurement). */
export async function recordMetrics(db: Queryable, runId: string, step: number, metrics: Record<string, number>): Promise<void> {
  const entries = Object.entries(metrics).filter(([, v]) => Number.isFinite(v));
  if (!entries.length) return;
  await db.query(
    `INSERT INTO metrics (run_id, step, name, value)
     SELECT $1, $2, n, v FROM unnest($3::text[], $4::float8[]) AS m(n, v)
     ON CONFLICT (run_id, step, name) DO UPDATE SET value = EXCLUDED.value`,
    [runId, step, entries.map(([k]) => k), entries.map(([, v]) => v)],
  );
}

/** A run's metrics as series: name -> [step, value] pairs in step order. */
export async function readMetrics(db: Queryable, runId: string): Promise<Record<string, Array<[number, number]>>> {
  const { rows } = await db.query<{ step: number; name: string; value: number }>('SELECT step, name, value FROM metrics WHERE run_id = $1 ORDER BY step, name', [runId]);
  const out: Record<string, Array<[number, number]>> = {};
  for (const r of rows) (out[r.name] ??= []).push([r.step, r.value]);
  return out;
}

/**
 * Seconds from the run's registration (before its first evaluation) to the first held-out
 * evaluation at or above `threshold`, or null if none reached it: the through-the-workflow
 * counterpart of `relax bench grpo`'s time_to_95_s.
 */
export async function secondsToAccuracy(db: Queryable, runId: string, threshold: number): Promise<number | null> {
  const { rows } = await db.query<{ s: number | null }>(
    `SELECT extract(epoch FROM min(m.created_at) - r.created_at) AS s
       FROM metrics m JOIN runs r ON r.run_id = m.run_id
      WHERE m.run_id = $1 AND m.name = 'eval_accuracy' AND m.value >= $2
      GROUP BY r.created_at`,
    [runId, threshold],
  );
  return rows.length && rows[0].s !== null ? Number(rows[0].s) : null;
}

/** A run's metric series: name -> [step, value] pairs in step order (e.g. `eval_accuracy`, `loss`, `reward_mean`). */
export type MetricSeries = Record<string, Array<[number, number]>>;

/** The run's series named in `names` (every series when `names` is absent or empty). */
export async function metricSeries(db: Queryable, runId: string, names?: readonly string[]): Promise<MetricSeries> {
  const { rows } = await db.query<{ step: number; name: string; value: number }>(
    'SELECT step, name, value FROM metrics WHERE run_id = $1 AND ($2::text[] IS NULL OR name = ANY($2::text[])) ORDER BY step, name',
    [runId, names && names.length ? names : null],
  );
  const out: MetricSeries = {};
  for (const r of rows) (out[r.name] ??= []).push([r.step, Number(r.value)]);
  return out;
}

/** The newest value at or before `step` of each series in `names` that has one. */
export async function metricValuesAt(db: Queryable, runId: string, step: number, names: readonly string[]): Promise<Map<string, number>> {
  const { rows } = await db.query<{ name: string; value: number }>(
    `SELECT DISTINCT ON (name) name, value FROM metrics WHERE run_id = $1 AND step <= $2 AND name = ANY($3::text[]) ORDER BY name, step DESC`,
    [runId, step, names],
  );
  return new Map(rows.map((r) => [r.name, Number(r.value)]));
}

/** One series' newest value for one run (latestRunMetrics). */
export interface LatestRunMetric {
  runId: string;
  status: string;
  name: string;
  step: number;
  value: number;
}

/**
 * The newest value of every series of the runs that are running or changed within `recentSecs`:
 * what a metrics endpoint exports as gauges (one row per run and series).
 */
export async function latestRunMetrics(db: Queryable, recentSecs: number): Promise<LatestRunMetric[]> {
  const { rows } = await db.query<{ run_id: string; status: string; name: string; step: number; value: number }>(
    `SELECT DISTINCT ON (m.run_id, m.name) m.run_id, r.status, m.name, m.step, m.value
         FROM metrics m JOIN runs r USING (run_id)
        WHERE r.status = 'running' OR r.updated_at > now() - make_interval(secs => $1)
        ORDER BY m.run_id, m.name, m.step DESC`,
    [recentSecs],
  );
  return rows.map((r) => ({ runId: r.run_id, status: r.status, name: r.name, step: r.step, value: Number(r.value) }));
}
