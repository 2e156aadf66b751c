// Rollout capacity through the client: start scale-out and scale-in operations (each one execution
// of the scaling workflow, under one workflow id so two never run at once), read them back, cancel
// them, and list the engines. The control API's /rollout routes call these.
import { WorkflowExecutionAlreadyStartedError, type Client, type WorkflowExecutionDescription } from '@temporalio/client';
import { parseAutoscalerConfig } from '../config/autoscaler';
import { parseHealthConfig } from '../config/health';
import type { HealthStatus } from '../workflows/health-manager';
import { CAPACITY_TASK_QUEUE, HEALTH_MANAGER_WORKFLOW_ID, ROLLOUT_AUTOSCALER_WORKFLOW_ID, ROLLOUT_SCALING_WORKFLOW_ID, roleTaskQueue } from '../config/task-queues';
import type { AutoscalerStatus } from '../workflows/autoscaler';
import type { ScaleInRequest, ScaleOutRequest, ScalingOperation } from '../workflows/rollout-scaling';
import type { RolloutEngineInfo, RunDatabase } from './database';

export type { ScaleInRequest, ScaleOutRequest, ScalingOperation } from '../workflows/rollout-scaling';
export type { AutoscalerDecision, AutoscalerStatus } from '../workflows/autoscaler';
export type { AutoscalerConfig, AutoscalerConfigInput } from '../config/autoscaler';

/** A scaling operation and where it stands. `requestId` is its Temporal run id. */
export interface ScalingOperationState extends ScalingOperation {
  requestId: string;
  /** Temporal's status of the execution (RUNNING, COMPLETED, FAILED, CANCELLED, ...). */
  execution: string;
}

/** Another scaling operation is running (HTTP 409). */
export class ScalingConflictError extends Error {}
/** Nothing serves the capacity queue: no `relax dev` (or other capacity provider) is connected (HTTP 503). */
export class NoCapacityProviderError extends Error {}
/** No such operation (HTTP 404). */
export class UnknownOperationError extends Error {}

const TYPES = { scale_out: 'rolloutScaleOut', scale_in: 'rolloutScaleIn' } as const;

export class RelaxRollout {
  constructor(
    private readonly client: Client,
    private readonly database: RunDatabase,
  ) {}

  scaleOut(request: ScaleOutRequest): Promise<ScalingOperationState> {
    return this.start('scale_out', request);
  }

  scaleIn(request: ScaleInRequest): Promise<ScalingOperationState> {
    return this.start('scale_in', request);
  }

  private async start(kind: keyof typeof TYPES, request: ScaleOutRequest | ScaleInRequest): Promise<ScalingOperationState> {
    await this.requireProvider();
    try {
      const handle = await this.client.workflow.start(TYPES[kind], {
        taskQueue: roleTaskQueue('control'),
        workflowId: ROLLOUT_SCALING_WORKFLOW_ID,
        workflowIdConflictPolicy: 'FAIL',
        workflowIdReusePolicy: 'ALLOW_DUPLICATE',
        args: [request],
      });
      const requestId = handle.firstExecutionRunId;
      return { kind, status: 'PENDING', request, engines: [], transitions: [], requestId, execution: 'RUNNING' };
    } catch (err) {
      if (err instanceof WorkflowExecutionAlreadyStartedError) {
        const running = await this.client.workflow.getHandle(ROLLOUT_SCALING_WORKFLOW_ID).describe().catch(() => undefined);
        throw new ScalingConflictError(`another scaling operation is running (request_id ${running?.runId ?? '?'}, ${running?.type ?? '?'}): wait for it or cancel it`);
      }
      throw err;
    }
  }

  /** The operation's state (its `scalingOperation` query, which closed executions answer too). */
  async operation(requestId: string, kind?: keyof typeof TYPES): Promise<ScalingOperationState> {
    const handle = this.client.workflow.getHandle(ROLLOUT_SCALING_WORKFLOW_ID, requestId);
    let info: WorkflowExecutionDescription;
    try {
      info = await handle.describe();
    } catch {
      throw new UnknownOperationError(`no scaling operation with request_id ${requestId}`);
    }
    if (kind && info.type !== TYPES[kind]) throw new UnknownOperationError(`request_id ${requestId} is a ${info.type === TYPES.scale_out ? 'scale_out' : 'scale_in'} operation, not ${kind}`);
    const op = await handle.query<ScalingOperation>('scalingOperation');
    return { ...op, requestId, execution: info.status.name };
  }

  /** Waits until the operation leaves its in-progress states (or `timeoutMs` passes) and returns it. */
  async wait(requestId: string, timeoutMs = 600_000): Promise<ScalingOperationState> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const op = await this.operation(requestId);
      if (op.execution !== 'RUNNING' || Date.now() > deadline) return op;
      await new Promise((r) => setTimeout(r, 250));
    }
  }

  /** Operations of one kind, newest first (Temporal visibility). */
  async list(kind: keyof typeof TYPES, limit = 20): Promise<ScalingOperationState[]> {
    const out: ScalingOperationState[] = [];
    const query = `WorkflowId = '${ROLLOUT_SCALING_WORKFLOW_ID}' AND WorkflowType = '${TYPES[kind]}'`;
    for await (const info of this.client.workflow.list({ query, pageSize: limit })) {
      out.push(await this.operation(info.runId));
      if (out.length >= limit) break;
    }
    return out;
  }

  /** Cancels a running operation: what it started is drained and removed, and it ends CANCELLED. */
  async cancel(requestId: string, kind?: keyof typeof TYPES): Promise<ScalingOperationState> {
    const op = await this.operation(requestId, kind);
    if (op.execution !== 'RUNNING') throw new ScalingConflictError(`request_id ${requestId} is not running (${op.status})`);
    await this.client.workflow.getHandle(ROLLOUT_SCALING_WORKFLOW_ID, requestId).cancel();
    return op;
  }

  /** The rollout engines (the provider's records in Postgres). */
  engines(options: { includeRemoved?: boolean } = {}): Promise<RolloutEngineInfo[]> {
    return this.database.rolloutEngines(options.includeRemoved);
  }

  /**
   * Starts the autoscaler (workflows/autoscaler.ts) with this config (config/autoscaler.ts; an
   * invalid one throws AutoscalerConfigError naming the field); a running one is a conflict.
   */
  async startAutoscaler(config: unknown): Promise<{ workflowId: string; runId: string }> {
    const parsed = parseAutoscalerConfig(config);
    await this.requireProvider();
    try {
      const handle = await this.client.workflow.start('rolloutAutoscaler', {
        taskQueue: roleTaskQueue('control'),
        workflowId: ROLLOUT_AUTOSCALER_WORKFLOW_ID,
        workflowIdConflictPolicy: 'FAIL',
        workflowIdReusePolicy: 'ALLOW_DUPLICATE',
        args: [parsed],
      });
      return { workflowId: handle.workflowId, runId: handle.firstExecutionRunId };
    } catch (err) {
      if (err instanceof WorkflowExecutionAlreadyStartedError) throw new ScalingConflictError('the autoscaler is already running: stop it first to change its config');
      throw err;
    }
  }

  /** The autoscaler's state and its recorded decisions (the latest execution, running or not). */
  async autoscaler(): Promise<AutoscalerStatus & { execution: string }> {
    const handle = this.client.workflow.getHandle(ROLLOUT_AUTOSCALER_WORKFLOW_ID);
    let execution: string;
    try {
      execution = (await handle.describe()).status.name;
    } catch {
      throw new UnknownOperationError('the autoscaler has never run: start it with POST /autoscaler (docs/control-api.md)');
    }
    return { ...(await handle.query<AutoscalerStatus>('autoscalerStatus')), execution };
  }

  /** Asks the autoscaler to stop after its current observation (an operation it started finishes). */
  async stopAutoscaler(): Promise<void> {
    const status = await this.autoscaler();
    if (status.execution !== 'RUNNING') throw new ScalingConflictError(`the autoscaler is not running (${status.execution})`);
    await this.client.workflow.getHandle(ROLLOUT_AUTOSCALER_WORKFLOW_ID).signal('stopAutoscaler');
  }

  /**
   * Starts the health manager (workflows/health-manager.ts) with this config (config/health.ts; an
   * invalid one throws HealthConfigError naming the field); a running one is a conflict.
   */
  async startHealthManager(config: unknown): Promise<{ workflowId: string; runId: string }> {
    const parsed = parseHealthConfig(config);
    await this.requireProvider();
    try {
      const handle = await this.client.workflow.start('healthManager', {
        taskQueue: roleTaskQueue('control'),
        workflowId: HEALTH_MANAGER_WORKFLOW_ID,
        workflowIdConflictPolicy: 'FAIL',
        workflowIdReusePolicy: 'ALLOW_DUPLICATE',
        args: [parsed],
      });
      return { workflowId: handle.workflowId, runId: handle.firstExecutionRunId };
    } catch (err) {
      if (err instanceof WorkflowExecutionAlreadyStartedError) throw new ScalingConflictError('the health manager is already running: stop it first to change its config');
      throw err;
    }
  }

  /** The health manager's last check, open problems and recorded actions (the latest execution). */
  async healthManager(): Promise<HealthStatus & { execution: string }> {
    const handle = this.client.workflow.getHandle(HEALTH_MANAGER_WORKFLOW_ID);
    let execution: string;
    try {
      execution = (await handle.describe()).status.name;
    } catch {
      throw new UnknownOperationError('the health manager has never run: start it with POST /health/manager (docs/monitoring.md)');
    }
    return { ...(await handle.query<HealthStatus>('healthStatus')), execution };
  }

  /** Asks the health manager to stop after its current check. */
  async stopHealthManager(): Promise<void> {
    const status = await this.healthManager();
    if (status.execution !== 'RUNNING') throw new ScalingConflictError(`the health manager is not running (${status.execution})`);
    await this.client.workflow.getHandle(HEALTH_MANAGER_WORKFLOW_ID).signal('stopHealthManager');
  }

  /** Refuses early when nothing serves the capacity queue (the operation would wait forever). */
  private async requireProvider(): Promise<void> {
    const { pollers } = await this.client.workflowService.describeTaskQueue({ namespace: this.client.options.namespace, taskQueue: { name: CAPACITY_TASK_QUEUE }, taskQueueType: 2 });
    if (!pollers?.length) {
      throw new NoCapacityProviderError(`no capacity provider polls ${CAPACITY_TASK_QUEUE}: rollout capacity is managed by \`relax dev\` (start the API through it), not by a standalone \`relax api\``);
    }
  }
}
