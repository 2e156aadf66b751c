// Task-queue names: the contract between workflows (which schedule) and workers (which poll).
// Plain constants with no imports, so deterministic workflow code can use them.

export const ROLES = ['control', 'rollout', 'train', 'reference'] as const;
export type Role = (typeof ROLES)[number];

/** Roles whose activities need an accelerator; each worker of these pins itself to one device. */
export const DEVICE_ROLES: readonly Role[] = ['rollout', 'train', 'reference'];

/** The queue every worker of a role polls: work scheduled here goes to any live worker of the role. */
export function roleTaskQueue(role: Role): string {
  return `relax-${role}`;
}

/**
 * The queue only ONE worker process polls (Temporal's worker-specific task queue pattern): work that
 * needs that process's in-memory state (a trainer's weights and optimizer) is scheduled here.
 */
export function instanceTaskQueue(role: Role, instanceId: string): string {
  return `relax-${role}@${instanceId}`;
}

/**
 * The queue of the process that owns rollout capacity (`relax dev`'s supervisor): a scaling
 * operation's start, drain and remove steps run there.
 */
export const CAPACITY_TASK_QUEUE = 'relax-capacity';

/**
 * Every scaling operation runs under this one workflow id, so at most one runs at a time (a second
 * start is refused: the control API's 409); each operation is one execution, its Temporal run id
 * the operation's request_id.
 */
export const ROLLOUT_SCALING_WORKFLOW_ID = 'relax-rollout-scaling';

/** The rollout autoscaler's one workflow id (workflows/autoscaler.ts): at most one runs. */
export const ROLLOUT_AUTOSCALER_WORKFLOW_ID = 'relax-rollout-autoscaler';
/** The health manager's one workflow id (workflows/health-manager.ts). */
export const HEALTH_MANAGER_WORKFLOW_ID = 'relax-health-manager';
