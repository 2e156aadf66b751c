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
