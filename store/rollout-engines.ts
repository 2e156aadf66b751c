// The rollout engines a capacity provider started (rollout_engines): which exist, their state, and
// which of them the stack started with (protected from scale-in unless forced). Written by the
// provider (workers/local-capacity.ts), read by the control API and the scaling workflows.
import type { Pool } from 'pg';
import type { Queryable } from './transfer-queue';

export const ENGINE_STATES = ['starting', 'active', 'draining', 'removed', 'failed'] as const;
export type EngineState = (typeof ENGINE_STATES)[number];
export type EngineKind = 'local' | 'external';

export interface RolloutEngineRecord {
  engineId: string;
  /**
   * 'local': a rollout worker process this stack's supervisor started; 'external': one such
   * process driving an OpenAI-compatible server at `url` (rollout/remote-engine.ts).
   */
  kind: EngineKind;
  host: string;
  pid: number | null;
  /** The worker's Temporal identity (what its pollers and its samples' `engine` say). */
  identity: string | null;
  url: string | null;
  state: EngineState;
  /** Started with the stack: scale-in leaves it unless forced. */
  initial: boolean;
  detail: Record<string, unknown>;
  createdAt: Date;
  updatedAt: Date;
}

type Row = {
  engine_id: string;
  kind: EngineKind;
  host: string;
  pid: number | null;
  identity: string | null;
  url: string | null;
  state: EngineState;
  initial: boolean;
  detail: Record<string, unknown>;
  created_at: Date;
  updated_at: Date;
};

const fromRow = (r: Row): RolloutEngineRecord => ({
  engineId: r.engine_id,
  kind: r.kind,
  host: r.host,
  pid: r.pid,
  identity: r.identity,
  url: r.url,
  state: r.state,
  initial: r.initial,
  detail: r.detail,
  createdAt: r.created_at,
  updatedAt: r.updated_at,
});

export interface EngineUpsert {
  engineId: string;
  kind: EngineKind;
  host: string;
  pid?: number | null;
  identity?: string | null;
  url?: string | null;
  state: EngineState;
  initial?: boolean;
  detail?: Record<string, unknown>;
}

/**
 * Inserts or updates one engine's row (identity, pid and url are kept when the update omits them).
 * A failed engine stays failed until it is removed.
 */
export async function upsertRolloutEngine(pool: Pool, e: EngineUpsert): Promise<void> {
  await pool.query(
    `INSERT INTO rollout_engines (engine_id, kind, host, pid, identity, url, state, initial, detail)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb)
     ON CONFLICT (engine_id) DO UPDATE SET
       pid = COALESCE(EXCLUDED.pid, rollout_engines.pid),
       identity = COALESCE(EXCLUDED.identity, rollout_engines.identity),
       url = COALESCE(EXCLUDED.url, rollout_engines.url),
       state = CASE WHEN rollout_engines.state = 'failed' AND EXCLUDED.state <> 'removed' THEN 'failed' ELSE EXCLUDED.state END,
       detail = rollout_engines.detail || EXCLUDED.detail,
       updated_at = now()`,
    [e.engineId, e.kind, e.host, e.pid ?? null, e.identity ?? null, e.url ?? null, e.state, e.initial ?? false, JSON.stringify(e.detail ?? {})],
  );
}

/** Engines, oldest first; by default only those not removed. */
export async function listRolloutEngines(pool: Pool, options: { includeRemoved?: boolean } = {}): Promise<RolloutEngineRecord[]> {
  const { rows } = await pool.query<Row>(
    `SELECT * FROM rollout_engines ${options.includeRemoved ? '' : `WHERE state <> 'removed'`} ORDER BY created_at, engine_id`,
  );
  return rows.map(fromRow);
}

/** Engines, oldest first; removed ones only with `includeRemoved` (the client's read: one parameterized statement). */
export async function rolloutEngines(db: Queryable, includeRemoved: boolean): Promise<RolloutEngineRecord[]> {
  const { rows } = await db.query<Row>(
    `SELECT * FROM rollout_engines WHERE $1::boolean OR state <> 'removed' ORDER BY created_at, engine_id`,
    [includeRemoved],
  );
  return rows.map(fromRow);
}

/**
 * Marks the engine whose worker has this identity failed, with why: it gets no more work (its
 * worker stops polling). Returns whether a row was marked.
 */
export async function markRolloutEngineFailed(pool: Pool, identity: string, reason: string): Promise<boolean> {
  const { rowCount } = await pool.query(
    `UPDATE rollout_engines SET state = 'failed', detail = detail || jsonb_build_object('failed_because', $2::text, 'failed_at', now()), updated_at = now()
      WHERE identity = $1 AND state <> 'removed'`,
    [identity, reason],
  );
  return (rowCount ?? 0) > 0;
}

/** Marks every engine of a host that is not removed as removed (a stack starting afresh: its old children are gone). */
export async function retireHostEngines(pool: Pool, host: string, reason: string): Promise<number> {
  const { rowCount } = await pool.query(
    `UPDATE rollout_engines SET state = 'removed', detail = detail || jsonb_build_object('removed_because', $2::text), updated_at = now()
      WHERE host = $1 AND state <> 'removed'`,
    [host, reason],
  );
  return rowCount ?? 0;
}
