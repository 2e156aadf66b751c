// The runs table: one row per training run (its id, the workflow that runs it, its config and status).
import type { Queryable } from './transfer-queue';

/** A run's row as control.startRun writes it (activities/run-registration.ts). */
export interface NewRun {
  runId: string;
  workflowId: string;
  /** The run's config as registered (stored as JSON; immutable once registered). */
  config: unknown;
  /** The Temporal Schedule that started the run, and when it meant to (null: not scheduled / no time given). */
  scheduleId: string | null;
  scheduledAt: Date | null;
}

/**
 * Inserts the run's row, or when its run_id is already registered only touches `updated_at`.
 * Returns the workflow id that owns the run_id: `run.workflowId` unless another workflow registered it first.
 */
export async function insertRun(db: Queryable, run: NewRun): Promise<string> {
  const { rows } = await db.query<{ workflow_id: string }>(
    `INSERT INTO runs (run_id, workflow_id, kind, config, schedule_id, scheduled_at) VALUES ($1, $2, 'training', $3, $4, $5)
       ON CONFLICT (run_id) DO UPDATE SET updated_at = now() RETURNING workflow_id`,
    [run.runId, run.workflowId, JSON.stringify(run.config), run.scheduleId, run.scheduledAt],
  );
  return rows[0].workflow_id;
}

/** The run's row (its registered config), or undefined when the run is not registered. */
export async function registeredRun<Config = unknown>(db: Queryable, runId: string): Promise<{ config: Config } | undefined> {
  const { rows } = await db.query<{ config: Config }>('SELECT config FROM runs WHERE run_id = $1', [runId]);
  return rows[0];
}

/** Sets the run's status (running, completed, failed, ...), as the run ends. */
export async function setRunStatus(db: Queryable, runId: string, status: string): Promise<void> {
  await db.query('UPDATE runs SET status = $2, updated_at = now() WHERE run_id = $1', [runId, status]);
}

/** The run ids of every run whose status is 'running', in order. */
export async function runningRunIds(db: Queryable): Promise<string[]> {
  const { rows } = await db.query<{ run_id: string }>(`SELECT run_id FROM runs WHERE status = 'running' ORDER BY run_id`);
  return rows.map((r) => r.run_id);
}

/** The workflow id of each of `runIds` that is registered; an unregistered run has no entry. */
export async function runWorkflowIds(db: Queryable, runIds: readonly string[]): Promise<Map<string, string>> {
  if (!runIds.length) return new Map();
  const { rows } = await db.query<{ run_id: string; workflow_id: string }>('SELECT run_id, workflow_id FROM runs WHERE run_id = ANY($1::text[])', [runIds]);
  return new Map(rows.map((r) => [r.run_id, r.workflow_id]));
}

/** The newest run this workflow registered for the schedule (a retried scheduled start finds it), or undefined. */
export async function scheduledRunOfWorkflow(db: Queryable, workflowId: string, scheduleId: string): Promise<string | undefined> {
  const { rows } = await db.query<{ run_id: string }>(`SELECT run_id FROM runs WHERE workflow_id = $1 AND schedule_id = $2 ORDER BY created_at DESC LIMIT 1`, [workflowId, scheduleId]);
  return rows[0]?.run_id;
}

/** How many runs the schedule has started. */
export async function scheduleRunCount(db: Queryable, scheduleId: string): Promise<number> {
  const { rows } = await db.query<{ n: string }>('SELECT count(*) AS n FROM runs WHERE schedule_id = $1', [scheduleId]);
  return Number(rows[0].n);
}

/**
 * The most recent *completed* run the schedule started (by scheduled time, then registration) that
 * still has a retained checkpoint, other than `exceptRunId`; undefined when there is none.
 */
export async function newestCompletedScheduledRun(db: Queryable, scheduleId: string, exceptRunId: string): Promise<string | undefined> {
  const { rows } = await db.query<{ run_id: string }>(
    `SELECT r.run_id FROM runs r
      WHERE r.schedule_id = $1 AND r.status = 'completed' AND r.run_id <> $2
        AND EXISTS (SELECT 1 FROM checkpoints c WHERE c.run_id = r.run_id AND c.pruned_at IS NULL)
      ORDER BY coalesce(r.scheduled_at, r.created_at) DESC, r.created_at DESC, r.run_id DESC LIMIT 1`,
    [scheduleId, exceptRunId],
  );
  return rows[0]?.run_id;
}
