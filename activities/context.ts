// What every activity of a worker process shares: its database pool and who it is, the run's
// context, heartbeats while long work runs, stage events and spans, and the one mapping from the
// core's errors to Temporal failures (non-retryable where a retry cannot help, with a stable type).
import { ApplicationFailure, Context } from '@temporalio/activity';
import type { Pool } from 'pg';
import type { Role } from '../config/task-queues';
import { UserModuleError } from '../envs/user-modules';
import { CheckpointPrunedError, MissingPolicyVersionError } from '../store/checkpoint-registry';
import { recordEvent } from '../store/events';
import { recordSpan } from '../store/spans';
import { AlgorithmConfigError } from '../training/advantages';
import { RunModelError } from '../training/policy-model';
import { loadRunContext, RunTaskError, UnknownRunError, type RunContext } from '../training/run-context';

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
  return async () => ({ role: ctx.role, device: ctx.device, identity: ctx.identity, instanceQueue: ctx.instanceQueue, pid: process.pid });
}

/**
 * The core's errors as Temporal failures: a pruned version, an unknown run or task, a bad user
 * module or algorithm name can never succeed on retry (non-retryable); a version that is not
 * published yet may appear (retryable). Anything else is returned as it is.
 */
export function asActivityFailure(err: unknown): unknown {
  if (err instanceof CheckpointPrunedError) return ApplicationFailure.create({ message: err.message, type: 'PrunedPolicyVersion', nonRetryable: true });
  if (err instanceof MissingPolicyVersionError) return ApplicationFailure.create({ message: err.message, type: 'MissingPolicyVersion' });
  if (err instanceof UnknownRunError) return ApplicationFailure.create({ message: err.message, type: 'UnknownRun', nonRetryable: true });
  if (err instanceof RunTaskError) return ApplicationFailure.create({ message: err.message, type: 'UnknownTask', nonRetryable: true });
  if (err instanceof UserModuleError) return ApplicationFailure.create({ message: err.message, type: 'InvalidUserModule', nonRetryable: true });
  if (err instanceof RunModelError) return ApplicationFailure.create({ message: `invalid run config: ${err.message}`, type: 'InvalidRunConfig', nonRetryable: true });
  if (err instanceof AlgorithmConfigError) return ApplicationFailure.create({ message: `invalid run config: ${err.message}`, type: 'InvalidRunConfig', nonRetryable: true });
  return err;
}

/** Runs `fn`, rethrowing the core's errors as Temporal failures (asActivityFailure). */
export async function failuresMapped<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    throw asActivityFailure(err);
  }
}

/** The run's context (training/run-context.ts), its errors as Temporal failures. */
export function runContext(ctx: WorkerContext, runId: string): Promise<RunContext> {
  return failuresMapped(() => loadRunContext(ctx.pool, runId));
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
