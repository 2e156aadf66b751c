// One worker process: one role, one device. It polls its role's shared queue and its own instance
// queue, so work can go to any worker of the role or be pinned to this one.
import os from 'node:os';
import { randomUUID } from 'node:crypto';
import { NativeConnection, Worker, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { activitiesForRole } from '../activities';
import type { WorkerContext } from '../activities/context';
import { DEVICE_ROLES, instanceTaskQueue, roleTaskQueue, type Role } from '../config/task-queues';
import { loadTfjsBackend } from '../engines/backends';
import { deviceLabel, pinProcessToDevice, type Device } from '../engines/device';
import { probeEngine } from '../rollout/remote-engine';
import { CheckpointServer } from '../serving/checkpoint-server';
import { openStore, redactUrl } from '../store/db';
import { markRolloutEngineFailed } from '../store/rollout-engines';
import { metricsEnabled, startWorkerMetrics } from './worker-metrics';
import { startRunReaper, temporalWorkflowStates } from './run-reaper';
import { LIVENESS_PING, LIVENESS_PONG } from './supervisor';
import { checkpointServerSettings, engineTokenFromEnv, taskQueuePrefix, externalEngineUrl, rolloutConcurrency, runReleaseSettings, supervisedWorker, workerDeploymentSettings, workerMetricsPort } from '../config/environment';
import { deploymentOptions, promoteBuild } from './deployment';
import { createSearchAttributesCommand, ensureSearchAttributes } from './search-attributes';
import { RELAX_SEARCH_ATTRIBUTES } from '../workflows/definitions';
import { sdkConnectionOptions, temporalConnectionOptions, TemporalConnectionConfigError, type TemporalConnectionOptions } from '../security/temporal-connection';
import { startTracing } from '../telemetry/tracing';
import { componentLog, setProcessFields } from '../telemetry/log';
import { bundleWorkflows } from './workflow-bundle';

const workerLog = componentLog('worker');

export interface WorkerOptions {
  role: Role;
  device: Device;
  temporalAddress: string;
  namespace: string;
  databaseUrl: string;
  /** Pre-built workflow bundle (tests bundle once per run); the control worker bundles otherwise, and always when tracing is on (its bundle has the tracing interceptors). */
  workflowBundle?: WorkflowBundleWithSourceMap;
  /** Grace for running activities when the worker shuts down. */
  shutdownGraceMs?: number;
}

export interface RunningWorker {
  identity: string;
  instanceQueue: string;
  taskQueues: string[];
  /** The control worker's worker-deployment build (workers/deployment.ts); absent when unversioned. */
  build?: { deploymentName: string; buildId: string };
  /** The tfjs backend loaded for the trainer (train and reference roles). */
  tfjsBackend?: string;
  /** Resolves when the worker has stopped (after shutdown() or a fatal error). */
  done: Promise<void>;
  shutdown(): void;
  /** Its Prometheus endpoint (workers/worker-metrics.ts); absent with RELAX_METRICS=off. */
  metricsUrl?: string;
  /** Where it sends its OpenTelemetry spans, when tracing is on (config/tracing.ts). */
  tracesUrl?: string;
  /** Why the external engine it drove was marked failed (it stopped taking work), if it was. */
  unhealthy(): string | undefined;
}

/**
 * RELAX_ENGINE_URL on a rollout worker: it drives that external OpenAI-compatible engine
 * (rollout/remote-engine.ts) instead of a local one. It serves the checkpoints the engine is told to
 * load (RELAX_CHECKPOINT_HOST / RELAX_CHECKPOINT_URL) and probes the engine before it polls.
 */
async function externalEngineSetup(role: Role): Promise<{ url: string; token?: string; checkpoints: CheckpointServer } | undefined> {
  const url = externalEngineUrl(role);
  if (!url) return undefined;
  const problem = await probeEngine(url);
  if (problem) throw new Error(`the external engine at ${url} does not answer (${problem}): start it (\`relax serve --engine\`) or fix RELAX_ENGINE_URL`);
  const token = engineTokenFromEnv()?.token;
  const checkpoints = await CheckpointServer.start(checkpointServerSettings());
  return { url, ...(token ? { token } : {}), checkpoints };
}

/**
 * Rollout workers keep one activity poll outstanding (the SDK's default is up to 10). A drained
 * worker (scale-in) shuts down while the rollout queue is busy: the SDK's core ends its task stream
 * at the first poll the server completes empty, and a task another outstanding poll receives after
 * that is dropped, to be retried only after its heartbeat timeout. With one poll there is no other.
 * A worker polls again as soon as it has a task, and its activities still run concurrently.
 */
const ROLLOUT_POLLER = { type: 'simple-maximum', maximum: 1 } as const;

export async function startWorker(opts: WorkerOptions): Promise<RunningWorker> {
  if (opts.role === 'control' && opts.device.kind !== 'cpu') {
    throw new Error(`--device: the control role runs on the CPU only; drop --device ${deviceLabel(opts.device)}`);
  }
  if (DEVICE_ROLES.includes(opts.role)) pinProcessToDevice(opts.device);

  const release = runReleaseSettings(); // a bad RELAX_RUN_* value fails here, before anything starts
  const deployment = workerDeploymentSettings();
  const { label, identity, instanceQueue } = workerNames(opts);
  setProcessFields({ role: opts.role, worker: identity });

  const { pool, connection, security } = await connectWorker(opts);

  // Roles that run the tfjs trainer load the fastest backend for their device now: left alone, tfjs
  // would fall back to its pure-JS backend, tens of times slower.
  let tfjsBackend: string | undefined;
  if (opts.role === 'train' || opts.role === 'reference') tfjsBackend = (await loadTfjsBackend(opts.device)).backend;

  const external = await externalEngineOrClose(opts.role, connection, pool);
  const health: EngineHealth = { stopPolling: () => undefined };
  const ctx = workerContext(opts.role, pool, label, identity, instanceQueue, external, health);
  const activities = activitiesForRole(opts.role, ctx);
  const tracing = startTracing({ role: opts.role, identity });
  const metrics = metricsEnabled() ? await startWorkerMetrics({ role: opts.role, ...workerMetricsPort() }) : undefined;
  if (metrics) ctx.figures = metrics.figures;
  // What this process holds for a run is released once the run's workflow has closed (workers/run-reaper.ts).
  const workflowStates = temporalWorkflowStates(opts.temporalAddress, opts.namespace, security);
  const reaper = startRunReaper({ db: pool, workflowState: workflowStates.state, checkMs: release.checkS * 1000, idleMs: release.idleS * 1000, log: (line) => workerLog.info(line) });
  const common = {
    connection,
    namespace: opts.namespace,
    identity,
    activities,
    interceptors: { activity: [...(metrics ? [() => ({ inbound: metrics.activityInbound() })] : []), ...(tracing?.activityInterceptors ?? [])] },
    shutdownGraceTime: opts.shutdownGraceMs ?? 5_000,
  };

  const { workers, versioned } = await createRoleWorkers(opts, common, security, deployment, tracing, instanceQueue);

  const done = runWorkers(workers);
  // An engine marked failed: stop taking the shared queue's work. The instance queue still answers,
  // so a scale-out's weight sync pinned to this worker gets the reason instead of a timeout.
  health.stopPolling = () => {
    for (const w of workers) if (w.options.taskQueue === roleTaskQueue(opts.role, taskQueuePrefix()) && w.getState() === 'RUNNING') w.shutdown();
  };
  const closed = done.finally(async () => {
    await reaper.stop();
    await workflowStates.close();
    await metrics?.close().catch(() => undefined);
    await tracing?.shutdown();
    await external?.checkpoints.close().catch(() => undefined);
    await connection.close().catch(() => undefined);
    await pool.end().catch(() => undefined);
  });
  if (versioned && deployment.promote) {
    // New runs start on this build once it is current; runs pinned to an older build finish there.
    const promoted = promoteBuild(connection, { namespace: opts.namespace, ...versioned, identity });
    await Promise.race([promoted, done]).catch(async (err) => {
      shutdownRunning(workers);
      await closed.catch(() => undefined);
      throw err;
    });
  }
  const running: RunningWorker = {
    identity,
    instanceQueue,
    taskQueues: workers.map((w) => w.options.taskQueue),
    tfjsBackend,
    ...(versioned ? { build: versioned } : {}),
    done: closed,
    shutdown: () => shutdownRunning(workers),
    ...(metrics ? { metricsUrl: metrics.url } : {}),
    ...(tracing ? { tracesUrl: tracing.settings.endpoint } : {}),
    unhealthy: () => health.reason,
  };
  exitWithSupervisor(running);
  return running;
}

/** Opens the worker's database pool and its Temporal connection, each failure with its fix. */
async function connectWorker(opts: WorkerOptions): Promise<{ pool: Pool; connection: NativeConnection; security: TemporalConnectionOptions }> {
  let pool;
  try {
    pool = await openStore({ url: opts.databaseUrl });
  } catch (err) {
    throw new Error(`${(err as Error).message}\n  fix: start the database or point DATABASE_URL at one (now ${redactUrl(opts.databaseUrl)})`);
  }
  let connection: NativeConnection;
  let security: TemporalConnectionOptions;
  try {
    security = temporalConnectionOptions();
    connection = await NativeConnection.connect({ address: opts.temporalAddress, ...sdkConnectionOptions(security) });
  } catch (err) {
    await pool.end();
    if (err instanceof TemporalConnectionConfigError) throw err;
    throw new Error(`cannot reach Temporal at ${opts.temporalAddress} (${security!.summary}): ${(err as Error).message}\n  fix: run \`relax dev\` or set TEMPORAL_ADDRESS; for TLS check TEMPORAL_TLS_CA / TEMPORAL_TLS_SERVER_NAME (docs/security.md)`);
  }
  return { pool, connection, security };
}

/** Why this worker's external engine was marked failed (once set, it takes no more shared work), and how to stop its shared-queue polling. */
interface EngineHealth {
  reason?: string;
  stopPolling: () => void;
}

/** The activities' view of this worker; an external engine's `unhealthy` records the failure once and stops the shared-queue polling. */
function workerContext(
  role: Role,
  pool: Pool,
  label: string,
  identity: string,
  instanceQueue: string,
  external: Awaited<ReturnType<typeof externalEngineSetup>>,
  health: EngineHealth,
): WorkerContext {
  return {
    pool,
    role,
    device: label,
    identity,
    instanceQueue,
    ...(external
      ? {
          externalEngine: {
            ...external,
            unhealthy: async (reason: string) => {
              if (health.reason !== undefined) return;
              health.reason = reason;
              workerLog.error({ engine: external!.url }, `the external engine ${external!.url} is marked failed and this worker takes no more work: ${reason}`);
              await markRolloutEngineFailed(pool!, identity, reason).catch((err: Error) => workerLog.error({ err }, 'could not record the external engine\'s failure'));
              health.stopPolling();
            },
          },
        }
      : {}),
  };
}

/**
 * The SDK workers of a role: the control worker polls the control queue with the workflow bundle (a
 * worker-deployment build when versioned); other roles poll their shared queue and their instance queue.
 */
async function createRoleWorkers(
  opts: WorkerOptions,
  common: Omit<Parameters<typeof Worker.create>[0], 'taskQueue'>,
  security: TemporalConnectionOptions,
  deployment: ReturnType<typeof workerDeploymentSettings>,
  tracing: ReturnType<typeof startTracing>,
  instanceQueue: string,
): Promise<{ workers: Worker[]; versioned?: { deploymentName: string; buildId: string } }> {
  const workers: Worker[] = [];
  let versioned: { deploymentName: string; buildId: string } | undefined;
  if (opts.role === 'control') {
    await checkSearchAttributes(opts, security);
    const workflowBundle = (!tracing && opts.workflowBundle) || (await bundleWorkflows({ tracing: !!tracing }));
    const workerDeploymentOptions = deploymentOptions(deployment, workflowBundle);
    versioned = workerDeploymentOptions?.version;
    workers.push(await Worker.create({ ...common, taskQueue: roleTaskQueue('control', taskQueuePrefix()), workflowBundle, ...(workerDeploymentOptions ? { workerDeploymentOptions } : {}), ...(tracing ? { sinks: tracing.sinks } : {}) }));
  } else {
    const polling = opts.role === 'rollout' ? { activityTaskPollerBehavior: ROLLOUT_POLLER, ...rolloutConcurrency() } : {};
    workers.push(await Worker.create({ ...common, ...polling, taskQueue: roleTaskQueue(opts.role, taskQueuePrefix()) }));
    workers.push(await Worker.create({ ...common, ...polling, taskQueue: instanceQueue }));
  }
  return { workers, versioned };
}

type Pool = Awaited<ReturnType<typeof openStore>>;

/** This process's names: its device label, its Temporal identity (role/host:device:pid:random) and its instance queue. */
function workerNames(opts: WorkerOptions): { label: string; identity: string; instanceQueue: string } {
  const label = deviceLabel(opts.device);
  const instanceId = `${os.hostname()}:${label}:${process.pid}:${randomUUID().slice(0, 8)}`;
  const identity = `${opts.role}/${instanceId}`;
  const instanceQueue = instanceTaskQueue(opts.role, instanceId, taskQueuePrefix());
  return { label, identity, instanceQueue };
}

/** externalEngineSetup; when it fails, the Temporal connection and the pool are closed first. */
async function externalEngineOrClose(role: Role, connection: NativeConnection, pool: Pool): Promise<Awaited<ReturnType<typeof externalEngineSetup>>> {
  try {
    return await externalEngineSetup(role);
  } catch (err) {
    await connection.close().catch(() => undefined);
    await pool.end();
    throw err;
  }
}

/** Runs the SDK workers until they all stop; when one fails, the others are shut down and the failure is returned. */
function runWorkers(workers: Worker[]): Promise<void> {
  return Promise.all(workers.map((w) => w.run())).then(
    () => undefined,
    (err) => {
      shutdownRunning(workers);
      throw err;
    },
  );
}

const shutdownRunning = (workers: Worker[]): void => {
  for (const w of workers) if (w.getState() === 'RUNNING') w.shutdown();
};

/** A control worker registers the runs' search attributes if they are missing, and says how when it cannot. */
async function checkSearchAttributes(opts: WorkerOptions, security: TemporalConnectionOptions): Promise<void> {
  const checked = await ensureSearchAttributes(opts.temporalAddress, opts.namespace, security).catch((err: Error) => ({ missing: ['?'], error: err.message }));
  if (!checked.missing.length) return;
  const names = checked.missing[0] === '?' ? Object.keys(RELAX_SEARCH_ATTRIBUTES) : checked.missing;
  workerLog.warn(
    `search attributes ${names.join(', ')} are not registered in namespace ${opts.namespace} and could not be added (${checked.error}):\n` +
      `  runs will fail their workflow tasks until they exist. fix: ${createSearchAttributesCommand(names, opts.namespace)}`,
  );
}

/**
 * Started by `relax dev` (SUPERVISED_ENV set, an IPC channel open): answers its liveness pings from
 * this event loop (workers/supervisor.ts watchLiveness: a worker that stops answering is killed and
 * restarted), and when the channel closes, relax dev is gone (even by SIGKILL), so shut down and
 * exit; a hard exit follows if shutdown hangs.
 */
function exitWithSupervisor(worker: RunningWorker): void {
  if (!supervisedWorker() || !process.send) return;
  process.on('message', (m: unknown) => {
    if ((m as { relax?: unknown } | null)?.relax === LIVENESS_PING.relax && process.connected) process.send!(LIVENESS_PONG, undefined, {}, () => undefined);
  });
  const onGone = () => {
    workerLog.error('relax dev (the supervisor) is gone: exiting');
    worker.shutdown();
    setTimeout(() => process.exit(1), 3_000).unref();
    void worker.done.finally(() => process.exit(1));
  };
  if (!process.connected) onGone();
  else process.once('disconnect', onGone);
}
