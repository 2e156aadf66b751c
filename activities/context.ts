// What every activity of a worker process shares: its database pool and who it is, the run's
// context, heartbeats while long work runs, stage events and spans, and the one mapping from the
// core's errors to Temporal failures (non-retryable where a retry cannot help, with a stable type).
import { AsyncLocalStorage } from 'node:async_hooks';
import { ApplicationFailure, CancelledFailure, Context } from '@temporalio/activity';
import type { Pool } from 'pg';
import type { Role } from '../config/task-queues';
import { NON_RETRYABLE_FAILURE_TYPES, type NonRetryableFailureType, type RetryableFailureType } from '../config/failure-types';
import { shortened } from '../config/json-limits';
import { RUN_MEMORY_SETTING } from '../config/run-bounds';
import { RunConfigError } from '../config/run-config';
import { CheckpointOverwriteError } from '../engines/checkpoint';
import { NonFiniteUpdateError } from '../engines/trainer';
import type { CheckpointServer } from '../serving/checkpoint-server';
import { NotAllowedError } from '../envs/module-policy';
import { UserModuleError } from '../envs/user-modules';
import { CheckpointConflictError, CheckpointPrunedError, MissingPolicyVersionError } from '../store/checkpoint-registry';
import { TrainStepConflictError } from '../store/transfer-queue';
import { recordEvent } from '../store/events';
import { recordSpan } from '../store/spans';
import { AlgorithmConfigError } from '../training/advantages';
import { RunModelError } from '../training/policy-model';
import { FailureBudgetExceededError } from '../training/step';
import { loadRunContext, RunTaskError, UnknownRunError, type RunContext } from '../training/run-context';
import { componentLog } from '../telemetry/log';

/** The one list of failure types (config/failure-types.ts), here for activity code and tests. */
export { NON_RETRYABLE_FAILURE_TYPES, RETRYABLE_FAILURE_TYPES } from '../config/failure-types';

export interface WorkerContext {
  pool: Pool;
  role: Role;
  /** "cpu" or "cuda:N" */
  device: string;
  /** Unique per process: role, device, host and pid. */
  identity: string;
  /** The queue only this process polls (stateful work is pinned here). */
  instanceQueue: string;
  /** A rollout worker driving an external engine (RELAX_ENGINE_URL): generation goes there. */
  externalEngine?: ExternalEngineHandle;
  /** Where the engines' figures go (the worker's Prometheus endpoint, workers/worker-metrics.ts). */
  figures?: EngineFigures;
}

/** The engines' own figures, as activities observe them (engine: "local" or "external"). */
export interface EngineFigures {
  /** One generate call: sequences in its batch, response tokens produced, seconds it took. */
  generated(g: { engine: 'local' | 'external'; sequences: number; tokens: number; seconds: number }): void;
  /** A weight sync: the engine switched to another policy version (loaded, checked, set). */
  synced(s: { engine: 'local' | 'external'; seconds: number }): void;
  /** One trainer update: sequences and tokens it trained on, seconds it took. */
  trained(t: { sequences: number; tokens: number; seconds: number }): void;
}

/** What a rollout worker that drives an external engine holds (workers/worker.ts sets it up). */
export interface ExternalEngineHandle {
  url: string;
  /** The engine's token for its version-load call (RELAX_ENGINE_TOKEN). */
  token?: string;
  checkpoints: CheckpointServer;
  /** Marks the engine failed (with why) and stops this worker taking work. */
  unhealthy(reason: string): Promise<void>;
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

/** A failure's message is at most this many characters (it goes into workflow history). */
export const FAILURE_MESSAGE_MAX_CHARS = 2000;

/** Allocations a too-large model makes fail with (V8's RangeErrors): not transient, a ResourceLimit. */
const ALLOCATION_FAILED = /Invalid typed array length|Array buffer allocation failed|Invalid array length|Invalid string length/;

function failure(err: Error, type: NonRetryableFailureType | RetryableFailureType, prefix = ''): ApplicationFailure {
  const message = shortened(`${prefix}${err.message}`, FAILURE_MESSAGE_MAX_CHARS);
  return ApplicationFailure.create({ message, type, nonRetryable: (NON_RETRYABLE_FAILURE_TYPES as readonly string[]).includes(type) });
}

/** The stable type of one of the core's errors (config/failure-types.ts), or undefined for any other error. */
function failureType(err: unknown): [NonRetryableFailureType | RetryableFailureType, string] | undefined {
  if (err instanceof CheckpointPrunedError) return ['PrunedPolicyVersion', ''];
  if (err instanceof MissingPolicyVersionError) return ['MissingPolicyVersion', ''];
  if (err instanceof UnknownRunError) return ['UnknownRun', ''];
  if (err instanceof RunTaskError) return ['UnknownTask', ''];
  if (err instanceof NotAllowedError) return ['NotAllowed', `not allowed by ${err.setting}: `];
  if (err instanceof UserModuleError) return ['InvalidUserModule', ''];
  if (err instanceof RunModelError || err instanceof AlgorithmConfigError) return ['InvalidRunConfig', 'invalid run config: '];
  if (err instanceof RunConfigError) return ['InvalidRunConfig', ''];
  if (err instanceof CheckpointOverwriteError || err instanceof CheckpointConflictError) return ['CheckpointConflict', ''];
  if (err instanceof TrainStepConflictError) return ['TrainStepConflict', ''];
  if (err instanceof NonFiniteUpdateError) return ['NonFiniteUpdate', ''];
  if (err instanceof FailureBudgetExceededError) return ['FailureBudgetExceeded', ''];
  if (err instanceof RangeError && ALLOCATION_FAILED.test(err.message)) {
    return ['ResourceLimit', `out of memory (the model or micro-batch is too large for this worker: make model sizes or train.micro_batch smaller, or set ${RUN_MEMORY_SETTING} to what the machine can hold): `];
  }
  return undefined;
}

/**
 * The core's errors as Temporal failures of a stable type (config/failure-types.ts): a pruned
 * version, an unknown run or task, a bad user module, algorithm or config, a module the worker's
 * allow-list refuses, a checkpoint or train step conflict, a step over its failure budget, an
 * allocation a too-large model makes fail, can never succeed on retry (non-retryable); a version that is not published yet may appear
 * (retryable). An error carried as another's `cause` counts too. Anything else is returned as it is.
 */
export function asActivityFailure(err: unknown): unknown {
  if (err instanceof ApplicationFailure) return err;
  for (let e = err, depth = 0; e instanceof Error && depth < 4; e = e.cause, depth++) {
    const found = failureType(e);
    if (found) return failure(e, found[0], found[1]);
  }
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

/** An attempt's scope: the activity it belongs to, and the signal that ends it (cancelled, timed out, or superseded). */
interface AttemptScope {
  key: string;
  attempt: number;
  controller: AbortController;
}

const attemptScope = new AsyncLocalStorage<AttemptScope>();
/** The attempts running in this process, by activity (workflow run and activity id): at most one each. */
const runningAttempts = new Map<string, { scope: AttemptScope; settled: Promise<unknown> }>();
/** How long a new attempt waits for the one it supersedes to end before it goes on anyway. */
export const SUPERSEDED_ATTEMPT_WAIT_MS = 30_000;
const attemptLog = componentLog('attempts');
const why = (signal: AbortSignal): string => (signal.reason instanceof Error ? signal.reason.message : String(signal.reason));

/** Why the server or the workflow ended this attempt, or undefined for a cancellation it should ride out (the worker's own shutdown, which has its grace period). */
function endedBy(ctx: Context): string | undefined {
  const details = ctx.cancellationDetails;
  if (details?.workerShutdown) return undefined;
  const reason = ctx.cancellationSignal.reason;
  return details?.timedOut ? 'TIMED_OUT' : details?.notFound ? 'NOT_FOUND' : details?.paused ? 'PAUSED' : details?.reset ? 'RESET' : reason instanceof Error ? reason.message : String(reason ?? 'CANCELLED');
}

/**
 * Throws CancelledFailure when this attempt has ended (its heartbeat timed out, the server no longer
 * knows it, the workflow cancelled it, or a newer attempt of the same activity started here): call
 * it before writing results, so an attempt Temporal has given up on never writes over its retry's.
 */
export function assertAttemptCurrent(): void {
  const scope = attemptScope.getStore();
  if (scope?.controller.signal.aborted) throw new CancelledFailure(`attempt ${scope.attempt} ended: ${why(scope.controller.signal)}`);
}

/** Heartbeats every `everyMs` while `fn` runs, and nothing else: for a wait inside an activity (whose attempt scope, if any, is its caller's). */
export async function heartbeatWhile<T>(fn: () => Promise<T>, everyMs = 1_000): Promise<T> {
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
 * Runs long activity work with heartbeats every `everyMs`, one attempt at a time: a new attempt of
 * the same activity (same workflow run and activity id) ends the one still running in this process
 * and waits for it (at most SUPERSEDED_ATTEMPT_WAIT_MS), and an older attempt delivered late ends
 * at once, leaving the newer one running; an attempt the server timed out or the
 * workflow cancelled rejects at once with CancelledFailure, and its work, which checks
 * assertAttemptCurrent before it writes, stops at its next check. Nested calls only heartbeat.
 */
export async function withHeartbeats<T>(fn: () => Promise<T>, everyMs = 1_000): Promise<T> {
  if (attemptScope.getStore()) return heartbeatWhile(fn, everyMs);
  const ctx = Context.current();
  const scope: AttemptScope = { key: attemptKey(ctx), attempt: ctx.info.attempt, controller: new AbortController() };
  ctx.heartbeat();
  let lastTick = performance.now();
  const timer = setInterval(() => {
    // A gap between ticks longer than the heartbeat timeout means this process was frozen (SIGSTOP,
    // a paging machine) for longer than the server waits: it has given up on this attempt. Timers
    // run before the I/O that would resume the attempt's work, so the work sees the attempt ended.
    const now = performance.now();
    const gap = now - lastTick;
    lastTick = now;
    const timeout = ctx.info.heartbeatTimeoutMs;
    if (timeout && gap > timeout && !scope.controller.signal.aborted) scope.controller.abort(new Error(`frozen ${(gap / 1000).toFixed(1)} s, past the ${timeout / 1000} s heartbeat timeout`));
    ctx.heartbeat();
  }, everyMs);
  try {
    return await oneAttempt(ctx, scope, fn);
  } finally {
    clearInterval(timer);
  }
}

/** The activity an attempt belongs to: its workflow run and activity id. */
function attemptKey(ctx: Context): string {
  const info = ctx.info;
  return `${info.workflowExecution?.workflowId ?? ''}/${info.workflowExecution?.runId ?? ''}/${info.activityId}`;
}

async function oneAttempt<T>(ctx: Context, scope: AttemptScope, fn: () => Promise<T>): Promise<T> {
  const info = ctx.info;
  const key = scope.key;
  const previous = runningAttempts.get(key);
  if (previous && previous.scope.attempt >= info.attempt) {
    // A stale delivery (seen after a Temporal server restart: attempt 1's task arriving while attempt
    // 2 runs here): the server has moved past it, so it ends at once and leaves the newer one alone.
    attemptLog.warn({ activity: info.activityType, key }, `attempt ${info.attempt} of ${info.activityType} arrived while attempt ${previous.scope.attempt} runs here: ended at once`);
    throw new CancelledFailure(`attempt ${info.attempt} of ${info.activityType} is stale: attempt ${previous.scope.attempt} of it runs in this worker`);
  }
  if (previous) {
    previous.scope.controller.abort(new Error(`superseded by attempt ${info.attempt}`));
    const waited = await Promise.race([previous.settled.then(() => true, () => true), new Promise<boolean>((resolve) => setTimeout(() => resolve(false), SUPERSEDED_ATTEMPT_WAIT_MS).unref())]);
    attemptLog.warn({ activity: info.activityType, key }, `attempt ${info.attempt} of ${info.activityType} starts after attempt ${previous.scope.attempt} ${waited ? 'ended' : `did not end within ${SUPERSEDED_ATTEMPT_WAIT_MS} ms`}`);
  }
  const started = performance.now();
  const onCancel = () => {
    const why = endedBy(ctx);
    if (why) scope.controller.abort(new Error(why));
  };
  ctx.cancellationSignal.addEventListener('abort', onCancel, { once: true });
  if (ctx.cancellationSignal.aborted) onCancel();
  const work = attemptScope.run(scope, fn);
  const settled = work.then(
    () => undefined,
    () => undefined,
  );
  const entry = { scope, settled };
  runningAttempts.set(key, entry);
  void settled.then(() => {
    if (runningAttempts.get(key) === entry) runningAttempts.delete(key);
    ctx.cancellationSignal.removeEventListener('abort', onCancel);
    if (scope.controller.signal.aborted) attemptLog.warn({ activity: info.activityType, key }, `attempt ${info.attempt} of ${info.activityType} stopped (${why(scope.controller.signal)}) ${((performance.now() - started) / 1000).toFixed(1)} s after it started`);
  });
  const ended = new Promise<never>((_, reject) => {
    const stop = () => reject(new CancelledFailure(`attempt ${info.attempt} of ${info.activityType} ended: ${why(scope.controller.signal)}`));
    if (scope.controller.signal.aborted) stop();
    else scope.controller.signal.addEventListener('abort', stop, { once: true });
  });
  ended.catch(() => undefined);
  return Promise.race([work, ended]);
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
