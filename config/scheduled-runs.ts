// Scheduled retraining, the pure part (docs/schedules.md): a valid run_id derived from any workflow
// id (a Temporal Schedule names its workflows `<name>-2026-12-01T06:35:35Z`), the run_id of a
// scheduled run whose config fixes one, the `schedule:<name>@latest` init_from form, and the
// `{date}` / `{scheduled_at}` patterns of dataset paths. Used by startRun and by the client.
import { createHash } from 'node:crypto';

/** A run_id (and a schedule name created by Relax): 1-64 of [A-Za-z0-9._-], starting with a letter or digit. */
export const RUN_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
export const RUN_ID_MAX_CHARS = 64;
/** How a run_id is described in errors. */
export const RUN_ID_RULE = '1-64 characters of letters, digits, ".", "_" or "-", starting with a letter or digit';

/** `schedule:<name>@latest`: the newest version of the schedule's most recent completed run. */
export const SCHEDULE_INIT_FROM = /^schedule:([A-Za-z0-9][A-Za-z0-9._-]{0,63})@latest$/;

/** What a scheduled start says about itself (the TemporalScheduledById / TemporalScheduledStartTime search attributes). */
export interface ScheduledStart {
  /** The schedule's id (its name). */
  id: string;
  /** When the schedule meant the run to start (ISO 8601). */
  scheduledAt?: string;
}

function shortHash(text: string): string {
  return createHash('sha256').update(text).digest('hex').slice(0, 8);
}

/** `text` cut to fit `max` characters with a short hash of `whole` appended (unique per `whole`). */
function withHash(text: string, whole: string, max = RUN_ID_MAX_CHARS): string {
  const hash = shortHash(whole);
  return `${text.slice(0, max - hash.length - 1).replace(/[._-]+$/, '')}-${hash}`;
}

/**
 * A valid run_id for a workflow id: characters outside [A-Za-z0-9._-] become "-", a leading
 * ".", "_" or "-" is dropped; an id longer than 64 characters keeps a prefix and a hash of the
 * whole id. `retrain-2026-12-01T06:35:35Z` -> `retrain-2026-12-01T06-35-35Z`.
 */
export function runIdFromWorkflowId(workflowId: string): string {
  if (RUN_ID_PATTERN.test(workflowId)) return workflowId;
  const cleaned = workflowId.replace(/[^A-Za-z0-9._-]/g, '-').replace(/^[._-]+/, '');
  if (cleaned.length === 0) return `run-${shortHash(workflowId)}`;
  return cleaned.length <= RUN_ID_MAX_CHARS ? cleaned : withHash(cleaned, workflowId);
}

/**
 * The same id with a hash of the workflow id: used when the readable derivation is already taken by
 * another workflow (two workflow ids that differ only in replaced characters).
 */
export function hashedRunIdFromWorkflowId(workflowId: string): string {
  return withHash(runIdFromWorkflowId(workflowId), workflowId);
}

/** `2026-12-01T06:35:35.123Z` -> `20261201T063535Z` (UTC, to the second). */
export function compactTimestamp(when: Date): string {
  return when.toISOString().replace(/\.\d+Z$/, 'Z').replace(/[-:]/g, '');
}

/**
 * The run_id of a scheduled run whose config names a fixed `run_id`: `<run_id>-<scheduled time>`
 * (`nightly-20261201T063535Z`), or `<run_id>-<counter>` when the start time is unknown; cut to 64
 * characters with a hash when needed. Every tick gets its own run, so none fails with DuplicateRunId.
 */
export function scheduledRunId(runId: string, scheduledAt: Date | undefined, counter: number): string {
  const suffix = scheduledAt ? compactTimestamp(scheduledAt) : String(counter);
  const id = `${runId}-${suffix}`;
  if (id.length <= RUN_ID_MAX_CHARS) return id;
  return `${withHash(runId, id, RUN_ID_MAX_CHARS - suffix.length - 1)}-${suffix}`;
}

/** The schedule name of a `schedule:<name>@latest` spec; undefined for any other spec. */
export function scheduleInitFrom(spec: string | undefined): string | undefined {
  return spec === undefined ? undefined : SCHEDULE_INIT_FROM.exec(spec)?.[1];
}

/** A problem with an init_from that starts with "schedule:" but is not `schedule:<name>@latest`. */
export function scheduleInitFromProblem(spec: string | undefined): string | undefined {
  if (spec === undefined || !spec.startsWith('schedule:') || SCHEDULE_INIT_FROM.test(spec)) return undefined;
  return `"${spec.slice(0, 80)}" is not a schedule reference: write schedule:<name>@latest (the name: ${RUN_ID_RULE}; only @latest is supported)`;
}

/** The patterns a dataset path may hold, filled from the scheduled start time (or the run's start time). */
export const DATE_PATTERNS = ['{date}', '{scheduled_at}'] as const;

/**
 * Fills `{date}` (UTC, YYYY-MM-DD) and `{scheduled_at}` (UTC, YYYY-MM-DDTHH:MM:SSZ) in a path.
 * `data/{date}.jsonl` at 2026-12-01T06:35:35Z -> `data/2026-12-01.jsonl`.
 */
export function fillDatePatterns(text: string, when: Date): string {
  const iso = when.toISOString().replace(/\.\d+Z$/, 'Z');
  return text.replaceAll('{date}', iso.slice(0, 10)).replaceAll('{scheduled_at}', iso);
}

/** A scheduled start's time as a Date (undefined when absent); throws naming the field when it is not a date. */
export function parseScheduledAt(scheduledAt: string | undefined): Date | undefined {
  if (scheduledAt === undefined) return undefined;
  const when = new Date(scheduledAt);
  if (Number.isNaN(when.getTime())) throw new Error(`schedule.scheduledAt: not a date: ${JSON.stringify(scheduledAt.slice(0, 60))}`);
  return when;
}
