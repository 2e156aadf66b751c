// The evaluations table: one row per sampled evaluation of a policy version (pass@1, pass@k, maj@k,
// mean@k over a dataset, k samples per prompt at a temperature), written by the rollout worker's
// evaluation activity and read by `relax eval`, the client and the "unevaluated" version choice.
import type { Queryable } from './transfer-queue';

/** What an evaluation is of: the same key twice is the same evaluation (a retry overwrites it). */
export interface EvaluationKey {
  runId: string;
  policyVersion: number;
  /** "held_out" or a dataset file. */
  dataset: string;
  k: number;
  temperature: number;
  prompts: number;
  seed: number;
}

export interface EvaluationRecord extends EvaluationKey {
  step: number;
  passAt1: number;
  passAtK: number;
  majAtK: number;
  meanAtK: number;
  workflowId?: string;
  createdAt?: Date;
}

/**
 * Writes (or overwrites) one evaluation's row, and marks the run changed (runs.updated_at): a metrics
 * endpoint exports the series of runs running or changed lately, the evaluation's metrics included.
 */
export async function recordEvaluation(db: Queryable, e: EvaluationRecord): Promise<void> {
  await db.query(
    `INSERT INTO evaluations (run_id, policy_version, dataset, k, temperature, prompts, seed, step, pass_at_1, pass_at_k, maj_at_k, mean_at_k, workflow_id)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
     ON CONFLICT (run_id, policy_version, dataset, k, temperature, prompts, seed) DO UPDATE SET
       step = EXCLUDED.step, pass_at_1 = EXCLUDED.pass_at_1, pass_at_k = EXCLUDED.pass_at_k, maj_at_k = EXCLUDED.maj_at_k,
       mean_at_k = EXCLUDED.mean_at_k, workflow_id = EXCLUDED.workflow_id, created_at = now()`,
    [e.runId, e.policyVersion, e.dataset, e.k, e.temperature, e.prompts, e.seed, e.step, e.passAt1, e.passAtK, e.majAtK, e.meanAtK, e.workflowId ?? null],
  );
  await db.query('UPDATE runs SET updated_at = now() WHERE run_id = $1', [e.runId]);
}

interface Row {
  run_id: string;
  policy_version: number;
  dataset: string;
  k: number;
  temperature: number;
  prompts: number;
  seed: number;
  step: number;
  pass_at_1: number;
  pass_at_k: number;
  maj_at_k: number;
  mean_at_k: number;
  workflow_id: string | null;
  created_at: Date;
}

const fromRow = (r: Row): EvaluationRecord => ({
  runId: r.run_id,
  policyVersion: r.policy_version,
  dataset: r.dataset,
  k: r.k,
  temperature: Number(r.temperature),
  prompts: r.prompts,
  seed: r.seed,
  step: r.step,
  passAt1: Number(r.pass_at_1),
  passAtK: Number(r.pass_at_k),
  majAtK: Number(r.maj_at_k),
  meanAtK: Number(r.mean_at_k),
  ...(r.workflow_id ? { workflowId: r.workflow_id } : {}),
  createdAt: r.created_at,
});

/** The run's evaluations, oldest version first (then oldest first). */
export async function listEvaluations(db: Queryable, runId: string): Promise<EvaluationRecord[]> {
  const { rows } = await db.query<Row>('SELECT * FROM evaluations WHERE run_id = $1 ORDER BY policy_version, created_at', [runId]);
  return rows.map(fromRow);
}

/** The evaluation with exactly this key, if one was recorded. */
export async function findEvaluation(db: Queryable, key: EvaluationKey): Promise<EvaluationRecord | undefined> {
  const { rows } = await db.query<Row>(
    'SELECT * FROM evaluations WHERE run_id = $1 AND policy_version = $2 AND dataset = $3 AND k = $4 AND temperature = $5 AND prompts = $6 AND seed = $7',
    [key.runId, key.policyVersion, key.dataset, key.k, key.temperature, key.prompts, key.seed],
  );
  return rows[0] ? fromRow(rows[0]) : undefined;
}
