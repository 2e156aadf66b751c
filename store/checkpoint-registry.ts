// The checkpoint registry: which policy versions of a run are published, where, and with which
// content hash. The weights themselves are files (engines/checkpoint.ts); this is the index every
// worker trusts (training/policy-versions.ts puts the two together). A version is registered once: re-registering identical content is a no-op (a retried
// publish), anything else is a conflict. Checkpoint retention deletes the files of old versions but
// keeps their rows, marked pruned_at, so the run's lineage stays readable and a reader asking for a
// pruned version gets a clear error instead of a missing file.
import { stat } from 'node:fs/promises';
import { formatVersions, versionsToPrune, type RetentionPolicy } from './checkpoint-retention';
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
  /** Set when checkpoint retention deleted this version's files: the row remains, the weights do not. */
  prunedAt?: Date;
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
  pruned_at: Date | null;
}

function fromDb(r: CheckpointDbRow): CheckpointRecord {
  const record: CheckpointRecord = { runId: r.run_id, policyVersion: r.policy_version, path: r.path, sha256: r.sha256, step: r.step, createdAt: r.created_at };
  if (r.pruned_at) record.prunedAt = r.pruned_at;
  return record;
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

/**
 * The registered row of a version, pruned or not (check `prunedAt`, or use getRetainedCheckpoint when
 * about to read the files).
 */
export async function getCheckpoint(db: Queryable, runId: string, policyVersion: number): Promise<CheckpointRecord | undefined> {
  const { rows } = await db.query<CheckpointDbRow>('SELECT * FROM checkpoints WHERE run_id = $1 AND policy_version = $2', [runId, policyVersion]);
  return rows[0] && fromDb(rows[0]);
}

/** The newest registered version of a run, or undefined when none is. */
export async function latestCheckpoint(db: Queryable, runId: string): Promise<CheckpointRecord | undefined> {
  const { rows } = await db.query<CheckpointDbRow>('SELECT * FROM checkpoints WHERE run_id = $1 ORDER BY policy_version DESC LIMIT 1', [runId]);
  return rows[0] && fromDb(rows[0]);
}

/** Every registered version of a run, oldest first, pruned ones included (with `prunedAt`). */
export async function listCheckpoints(db: Queryable, runId: string): Promise<CheckpointRecord[]> {
  const { rows } = await db.query<CheckpointDbRow>('SELECT * FROM checkpoints WHERE run_id = $1 ORDER BY policy_version', [runId]);
  return rows.map(fromDb);
}

// ---- Pruned versions: the error a reader gets ----

/** A version whose files checkpoint retention deleted; `retained` lists the versions that still have files. */
/** A published policy version of a run, as the client reads it. */
export interface CheckpointVersion {
  policyVersion: number;
  /** The train step whose update produced it (0: the initial policy). */
  step: number;
  /** The checkpoint directory. */
  path: string;
  /** sha256 of its weights file. */
  sha256: string;
  createdAt: Date;
  /** Set when checkpoint retention deleted its files (the row stays for the lineage). */
  prunedAt?: Date;
}

/** Every registered version of a run, oldest first, pruned ones included (with `prunedAt`). */
export async function checkpointVersions(db: Queryable, runId: string): Promise<CheckpointVersion[]> {
  const { rows } = await db.query<{ policy_version: number; step: number; path: string; sha256: string; created_at: Date; pruned_at: Date | null }>(
    'SELECT policy_version, step, path, sha256, created_at, pruned_at FROM checkpoints WHERE run_id = $1 ORDER BY policy_version',
    [runId],
  );
  return rows.map((r) => ({
    policyVersion: r.policy_version,
    step: r.step,
    path: r.path,
    sha256: r.sha256,
    createdAt: r.created_at,
    ...(r.pruned_at ? { prunedAt: r.pruned_at } : {}),
  }));
}

export class CheckpointPrunedError extends Error {
  override readonly name = 'CheckpointPrunedError';
  constructor(
    readonly runId: string,
    readonly policyVersion: number,
    readonly retained: readonly number[],
    retention?: { every: number; keepLast: number },
    context?: string,
  ) {
    const policy = retention ? ` (checkpoint.every=${retention.every}, keep_last=${retention.keepLast})` : '';
    const next = retained.length > 0 ? `start from a retained version: ${formatVersions(retained)}` : `no version of run ${runId} is retained`;
    super(`${context ? `${context}: ` : ''}policy version ${policyVersion} of run ${runId} was pruned by checkpoint retention${policy}; ${next}`);
  }
}

/** The versions of a run whose files are kept, ascending. */
export async function retainedVersions(db: Queryable, runId: string): Promise<number[]> {
  const { rows } = await db.query<{ v: number }>('SELECT policy_version AS v FROM checkpoints WHERE run_id = $1 AND pruned_at IS NULL ORDER BY 1', [runId]);
  return rows.map((r) => r.v);
}

/** checkpoint.every / keep_last of a run as recorded in its config (the registered config has its defaults filled); undefined when unreadable. */
async function runRetention(db: Queryable, runId: string): Promise<{ every: number; keepLast: number } | undefined> {
  const { rows } = await db.query<{ every: unknown; keep_last: unknown }>(
    `SELECT config->'checkpoint'->'every' AS every, config->'checkpoint'->'keep_last' AS keep_last FROM runs WHERE run_id = $1`,
    [runId],
  );
  const { every, keep_last: keepLast } = rows[0] ?? {};
  return Number.isInteger(every) && Number.isInteger(keepLast) ? { every: every as number, keepLast: keepLast as number } : undefined;
}

/** The error to raise for a pruned version: names the run's retention settings and the versions still retained. */
export async function prunedCheckpointError(db: Queryable, checkpoint: CheckpointRecord, context?: string): Promise<CheckpointPrunedError> {
  const [retained, retention] = await Promise.all([retainedVersions(db, checkpoint.runId), runRetention(db, checkpoint.runId)]);
  return new CheckpointPrunedError(checkpoint.runId, checkpoint.policyVersion, retained, retention, context);
}

/** A version that is not (yet) registered: an engine asked for it too early, or a bad reference. */
export class MissingPolicyVersionError extends Error {
  override readonly name = 'MissingPolicyVersionError';
}

/** getRetainedCheckpoint for a caller that needs the version: MissingPolicyVersionError when it is not registered. */
export async function requireRetainedCheckpoint(db: Queryable, runId: string, policyVersion: number): Promise<CheckpointRecord> {
  const checkpoint = await getRetainedCheckpoint(db, runId, policyVersion);
  if (!checkpoint) throw new MissingPolicyVersionError(`policy version ${policyVersion} of run ${runId} is not published`);
  return checkpoint;
}

/**
 * getCheckpoint for a caller about to read the files: undefined when the version is not registered,
 * and a CheckpointPrunedError (saying which versions are retained) when retention deleted its files.
 */
export async function getRetainedCheckpoint(db: Queryable, runId: string, policyVersion: number): Promise<CheckpointRecord | undefined> {
  const checkpoint = await getCheckpoint(db, runId, policyVersion);
  if (checkpoint?.prunedAt) throw await prunedCheckpointError(db, checkpoint);
  return checkpoint;
}

// ---- checkpoint.init_from: a directory, or a version of another run ----

/** Where a run's version 0 comes from. sha256 / runId / policyVersion are set for a registry reference. */
export interface InitFromSource {
  path: string;
  /** The registered content hash: pass it to loadCheckpoint so a replaced file is caught. */
  sha256?: string;
  runId?: string;
  policyVersion?: number;
}

/** `<run_id>@<version>` or `<run_id>@latest`; run_id as in the run config (1-64 of [A-Za-z0-9._-]). */
// The same pattern as config/run-config.ts POLICY_VERSION_REFERENCE (store may not import config).
export const INIT_FROM_REFERENCE = /^([A-Za-z0-9][A-Za-z0-9._-]{0,63})@(\d+|latest)$/;

async function pathExists(p: string): Promise<boolean> {
  try {
    await stat(p);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT' || (err as NodeJS.ErrnoException).code === 'ENOTDIR') return false;
    throw err;
  }
}

/**
 * Resolves checkpoint.init_from. A spec matching INIT_FROM_REFERENCE that is not an existing path is
 * a registry reference: version <n> (or the newest) of a run in this database, which must still be
 * retained. Anything else is a checkpoint directory path, returned unchanged (loadCheckpoint checks
 * it). An existing path wins, so a directory that happens to be named like "run@3" still works.
 */
export async function resolveInitFrom(db: Queryable, spec: string): Promise<InitFromSource> {
  const ref = INIT_FROM_REFERENCE.exec(spec);
  if (!ref || (await pathExists(spec))) return { path: spec };
  const [, runId, which] = ref;
  const context = `"${spec}" (not an existing path, so read as a registry reference <run_id>@<version|latest>)`;
  const { rows } = await db.query<{ known: boolean; n: string; min: number | null; max: number | null }>(
    `SELECT EXISTS (SELECT 1 FROM runs WHERE run_id = $1) AS known, count(c.*) AS n, min(c.policy_version) AS min, max(c.policy_version) AS max
       FROM checkpoints c WHERE c.run_id = $1`,
    [runId],
  );
  const { known, n, min, max } = rows[0];
  if (!known) throw new Error(`${context}: no run "${runId}" is registered in this database; ${await recentRunsHint(db)}`);
  if (Number(n) === 0 || min === null || max === null) {
    throw new Error(`${context}: run "${runId}" has no registered policy versions yet; start from a run that has published one, or give a checkpoint directory`);
  }
  const version = which === 'latest' ? max : Number(which);
  // Beyond the integer column's range nothing can be registered (and the query would fail).
  const checkpoint = version <= 2_147_483_647 ? await getCheckpoint(db, runId, version) : undefined;
  if (!checkpoint) {
    throw new Error(`${context}: run "${runId}" has policy versions ${min}..${max} registered, not version ${which}; use ${runId}@latest or a version in ${min}..${max}`);
  }
  if (checkpoint.prunedAt) throw await prunedCheckpointError(db, checkpoint, context);
  return { path: checkpoint.path, sha256: checkpoint.sha256, runId, policyVersion: version };
}

/** A short pointer at runs that do have checkpoints: the five most recently published to. */
async function recentRunsHint(db: Queryable): Promise<string> {
  const { rows } = await db.query<{ run_id: string }>(
    'SELECT run_id FROM checkpoints GROUP BY run_id ORDER BY max(created_at) DESC, run_id LIMIT 5',
  );
  if (rows.length === 0) return 'no run in it has checkpoints; give a checkpoint directory path instead';
  return `runs with checkpoints, most recent first: ${rows.map((r) => r.run_id).join(', ')}${rows.length === 5 ? ', ...' : ''} (or give a checkpoint directory path)`;
}

// ---- Retention: deleting the files of old versions ----

export interface PruneCheckpointsRequest extends RetentionPolicy {
  runId: string;
  /** The version just published and registered; versions above it are never touched. */
  latest: number;
}

export interface MarkedPruned {
  /** The versions this call marked, ascending (empty when a previous call already did). */
  marked: number[];
  /** Every pruned version of the run (marked now or before): their files are to be deleted. */
  pruned: CheckpointRecord[];
}

/**
 * Applies checkpoint retention (store/checkpoint-retention.ts) to a run's rows: marks the versions it
 * prunes (pruned_at) and returns them, with every version pruned before, whose files the caller then
 * deletes (training/policy-versions.ts prunePolicyVersions).
 *
 * Order: mark in the database first, then delete the files. Readers trust a row whose pruned_at is
 * NULL, so the opposite order could crash between the two and leave a trusted row pointing at
 * missing files. Marked first, a crash leaves at worst a pruned row whose files still exist: readers
 * refuse it (getRetainedCheckpoint), and the next call deletes those files, because it returns every
 * pruned row, not only the rows it marked.
 *
 * A reader may have looked a version up just before it was marked; `protect` (max_staleness + 1)
 * keeps every version a rollout engine can still be asked for, so that read is never of a pruned one.
 */
export async function markPrunedCheckpoints(db: Queryable, request: PruneCheckpointsRequest): Promise<MarkedPruned> {
  const { runId, latest } = request;
  const registered = await listCheckpoints(db, runId);
  if (!registered.some((c) => c.policyVersion === latest)) {
    const have = registered.length > 0 ? `registered: ${formatVersions(registered.map((c) => c.policyVersion))}` : 'the run has no registered versions';
    throw new Error(`cannot prune run ${runId} relative to policy version ${latest}: it is not registered (${have}); register the version just published, then prune`);
  }
  const prune = versionsToPrune({ ...request, versions: registered.map((c) => c.policyVersion) });
  const { rows } = await db.query<{ policy_version: number }>(
    `UPDATE checkpoints SET pruned_at = now()
      WHERE run_id = $1 AND policy_version = ANY($2::integer[]) AND pruned_at IS NULL
     RETURNING policy_version`,
    [runId, prune],
  );
  const marked = new Set(rows.map((r) => r.policy_version));
  return { marked: [...marked].sort((a, b) => a - b), pruned: registered.filter((c) => c.prunedAt || marked.has(c.policyVersion)) };
}
