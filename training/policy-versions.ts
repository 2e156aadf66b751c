// A run's policy versions, the one place that puts checkpoint files (engines/checkpoint.ts: weights
// and optimizer state) and the checkpoint registry (store/checkpoint-registry.ts: which versions
// exist) together: publish a version, load one, verify one, prune old ones, resolve checkpoint.init_from.
import { deleteCheckpointFiles, loadCheckpoint, publishCheckpoint, readOptimizerState, verifyCheckpointFiles, writeOptimizerState } from '../engines/checkpoint';
import type { ModelConfig, PolicyWeights } from '../engines/model';
import { failpoint } from '../config/failpoints';
import { scheduleInitFrom, scheduleInitFromProblem } from '../config/scheduled-runs';
import {
  getCheckpoint,
  markPrunedCheckpoints,
  prunedCheckpointError,
  registerCheckpoint,
  requireRetainedCheckpoint,
  resolveInitFrom as resolveRegistryInitFrom,
  type CheckpointRecord,
  type InitFromSource,
  type PruneCheckpointsRequest,
} from '../store/checkpoint-registry';
import { newestCompletedScheduledRun } from '../store/runs';
import type { Queryable } from '../store/transfer-queue';

export type { InitFromSource } from '../store/checkpoint-registry';

/** Where a run's versions live and what they hold. */
export interface RunCheckpoints {
  runId: string;
  model: ModelConfig;
  /** The run's checkpoint root (shared storage in a multi-host deployment). */
  checkpointRoot: string;
}

/**
 * Publishes version `version` (produced by train step `step`): optimizer state first, then the
 * weights, then the registry row, so a registered version always has its files and its moments.
 * Idempotent: a retry with the same weights re-registers nothing new.
 */
export async function publishPolicyVersion(
  db: Queryable,
  run: RunCheckpoints,
  version: number,
  step: number,
  weights: PolicyWeights,
  optimizerState?: Uint8Array,
): Promise<CheckpointRecord> {
  if (optimizerState) await writeOptimizerState(run.checkpointRoot, version, optimizerState);
  const info = await publishCheckpoint(run.checkpointRoot, version, run.model, weights);
  failpoint('train.publish');
  return registerCheckpoint(db, { runId: run.runId, policyVersion: version, path: info.dir, sha256: info.sha256, step });
}

/**
 * The weights of a published version, verified against the registry's hash and the run's model.
 * Throws MissingPolicyVersionError (not published yet) or CheckpointPrunedError (retention deleted it).
 */
export async function loadPolicyWeights(db: Queryable, run: RunCheckpoints, version: number): Promise<PolicyWeights> {
  const checkpoint = await requireRetainedCheckpoint(db, run.runId, version);
  try {
    return (await loadCheckpoint(checkpoint.path, { model: run.model, sha256: checkpoint.sha256 })).weights;
  } catch (err) {
    // Retention marks a version pruned before it deletes the files: files gone between the registry
    // read and the file read are a pruned version (CheckpointPrunedError), not an I/O failure.
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') await requireRetainedCheckpoint(db, run.runId, version);
    throw err;
  }
}

/** The optimizer state published with `version`, if any (version 0 and warm starts have none). */
export function loadOptimizerState(run: RunCheckpoints, version: number): Promise<Uint8Array | undefined> {
  return readOptimizerState(run.checkpointRoot, version);
}

export type CheckpointVerification = { checkpoint: CheckpointRecord; ok: true } | { checkpoint: CheckpointRecord; ok: false; problem: string };

/**
 * Re-reads a registered version from disk and checks it against the registry: the weights file's
 * sha256, its config, every tensor's shape, and the version it says it is. A missing, corrupt or
 * pruned checkpoint is reported (ok: false, with the problem), not thrown; an unregistered version throws.
 */
export async function verifyPolicyVersion(db: Queryable, runId: string, version: number): Promise<CheckpointVerification> {
  const checkpoint = await getCheckpoint(db, runId, version);
  if (!checkpoint) throw new Error(`policy version ${version} of run ${runId} is not registered`);
  if (checkpoint.prunedAt) return { checkpoint, ok: false, problem: (await prunedCheckpointError(db, checkpoint)).message };
  const files = await verifyCheckpointFiles(checkpoint.path, version, checkpoint.sha256);
  return files.ok ? { checkpoint, ok: true } : { checkpoint, ok: false, problem: files.problem };
}

/**
 * Checkpoint retention for a run: marks the versions it prunes in the registry, then deletes the
 * files of every pruned version still on disk (store/checkpoint-registry.ts says why in that order).
 * Returns the versions this call marked, ascending; a retried or concurrent call ends in the same state.
 */
export async function prunePolicyVersions(db: Queryable, request: PruneCheckpointsRequest & { checkpointRoot: string }): Promise<number[]> {
  if (!request.checkpointRoot) throw new Error("checkpointRoot must name the run's checkpoint root");
  const { marked, pruned } = await markPrunedCheckpoints(db, request);
  await deleteCheckpointFiles(request.checkpointRoot, pruned, new Set(marked));
  return marked;
}

/**
 * Resolves checkpoint.init_from: a checkpoint directory, `<run_id>@<version|latest>` (a version in
 * the registry: store/checkpoint-registry.ts), or `schedule:<name>@latest`: the newest published
 * version of the most recent *completed* run the schedule started (by scheduled time), other than
 * `runId`. That form resolves to undefined while the schedule has no completed run with a
 * version yet (its first tick): the caller then initializes as if no init_from were given.
 */
export async function resolveInitFrom(db: Queryable, spec: string, options: { runId?: string } = {}): Promise<InitFromSource | undefined> {
  const problem = scheduleInitFromProblem(spec);
  if (problem) throw new Error(problem);
  const schedule = scheduleInitFrom(spec);
  if (schedule === undefined) return resolveRegistryInitFrom(db, spec);
  const newest = await newestCompletedScheduledRun(db, schedule, options.runId ?? '');
  if (newest === undefined) return undefined;
  return resolveRegistryInitFrom(db, `${newest}@latest`);
}
