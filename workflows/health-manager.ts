// The health manager: one long-running workflow per stack (id `<prefix>-health-manager`, started with
// POST /health/manager), on the capacity queue's owner (relax dev). Every interval it checks
// (activities/capacity.ts checkHealth): each role's worker slots are up and their workers poll the
// role's queue, active external engines answer their probe, running runs' steps keep coming (a stall
// is no step within stall_factor x the median step time), and the checkpoint directory's free space.
// It acts, and records each action with its reason (the `healthStatus` query; sent to its webhooks):
// restarts a role's down or hung workers through the supervisor (never the whole stack), stops
// routing to an engine that does not answer, reports a stalled run and a low disk, and says when a
// problem clears. A problem is acted on and reported when it appears, not at every check.
import { condition, defineQuery, defineSignal, log, proxyActivities, setHandler } from '@temporalio/workflow';
import type { CapacityActivities, HealthAction, HealthReport } from '../activities/capacity';
import type { HealthConfig } from '../config/health';
import { CAPACITY_TASK_QUEUE } from '../config/task-queues';
import { continueOnCurrentBuild, newerBuildIsCurrent } from './versioning';
import type { HealthStatus } from './operation-types';
import { onOwnQueue } from './task-queue';

export type { HealthStatus } from './operation-types';

export { HEALTH_MANAGER_WORKFLOW_ID } from '../config/task-queues';

export const healthStatusQuery = defineQuery<HealthStatus>('healthStatus');
export const stopHealthManagerSignal = defineSignal('stopHealthManager');

const MAX_ACTIONS = 200;
const CHECKS_PER_EXECUTION = 500;

const act = proxyActivities<CapacityActivities>(onOwnQueue({
  taskQueue: CAPACITY_TASK_QUEUE,
  startToCloseTimeout: '2 minutes',
  heartbeatTimeout: '20 seconds',
  retry: { initialInterval: '1 second', maximumAttempts: 3 },
}));

const notifications = proxyActivities<CapacityActivities>(onOwnQueue({
  taskQueue: CAPACITY_TASK_QUEUE,
  startToCloseTimeout: '30 seconds',
  retry: { initialInterval: '2 seconds', backoffCoefficient: 2, maximumInterval: '1 minute', maximumAttempts: 6, nonRetryableErrorTypes: ['NotificationRejected', 'NotificationMisconfigured'] },
}));

/** The problems a report shows, by key, with what to say about each. Pure. */
export function problemsOf(report: HealthReport): Map<string, { action: string; target: string; reason: string; detail?: Record<string, unknown> }> {
  const out = new Map<string, { action: string; target: string; reason: string; detail?: Record<string, unknown> }>();
  for (const r of report.roles) {
    if (r.up < r.slots || r.hung.length) {
      const parts = [`${r.up} of ${r.slots} ${r.role} workers up`, ...(r.down.length ? [`down or starting: pid ${r.down.join(', ')}`] : []), ...(r.hung.length ? [`not polling: ${r.hung.join(', ')}`] : [])];
      out.set(`role:${r.role}`, { action: 'restart_workers', target: r.role, reason: parts.join('; '), detail: { down: r.down, hung: r.hung } });
    }
  }
  for (const e of report.engines) if (!e.ok) out.set(`engine:${e.engineId}`, { action: 'stop_routing', target: e.engineId, reason: `engine ${e.url} does not answer its probe: ${e.problem}` });
  for (const r of report.runs) {
    if (r.stalled) out.set(`run:${r.runId}`, { action: 'run_stalled', target: r.runId, reason: `no step for ${r.lastStepSecsAgo.toFixed(0)} s (median step ${r.medianStepSecs.toFixed(1)} s)` });
  }
  if (report.disk?.low) out.set('disk', { action: 'disk_low', target: report.disk.path, reason: `${report.disk.freeMb} MiB free in ${report.disk.path}` });
  return out;
}

const RECOVERED: Record<string, string> = { restart_workers: 'workers_recovered', run_stalled: 'run_recovered', disk_low: 'disk_recovered', stop_routing: 'engine_removed' };

export async function healthManager(config: HealthConfig, carried?: { actions: HealthAction[]; open: Array<[string, string]> }): Promise<HealthStatus> {
  const status: HealthStatus = { state: 'running', config, open: (carried?.open ?? []).map(([k]) => k), actions: carried?.actions ?? [] };
  let stopRequested = false;
  setHandler(healthStatusQuery, () => status);
  setHandler(stopHealthManagerSignal, () => void (stopRequested = true));
  const open = new Map<string, string>(carried?.open ?? []);

  const record = async (a: Omit<HealthAction, 'at'>) => {
    const action: HealthAction = { at: new Date().toISOString(), ...a };
    status.actions.push(action);
    if (status.actions.length > MAX_ACTIONS) status.actions.splice(0, status.actions.length - MAX_ACTIONS);
    if (config.webhooks.length) {
      await notifications.notifyHealth({ webhooks: config.webhooks, action }).catch((err: Error) => log.warn(`health notification not delivered: ${err.message}`));
    }
  };

  for (let checks = 0; checks < CHECKS_PER_EXECUTION && !stopRequested && !newerBuildIsCurrent(); checks++) {
    const report = await act.checkHealth({ stallFactor: config.stall_factor, minStallSecs: config.min_stall_secs, minFreeDiskMb: config.min_free_disk_mb, hungAfterSecs: config.hung_after_secs });
    status.lastReport = report;
    const problems = problemsOf(report);
    for (const [key, p] of problems) {
      if (p.action === 'restart_workers' && config.restart_workers) {
        // Every check while a role is short: relaunches what is gone, kills what hangs.
        const role = report.roles.find((r) => r.role === p.target)!;
        const done = await act.restartRoleWorkers({ role: p.target, hung: role.hung, graceMs: config.hung_after_secs * 1000 });
        if (!open.has(key) || done.relaunched.length || done.killed.length) await record({ ...p, detail: { ...p.detail, ...done } });
      } else if (p.action === 'stop_routing') {
        await act.stopRoutingToEngine({ engineId: p.target, reason: p.reason });
        await record(p);
      } else if (!open.has(key)) await record(p);
      open.set(key, p.action);
    }
    for (const [key, action] of [...open]) {
      if (problems.has(key)) continue;
      open.delete(key);
      await record({ action: RECOVERED[action] ?? 'recovered', target: key.slice(key.indexOf(':') + 1), reason: `${key} is healthy again` });
    }
    status.open = [...open.keys()];
    await condition(() => stopRequested, config.interval_secs * 1000);
  }
  if (stopRequested) {
    status.state = 'stopped';
    return status;
  }
  return continueOnCurrentBuild<typeof healthManager>()(config, { actions: status.actions.slice(-50), open: [...open] });
}
