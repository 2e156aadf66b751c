// The task queues a workflow schedules on, under the prefix of the workflow's own task queue
// ("team-a-control" -> "team-a-rollout"): deterministic (workflowInfo, not process.env), so two
// deployments with different RELAX_TASK_QUEUE_PREFIX share a namespace without taking each other's work;
// and the stack services' workflow ids under the same prefix.
import { workflowInfo, type ActivityOptions } from '@temporalio/workflow';
import { serviceWorkflowId, taskQueuePrefixOf, withTaskQueuePrefix, type StackServiceName } from '../config/task-queues';

/** The prefix of the running workflow's task queue. */
export function ownTaskQueuePrefix(): string {
  return taskQueuePrefixOf(workflowInfo().taskQueue);
}

/** A queue named with the default prefix (roleTaskQueue('rollout'), CAPACITY_TASK_QUEUE), under this workflow's prefix. */
export function ownTaskQueue(queue: string): string {
  return withTaskQueuePrefix(queue, ownTaskQueuePrefix());
}

/** A stack service's workflow id under this workflow's prefix (the autoscaler's scaling children). */
export function ownServiceWorkflowId(service: StackServiceName): string {
  return serviceWorkflowId(service, ownTaskQueuePrefix());
}

/**
 * `options` whose taskQueue (named with the default prefix) is moved under this workflow's prefix
 * when each activity is scheduled: proxyActivities reads its options then, so a proxy made at a
 * module's top level, outside any workflow, works too.
 */
export function onOwnQueue(options: ActivityOptions): ActivityOptions {
  const queue = options.taskQueue;
  if (queue === undefined) return options;
  const out = { ...options };
  Object.defineProperty(out, 'taskQueue', { get: () => ownTaskQueue(queue), enumerable: true });
  return out;
}
