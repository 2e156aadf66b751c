// Run events (run_events): a run's start and end, with the worker and task queue that handled them.
import type { Pool } from 'pg';
import type { Queryable } from './transfer-queue';

export interface RunEvent {
  runId: string;
  kind: string;
  role?: string;
  taskQueue?: string;
  worker?: string;
  detail?: Record<string, unknown>;
}

export async function recordEvent(pool: Pool, e: RunEvent): Promise<void> {
  await pool.query(
    'INSERT INTO run_events (run_id, kind, role, task_queue, worker, detail) VALUES ($1, $2, $3, $4, $5, $6)',
    [e.runId, e.kind, e.role ?? null, e.taskQueue ?? null, e.worker ?? null, JSON.stringify(e.detail ?? {})],
  );
}

export interface RunEventRow {
  id: string;
  run_id: string;
  kind: string;
  role: string | null;
  task_queue: string | null;
  worker: string | null;
  detail: Record<string, unknown>;
}

export async function listEvents(pool: Pool, runId: string): Promise<RunEventRow[]> {
  const { rows } = await pool.query<RunEventRow>('SELECT * FROM run_events WHERE run_id = $1 ORDER BY id', [runId]);
  return rows;
}

/** One row of run_events: a stage's start or end, with the worker and task queue that handled it. */
export interface RunEventRecord {
  /** Increasing: pass the last one seen as `afterId` to read only newer events. */
  id: number;
  kind: string;
  role?: string;
  taskQueue?: string;
  worker?: string;
  detail: Record<string, unknown>;
  createdAt: Date;
}

/** The run's events with an id above `afterId`, oldest first, at most `limit` of them. */
export async function eventsAfter(db: Queryable, runId: string, afterId: number, limit: number): Promise<RunEventRecord[]> {
  const { rows } = await db.query<{ id: string; kind: string; role: string | null; task_queue: string | null; worker: string | null; detail: Record<string, unknown>; created_at: Date }>(
    'SELECT id, kind, role, task_queue, worker, detail, created_at FROM run_events WHERE run_id = $1 AND id > $2 ORDER BY id LIMIT $3',
    [runId, afterId, limit],
  );
  return rows.map((r) => ({
    id: Number(r.id),
    kind: r.kind,
    ...(r.role ? { role: r.role } : {}),
    ...(r.task_queue ? { taskQueue: r.task_queue } : {}),
    ...(r.worker ? { worker: r.worker } : {}),
    detail: r.detail ?? {},
    createdAt: r.created_at,
  }));
}

/**
 * Whether a `hyperparameters_set` event of the run was recorded by this activity (its workflow run
 * and activity id): a retried activity records nothing more.
 */
export async function hyperparametersRecorded(db: Queryable, runId: string, origin: { workflow_run_id: string; activity_id: string }): Promise<boolean> {
  const { rows } = await db.query(
    `SELECT 1 FROM run_events WHERE run_id = $1 AND kind = 'hyperparameters_set' AND detail->>'workflow_run_id' = $2 AND detail->>'activity_id' = $3 LIMIT 1`,
    [runId, origin.workflow_run_id, origin.activity_id],
  );
  return rows.length > 0;
}

/**
 * The hyperparameters in force at train step `step`: those of the last `hyperparameters_set` event
 * that took effect at or before it (the newest when two name the same step); undefined when none did.
 */
export async function hyperparametersInForce<H>(db: Queryable, runId: string, step: number): Promise<H | undefined> {
  const { rows } = await db.query<{ detail: { hyperparameters?: H } }>(
    `SELECT detail FROM run_events WHERE run_id = $1 AND kind = 'hyperparameters_set' AND (detail->>'step')::int <= $2 ORDER BY (detail->>'step')::int DESC, id DESC LIMIT 1`,
    [runId, step],
  );
  return rows[0]?.detail.hyperparameters;
}

