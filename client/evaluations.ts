// Sampled evaluations from the client (docs/algorithms.md, "Evaluation"): start an `evaluateRun`
// workflow (k samples per prompt at a temperature against one version of a run; pass@1, pass@k,
// maj@k, mean@k) and wait for its result, or create a Temporal Schedule that evaluates a run's
// newest version on an interval or cron, skipping versions already evaluated with its settings.
// Inputs are checked before anything is sent: a bad one throws EvaluationInputError naming the field.
import { ScheduleOverlapPolicy, type Client, type ScheduleHandle, type WorkflowHandle } from '@temporalio/client';
import { parseEvaluationInput, type EvaluationInput, type EvaluationResult } from '../config/evaluation';
import { roleTaskQueue } from '../config/task-queues';
import { taskQueuePrefix } from '../config/environment-temporal';
import { checkScheduleName, parseScheduleDuration, ScheduleOptionError } from './schedules';

export { EvaluationInputError, parseEvaluationRef, type EvaluationInput, type EvaluationResult } from '../config/evaluation';

export type EvaluationHandle = WorkflowHandle<(input: EvaluationInput) => Promise<EvaluationResult>>;

/** The Web UI's one-line summary of an evaluation. */
function summaryOf(input: EvaluationInput): string {
  const r = parseEvaluationInput(input);
  return `evaluate ${r.runId}@${r.version} · ${r.k} samples/prompt · T=${r.temperature}${r.dataset ? ` · ${r.dataset}` : ' · held-out'}`;
}

/** Starts an evaluateRun workflow (id `workflowId`, else `eval-<run>-<time>`); throws EvaluationInputError before sending a bad input. */
export async function startEvaluation(client: Client, input: EvaluationInput, options: { workflowId?: string } = {}): Promise<EvaluationHandle> {
  const staticSummary = summaryOf(input);
  const workflowId = options.workflowId ?? `eval-${input.run_id}-${Date.now().toString(36)}`;
  return client.workflow.start('evaluateRun', { taskQueue: roleTaskQueue('control', taskQueuePrefix()), workflowId, args: [input], staticSummary });
}

/** Runs one evaluation to its end and returns its scores (its `skipped` says why nothing was evaluated). */
export async function evaluate(client: Client, input: EvaluationInput, options: { workflowId?: string } = {}): Promise<EvaluationResult> {
  return (await startEvaluation(client, input, options)).result();
}

export interface EvaluationScheduleOptions {
  /** The schedule's id (same rule as a run_id); its evaluations are workflows `<name>-<scheduled time>`. */
  name: string;
  /** What each tick evaluates; `version` is "unevaluated" unless given. */
  input: EvaluationInput;
  /** An interval ("30s", "10m"); give this or `cron`. */
  every?: string;
  /** A cron expression; give this or `every`. */
  cron?: string;
  paused?: boolean;
}

/**
 * A schedule that starts an evaluation of the run's newest version on each tick: with version
 * "unevaluated" (the default) a tick whose newest version was already evaluated with these settings
 * records nothing, so each new version is evaluated once. Ticks never overlap (overlap "skip").
 */
export async function createEvaluationSchedule(client: Client, options: EvaluationScheduleOptions): Promise<ScheduleHandle> {
  checkScheduleName(options.name);
  const input: EvaluationInput = { version: 'unevaluated', ...options.input };
  const staticSummary = summaryOf(input);
  if ((options.cron === undefined) === (options.every === undefined)) throw new ScheduleOptionError('cron/every', 'give exactly one of --cron <expr> or --every <duration> (e.g. "1m")');
  const spec = options.every !== undefined ? { intervals: [{ every: parseScheduleDuration('every', options.every) }] } : { cronExpressions: [options.cron as string] };
  return client.schedule.create({
    scheduleId: options.name,
    spec,
    action: { type: 'startWorkflow', workflowType: 'evaluateRun', taskQueue: roleTaskQueue('control', taskQueuePrefix()), workflowId: options.name, args: [input], staticSummary },
    policies: { overlap: ScheduleOverlapPolicy.SKIP },
    state: { paused: options.paused === true },
    memo: { relaxSpec: options.cron !== undefined ? `cron ${options.cron}` : `every ${options.every}` },
  });
}
