// Capacity activities: the steps of a rollout scaling operation (workflows/rollout-scaling.ts),
// served on the capacity queue by the process that owns the capacity (relax dev's supervisor:
// workers/local-capacity.ts implements CapacityProvider). Start engines, check they poll the rollout
// queue, drain engines (the worker stops polling, finishes its activities, exits), remove them. Each
// waits with heartbeats, so a cancelled operation stops waiting at once.
import { ApplicationFailure, Context } from '@temporalio/activity';
import type { Webhook } from '../config/notify-config';
import type { EngineKind, RolloutEngineRecord } from '../store/rollout-engines';
import { postToWebhooks } from './notify';
import type { HealthAction, HealthReport, RoleHealth, RolloutObservation } from './reports';

export type { HealthAction, HealthReport, RoleHealth, RolloutObservation } from './reports';

/** An engine as the scaling workflow sees it (dates as ISO strings: workflow payloads are JSON). */
export interface EngineSummary {
  engineId: string;
  kind: EngineKind;
  /** An external engine's URL. */
  url: string | null;
  pid: number | null;
  identity: string | null;
  state: RolloutEngineRecord['state'];
  initial: boolean;
  createdAt: string;
}

export interface HealthCheckOptions {
  stallFactor: number;
  minStallSecs: number;
  minFreeDiskMb: number;
  hungAfterSecs: number;
}

/** What owns rollout capacity: starts and stops engines, and says who polls a task queue. */
export interface CapacityProvider {
  /** Engines not removed (failed ones included: they take no work but their worker is still there), oldest first. */
  engines(): Promise<RolloutEngineRecord[]>;
  /**
   * Starts `count` engines, or with `engineUrls` one rollout worker per URL that drives that
   * external engine; resolves once each is up (its worker says it is ready).
   */
  startEngines(count: number, options?: { engineUrls?: string[] }): Promise<RolloutEngineRecord[]>;
  /** Graceful: the engine stops taking work, finishes what it runs, exits; resolves when it has exited. */
  drainEngine(engineId: string, timeoutMs: number): Promise<void>;
  /** Forgets a drained engine (state removed); with keepFailed a failed one stays listed as failed. */
  removeEngine(engineId: string, options?: { keepFailed?: boolean }): Promise<void>;
  /** Marks engines active (they passed the health check and the weight sync). */
  markActive(engineIds: string[]): Promise<void>;
  /** The identities of the workers polling a task queue now (Temporal's DescribeTaskQueue). */
  pollerIdentities(taskQueue: string): Promise<string[]>;
  /** The rollout queue's backlog and the stages' busy time over the last `windowSecs`. */
  observe(windowSecs: number): Promise<RolloutObservation>;
  /** The health manager's check: workers per role, external engines, runs' step times, disk. */
  health(options: HealthCheckOptions): Promise<HealthReport>;
  /** Restarts a role's workers that are down or hung (through the supervisor); says what it did. */
  restartWorkers(role: string, hung: string[], graceMs: number): Promise<{ relaunched: number[]; killed: number[]; starting: number[] }>;
  /** Stops routing to an external engine: marked failed with why, its worker drained. */
  stopRouting(engineId: string, reason: string): Promise<void>;
}

export const summarizeEngine = (e: RolloutEngineRecord): EngineSummary => ({
  engineId: e.engineId,
  kind: e.kind,
  url: e.url,
  pid: e.pid,
  identity: e.identity,
  state: e.state,
  initial: e.initial,
  createdAt: e.createdAt.toISOString(),
});

/**
 * Heartbeats every second while `work` runs, and gives up when the operation is cancelled (a wait
 * for processes must stop at once). Not activities/context.ts withHeartbeats: that module brings the
 * trainer's engines, which the relax dev process serving these activities should not load.
 */
async function heartbeating<T>(work: Promise<T>): Promise<T> {
  const ctx = Context.current();
  ctx.heartbeat();
  const timer = setInterval(() => ctx.heartbeat(), 1_000);
  try {
    return await Promise.race([work, ctx.cancelled as Promise<never>]);
  } finally {
    clearInterval(timer);
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export function createCapacityActivities(provider: CapacityProvider) {
  return {
    async listRolloutEngines(): Promise<EngineSummary[]> {
      return (await provider.engines()).map(summarizeEngine);
    },

    async startRolloutEngines({ count, engineUrls }: { count: number; engineUrls?: string[] }): Promise<EngineSummary[]> {
      return (await heartbeating(provider.startEngines(count, engineUrls?.length ? { engineUrls } : {}))).map(summarizeEngine);
    },

    /**
     * Health check: waits until every identity polls `taskQueue`; fails naming the ones that never
     * did, or at once for an engine marked failed (an external engine that could not confirm the
     * version its first activity needed: it stopped polling before this saw it).
     */
    async awaitPollers({ taskQueue, identities, timeoutMs }: { taskQueue: string; identities: string[]; timeoutMs: number }): Promise<string[]> {
      const deadline = Date.now() + timeoutMs;
      const wait = async () => {
        for (;;) {
          const failed = (await provider.engines()).filter((e) => e.state === 'failed' && e.identity !== null && identities.includes(e.identity));
          if (failed.length) {
            const why = failed.map((e) => `${e.engineId}: ${String(e.detail.failed_because ?? 'marked failed')}`).join('; ');
            throw ApplicationFailure.create({ type: 'EngineUnhealthy', nonRetryable: true, message: why });
          }
          const polling = new Set(await provider.pollerIdentities(taskQueue));
          const missing = identities.filter((id) => !polling.has(id));
          if (!missing.length) return identities;
          if (Date.now() > deadline) {
            throw ApplicationFailure.create({ type: 'EngineUnhealthy', nonRetryable: true, message: `no poller on ${taskQueue} after ${timeoutMs} ms for ${missing.join(', ')}` });
          }
          await sleep(250);
        }
      };
      return heartbeating(wait());
    },

    async drainRolloutEngines({ engineIds, timeoutMs }: { engineIds: string[]; timeoutMs: number }): Promise<void> {
      await heartbeating(Promise.all(engineIds.map((id) => provider.drainEngine(id, timeoutMs))));
    },

    async removeRolloutEngines({ engineIds, keepFailed }: { engineIds: string[]; keepFailed?: boolean }): Promise<void> {
      for (const id of engineIds) await provider.removeEngine(id, { keepFailed });
    },

    async markRolloutEnginesActive({ engineIds }: { engineIds: string[] }): Promise<void> {
      await provider.markActive(engineIds);
    },

    async observeRollout({ windowSecs }: { windowSecs: number }): Promise<RolloutObservation> {
      return provider.observe(windowSecs);
    },

    async checkHealth(options: HealthCheckOptions): Promise<HealthReport> {
      return heartbeating(provider.health(options));
    },

    async restartRoleWorkers({ role, hung, graceMs }: { role: string; hung: string[]; graceMs: number }) {
      return provider.restartWorkers(role, hung, graceMs);
    },

    /** A health action to the manager's webhooks (activities/notify.ts shapes). */
    async notifyHealth({ webhooks, action }: { webhooks: Webhook[]; action: HealthAction }): Promise<number> {
      const text = `Relax health: ${action.action}${action.target ? ` ${action.target}` : ''}: ${action.reason}`;
      return postToWebhooks(webhooks, text, { event: 'health', text, ...action });
    },

    async stopRoutingToEngine({ engineId, reason }: { engineId: string; reason: string }): Promise<void> {
      await heartbeating(provider.stopRouting(engineId, reason));
    },
  };
}

export type CapacityActivities = ReturnType<typeof createCapacityActivities>;
