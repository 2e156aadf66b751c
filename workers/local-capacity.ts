// Local rollout capacity: `relax dev`'s supervisor as the capacity provider of scaling operations.
// An engine is one rollout worker slot of the stack ("<host>/rollout#<index>"); scale-out starts
// new supervised worker processes, scale-in drains the newest (LIFO). The engines are recorded in
// Postgres (rollout_engines) for the control API. A Temporal worker on the capacity queue, inside
// the relax dev process, runs the capacity activities (activities/capacity.ts).
import os from 'node:os';
import { Connection } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';
import fs from 'node:fs';
import path from 'node:path';
import { createCapacityActivities, type CapacityProvider, type HealthCheckOptions, type HealthReport, type RoleHealth } from '../activities/capacity';
import { ROLES, type Role } from '../config/task-queues';
import { probeEngine } from '../rollout/engine-probe';
import { capacityTaskQueue, roleTaskQueue } from '../config/task-queues';
import { taskQueuePrefix } from '../config/environment-temporal';
import { sdkConnectionOptions, type TemporalConnectionOptions } from '../security/temporal-connection';
import { openStore } from '../store/db';
import { listRolloutEngines, markRolloutEngineFailed, retireHostEngines, upsertRolloutEngine, type RolloutEngineRecord } from '../store/rollout-engines';
import { recentStageBusySeconds } from '../store/spans';
import { runningStepCadence } from '../store/step-records';
import type { LocalStack, StackWorker } from './local-stack';

export interface LocalCapacityOptions {
  stack: LocalStack;
  namespace?: string;
  security: TemporalConnectionOptions;
  /** Names this stack's engines; default the host name and the stack's Temporal port. */
  host?: string;
}

export interface LocalCapacity {
  host: string;
  provider: CapacityProvider;
  stop(): Promise<void>;
}

/** Starts the capacity worker of a local stack and records its rollout workers as the initial engines. */
// Over 80 lines because the capacity worker's closures (scale out, drain, engine records) share the
// stack and the store it opens; not yet split (issue 33).
export async function startLocalCapacity(opts: LocalCapacityOptions): Promise<LocalCapacity> {
  const { stack } = opts;
  const namespace = opts.namespace ?? 'default';
  const host = opts.host ?? `${os.hostname()}:${stack.temporalAddress.split(':').pop()}`;
  const pool = await openStore({ url: stack.databaseUrl, maxConnections: 2 });
  const client = await Connection.connect({ address: stack.temporalAddress, ...sdkConnectionOptions(opts.security) });
  const engineId = (w: Pick<StackWorker, 'index'>) => `${host}/rollout#${w.index}`;
  const record = (w: StackWorker, state: RolloutEngineRecord['state']) =>
    upsertRolloutEngine(pool, { engineId: engineId(w), kind: w.engineUrl ? 'external' : 'local', host, pid: w.pid, identity: w.identity ?? null, url: w.engineUrl ?? null, state, initial: w.initial });

  // A restarted stack's earlier children are gone: its rows say so before the new ones are written.
  await retireHostEngines(pool, host, 'the stack restarted');
  for (const w of stack.workers('rollout')) await record(w, 'active');

  const mine = async () => (await listRolloutEngines(pool)).filter((e) => e.host === host);
  const provider: CapacityProvider = {
    async engines() {
      // A supervised restart gives a slot a new pid and identity: refresh before answering.
      const known = new Map((await mine()).map((e) => [e.engineId, e]));
      const stale = stack.workers('rollout').filter((w) => {
        const e = known.get(engineId(w));
        return e && (e.pid !== w.pid || e.identity !== (w.identity ?? null));
      });
      for (const w of stale) await record(w, known.get(engineId(w))!.state);
      return stale.length ? mine() : [...known.values()];
    },
    async startEngines(count, options = {}) {
      const added = await stack.addWorkers('rollout', options.engineUrls?.length ?? count, options);
      for (const w of added) await record(w, 'starting');
      const ids = new Set(added.map(engineId));
      return (await mine()).filter((e) => ids.has(e.engineId));
    },
    async drainEngine(id, timeoutMs) {
      // A failed engine's process is drained too (it idles, taking no work, until then).
      const e = (await mine()).find((x) => x.engineId === id);
      if (!e || e.pid === null) return;
      await upsertRolloutEngine(pool, { engineId: id, kind: 'local', host, state: 'draining', detail: { drain_started_at: new Date().toISOString() } });
      await stack.drainWorker(e.pid, timeoutMs);
    },
    async removeEngine(id, options = {}) {
      const failed = options.keepFailed && (await mine()).some((e) => e.engineId === id && e.state === 'failed');
      await upsertRolloutEngine(pool, { engineId: id, kind: 'local', host, state: failed ? 'failed' : 'removed', detail: { removed_at: new Date().toISOString() } });
    },
    async markActive(ids) {
      for (const id of ids) await upsertRolloutEngine(pool, { engineId: id, kind: 'local', host, state: 'active' });
    },
    async pollerIdentities(taskQueue) {
      const { pollers } = await client.workflowService.describeTaskQueue({ namespace, taskQueue: { name: taskQueue }, taskQueueType: 2 /* activity */ });
      return (pollers ?? []).map((p) => p.identity ?? '').filter(Boolean);
    },
    async observe(windowSecs) {
      const [described, engines, busy] = await Promise.all([
        client.workflowService.describeTaskQueue({ namespace, taskQueue: { name: roleTaskQueue('rollout', taskQueuePrefix()) }, taskQueueType: 2, reportStats: true }),
        mine(),
        recentStageBusySeconds(pool, windowSecs),
      ]);
      const age = described.stats?.approximateBacklogAge;
      const active = engines.filter((e) => e.state === 'active' || e.state === 'starting').length;
      return {
        at: new Date().toISOString(),
        backlog: Number(described.stats?.approximateBacklogCount ?? 0),
        backlogAgeSecs: age ? Number(age.seconds ?? 0) + (age.nanos ?? 0) / 1e9 : 0,
        engines: active,
        pollers: described.pollers?.length ?? 0,
        rolloutBusy: busy.generate === undefined ? null : Math.min(1, busy.generate / (windowSecs * Math.max(1, active))),
        trainerWait: busy.train === undefined ? null : Math.max(0, 1 - busy.train / windowSecs),
      };
    },
    health: (options) => checkHealth(options),
    async restartWorkers(role, hung, graceMs) {
      return stack.restartWorkers(role as Role, hung, graceMs);
    },
    async stopRouting(engineId, reason) {
      const e = (await mine()).find((x) => x.engineId === engineId);
      if (!e) return;
      if (e.identity) await markRolloutEngineFailed(pool, e.identity, reason);
      if (e.pid !== null) await stack.drainWorker(e.pid, 30_000);
    },
  };

  /** Workers per role (their slots, and who polls the role's queue), external engines' probes, runs' step times, the disk. */
  async function checkHealth(options: HealthCheckOptions): Promise<HealthReport> {
    const roles: RoleHealth[] = [];
    for (const role of ROLES) {
      const slots = stack.slots(role);
      if (!slots.length) continue;
      const { pollers } = await client.workflowService.describeTaskQueue({ namespace, taskQueue: { name: roleTaskQueue(role, taskQueuePrefix()) }, taskQueueType: role === 'control' ? 1 : 2 });
      const polling = new Set((pollers ?? []).map((p) => p.identity ?? ''));
      const ready = slots.filter((w) => w.alive && w.identity);
      roles.push({
        role,
        slots: slots.length,
        up: ready.length,
        down: slots.filter((w) => !w.alive || !w.identity).map((w) => w.pid),
        hung: ready.filter((w) => !polling.has(w.identity!) && Date.now() - w.startedAt.getTime() > options.hungAfterSecs * 1000).map((w) => w.identity!),
      });
    }
    const external = (await mine()).filter((e) => e.url && e.state === 'active');
    const engines = await Promise.all(
      external.map(async (e) => {
        const problem = await probeEngine(e.url!, 5_000);
        return { engineId: e.engineId, url: e.url!, ok: problem === undefined, ...(problem ? { problem } : {}) };
      }),
    );
    const runs = (await runningStepCadence(pool)).flatMap(({ runId, lastStepSecsAgo, medianStepSecs }) =>
      medianStepSecs === null ? [] : [{ runId, lastStepSecsAgo, medianStepSecs, stalled: lastStepSecsAgo > Math.max(options.minStallSecs, options.stallFactor * medianStepSecs) }],
    );
    let disk: HealthReport['disk'] = null;
    try {
      const dir = fs.existsSync(path.join(stack.home, 'checkpoints')) ? path.join(stack.home, 'checkpoints') : stack.home;
      const st = fs.statfsSync(dir);
      const freeMb = (st.bavail * st.bsize) / 2 ** 20;
      disk = { path: dir, freeMb: Math.round(freeMb), low: freeMb < options.minFreeDiskMb };
    } catch {
      // no such directory yet: nothing to say
    }
    return { at: new Date().toISOString(), roles, engines, runs, disk };
  }

  const connection = await NativeConnection.connect({ address: stack.temporalAddress, ...sdkConnectionOptions(opts.security) });
  const worker = await Worker.create({
    connection,
    namespace,
    taskQueue: capacityTaskQueue(taskQueuePrefix()),
    identity: `capacity/${host}`,
    activities: createCapacityActivities(provider),
  });
  const running = worker.run();
  // Ready means the queue is served: a client that asks right after start (the API's scaling
  // routes check for a poller) must not find it empty while the first poll is still on its way.
  for (let waited = 0; ; waited += 100) {
    const { pollers } = await client.workflowService.describeTaskQueue({ namespace, taskQueue: { name: capacityTaskQueue(taskQueuePrefix()) }, taskQueueType: 2 });
    if (pollers?.length || waited >= 15_000 || worker.getState() !== 'RUNNING') break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return {
    host,
    provider,
    async stop() {
      if (worker.getState() === 'RUNNING') worker.shutdown();
      await running.catch(() => undefined);
      await connection.close().catch(() => undefined);
      await client.close().catch(() => undefined);
      await pool.end().catch(() => undefined);
    },
  };
}
