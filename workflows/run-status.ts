// What a running training run shows outside itself: the current-details line of the Web UI's run
// page (every step), the memo's `progress` and the search attributes the workflow list filters on
// (at start, at each evaluation, on a status change, every few steps and at the end), and the
// answer of the `progress` query (small by default, the curves on request).
import { setCurrentDetails, upsertMemo, upsertSearchAttributes, workflowInfo } from '@temporalio/workflow';
import type { RunConfig } from '../config/run-config';
import { formatDuration } from './duration';
import { RelaxAccuracyKey, RelaxModelKey, RelaxStatusKey, RelaxStepKey, RelaxTaskKey, type ProgressQueryOptions, type TrainingProgress } from './definitions';

/** Memo and search attributes are commands in the history: refreshed at most every this many steps between events. */
const VISIBILITY_EVERY_STEPS = 10;

export interface Visibility {
  published?: { step: number; status: string; accuracy?: number };
  /** This execution's first step start (workflow time) and the steps it has done, for the pace and ETA. */
  paceFrom?: number;
  paceSteps: number;
}

/** "step 12/100 · v12 · reward 0.41 · held-out 63.0% (step 10) · 95 samples/s · ETA 1m20s" */
export function detailsLine(p: TrainingProgress): string {
  const parts = [`${p.status}`, `step ${p.step}/${p.totalSteps || '?'}`, `v${p.policyVersion}`];
  if (p.lastReward !== undefined) parts.push(`reward ${p.lastReward.toFixed(3)}`);
  if (p.lastAccuracy !== undefined) parts.push(`held-out ${(p.lastAccuracy * 100).toFixed(1)}% (step ${p.lastEvalStep ?? '?'})`);
  if (p.samplesPerSecond !== undefined) parts.push(`${p.samplesPerSecond.toFixed(0)} samples/s`);
  if (p.etaSeconds !== undefined && p.status === 'running') parts.push(`ETA ${formatDuration(p.etaSeconds)}`);
  if (p.skippedSteps) parts.push(`${p.skippedSteps} skipped`);
  return parts.join(' · ');
}

/** The query's answer: everything but the curves, unless asked. */
export function progressView(p: TrainingProgress, options?: ProgressQueryOptions): TrainingProgress {
  if (options?.curves) return p;
  const { rewards: _rewards, accuracies: _accuracies, ...small } = p;
  return small;
}

/** Counts a finished step towards the pace and refreshes the ETA. */
export function recordPace(v: Visibility, p: TrainingProgress, stepStarted: number): void {
  v.paceFrom ??= stepStarted;
  v.paceSteps++;
  p.stepSeconds = (Date.now() - v.paceFrom) / 1000 / v.paceSteps;
  p.etaSeconds = p.stepSeconds * Math.max(0, p.totalSteps - p.step);
}

/**
 * Refreshes the current details (always: not a command) and, when something worth it changed
 * (status, a new accuracy, VISIBILITY_EVERY_STEPS steps) or `force`, the memo and search attributes.
 */
export function publishProgress(v: Visibility, p: TrainingProgress, config: RunConfig | undefined, force = false): void {
  setCurrentDetails(detailsLine(p));
  const last = v.published;
  const due = force || !last || last.status !== p.status || last.accuracy !== p.lastAccuracy || p.step - last.step >= VISIBILITY_EVERY_STEPS;
  if (!due) return;
  v.published = { step: p.step, status: p.status, accuracy: p.lastAccuracy };
  upsertMemo({
    progress: {
      status: p.status,
      step: p.step,
      totalSteps: p.totalSteps,
      policyVersion: p.policyVersion,
      lastReward: p.lastReward ?? null,
      lastAccuracy: p.lastAccuracy ?? null,
      lastEvalStep: p.lastEvalStep ?? null,
      etaSeconds: p.etaSeconds === undefined ? null : Math.round(p.etaSeconds),
      updatedAt: new Date(Date.now()).toISOString(),
    },
  });
  const attributes: Parameters<typeof upsertSearchAttributes>[0] = [
    { key: RelaxStatusKey, value: p.status },
    { key: RelaxStepKey, value: p.step },
  ];
  if (p.lastAccuracy !== undefined) attributes.push({ key: RelaxAccuracyKey, value: p.lastAccuracy });
  if (config) {
    attributes.push({ key: RelaxTaskKey, value: config.task });
    attributes.push({ key: RelaxModelKey, value: config.model.from ?? 'tiny-gpt' });
  }
  upsertSearchAttributes(attributes);
}

/** The schedule that started this execution, from the search attributes Temporal sets on scheduled workflows. */
export function scheduleOfThisRun(): { id: string; scheduledAt?: string } | undefined {
  const attributes = workflowInfo().searchAttributes ?? {};
  const id = attributes.TemporalScheduledById?.[0];
  if (typeof id !== 'string') return undefined;
  const at = attributes.TemporalScheduledStartTime?.[0];
  return { id, ...(at !== undefined ? { scheduledAt: at instanceof Date ? at.toISOString() : String(at) } : {}) };
}
