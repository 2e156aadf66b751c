// The typed client (`relax/client`): how programs and the CLI start, watch, steer and inspect Relax
// runs. A run's config is validated here before anything is sent, and again by the workflow (for
// starts that bypass this client, such as the Temporal Web UI form). docs/client.md is its guide.
import { Client, Connection, WorkflowFailedError, type ScheduleHandle, type WorkflowHandle } from '@temporalio/client';
import { CancelledFailure } from '@temporalio/common';
import { parseRunConfig, type RunConfigInput } from '../config/run-config';
import type { HyperparameterUpdate } from '../config/hyperparameters';
import { roleTaskQueue } from '../config/task-queues';
import { taskQueuePrefix } from '../config/environment-temporal';
import { runUserMetadata } from './run-metadata';
import { clientConnectionOptions, sdkConnectionOptions, type TemporalConnectionOptions } from '../security/temporal-connection';
import { startClientTracing, type ClientTracing } from '../telemetry/client-tracing';
import type { HyperparameterUpdateResult, ProgressQueryOptions, TrainingProgress, TrainingResult } from '../workflows/run-types';
import { resolveAddresses } from './addresses';
import { RelaxSchedules } from './schedules';
import { createEvaluationSchedule, evaluate, startEvaluation, type EvaluationHandle, type EvaluationInput, type EvaluationResult, type EvaluationScheduleOptions } from './evaluations';
import type { EvaluationRecord } from '../store/evaluations';
import { RelaxRollout } from './scaling';
import { RunDatabase, type CheckpointVersion, type LatestRunMetric, type StageSpan, type MetricSeries, type RunEventRecord } from './database';
import { describeError, failureChain, formatFailureChain, failureType, RunFailedError, UpdateRefusedError, type FailureLink } from './failures';
import { listQuery, runSummary, type ListOptions, type MemoProgress, type MemoSummary, type RunSummary } from './visibility';

export * from './addresses';
export * from './schedules';
export * from './evaluations';
export type { EvaluationRecord } from '../store/evaluations';
export * from './scaling';
export * from './failures';
export { RunDatabase, type CheckpointVersion, type LatestRunMetric, type StageSpan, type MetricSeries, type RolloutEngineInfo, type RunEventRecord } from './database';
export { listQuery, runState, type ListOptions, type MemoProgress, type MemoSummary, type RunSummary } from './visibility';
export type { HyperparameterUpdateResult, ProgressQueryOptions, RunStatus, TrainingProgress, TrainingResult } from '../workflows/run-types';
export type { Hyperparameters, HyperparameterUpdate } from '../config/hyperparameters';
export type { RunConfigInput } from '../config/run-config';
export { withOverrides, applyOverrides, parseOverrides, type Override } from '../config/overrides';
export { readRunConfigInput, parseConfigText, configSourceOf, ConfigInputError } from '../config/config-file';
export { preflightRunConfig, preflightProblems, PreflightError, type PreflightProbes, type PreflightProblem } from '../config/preflight';

export interface ConnectOptions {
  /** Temporal's gRPC address (default: TEMPORAL_ADDRESS, else a running `relax dev`, else localhost:7233). */
  address?: string;
  /** Temporal namespace (default: TEMPORAL_NAMESPACE, else "default"). */
  namespace?: string;
  /** TLS / mTLS / API key (default: the TEMPORAL_TLS_* and TEMPORAL_API_KEY* variables; PLAINTEXT_TEMPORAL for none). */
  security?: TemporalConnectionOptions;
  /** The runs' Postgres database, for metrics, checkpoints and events (default: DATABASE_URL, else a running `relax dev`). */
  databaseUrl?: string;
}

/** One run's state: Temporal's status, the run's own progress, its memo, and the failure when it failed. */
export interface RunDescription extends Omit<RunSummary, 'progress'> {
  /** The live progress query's answer while the run is open; else the memo's last `progress`. */
  progress?: MemoProgress | TrainingProgress;
  /** Set when the run failed, was terminated or timed out: the cause chain, outermost first. */
  failure?: { message: string; type?: string; chain: FailureLink[] };
  memo: Record<string, unknown>;
  historyLength: number;
}

export type TrainingHandle = WorkflowHandle<(input: unknown) => Promise<TrainingResult>>;

/** A started run: its id and the client calls bound to it. */
export interface RunHandle {
  runId: string;
  /** The underlying Temporal handle (signals, queries, history). */
  workflow: TrainingHandle;
  result(): Promise<TrainingResult>;
  progress(options?: ProgressQueryOptions): Promise<TrainingProgress>;
  watch(options?: { intervalMs?: number }): AsyncGenerator<TrainingProgress>;
  describe(): Promise<RunDescription>;
}

const OPEN = new Set(['RUNNING', 'CONTINUED_AS_NEW']);

export class RelaxClient {
  private readonly database: RunDatabase;
  private constructor(
    readonly client: Client,
    private readonly connection: Connection,
    databaseUrl: string | undefined,
    private readonly tracing?: ClientTracing,
  ) {
    this.database = new RunDatabase(databaseUrl);
  }

  /**
   * Connects with TLS / mTLS / an API key as the TEMPORAL_TLS_* and TEMPORAL_API_KEY* variables say
   * (config/temporal-connection.ts); pass `security` (e.g. PLAINTEXT_TEMPORAL for a stack this
   * process started) to override them. Either `connect(options)` or `connect(address, namespace, security)`.
   */
  static async connect(address?: string | ConnectOptions, namespace?: string, security?: TemporalConnectionOptions): Promise<RelaxClient> {
    const o: ConnectOptions = typeof address === 'object' ? address : { address, namespace, security };
    const resolved = resolveAddresses();
    const target = o.address ?? resolved.temporalAddress;
    // explicit options > TEMPORAL_* variables > the temporal CLI's config profile > a running relax dev > localhost (client/addresses.ts)
    const options = o.security ?? clientConnectionOptions(process.env, o.address === undefined ? resolved.profileSecurity : undefined);
    // With OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT set, starting a run opens its trace (telemetry/client-tracing.ts); close() sends the spans.
    const tracing = startClientTracing('client');
    let connection: Connection;
    try {
      connection = await Connection.connect({ address: target, connectTimeout: 5_000, ...sdkConnectionOptions(options) });
    } catch (err) {
      await tracing?.shutdown();
      throw new Error(`cannot reach Temporal at ${target} (${options.summary}): ${(err as Error).message}\n  fix: start \`relax dev\` or set TEMPORAL_ADDRESS; for TLS check TEMPORAL_TLS_CA / TEMPORAL_TLS_SERVER_NAME (docs/security.md)`);
    }
    const interceptors = tracing ? { interceptors: { workflow: tracing.clientInterceptors } } : {};
    return new RelaxClient(new Client({ connection, namespace: o.namespace ?? resolved.namespace, ...interceptors }), connection, o.databaseUrl ?? resolved.databaseUrl, tracing);
  }

  /** Starts a training run (the `trainingRun` workflow); throws RunConfigError before sending an invalid config. */
  async startTraining(config: RunConfigInput, workflowId?: string): Promise<TrainingHandle> {
    const parsed = parseRunConfig(config);
    const id = workflowId ?? parsed.run_id ?? `run-${Date.now().toString(36)}`;
    return this.client.workflow.start('trainingRun', { taskQueue: roleTaskQueue('control', taskQueuePrefix()), workflowId: id, args: [config], ...runUserMetadata(parsed) });
  }

  /** Starts a training run and returns its RunHandle. The workflow id is `workflowId`, else the config's run_id, else generated. */
  async start(config: RunConfigInput, options: { workflowId?: string } = {}): Promise<RunHandle> {
    const workflow = await this.startTraining(config, options.workflowId);
    const runId = workflow.workflowId;
    return {
      runId,
      workflow,
      result: () => this.result(runId),
      progress: (o) => this.progress(runId, o),
      watch: (o) => this.watch(runId, o),
      describe: () => this.describe(runId),
    };
  }

  /** The run's progress (the `progress` query): the latest values; `{ curves: true }` adds the reward and accuracy curves. */
  progress(runId: string, options?: ProgressQueryOptions): Promise<TrainingProgress> {
    return this.client.workflow.getHandle(runId).query<TrainingProgress, [ProgressQueryOptions?]>('progress', ...(options ? [options] : []));
  }

  /**
   * Waits for the run to end and returns its TrainingResult. A cancelled run (graceful stop) returns
   * the memo's summary with `cancelled: true`; a failed, terminated or timed-out run throws
   * RunFailedError whose message is the workflow's cause chain.
   */
  async result(runId: string): Promise<TrainingResult> {
    const handle = this.client.workflow.getHandle(runId);
    try {
      return (await handle.result()) as TrainingResult;
    } catch (err) {
      if (err instanceof WorkflowFailedError && err.cause instanceof CancelledFailure) {
        const memo = ((await handle.describe().catch(() => undefined))?.memo ?? {}) as { summary?: MemoSummary };
        if (memo.summary) {
          const s = memo.summary;
          return { runId, steps: s.steps, policyVersion: s.policyVersion, ...(s.evalAccuracy !== null ? { evalAccuracy: s.evalAccuracy } : {}), stopped: true, cancelled: true, accuracies: [], rewards: [], ...(s.skippedSteps ? { skippedSteps: s.skippedSteps } : {}) };
        }
      }
      throw new RunFailedError(runId, err);
    }
  }

  /**
   * Yields the run's progress every time it changes (polling every `intervalMs`, default 1000) until
   * the run closes, its final state last; follows continue-as-new. Call `result()` for the outcome.
   */
  async *watch(runId: string, options: { intervalMs?: number } = {}): AsyncGenerator<TrainingProgress> {
    const handle = this.client.workflow.getHandle(runId);
    let last = '';
    for (;;) {
      const open = OPEN.has((await handle.describe()).status.name);
      const p = await handle.query<TrainingProgress>('progress').catch(() => undefined);
      if (p) {
        const key = JSON.stringify([p.status, p.step, p.policyVersion, p.lastEvalStep, p.lastAccuracy, p.lastReward]);
        if (key !== last) yield p;
        last = key;
      }
      if (!open) return;
      await new Promise((r) => setTimeout(r, options.intervalMs ?? 1_000));
    }
  }

  /** Runs in Temporal visibility (workflow type trainingRun), newest first, filtered by status and task. */
  async list(options: ListOptions = {}): Promise<RunSummary[]> {
    const limit = options.limit ?? 20;
    if (!Number.isInteger(limit) || limit < 1) throw new Error(`limit: must be an integer >= 1, got ${limit}`);
    const out: RunSummary[] = [];
    for await (const info of this.client.workflow.list({ query: listQuery(options), pageSize: Math.min(limit, 100) })) {
      out.push(runSummary(info));
      if (out.length >= limit) break;
    }
    return out;
  }

  /** The run's Temporal status, memo and search attributes, its live progress while it runs, and the failure cause when it failed. */
  async describe(runId: string): Promise<RunDescription> {
    const handle = this.client.workflow.getHandle(runId);
    const d = await handle.describe();
    const base = runSummary(d);
    const out: RunDescription = { ...base, memo: (d.memo ?? {}) as Record<string, unknown>, historyLength: d.historyLength };
    if (OPEN.has(d.status.name)) {
      const live = await handle.query<TrainingProgress>('progress').catch(() => undefined);
      if (live) out.progress = live;
    } else if (['FAILED', 'TERMINATED', 'TIMED_OUT'].includes(d.status.name)) {
      const err = await handle.result().then(() => undefined, (e: unknown) => e);
      if (err) {
        const chain = failureChain(err);
        const type = failureType(chain);
        out.failure = { message: formatFailureChain(chain), ...(type ? { type } : {}), chain };
      }
    }
    return out;
  }

  /**
   * Changes the safe hyperparameters (lr and its schedule, kl_coef, entropy_coef, clip range,
   * temperature, top_p, max_staleness, eval_every, steps) from the next step on, through the
   * workflow's `setHyperparameters` Update. Throws with the validator's message when refused (the
   * run is untouched then).
   */
  async setHyperparameters(runId: string, update: HyperparameterUpdate): Promise<HyperparameterUpdateResult> {
    try {
      return await this.client.workflow.getHandle(runId).executeUpdate<HyperparameterUpdateResult, [HyperparameterUpdate]>('setHyperparameters', { args: [update] });
    } catch (err) {
      throw new UpdateRefusedError('setHyperparameters', runId, err);
    }
  }

  /** Asks the run to finish its current step (publishing that version) and end. */
  async stop(runId: string): Promise<void> {
    await this.client.workflow.getHandle(runId).signal('stop');
  }

  async pause(runId: string): Promise<void> {
    await this.client.workflow.getHandle(runId).signal('pause');
  }

  async resume(runId: string): Promise<void> {
    await this.client.workflow.getHandle(runId).signal('resume');
  }

  /** Cancels the workflow: a graceful stop (the current step finishes or is abandoned cleanly; Postgres and the memo say `cancelled`). */
  async cancel(runId: string): Promise<void> {
    await this.client.workflow.getHandle(runId).cancel();
  }

  /** The hard stop: Temporal ends the workflow at once, no step finishes and nothing is recorded by the run. */
  async terminate(runId: string, reason?: string): Promise<void> {
    await this.client.workflow.getHandle(runId).terminate(reason);
  }

  /** The run's metric series from Postgres (all of them, or only `names`). */
  metrics(runId: string, options: { names?: string[] } = {}): Promise<MetricSeries> {
    return this.database.metrics(runId, options.names);
  }

  /** The newest value of each series of the running (and recently ended) runs: what GET /metrics exports. */
  latestRunMetrics(recentSecs?: number): Promise<LatestRunMetric[]> {
    return this.database.latestRunMetrics(recentSecs);
  }

  /** Readiness: whether Temporal and the database answer; each check's error when not. */
  async readiness(): Promise<{ temporal: string; database: string }> {
    const check = (p: Promise<unknown>) => p.then(() => 'ok', (err: Error) => `unreachable: ${err.message}`);
    const [temporal, database] = await Promise.all([check(this.connection.workflowService.getSystemInfo({})), check(this.database.ping())]);
    return { temporal, database };
  }

  /** The run's published policy versions (the checkpoints registry), oldest first, pruned ones marked. */
  checkpoints(runId: string): Promise<CheckpointVersion[]> {
    return this.database.checkpoints(runId);
  }

  /** The run's newest stage spans (its timeline), oldest first. */
  spans(runId: string, options: { limit?: number } = {}): Promise<StageSpan[]> {
    return this.database.spans(runId, options.limit);
  }

  /** The run's run_events in time order; `afterId` reads only newer ones (for following). */
  events(runId: string, options: { afterId?: number; limit?: number } = {}): Promise<RunEventRecord[]> {
    return this.database.events(runId, options.afterId, options.limit);
  }

  /** Starts a sampled evaluation (the evaluateRun workflow: pass@1, pass@k, maj@k, mean@k of one version; docs/algorithms.md). */
  startEvaluation(input: EvaluationInput, options: { workflowId?: string } = {}): Promise<EvaluationHandle> {
    return startEvaluation(this.client, input, options);
  }

  /** Runs a sampled evaluation to its end and returns its scores (also recorded in the run's evaluations and metrics). */
  evaluate(input: EvaluationInput, options: { workflowId?: string } = {}): Promise<EvaluationResult> {
    return evaluate(this.client, input, options);
  }

  /** A Schedule that evaluates the run's newest not-yet-evaluated version on each tick. */
  scheduleEvaluations(options: EvaluationScheduleOptions): Promise<ScheduleHandle> {
    return createEvaluationSchedule(this.client, options);
  }

  /** The run's recorded sampled evaluations, oldest version first. */
  evaluations(runId: string): Promise<EvaluationRecord[]> {
    return this.database.evaluations(runId);
  }

  /** Scheduled retraining: Temporal Schedules that start training runs (docs/schedules.md). */
  get schedules(): RelaxSchedules {
    return new RelaxSchedules(this.client);
  }

  /** Rollout capacity: scale-out and scale-in operations, the engines (docs/control-api.md). */
  get rollout(): RelaxRollout {
    return new RelaxRollout(this.client, this.database);
  }

  async close(): Promise<void> {
    await this.database.close();
    await this.connection.close();
    await this.tracing?.shutdown();
  }
}
