// The rollout autoscaler: one long-running workflow (id `<prefix>-rollout-autoscaler`, off unless
// started) that reads the rollout queue's backlog every interval (Temporal's task-queue statistics,
// with the stages' busy time for the record), and scales between min_engines and max_engines
// through the same scaling workflows the control API starts (as child workflows under their one id,
// so it never races an operation started by hand). A decision needs its condition to hold over the
// whole sustain window and respects the cooldowns; every decision and every change of mind is
// recorded with its reason (the `autoscalerStatus` query). It continues as new every few hundred
// observations, carrying its recent decisions.
import { ApplicationFailure, defineQuery, defineSignal, executeChild, proxyActivities, setHandler, sleep } from '@temporalio/workflow';
import { WorkflowExecutionAlreadyStartedError } from '@temporalio/common';
import type { CapacityActivities, RolloutObservation } from '../activities/capacity';
import type { AutoscalerConfig } from '../config/autoscaler';
import { CAPACITY_TASK_QUEUE, roleTaskQueue } from '../config/task-queues';
import type { rolloutScaleIn, rolloutScaleOut } from './rollout-scaling';
import { continueOnCurrentBuild, newerBuildIsCurrent } from './versioning';
import type { AutoscalerDecision, AutoscalerStatus } from './operation-types';
import { onOwnQueue, ownServiceWorkflowId, ownTaskQueuePrefix } from './task-queue';

export type { AutoscalerDecision, AutoscalerStatus } from './operation-types';

export const autoscalerStatusQuery = defineQuery<AutoscalerStatus>('autoscalerStatus');
export const stopAutoscalerSignal = defineSignal('stopAutoscaler');

const MAX_DECISIONS = 200;
const OBSERVATIONS_PER_EXECUTION = 400;

interface Sample { atMs: number; backlogPerEngine: number }

/** Mean backlog per engine of the samples within the last `secs` (undefined until the window is covered). */
export function windowMean(samples: Sample[], nowMs: number, secs: number): number | undefined {
  const from = nowMs - secs * 1000;
  if (!samples.length || samples[0].atMs > from) return secs === 0 && samples.length ? samples[samples.length - 1].backlogPerEngine : undefined;
  const inWindow = samples.filter((s) => s.atMs >= from);
  const used = inWindow.length ? inWindow : [samples[samples.length - 1]];
  return used.reduce((a, s) => a + s.backlogPerEngine, 0) / used.length;
}

/**
 * The scaling decision for this moment: scale out when the mean backlog per engine over the
 * scale-out window reaches its threshold, scale in when the mean over the scale-in window is at or
 * below its threshold, within [min_engines, max_engines] and outside the cooldowns. Pure.
 */
export function decideScaling(
  config: AutoscalerConfig,
  samples: Sample[],
  engines: number,
  nowMs: number,
  last: { scaleOutAtMs?: number; scaleInAtMs?: number },
): Omit<AutoscalerDecision, 'at'> {
  const out = windowMean(samples, nowMs, config.scale_out.sustain_secs);
  const inn = windowMean(samples, nowMs, config.scale_in.sustain_secs);
  const since = (t?: number) => (t === undefined ? Infinity : (nowMs - t) / 1000);
  const fmt = (x: number) => x.toFixed(2);
  if (engines < config.min_engines) return { action: 'scale_out', engines, target: config.min_engines, reason: `${engines} engines, below min_engines ${config.min_engines}` };
  if (engines > config.max_engines) return { action: 'scale_in', engines, target: config.max_engines, reason: `${engines} engines, above max_engines ${config.max_engines}` };
  if (out !== undefined && out >= config.scale_out.backlog_per_engine) {
    const why = `mean backlog ${fmt(out)} per engine over ${config.scale_out.sustain_secs}s >= ${config.scale_out.backlog_per_engine}`;
    if (engines >= config.max_engines) return { action: 'hold', engines, reason: `${why}, but at max_engines ${config.max_engines}` };
    const cool = since(last.scaleOutAtMs);
    if (cool < config.cooldown.scale_out_secs) return { action: 'hold', engines, reason: `${why}, but in the scale-out cooldown (${fmt(cool)}s of ${config.cooldown.scale_out_secs}s)` };
    return { action: 'scale_out', engines, target: Math.min(config.max_engines, engines + config.scale_out.step), reason: why };
  }
  if (inn !== undefined && inn <= config.scale_in.backlog_per_engine) {
    const why = `mean backlog ${fmt(inn)} per engine over ${config.scale_in.sustain_secs}s <= ${config.scale_in.backlog_per_engine}`;
    if (engines <= config.min_engines) return { action: 'hold', engines, reason: `${why}, at min_engines ${config.min_engines}` };
    const cool = Math.min(since(last.scaleInAtMs), since(last.scaleOutAtMs));
    if (cool < config.cooldown.scale_in_secs) return { action: 'hold', engines, reason: `${why}, but in the scale-in cooldown (${fmt(cool)}s of ${config.cooldown.scale_in_secs}s)` };
    return { action: 'scale_in', engines, target: Math.max(config.min_engines, engines - config.scale_in.step), reason: why };
  }
  return { action: 'hold', engines, reason: 'backlog within thresholds' };
}

interface Carried {
  decisions: AutoscalerDecision[];
  lastScaleOutAt?: string;
  lastScaleInAt?: string;
}

/** Runs the scaling operation as a child under the one scaling id; says how it ended. */
async function scale(decision: Omit<AutoscalerDecision, 'at'>): Promise<string> {
  const child = decision.action === 'scale_out' ? ('rolloutScaleOut' as const) : ('rolloutScaleIn' as const);
  try {
    const op = await executeChild<typeof rolloutScaleOut | typeof rolloutScaleIn>(child, {
      workflowId: ownServiceWorkflowId('rollout-scaling'),
      taskQueue: roleTaskQueue('control', ownTaskQueuePrefix()),
      args: [{ num_replicas: decision.target! }],
      // A stopped autoscaler lets a scaling operation it started finish (never half-created engines).
      parentClosePolicy: 'ABANDON',
    });
    return `${op.status}${op.engines.length ? ` (${op.engines.join(', ')})` : ''}`;
  } catch (err) {
    if (err instanceof WorkflowExecutionAlreadyStartedError) return 'skipped: another scaling operation is running';
    return `failed: ${(err as Error).cause instanceof Error ? ((err as Error).cause as Error).message : (err as Error).message}`;
  }
}

export async function rolloutAutoscaler(config: AutoscalerConfig, carried: Carried = { decisions: [] }): Promise<AutoscalerStatus> {
  if (!(config.min_engines >= 1 && config.max_engines >= config.min_engines)) {
    throw ApplicationFailure.nonRetryable(`autoscaler config: need 1 <= min_engines <= max_engines, got ${config.min_engines}..${config.max_engines}`, 'InvalidAutoscalerConfig');
  }
  const status: AutoscalerStatus = { state: 'running', config, decisions: carried.decisions, ...(carried.lastScaleOutAt ? { lastScaleOutAt: carried.lastScaleOutAt } : {}), ...(carried.lastScaleInAt ? { lastScaleInAt: carried.lastScaleInAt } : {}) };
  let stop = false;
  setHandler(autoscalerStatusQuery, () => status);
  setHandler(stopAutoscalerSignal, () => void (stop = true));
  const act = proxyActivities<CapacityActivities>(onOwnQueue({ taskQueue: CAPACITY_TASK_QUEUE, startToCloseTimeout: '30 seconds', retry: { maximumAttempts: 5 } }));
  const keepSecs = Math.max(config.scale_out.sustain_secs, config.scale_in.sustain_secs) + 2 * config.interval_secs;
  const samples: Sample[] = [];
  const record = (d: AutoscalerDecision) => {
    status.decisions.push(d);
    if (status.decisions.length > MAX_DECISIONS) status.decisions.splice(0, status.decisions.length - MAX_DECISIONS);
  };
  for (let i = 0; i < OBSERVATIONS_PER_EXECUTION && !stop && !newerBuildIsCurrent(); i++) {
    const obs = await act.observeRollout({ windowSecs: Math.max(config.interval_secs, config.scale_out.sustain_secs) });
    const now = Date.now();
    status.lastObservation = obs;
    samples.push({ atMs: now, backlogPerEngine: obs.backlog / Math.max(1, obs.engines) });
    while (samples.length && samples[0].atMs < now - keepSecs * 1000) samples.shift();
    status.meanBacklogPerEngine = { scaleOutWindow: windowMean(samples, now, config.scale_out.sustain_secs) ?? NaN, scaleInWindow: windowMean(samples, now, config.scale_in.sustain_secs) ?? NaN };
    const decision = decideScaling(config, samples, obs.engines, now, { scaleOutAtMs: status.lastScaleOutAt ? Date.parse(status.lastScaleOutAt) : undefined, scaleInAtMs: status.lastScaleInAt ? Date.parse(status.lastScaleInAt) : undefined });
    const at = new Date(now).toISOString();
    if (decision.action === 'hold') {
      // A hold is recorded when its reason changes, not every interval.
      const previous = status.decisions[status.decisions.length - 1];
      const gist = (reason: string) => reason.replace(/[\d.]+/g, '#');
      if (!previous || previous.action !== 'hold' || gist(previous.reason) !== gist(decision.reason)) record({ at, ...decision });
    } else {
      const outcome = await scale(decision);
      record({ at, ...decision, outcome });
      if (!outcome.startsWith('skipped') && !outcome.startsWith('failed')) {
        if (decision.action === 'scale_out') status.lastScaleOutAt = new Date().toISOString();
        else status.lastScaleInAt = new Date().toISOString();
      }
    }
    await sleep(config.interval_secs * 1000);
  }
  if (stop) {
    status.state = 'stopped';
    return status;
  }
  return continueOnCurrentBuild<typeof rolloutAutoscaler>()(config, { decisions: status.decisions.slice(-50), ...(status.lastScaleOutAt ? { lastScaleOutAt: status.lastScaleOutAt } : {}), ...(status.lastScaleInAt ? { lastScaleInAt: status.lastScaleInAt } : {}) });
}
