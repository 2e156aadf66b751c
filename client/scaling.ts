// Rollout capacity through the client: start scale-out and scale-in operations (each one execution
// of the scaling workflow, under one workflow id so two never run at once), read them back, cancel
// them, and list the engines. The control API's /rollout routes call these.
import { WorkflowExecutionAlreadyStartedError, type Client, type WorkflowExecutionDescription } from '@temporalio/client';
import { parseAutoscalerConfig } from '../config/autoscaler';
import { parseHealthConfig } from '../config/health';
import { capacityTaskQueue, roleTaskQueue, serviceWorkflowId, type StackServiceName } from '../config/task-queues';
import { taskQueuePrefix } from '../config/environment-temporal';
import type { AutoscalerStatus, HealthStatus, ScaleInRequest, ScaleOutRequest, ScalingOperation } from '../workflows/operation-types';
import type { RolloutEngineInfo, RunDatabase } from './database';

export type { AutoscalerDecision, AutoscalerStatus, ScaleInRequest, ScaleOutRequest, ScalingOperation } from '../workflows/operation-types';
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

/** A long-running workflow of the stack, one execution at a time under its id (serviceWorkflowId): started, queried and stopped alike. */
interface StackService {
  name: string;
  workflowType: string;
  service: StackServiceName;
  query: string;
  stopSignal: string;
  startedBy: string;
}

const AUTOSCALER: StackService = { name: 'autoscaler', workflowType: 'rolloutAutoscaler', service: 'rollout-autoscaler', query: 'autoscalerStatus', stopSignal: 'stopAutoscaler', startedBy: 'POST /autoscaler (docs/control-api.md)' };
const HEALTH_MANAGER: StackService = { name: 'health manager', workflowType: 'healthManager', service: 'health-manager', query: 'healthStatus', stopSignal: 'stopHealthManager', startedBy: 'POST /health/manager (docs/monitoring.md)' };

/** A stack service's workflow id under this process's RELAX_TASK_QUEUE_PREFIX (default: relax-<service>). */
export function stackServiceWorkflowId(service: StackServiceName): string {
  return serviceWorkflowId(service, taskQueuePrefix());
}

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
        taskQueue: roleTaskQueue('control', taskQueuePrefix()),
        workflowId: stackServiceWorkflowId('rollout-scaling'),
        workflowIdConflictPolicy: 'FAIL',
        workflowIdReusePolicy: 'ALLOW_DUPLICATE',
        args: [request],
      });
      const requestId = handle.firstExecutionRunId;
      return { kind, status: 'PENDING', request, engines: [], transitions: [], requestId, execution: 'RUNNING' };
    } catch (err) {
      if (err instanceof WorkflowExecutionAlreadyStartedError) {
        const running = await this.client.workflow.getHandle(stackServiceWorkflowId('rollout-scaling')).describe().catch(() => undefined);
        throw new ScalingConflictError(`another scaling operation is running (request_id ${running?.runId ?? '?'}, ${running?.type ?? '?'}): wait for it or cancel it`);
      }
      throw err;
    }
  }

  /** The operation's state (its `scalingOperation` query, which closed executions answer too). */
  async operation(requestId: string, kind?: keyof typeof TYPES): Promise<ScalingOperationState> {
    const handle = this.client.workflow.getHandle(stackServiceWorkflowId('rollout-scaling'), requestId);
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
    const query = `WorkflowId = '${stackServiceWorkflowId('rollout-scaling')}' AND WorkflowType = '${TYPES[kind]}'`;
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
    await this.client.workflow.getHandle(stackServiceWorkflowId('rollout-scaling'), requestId).cancel();
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
  startAutoscaler(config: unknown): Promise<{ workflowId: string; runId: string }> {
    return this.startService(AUTOSCALER, parseAutoscalerConfig(config));
  }

  /** The autoscaler's state and its recorded decisions (the latest execution, running or not). */
  autoscaler(): Promise<AutoscalerStatus & { execution: string }> {
    return this.serviceStatus<AutoscalerStatus>(AUTOSCALER);
  }

  /** Asks the autoscaler to stop after its current observation (an operation it started finishes). */
  stopAutoscaler(): Promise<void> {
    return this.stopService(AUTOSCALER);
  }

  /**
   * Starts the health manager (workflows/health-manager.ts) with this config (config/health.ts; an
   * invalid one throws HealthConfigError naming the field); a running one is a conflict.
   */
  startHealthManager(config: unknown): Promise<{ workflowId: string; runId: string }> {
    return this.startService(HEALTH_MANAGER, parseHealthConfig(config));
  }

  /** The health manager's last check, open problems and recorded actions (the latest execution). */
  healthManager(): Promise<HealthStatus & { execution: string }> {
    return this.serviceStatus<HealthStatus>(HEALTH_MANAGER);
  }

  /** Asks the health manager to stop after its current check. */
  stopHealthManager(): Promise<void> {
    return this.stopService(HEALTH_MANAGER);
  }

  /** Starts a stack service workflow under its one id; a running one is a conflict. */
  private async startService(service: StackService, config: unknown): Promise<{ workflowId: string; runId: string }> {
    await this.requireProvider();
    try {
      const handle = await this.client.workflow.start(service.workflowType, {
        taskQueue: roleTaskQueue('control', taskQueuePrefix()),
        workflowId: stackServiceWorkflowId(service.service),
        workflowIdConflictPolicy: 'FAIL',
        workflowIdReusePolicy: 'ALLOW_DUPLICATE',
        args: [config],
      });
      return { workflowId: handle.workflowId, runId: handle.firstExecutionRunId };
    } catch (err) {
      if (err instanceof WorkflowExecutionAlreadyStartedError) throw new ScalingConflictError(`the ${service.name} is already running: stop it first to change its config`);
      throw err;
    }
  }

  /** A stack service's status query on its latest execution, with that execution's Temporal status. */
  private async serviceStatus<T>(service: StackService): Promise<T & { execution: string }> {
    const handle = this.client.workflow.getHandle(stackServiceWorkflowId(service.service));
    let execution: string;
    try {
      execution = (await handle.describe()).status.name;
    } catch {
      throw new UnknownOperationError(`the ${service.name} has never run: start it with ${service.startedBy}`);
    }
    return { ...(await handle.query<T>(service.query)), execution };
  }

  private async stopService(service: StackService): Promise<void> {
    const status = await this.serviceStatus<object>(service);
    if (status.execution !== 'RUNNING') throw new ScalingConflictError(`the ${service.name} is not running (${status.execution})`);
    await this.client.workflow.getHandle(stackServiceWorkflowId(service.service)).signal(service.stopSignal);
  }

  /** Refuses early when nothing serves the capacity queue (the operation would wait forever). */
  private async requireProvider(): Promise<void> {
    const { pollers } = await this.client.workflowService.describeTaskQueue({ namespace: this.client.options.namespace, taskQueue: { name: capacityTaskQueue(taskQueuePrefix()) }, taskQueueType: 2 });
    if (!pollers?.length) {
      throw new NoCapacityProviderError(`no capacity provider polls ${capacityTaskQueue(taskQueuePrefix())}: rollout capacity is managed by \`relax dev\` (start the API through it), not by a standalone \`relax api\``);
    }
  }
}
