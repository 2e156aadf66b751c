// The checkpoint registry: which policy versions of a run are published, where, and with which
// content hash. The weights themselves are files (engines/checkpoint.ts); this is the index every
// worker trusts. A version is registered once: re-registering identical content is a no-op (a retried
// publish), anything else is a conflict.
import { loadCheckpoint } from '../engines/checkpoint';
import type { Queryable } from './transfer-queue';

export interface NewCheckpoint {
  runId: string;
  policyVersion: number;
  /** The checkpoint directory (engines/checkpoint.ts checkpointDir). */
  path: string;
  /** sha256 of its weights file, lowercase hex. */
  sha256: string;
  /** The train step whose update produced this version. */
  step: number;
}

export interface CheckpointRecord extends NewCheckpoint {
  createdAt: Date;
}

/** A version registered again with different content, path or step. */
export class CheckpointConflictError extends Error {
  override readonly name = 'CheckpointConflictError';
}

interface CheckpointDbRow {
  run_id: string;
  policy_version: number;
  path: string;
  sha256: string;
  step: number;
  created_at: Date;
}

function fromDb(r: CheckpointDbRow): CheckpointRecord {
  return { runId: r.run_id, policyVersion: r.policy_version, path: r.path, sha256: r.sha256, step: r.step, createdAt: r.created_at };
}

function checkVersion(policyVersion: number): void {
  if (!Number.isInteger(policyVersion) || policyVersion < 0) throw new Error(`policyVersion must be a non-negative integer, got ${policyVersion}`);
}

/**
 * Registers a published version. Idempotent when (run, version) is already registered with the same
 * sha256, path and step; otherwise throws CheckpointConflictError: a version is published once.
 */
export async function registerCheckpoint(db: Queryable, c: NewCheckpoint): Promise<CheckpointRecord> {
  checkVersion(c.policyVersion);
  if (!/^[0-9a-f]{64}$/.test(c.sha256)) throw new Error(`sha256 must be 64 lowercase hex digits, got ${JSON.stringify(c.sha256)}`);
  if (!c.path) throw new Error('path must name the checkpoint directory');
  if (!Number.isInteger(c.step) || c.step < 0) throw new Error(`step must be a non-negative integer, got ${c.step}`);
  const inserted = await db.query<CheckpointDbRow>(
    `INSERT INTO checkpoints (run_id, policy_version, path, sha256, step) VALUES ($1, $2, $3, $4, $5)
     ON CONFLICT (run_id, policy_version) DO NOTHING RETURNING *`,
    [c.runId, c.policyVersion, c.path, c.sha256, c.step],
  );
  if (inserted.rows[0]) return fromDb(inserted.rows[0]);
  const existing = await getCheckpoint(db, c.runId, c.policyVersion);
  if (!existing) throw new Error(`policy version ${c.policyVersion} of run ${c.runId} conflicted on insert but cannot be read back`);
  const differences = (['sha256', 'path', 'step'] as const)
    .filter((field) => existing[field] !== c[field])
    .map((field) => `${field} ${JSON.stringify(existing[field])} (registering ${JSON.stringify(c[field])})`);
  if (differences.length > 0) {
    throw new CheckpointConflictError(
      `policy version ${c.policyVersion} of run ${c.runId} is already registered with ${differences.join(', ')}; a published version never changes: publish a new version instead`,
    );
  }
  return existing;
}

export async function getCheckpoint(db: Queryable, runId: string, policyVersion: number): Promise<CheckpointRecord | undefined> {
  const { rows } = await db.query<CheckpointDbRow>('SELECT * FROM checkpoints WHERE run_id = $1 AND policy_version = $2', [runId, policyVersion]);
  return rows[0] && fromDb(rows[0]);
}

/** The newest registered version of a run, or undefined when none is. */
export async function latestCheckpoint(db: Queryable, runId: string): Promise<CheckpointRecord | undefined> {
  const { rows } = await db.query<CheckpointDbRow>('SELECT * FROM checkpoints WHERE run_id = $1 ORDER BY policy_version DESC LIMIT 1', [runId]);
  return rows[0] && fromDb(rows[0]);
}

/** Every registered version of a run, oldest first. */
export async function listCheckpoints(db: Queryable, runId: string): Promise<CheckpointRecord[]> {
  const { rows } = await db.query<CheckpointDbRow>('SELECT * FROM checkpoints WHERE run_id = $1 ORDER BY policy_version', [runId]);
  return rows.map(fromDb);
}

export type CheckpointVerification = { checkpoint: CheckpointRecord; ok: true } | { checkpoint: CheckpointRecord; ok: false; problem: string };

/**
 * Re-reads a registered version from disk and checks it against the registry: the weights file's
 * sha256, its config, every tensor's shape, and the version it says it is. A missing or corrupt
 * checkpoint is reported (ok: false, with the problem), not thrown; an unregistered version throws.
 */
export async function verifyCheckpoint(db: Queryable, runId: string, policyVersion: number): Promise<CheckpointVerification> {
  const checkpoint = await getCheckpoint(db, runId, policyVersion);
  if (!checkpoint) throw new Error(`policy version ${policyVersion} of run ${runId} is not registered`);
  try {
    const { info } = await loadCheckpoint(checkpoint.path, { sha256: checkpoint.sha256 });
    if (info.policyVersion !== policyVersion) {
      return { checkpoint, ok: false, problem: `checkpoint ${checkpoint.path} holds policy version ${info.policyVersion}, but the registry lists it as version ${policyVersion}` };
    }
    return { checkpoint, ok: true };
  } catch (err) {
    return { checkpoint, ok: false, problem: (err as Error).message };
  }
}

export interface PruneCheckpointsOptions {
  /** Versions kept whatever their age, e.g. the reference policy (version 0) the KL term needs. */
  alsoKeep?: readonly number[];
}

/**
 * Removes all but the newest `keepLast` (>= 1, so never the latest) versions from the registry and
 * returns their paths, oldest first: the caller deletes the files.
 */
export async function pruneCheckpoints(db: Queryable, runId: string, keepLast: number, options: PruneCheckpointsOptions = {}): Promise<string[]> {
  if (!Number.isInteger(keepLast) || keepLast < 1) throw new Error(`keepLast must be an integer >= 1 (the latest version is always kept), got ${keepLast}`);
  const alsoKeep = options.alsoKeep ?? [];
  alsoKeep.forEach(checkVersion);
  const { rows } = await db.query<{ path: string; policy_version: number }>(
    `DELETE FROM checkpoints
      WHERE run_id = $1 AND NOT (policy_version = ANY($3::integer[]))
        AND policy_version NOT IN (SELECT policy_version FROM checkpoints WHERE run_id = $1 ORDER BY policy_version DESC LIMIT $2)
     RETURNING path, policy_version`,
    [runId, keepLast, alsoKeep],
  );
  return rows.sort((a, b) => a.policy_version - b.policy_version).map((r) => r.path);
}
