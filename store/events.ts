// Run events (run_events): a run's start and end, with the worker and task queue that handled them.
import type { Pool } from 'pg';

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
