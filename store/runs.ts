// The runs table: one row per training run (its id, the workflow that runs it, its config and status).
import type { Queryable } from './transfer-queue';

/** The workflow id of each of `runIds` that is registered; an unregistered run has no entry. */
export async function runWorkflowIds(db: Queryable, runIds: readonly string[]): Promise<Map<string, string>> {
  if (!runIds.length) return new Map();
  const { rows } = await db.query<{ run_id: string; workflow_id: string }>('SELECT run_id, workflow_id FROM runs WHERE run_id = ANY($1::text[])', [runIds]);
  return new Map(rows.map((r) => [r.run_id, r.workflow_id]));
}
