// Control activities, hosted by the control worker next to the workflows: a run's start (its
// config validated, its user modules and algorithm checked, the run registered) and its end.
import { ApplicationFailure, Context } from '@temporalio/activity';
import type { Hyperparameters } from '../config/hyperparameters';
import { parseRunConfig, RunConfigError, type RunConfig } from '../config/run-config';
import { scheduleInitFromProblem, type ScheduledStart } from '../config/scheduled-runs';
import { nativeTfjsAvailable } from '../engines/backends';
import { checkTrainerFitsMemory, checkTrainerFitsWasm } from '../training/options';
import { loadRunPolicy, RunModelError } from '../training/policy-model';

import { checkAgentCommandAllowed, checkRunPathsAllowed, NotAllowedError } from '../envs/module-policy';
import { loadUserExport, UserModuleError, validateRewardConfig } from '../envs/user-modules';
import { AlgorithmConfigError } from '../training/advantages';
import { resolveUpdateRule } from '../training/step';
import { hyperparametersRecorded } from '../store/events';
import { setRunStatus } from '../store/runs';
import { recordStageEvent, type WorkerContext } from './context';
import { parseScheduledStart, registerRun, withDatePatterns } from './run-registration';

export interface StartRunInput {
  input: unknown;
  workflowId: string;
  /** Set by the workflow when a Temporal Schedule started it (TemporalScheduledById / TemporalScheduledStartTime). */
  schedule?: ScheduledStart;
}

export const INVALID_RUN_CONFIG = 'InvalidRunConfig';
export const NOT_ALLOWED = 'NotAllowed';

/** A module or agent command this worker's allow-list refuses: non-retryable, naming the setting that decides. */
function notAllowed(err: NotAllowedError): ApplicationFailure {
  return ApplicationFailure.create({ message: `not allowed by ${err.setting}: ${err.message}`, type: NOT_ALLOWED, nonRetryable: true, details: [{ setting: err.setting }] });
}

function invalid(field: string, message: string): ApplicationFailure {
  return ApplicationFailure.create({ message: `invalid run config: ${field}: ${message}`, type: INVALID_RUN_CONFIG, nonRetryable: true });
}

function parsed(input: unknown): RunConfig {
  try {
    return parseRunConfig(input);
  } catch (err) {
    if (err instanceof RunConfigError) throw ApplicationFailure.create({ message: err.message, type: INVALID_RUN_CONFIG, nonRetryable: true, details: err.problems });
    throw err;
  }
}

/**
 * The task, the user modules and the algorithm a config names all load and fit together, and this
 * worker's allow-list lets the run use them. User modules load in sandbox threads (envs/sandbox.ts),
 * never in this worker's event loop: one that blocks while loading fails its own run only.
 */
async function checkWhatItNames(config: RunConfig): Promise<void> {
  try {
    checkAgentCommandAllowed(config.rollout.agent?.command);
    checkRunPathsAllowed(config);
  } catch (err) {
    if (err instanceof NotAllowedError) throw notAllowed(err);
    throw err;
  }
  let task;
  try {
    // The model and data files are read here, so a run never starts on ones it cannot use.
    const policy = await loadRunPolicy(config);
    task = policy.task;
    if (!nativeTfjsAvailable()) checkTrainerFitsWasm(config, policy.model);
    checkTrainerFitsMemory(config, policy.model);
  } catch (err) {
    if (err instanceof NotAllowedError) throw notAllowed(err);
    if (err instanceof RunModelError || (err instanceof Error && err.message.startsWith('train.micro_batch:'))) throw ApplicationFailure.create({ message: `invalid run config: ${(err as Error).message}`, type: INVALID_RUN_CONFIG, nonRetryable: true });
    throw invalid('task', (err as Error).message);
  }
  for (const [field, check] of [
    ['reward', () => validateRewardConfig(config)],
    ['env', () => (config.env.module ? loadUserExport('env', config.env.module, config.env.export) : undefined)],
    ['generate', () => (config.generate.module ? loadUserExport('generate', config.generate.module, config.generate.export) : undefined)],
    ['algorithm', () => resolveUpdateRule(config.algorithm, { maxCompletionTokens: config.rollout.max_new_tokens })],
  ] as const) {
    try {
      await check();
    } catch (err) {
      if (err instanceof NotAllowedError) throw notAllowed(err);
      if (err instanceof UserModuleError) throw invalid(field, err.message);
      if (err instanceof AlgorithmConfigError) throw invalid(err.field, err.message.slice(err.field.length + 2));
      throw err;
    }
  }
  if (config.env.module && !task.interaction) {
    throw invalid('env.module', `task ${JSON.stringify(config.task)} is single-turn (it has no environment to replace): use a multi-turn task (calculator, guess-number, gridworld) or a task module that exports an environment`);
  }
}

/**
 * Validates a run's config, fills its defaults and registers the run. Invalid input is a
 * non-retryable failure naming every bad field, so the workflow fails at once instead of retrying a
 * workflow task forever. A dataset path's {date} / {scheduled_at} are filled first (from the
 * scheduled start time, else this start's time); the run_id is the config's, else one derived from
 * the workflow id, always valid (activities/run-registration.ts, docs/schedules.md).
 */
async function startRun(ctx: WorkerContext, { input, workflowId, schedule }: StartRunInput): Promise<RunConfig> {
  let scheduled;
  try {
    scheduled = parseScheduledStart(schedule);
  } catch (err) {
    throw invalid('schedule', (err as Error).message);
  }
  let config = parsed(withDatePatterns(parsed(input), scheduled?.at ?? new Date(Context.current().info.scheduledTimestampMs)));
  const initProblem = scheduleInitFromProblem(config.checkpoint.init_from);
  if (initProblem) throw invalid('checkpoint.init_from', initProblem);
  await checkWhatItNames(config);
  const registered = await registerRun(ctx.pool, config, workflowId, scheduled);
  if ('problem' in registered) {
    throw ApplicationFailure.create({ message: registered.problem, type: registered.type, nonRetryable: true });
  }
  config = registered.config;
  await recordStageEvent(ctx, registered.runId, 'run_started', scheduled ? { schedule_id: scheduled.id, scheduled_at: scheduled.at?.toISOString() ?? null } : {});
  return config;
}

export interface RecordHyperparametersInput {
  runId: string;
  /** The first step that uses the new values. */
  step: number;
  /** The dotted paths the update changed (e.g. "train.lr"). */
  changed: string[];
  /** Every hyperparameter in force from `step` on. */
  hyperparameters: Hyperparameters;
}

/**
 * Records a setHyperparameters update as a `hyperparameters_set` run event: the first step that uses
 * it, the changed paths with their new values, and every value in force. A retry of the same
 * activity (same workflow run and activity id) records nothing more.
 */
async function recordHyperparameters(ctx: WorkerContext, { runId, step, changed, hyperparameters }: RecordHyperparametersInput): Promise<void> {
  const info = Context.current().info;
  const origin = { workflow_run_id: info.workflowExecution?.runId ?? '', activity_id: info.activityId };
  if (await hyperparametersRecorded(ctx.pool, runId, origin)) return;
  const values: Record<string, unknown> = {};
  for (const p of changed) values[p] = p.split('.').reduce<unknown>((v, k) => (v && typeof v === 'object' ? (v as Record<string, unknown>)[k] : undefined), hyperparameters);
  await recordStageEvent(ctx, runId, 'hyperparameters_set', { step, changed, values, hyperparameters, ...origin });
}

async function finishRun(ctx: WorkerContext, { runId, status, summary }: { runId: string; status: string; summary: Record<string, unknown> }): Promise<void> {
  await setRunStatus(ctx.pool, runId, status);
  await recordStageEvent(ctx, runId, 'run_finished', { status, ...summary });
}

export function createControlActivities(ctx: WorkerContext) {
  return {
    startRun: (input: StartRunInput) => startRun(ctx, input),
    finishRun: (input: { runId: string; status: string; summary: Record<string, unknown> }) => finishRun(ctx, input),
    recordHyperparameters: (input: RecordHyperparametersInput) => recordHyperparameters(ctx, input),
  };
}

export type ControlActivities = ReturnType<typeof createControlActivities>;
