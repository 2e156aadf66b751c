// Task-queue names: the contract between workflows (which schedule) and workers (which poll).
// Plain functions with no imports, so deterministic workflow code can use them. Every name starts
// with a prefix (default "relax"; RELAX_TASK_QUEUE_PREFIX, read in config/environment-task-queue.ts)
// (and so does every stack service's workflow id, serviceWorkflowId) so two deployments can share
// a namespace: workers and clients take it from the environment,
// workflow code from its own task queue (workflows/task-queue.ts), never from process.env.

export const ROLES = ['control', 'rollout', 'train', 'reference', 'judge'] as const;
export type Role = (typeof ROLES)[number];

/** Roles whose activities need an accelerator; each worker of these pins itself to one device. */
export const DEVICE_ROLES: readonly Role[] = ['rollout', 'train', 'reference', 'judge'];

/** Roles a stack may run none of: a judge worker only serves runs with reward.judge (relax dev --judge-workers). */
export const OPTIONAL_ROLES = ['judge'] as const satisfies readonly Role[];
export type OptionalRole = (typeof OPTIONAL_ROLES)[number];

/** The prefix of every queue and of the worker deployment's name unless RELAX_TASK_QUEUE_PREFIX names another. */
export const DEFAULT_TASK_QUEUE_PREFIX = 'relax';

const PREFIX_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

/** `prefix` when it is a valid task-queue prefix; else an error naming `source` (the variable) and the rule. */
export function checkedTaskQueuePrefix(prefix: string, source = 'task queue prefix'): string {
  if (!PREFIX_PATTERN.test(prefix)) {
    throw new Error(`${source}=${prefix} is not a valid task queue prefix: use 1-64 letters, digits, '.', '_' and '-', starting with a letter or digit (default ${DEFAULT_TASK_QUEUE_PREFIX})`);
  }
  return prefix;
}

/** The queue every worker of a role polls: work scheduled here goes to any live worker of the role. */
export function roleTaskQueue(role: Role, prefix: string = DEFAULT_TASK_QUEUE_PREFIX): string {
  return `${prefix}-${role}`;
}

/**
 * The queue only ONE worker process polls (Temporal's worker-specific task queue pattern): work that
 * needs that process's in-memory state (a trainer's weights and optimizer) is scheduled here.
 */
export function instanceTaskQueue(role: Role, instanceId: string, prefix: string = DEFAULT_TASK_QUEUE_PREFIX): string {
  return `${prefix}-${role}@${instanceId}`;
}

/**
 * The queue of the process that owns rollout capacity (`relax dev`'s supervisor): a scaling
 * operation's start, drain and remove steps run there.
 */
export const CAPACITY_TASK_QUEUE = 'relax-capacity';

/** CAPACITY_TASK_QUEUE under `prefix`. */
export function capacityTaskQueue(prefix: string = DEFAULT_TASK_QUEUE_PREFIX): string {
  return `${prefix}-capacity`;
}

const QUEUE_PATTERN = new RegExp(`^(.+)-(${[...ROLES, 'capacity'].join('|')})(@.*)?$`);

/** The prefix of a queue named here ("team-a-control" -> "team-a"); the default for any other name. */
export function taskQueuePrefixOf(queue: string): string {
  return QUEUE_PATTERN.exec(queue)?.[1] ?? DEFAULT_TASK_QUEUE_PREFIX;
}

/** A queue named here with the default prefix ("relax-rollout@x"), under `prefix` instead. */
export function withTaskQueuePrefix(queue: string, prefix: string): string {
  const head = `${DEFAULT_TASK_QUEUE_PREFIX}-`;
  if (!queue.startsWith(head)) throw new Error(`task queue ${queue} does not start with ${head}: name it with roleTaskQueue / instanceTaskQueue / capacityTaskQueue`);
  return `${prefix}-${queue.slice(head.length)}`;
}

/** The long-running services of a stack, one workflow each under a fixed id: `<prefix>-<service>`. */
export type StackServiceName = 'rollout-scaling' | 'rollout-autoscaler' | 'health-manager';

/**
 * A stack service's one workflow id under `prefix` ("team-a" -> "team-a-health-manager"), so two
 * deployments in one namespace each have their own; the default prefix gives the ids used so far.
 */
export function serviceWorkflowId(service: StackServiceName, prefix: string = DEFAULT_TASK_QUEUE_PREFIX): string {
  return `${prefix}-${service}`;
}

/**
 * Every scaling operation runs under this one workflow id (serviceWorkflowId('rollout-scaling', prefix)
 * under another prefix), so at most one runs at a time (a second start is refused: the control API's
 * 409); each operation is one execution, its Temporal run id the operation's request_id.
 */
export const ROLLOUT_SCALING_WORKFLOW_ID = serviceWorkflowId('rollout-scaling');

/** The rollout autoscaler's one workflow id (workflows/autoscaler.ts) with the default prefix: at most one runs. */
export const ROLLOUT_AUTOSCALER_WORKFLOW_ID = serviceWorkflowId('rollout-autoscaler');
/** The health manager's one workflow id (workflows/health-manager.ts) with the default prefix. */
export const HEALTH_MANAGER_WORKFLOW_ID = serviceWorkflowId('health-manager');
