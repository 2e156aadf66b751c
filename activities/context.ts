// What every activity of a worker process shares: its database pool and who it is.
import { ApplicationFailure, Context } from '@temporalio/activity';
import type { Pool } from 'pg';
import type { Role } from '../config/task-queues';
import { CheckpointPrunedError, getRetainedCheckpoint, type CheckpointRecord } from '../store/checkpoint-registry';
import { recordEvent } from '../store/events';
import { recordSpan } from '../store/spans';

export interface WorkerContext {
  pool: Pool;
  role: Role;
  /** "cpu" or "cuda:N" */
  device: string;
  /** Unique per process: role, device, host and pid. */
  identity: string;
  /** The queue only this process polls (stateful work is pinned here). */
  instanceQueue: string;
}

/** Returned by each role's `workerInfo` activity: where to pin work that needs this process's state. */
export interface WorkerInfo {
  role: Role;
  device: string;
  identity: string;
  instanceQueue: string;
  pid: number;
}

export function workerInfoActivity(ctx: WorkerContext): () => Promise<WorkerInfo> {
  return async () => ({
    role: ctx.role,
    device: ctx.device,
    identity: ctx.identity,
    instanceQueue: ctx.instanceQueue,
    pid: process.pid,
  });
}

/** Records a stage's start or end in run_events, with the task queue it actually ran on. */
export async function recordStageEvent(ctx: WorkerContext, runId: string, kind: string, detail: Record<string, unknown> = {}): Promise<void> {
  const info = Context.current().info;
  await recordEvent(ctx.pool, {
    runId,
    kind,
    role: ctx.role,
    taskQueue: info.taskQueue,
    worker: ctx.identity,
    detail: { activity: info.activityType, attempt: info.attempt, pid: process.pid, device: ctx.device, ...detail },
  });
}

/** Sleeps `ms` while heartbeating, so a dead worker is noticed within the heartbeat timeout. */
export async function sleepWithHeartbeats(ms: number, everyMs = 250): Promise<void> {
  const ctx = Context.current();
  const end = Date.now() + ms;
  while (Date.now() < end) {
    ctx.heartbeat({ remainingMs: end - Date.now() });
    await ctx.sleep(Math.min(everyMs, Math.max(0, end - Date.now())));
  }
}

/**
 * Runs `fn` while heartbeating every `everyMs`, so a worker that dies mid-activity is noticed within
 * the activity's heartbeat timeout however long `fn` takes (it must not block the event loop longer).
 */
export async function withHeartbeats<T>(fn: () => Promise<T>, everyMs = 1_000): Promise<T> {
  const ctx = Context.current();
  ctx.heartbeat();
  const timer = setInterval(() => ctx.heartbeat(), everyMs);
  try {
    return await fn();
  } finally {
    clearInterval(timer);
  }
}

/**
 * The registered checkpoint of a policy version an engine is about to load. A version that was never
 * published may still appear (retryable: MissingPolicyVersion); one that retention pruned never will
 * (non-retryable, naming the versions still retained).
 */
export async function checkpointToLoad(ctx: WorkerContext, runId: string, version: number): Promise<CheckpointRecord> {
  let checkpoint: CheckpointRecord | undefined;
  try {
    checkpoint = await getRetainedCheckpoint(ctx.pool, runId, version);
  } catch (err) {
    if (err instanceof CheckpointPrunedError) throw ApplicationFailure.create({ message: err.message, type: 'PrunedPolicyVersion', nonRetryable: true });
    throw err;
  }
  if (!checkpoint) throw ApplicationFailure.create({ message: `policy version ${version} of run ${runId} is not published`, type: 'MissingPolicyVersion' });
  return checkpoint;
}

/** Runs one stage's work and records its span (stage_spans) when it completes. */
export async function spanned<T>(
  ctx: WorkerContext,
  runId: string,
  stage: string,
  where: { step?: number; iteration?: number; policyVersion?: number },
  fn: () => Promise<T>,
): Promise<T> {
  const startedAt = new Date();
  const out = await fn();
  await recordSpan(ctx.pool, { runId, role: ctx.role, stage, worker: ctx.identity, ...where, startedAt, endedAt: new Date() });
  return out;
}
