// Rollout scaling operations, one workflow execution each (durable, visible in the Web UI, unharmed
// by a restart of the control API), with Relax's contract:
//   scale-out: PENDING -> CREATING -> HEALTH_CHECKING -> WEIGHT_SYNCING -> READY -> ACTIVE
//   scale-in:  PENDING -> DRAINING -> REMOVING -> COMPLETED
// (and FAILED, CANCELLED). `num_replicas` is an absolute target, so an operation whose target is
// already met does nothing. The engines are rollout worker processes of the capacity provider
// (activities/capacity.ts); runs need not know: a worker that polls the rollout queue takes work, one
// that drains stops taking it and finishes what it has. The `scalingOperation` query answers the
// operation's state, open or closed.
import { ActivityFailure, ApplicationFailure, CancellationScope, defineQuery, isCancellation, proxyActivities, setHandler } from '@temporalio/workflow';
import type { CapacityActivities, EngineSummary } from '../activities/capacity';
import type { RolloutActivities } from '../activities/rollout';
import { CAPACITY_TASK_QUEUE, instanceTaskQueue, roleTaskQueue } from '../config/task-queues';
import { onOwnQueue, ownTaskQueuePrefix } from './task-queue';
import type { ScaleInRequest, ScaleInStatus, ScaleOutRequest, ScaleOutStatus, ScalingOperation } from './operation-types';

export type { ScaleInRequest, ScaleInStatus, ScaleOutRequest, ScaleOutStatus, ScalingOperation } from './operation-types';

export const scalingOperationQuery = defineQuery<ScalingOperation>('scalingOperation');

const DEFAULT_TIMEOUT_SECS = 300;

function capacity(timeoutSecs: number) {
  return proxyActivities<CapacityActivities>(onOwnQueue({
    taskQueue: CAPACITY_TASK_QUEUE,
    startToCloseTimeout: `${timeoutSecs + 30} seconds`,
    heartbeatTimeout: '10 seconds',
    retry: { initialInterval: '1 second', maximumAttempts: 3, nonRetryableErrorTypes: ['EngineUnhealthy'] },
  }));
}

function engineWeights(instanceQueue: string, timeoutSecs: number) {
  return proxyActivities<RolloutActivities>({
    taskQueue: instanceQueue,
    // A worker-specific queue: scheduleToClose bounds the wait for that one worker.
    scheduleToCloseTimeout: `${timeoutSecs} seconds`,
    heartbeatTimeout: '10 seconds',
    retry: { maximumAttempts: 1 },
  });
}

function newOperation(kind: ScalingOperation['kind'], request: ScalingOperation['request']): ScalingOperation {
  const op: ScalingOperation = { kind, status: 'PENDING', request, engines: [], transitions: [{ status: 'PENDING', at: new Date().toISOString() }] };
  setHandler(scalingOperationQuery, () => op);
  return op;
}

function enter(op: ScalingOperation, status: ScalingOperation['status']): void {
  op.status = status;
  op.transitions.push({ status, at: new Date().toISOString() });
}

/** The worker-specific queue of a rollout engine, from its identity ("rollout/<instance id>"). */
function engineQueue(e: EngineSummary): string {
  if (!e.identity?.startsWith('rollout/')) throw ApplicationFailure.nonRetryable(`engine ${e.engineId} has no rollout identity (${e.identity})`, 'EngineUnhealthy');
  return instanceTaskQueue('rollout', e.identity.slice('rollout/'.length), ownTaskQueuePrefix());
}

/** Ends a failed or cancelled operation: records it, undoes what it started, rethrows. */
async function windDown(op: ScalingOperation, err: unknown, undo: () => Promise<void>): Promise<never> {
  const cancelled = isCancellation(err);
  // An activity's failure says "Activity task failed": its cause says why.
  op.message = cancelled ? 'cancelled' : err instanceof ActivityFailure && err.cause ? err.cause.message : (err as Error).message;
  await CancellationScope.nonCancellable(undo);
  enter(op, cancelled ? 'CANCELLED' : 'FAILED');
  if (cancelled) throw err;
  throw ApplicationFailure.nonRetryable(`${op.kind} failed: ${op.message}`, 'ScalingFailed');
}

export async function rolloutScaleOut(request: ScaleOutRequest): Promise<ScalingOperation> {
  const op = newOperation('scale_out', request);
  const timeoutSecs = request.timeout_secs ?? DEFAULT_TIMEOUT_SECS;
  const act = capacity(timeoutSecs);
  let created: EngineSummary[] = [];
  try {
    // A failed engine (an external one that could not confirm a version) takes no work: not counted.
    const engines = (await act.listRolloutEngines()).filter((e) => e.state !== 'failed');
    const urls = request.engine_urls ?? [];
    op.fromReplicas = engines.length;
    op.targetReplicas = urls.length ? engines.length + urls.length : request.num_replicas;
    if (!urls.length && engines.length >= request.num_replicas) {
      op.message = `${engines.length} rollout engines already (target ${request.num_replicas}): nothing to do`;
      enter(op, 'ACTIVE');
      return op;
    }
    enter(op, 'CREATING');
    created = await act.startRolloutEngines(urls.length ? { count: urls.length, engineUrls: urls } : { count: request.num_replicas - engines.length });
    op.engines = created.map((e) => e.engineId);
    enter(op, 'HEALTH_CHECKING');
    await act.awaitPollers({ taskQueue: roleTaskQueue('rollout', ownTaskQueuePrefix()), identities: created.map((e) => e.identity ?? e.engineId), timeoutMs: timeoutSecs * 1000 });
    enter(op, 'WEIGHT_SYNCING');
    const loaded = await Promise.all(created.map((e) => engineWeights(engineQueue(e), timeoutSecs).loadLatestVersions()));
    op.weights = Object.fromEntries(created.map((e, i) => [e.engineId, loaded[i]]));
    enter(op, 'READY');
    await act.markRolloutEnginesActive({ engineIds: op.engines });
    enter(op, 'ACTIVE');
    return op;
  } catch (err) {
    return windDown(op, err, async () => {
      if (!created.length) return;
      await act.drainRolloutEngines({ engineIds: op.engines, timeoutMs: timeoutSecs * 1000 });
      // An engine marked failed stays listed so (with why) until a scale-in names it.
      await act.removeRolloutEngines({ engineIds: op.engines, keepFailed: true });
    });
  }
}

/**
 * The engines a scale-in removes: the named ones, or the newest first (LIFO) down to the target.
 * Engines the stack started with are kept unless `force`; the operation fails naming them.
 */
export function chooseScaleInVictims(engines: EngineSummary[], request: ScaleInRequest): EngineSummary[] {
  if (request.engine_urls?.length) {
    const unknown = request.engine_urls.filter((u) => !engines.some((e) => e.url === u));
    if (unknown.length) throw ApplicationFailure.nonRetryable(`engine_urls: no engine registered at ${unknown.join(', ')} (external engines: ${engines.filter((e) => e.url).map((e) => e.url).join(', ') || 'none'})`, 'InvalidScalingRequest');
    return engines.filter((e) => e.url !== null && request.engine_urls!.includes(e.url));
  }
  if (request.engine_ids?.length) {
    const unknown = request.engine_ids.filter((id) => !engines.some((e) => e.engineId === id));
    if (unknown.length) throw ApplicationFailure.nonRetryable(`engine_ids: no such engine ${unknown.join(', ')} (engines: ${engines.map((e) => e.engineId).join(', ')})`, 'InvalidScalingRequest');
    const victims = engines.filter((e) => request.engine_ids!.includes(e.engineId));
    const initial = victims.filter((e) => e.initial);
    if (initial.length && !request.force) throw ApplicationFailure.nonRetryable(`engine_ids: ${initial.map((e) => e.engineId).join(', ')} started with the stack (initial capacity); pass force: true to remove them`, 'InitialCapacityProtected');
    return victims;
  }
  // By count: among the engines that work (failed ones are removed by id or URL).
  const working = engines.filter((e) => e.state !== 'failed');
  const keep = request.num_replicas ?? working.length;
  const excess = working.length - keep;
  if (excess <= 0) return [];
  const newestFirst = [...working].sort((a, b) => (a.createdAt < b.createdAt ? 1 : a.createdAt > b.createdAt ? -1 : 0));
  const removable = request.force ? newestFirst : newestFirst.filter((e) => !e.initial);
  if (removable.length < excess) {
    throw ApplicationFailure.nonRetryable(`num_replicas ${keep}: only ${removable.length} of ${working.length} engines were added after the stack started (initial capacity ${working.length - removable.length}); pass force: true to go below it`, 'InitialCapacityProtected');
  }
  return removable.slice(0, excess);
}

export async function rolloutScaleIn(request: ScaleInRequest): Promise<ScalingOperation> {
  const op = newOperation('scale_in', request);
  const timeoutSecs = request.timeout_secs ?? DEFAULT_TIMEOUT_SECS;
  const act = capacity(timeoutSecs);
  try {
    const engines = await act.listRolloutEngines();
    const victims = chooseScaleInVictims(engines, request);
    op.fromReplicas = engines.length;
    op.targetReplicas = engines.length - victims.length;
    op.engines = victims.map((e) => e.engineId);
    if (request.dry_run || !victims.length) {
      op.dryRun = request.dry_run === true;
      op.message = victims.length ? `would drain ${op.engines.join(', ')}` : `${engines.length} rollout engines already (target ${op.targetReplicas}): nothing to do`;
      enter(op, 'COMPLETED');
      return op;
    }
    enter(op, 'DRAINING');
    await act.drainRolloutEngines({ engineIds: op.engines, timeoutMs: timeoutSecs * 1000 });
    enter(op, 'REMOVING');
    await act.removeRolloutEngines({ engineIds: op.engines });
    enter(op, 'COMPLETED');
    return op;
  } catch (err) {
    // A drain already asked for goes on in the provider; nothing to undo here.
    return windDown(op, err, async () => undefined);
  }
}
