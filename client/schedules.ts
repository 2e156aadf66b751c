// Scheduled retraining through Temporal Schedules (docs/schedules.md): create a schedule whose
// action starts a `trainingRun` workflow on the control queue with one run config, and list,
// describe, pause, unpause, trigger and delete schedules. The config is validated before anything
// is sent; bad options throw ScheduleOptionError naming the option and the fix.
import { ScheduleNotFoundError, ScheduleOverlapPolicy, type Client, type ScheduleDescription, type ScheduleHandle, type ScheduleSpec } from '@temporalio/client';
import ms, { type StringValue } from 'ms';
import { parseRunConfig, type RunConfigInput } from '../config/run-config';
import { RUN_ID_PATTERN, RUN_ID_RULE } from '../config/scheduled-runs';
import { roleTaskQueue } from '../config/task-queues';
import { taskQueuePrefix } from '../config/environment-temporal';
import { runUserMetadata } from './run-metadata';

/** The overlap policies, as the CLI spells them. */
export const OVERLAP_POLICIES = ['skip', 'buffer_one', 'buffer_all', 'cancel_other', 'terminate_other', 'allow_all'] as const;
export type OverlapPolicy = (typeof OVERLAP_POLICIES)[number];

/** A bad schedule option (the CLI turns it into a usage error, exit 2). */
export class ScheduleOptionError extends Error {
  constructor(
    readonly option: string,
    message: string,
  ) {
    super(`${option}: ${message}`);
    this.name = 'ScheduleOptionError';
  }
}

export interface CreateScheduleOptions {
  /** The schedule's id; its runs' workflow ids are `<name>-<scheduled time>`. Same rule as a run_id. */
  name: string;
  /** The run config each tick starts (validated with parseRunConfig first). */
  config: RunConfigInput;
  /** A cron expression ("0 6 * * *", "@daily"); give this or `every`. */
  cron?: string;
  /** An interval ("6h", "30 minutes", "5s"); give this or `cron`. */
  every?: string;
  /** What a tick does while the previous run still runs; default "skip". */
  overlap?: OverlapPolicy;
  /** How late a missed tick (server down) may still start; Temporal's default is 1 year. */
  catchupWindow?: string;
  /** Pause the schedule when one of its runs fails. */
  pauseOnFailure?: boolean;
  /** Create it paused. */
  paused?: boolean;
  /** A note shown with the schedule's state (e.g. why it is paused). */
  note?: string;
}

/** What `list` answers for each schedule. */
export interface ScheduleSummaryView {
  name: string;
  workflowType?: string;
  paused: boolean;
  note?: string;
  spec: string;
  nextRuns: string[];
  recentRuns: Array<{ workflowId: string; scheduledAt: string }>;
}

/** What `describe` answers. */
export interface ScheduleDescriptionView extends ScheduleSummaryView {
  overlap: string;
  catchupWindowMs: number;
  pauseOnFailure: boolean;
  actionsTaken: number;
  skippedOverlap: number;
  missedCatchupWindow: number;
  running: string[];
  config?: unknown;
}

/** A duration option in milliseconds ("5s", "6h", "30 minutes", or a number of ms). */
export function parseScheduleDuration(option: string, value: string): number {
  let millis: number;
  try {
    millis = /^\d+$/.test(value) ? Number(value) : ms(value as StringValue);
  } catch {
    millis = NaN;
  }
  if (!Number.isFinite(millis) || millis < 1000) throw new ScheduleOptionError(option, `must be a duration of at least 1s like "30s", "10m", "6h" or "1d", got ${JSON.stringify(value)}`);
  return millis;
}

export function checkScheduleName(name: string): void {
  if (!RUN_ID_PATTERN.test(name)) throw new ScheduleOptionError('name', `must be ${RUN_ID_RULE}, got ${JSON.stringify(name.slice(0, 80))}`);
}

function overlapPolicy(overlap: string | undefined): ScheduleOverlapPolicy {
  const value = overlap ?? 'skip';
  if (!(OVERLAP_POLICIES as readonly string[]).includes(value)) throw new ScheduleOptionError('overlap', `must be one of ${OVERLAP_POLICIES.join(', ')}, got ${JSON.stringify(value)}`);
  return value.toUpperCase() as ScheduleOverlapPolicy;
}

function scheduleSpec(options: CreateScheduleOptions): ScheduleSpec {
  if ((options.cron === undefined) === (options.every === undefined)) {
    throw new ScheduleOptionError('cron/every', 'give exactly one of --cron <expr> (e.g. "0 6 * * *") or --every <duration> (e.g. "6h")');
  }
  if (options.every !== undefined) return { intervals: [{ every: parseScheduleDuration('every', options.every) }] };
  const cron = (options.cron as string).trim();
  if (cron.length === 0 || cron.length > 200) throw new ScheduleOptionError('cron', 'must be a cron expression like "0 6 * * *" (minute hour day month weekday) or "@daily"');
  return { cronExpressions: [cron] };
}

function describeSpec(spec: ScheduleDescription['spec'] | undefined): string {
  if (!spec) return '';
  const parts: string[] = [];
  for (const i of spec.intervals ?? []) parts.push(`every ${Math.round((typeof i.every === 'number' ? i.every : ms(i.every)) / 1000)}s`);
  for (const c of spec.calendars ?? []) parts.push(`calendar ${JSON.stringify(c)}`);
  return parts.join(', ');
}

/** Creates a schedule; throws RunConfigError for an invalid config and ScheduleOptionError for a bad option. */
export async function createSchedule(client: Client, options: CreateScheduleOptions): Promise<ScheduleHandle> {
  checkScheduleName(options.name);
  const parsed = parseRunConfig(options.config);
  const spec = scheduleSpec(options);
  const overlap = overlapPolicy(options.overlap);
  const catchupWindow = options.catchupWindow === undefined ? undefined : parseScheduleDuration('catchup-window', options.catchupWindow);
  try {
    return await client.schedule.create({
      scheduleId: options.name,
      spec,
      action: { type: 'startWorkflow', workflowType: 'trainingRun', taskQueue: roleTaskQueue('control', taskQueuePrefix()), workflowId: options.name, args: [options.config], ...runUserMetadata(parsed) },
      policies: { overlap, ...(catchupWindow !== undefined ? { catchupWindow } : {}), pauseOnFailure: options.pauseOnFailure === true },
      state: { paused: options.paused === true, ...(options.note !== undefined ? { note: options.note } : {}) },
      memo: { relaxSpec: options.cron !== undefined ? `cron ${options.cron}` : `every ${options.every}` },
    });
  } catch (err) {
    const message = (err as Error).message;
    if (/already (exists|registered|running)/i.test(message)) throw new ScheduleOptionError('name', `a schedule named "${options.name}" already exists: delete it first or choose another name`);
    if (options.cron !== undefined && /cron|invalid/i.test(message)) throw new ScheduleOptionError('cron', `the server refused ${JSON.stringify(options.cron)}: ${message}`);
    throw err;
  }
}

function view(name: string, d: ScheduleDescription): ScheduleDescriptionView {
  const action = d.action;
  return {
    name,
    workflowType: action.workflowType,
    paused: d.state.paused,
    ...(d.state.note ? { note: d.state.note } : {}),
    spec: typeof d.memo?.relaxSpec === 'string' ? d.memo.relaxSpec : describeSpec(d.spec),
    nextRuns: d.info.nextActionTimes.slice(0, 3).map((t) => t.toISOString()),
    recentRuns: d.info.recentActions.slice(-5).map((a) => ({ workflowId: a.action.workflow.workflowId, scheduledAt: a.scheduledAt.toISOString() })),
    overlap: (d.policies.overlap ?? 'SKIP').toLowerCase(),
    catchupWindowMs: d.policies.catchupWindow,
    pauseOnFailure: d.policies.pauseOnFailure,
    actionsTaken: d.info.numActionsTaken,
    skippedOverlap: d.info.numActionsSkippedOverlap,
    missedCatchupWindow: d.info.numActionsMissedCatchupWindow,
    running: d.info.runningActions.map((a) => a.workflow.workflowId),
    config: action.args?.[0],
  };
}

/** A schedule's handle, or a ScheduleOptionError naming it when there is no such schedule. */
async function existing(client: Client, name: string): Promise<{ handle: ScheduleHandle; description: ScheduleDescription }> {
  const handle = client.schedule.getHandle(name);
  try {
    return { handle, description: await handle.describe() };
  } catch (err) {
    if (err instanceof ScheduleNotFoundError) throw new ScheduleOptionError('name', `no schedule named "${name}" (see \`relax schedule list\`)`);
    throw err;
  }
}

export async function describeSchedule(client: Client, name: string): Promise<ScheduleDescriptionView> {
  return view(name, (await existing(client, name)).description);
}

/** Every schedule in the namespace (those that start trainingRun first). */
export async function listSchedules(client: Client): Promise<ScheduleSummaryView[]> {
  const out: ScheduleSummaryView[] = [];
  for await (const s of client.schedule.list()) {
    out.push({
      name: s.scheduleId,
      workflowType: s.action?.workflowType,
      paused: s.state.paused,
      ...(s.state.note ? { note: s.state.note } : {}),
      spec: describeSpec(s.spec),
      nextRuns: s.info.nextActionTimes.slice(0, 3).map((t) => t.toISOString()),
      recentRuns: s.info.recentActions.slice(-5).map((a) => ({ workflowId: a.action.workflow.workflowId, scheduledAt: a.scheduledAt.toISOString() })),
    });
  }
  return out.sort((a, b) => Number(b.workflowType === 'trainingRun') - Number(a.workflowType === 'trainingRun') || a.name.localeCompare(b.name));
}

export async function pauseSchedule(client: Client, name: string, note?: string): Promise<void> {
  await (await existing(client, name)).handle.pause(note ?? 'paused with relax');
}

export async function unpauseSchedule(client: Client, name: string, note?: string): Promise<void> {
  await (await existing(client, name)).handle.unpause(note ?? 'unpaused with relax');
}

/** Starts a run now (under the schedule's overlap policy unless `overlap` is given). */
export async function triggerSchedule(client: Client, name: string, overlap?: OverlapPolicy): Promise<void> {
  const { handle } = await existing(client, name);
  await handle.trigger(overlap === undefined ? undefined : overlapPolicy(overlap));
}

/** Deletes the schedule; its runs (running or finished) are not touched. */
export async function deleteSchedule(client: Client, name: string): Promise<void> {
  await (await existing(client, name)).handle.delete();
}

/** The same functions bound to one client: `relaxClient.schedules.create({...})`. */
export class RelaxSchedules {
  constructor(private readonly client: Client) {}
  create(options: CreateScheduleOptions): Promise<ScheduleHandle> {
    return createSchedule(this.client, options);
  }
  list(): Promise<ScheduleSummaryView[]> {
    return listSchedules(this.client);
  }
  describe(name: string): Promise<ScheduleDescriptionView> {
    return describeSchedule(this.client, name);
  }
  pause(name: string, note?: string): Promise<void> {
    return pauseSchedule(this.client, name, note);
  }
  unpause(name: string, note?: string): Promise<void> {
    return unpauseSchedule(this.client, name, note);
  }
  trigger(name: string, overlap?: OverlapPolicy): Promise<void> {
    return triggerSchedule(this.client, name, overlap);
  }
  delete(name: string): Promise<void> {
    return deleteSchedule(this.client, name);
  }
}
