// A run's row in `runs`, written by control.startRun: which run_id it gets (the config's, derived
// from the workflow id, or for a scheduled run `<run_id>-<scheduled time>`), the schedule that
// started it, and its dataset paths with {date} / {scheduled_at} filled (docs/schedules.md).
import type { RunConfig } from '../config/run-config';
import {
  fillDatePatterns,
  hashedRunIdFromWorkflowId,
  parseScheduledAt,
  RUN_ID_PATTERN,
  RUN_ID_RULE,
  runIdFromWorkflowId,
  scheduledRunId,
  type ScheduledStart,
} from '../config/scheduled-runs';
import { insertRun, scheduledRunOfWorkflow, scheduleRunCount } from '../store/runs';
import type { Queryable } from '../store/transfer-queue';

/** A scheduled start, checked: the schedule's id and when it meant the run to start. */
export interface ParsedScheduledStart {
  id: string;
  at?: Date;
}

/** Checks the workflow's `schedule` input; throws an Error naming the field. */
export function parseScheduledStart(schedule: ScheduledStart | undefined): ParsedScheduledStart | undefined {
  if (schedule === undefined || schedule === null) return undefined;
  if (typeof schedule.id !== 'string' || schedule.id.length === 0 || schedule.id.length > 1000) {
    throw new Error(`schedule.id must be the schedule's id (a non-empty string), got ${JSON.stringify(schedule.id)?.slice(0, 60)}`);
  }
  return { id: schedule.id, at: parseScheduledAt(schedule.scheduledAt) };
}

/** The config with {date} and {scheduled_at} filled in data.train and data.eval (re-parse it after). */
export function withDatePatterns(config: RunConfig, when: Date): RunConfig {
  if (!config.data) return config;
  const data = { ...config.data, train: fillDatePatterns(config.data.train, when) };
  if (data.eval !== undefined) data.eval = fillDatePatterns(data.eval, when);
  return { ...config, data };
}

export type Registration = { runId: string; config: RunConfig } | { problem: string; type: 'InvalidRunConfig' | 'DuplicateRunId' };

/** The run ids to try in order: a derived id whose readable form is taken falls back to its hashed form. */
async function candidateRunIds(db: Queryable, config: RunConfig, workflowId: string, scheduled: ParsedScheduledStart | undefined): Promise<string[]> {
  if (config.run_id === undefined) return [runIdFromWorkflowId(workflowId), hashedRunIdFromWorkflowId(workflowId)];
  if (!scheduled) return [config.run_id];
  // A retried start of the same scheduled workflow finds the run it registered.
  const registered = await scheduledRunOfWorkflow(db, workflowId, scheduled.id);
  if (registered !== undefined) return [registered];
  const counted = scheduled.at ? undefined : await scheduleRunCount(db, scheduled.id);
  return [scheduledRunId(config.run_id, scheduled.at, (counted ?? 0) + 1)];
}

/**
 * Registers the run: the first candidate run_id not owned by another workflow. The same workflow
 * asking again (a retried activity) gets its run back. A run_id owned by another workflow is a
 * DuplicateRunId when the config named it, since nothing but another run_id can fix that.
 */
export async function registerRun(db: Queryable, config: RunConfig, workflowId: string, scheduled: ParsedScheduledStart | undefined): Promise<Registration> {
  const candidates = await candidateRunIds(db, config, workflowId, scheduled);
  let owner = '';
  for (const runId of candidates) {
    if (!RUN_ID_PATTERN.test(runId)) return { problem: `invalid run config: run_id: must be ${RUN_ID_RULE}; got ${JSON.stringify(runId.slice(0, 80))}`, type: 'InvalidRunConfig' };
    const registered = { ...config, run_id: runId };
    const ownedBy = await insertRun(db, { runId, workflowId, config: registered, scheduleId: scheduled?.id ?? null, scheduledAt: scheduled?.at ?? null });
    if (ownedBy === workflowId) return { runId, config: registered };
    owner = ownedBy;
  }
  const runId = candidates[candidates.length - 1];
  return { problem: `run_id "${runId}" already belongs to workflow ${owner}: choose another run_id`, type: 'DuplicateRunId' };
}
