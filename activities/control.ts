// Control activities, hosted by the control worker next to the workflows: a run's start (its
// config validated, its user modules and algorithm checked, the run registered) and its end.
import { ApplicationFailure } from '@temporalio/activity';
import { parseRunConfig, RunConfigError, type RunConfig } from '../config/run-config';
import { nativeTfjsAvailable } from '../engines/backends';
import { checkTrainerFitsMemory, checkTrainerFitsWasm } from '../training/options';
import { loadRunPolicy, RunModelError } from '../training/policy-model';

import { checkAgentCommandAllowed, NotAllowedError } from '../envs/module-policy';
import { loadUserExport, UserModuleError, validateRewardConfig } from '../envs/user-modules';
import { AlgorithmConfigError } from '../training/advantages';
import { resolveUpdateRule } from '../training/update';
import { recordStageEvent, type WorkerContext } from './context';

export interface StartRunInput {
  input: unknown;
  workflowId: string;
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
    ['algorithm', () => resolveUpdateRule(config.algorithm)],
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
 * workflow task forever.
 */
async function startRun(ctx: WorkerContext, { input, workflowId }: StartRunInput): Promise<RunConfig> {
  let config = parsed(input);
  await checkWhatItNames(config);
  config = { ...config, run_id: config.run_id ?? workflowId };
  const runId = config.run_id as string;
  const { rows } = await ctx.pool.query<{ workflow_id: string }>(
    `INSERT INTO runs (run_id, workflow_id, kind, config) VALUES ($1, $2, 'training', $3)
     ON CONFLICT (run_id) DO UPDATE SET updated_at = now() RETURNING workflow_id`,
    [runId, workflowId, JSON.stringify(config)],
  );
  if (rows[0].workflow_id !== workflowId) {
    throw ApplicationFailure.create({ message: `run_id "${runId}" already belongs to workflow ${rows[0].workflow_id}: choose another run_id`, type: 'DuplicateRunId', nonRetryable: true });
  }
  await recordStageEvent(ctx, runId, 'run_started');
  return config;
}

async function finishRun(ctx: WorkerContext, { runId, status, summary }: { runId: string; status: string; summary: Record<string, unknown> }): Promise<void> {
  await ctx.pool.query('UPDATE runs SET status = $2, updated_at = now() WHERE run_id = $1', [runId, status]);
  await recordStageEvent(ctx, runId, 'run_finished', { status, ...summary });
}

export function createControlActivities(ctx: WorkerContext) {
  return {
    startRun: (input: StartRunInput) => startRun(ctx, input),
    finishRun: (input: { runId: string; status: string; summary: Record<string, unknown> }) => finishRun(ctx, input),
  };
}

export type ControlActivities = ReturnType<typeof createControlActivities>;
