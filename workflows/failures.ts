// How a workflow fails on an activity failure that retrying cannot fix, and on a run config too
// deep or too large to even pass to an activity.
import { ActivityFailure, ApplicationFailure } from '@temporalio/workflow';
import { checkJsonLimits, RUN_CONFIG_JSON_LIMITS } from '../config/json-limits';
import type { NonRetryableFailureType } from '../config/failure-types';

/**
 * Fails the workflow at once (InvalidRunConfig, non-retryable) when its input breaks the run
 * config's JSON limits. Checked here, iteratively, before the input is passed to startRun: a config
 * nested thousands deep overflows the stack when it is serialized for the activity, which would
 * fail workflow tasks forever. A valid input schedules exactly what it did before (no patch needed:
 * an execution with such an input never got past its first workflow task).
 */
export function refuseOversizedInput(input: unknown): void {
  const problem = checkJsonLimits(input, RUN_CONFIG_JSON_LIMITS);
  if (!problem) return;
  const type: NonRetryableFailureType = 'InvalidRunConfig';
  throw ApplicationFailure.create({ message: `invalid run config: ${problem.path || 'config'}: ${problem.message}`, type, nonRetryable: true });
}

/**
 * An activity failed with a non-retryable ApplicationFailure (bad config, unknown task, non-finite
 * update...): fail the workflow with the same message and type instead of failing a workflow task,
 * which Temporal would retry forever. Anything else is rethrown as it is.
 */
export function failWorkflowOnNonRetryable(err: unknown): never {
  if (isNonRetryableActivityFailure(err)) {
    throw ApplicationFailure.create({ message: err.cause.message, type: err.cause.type ?? undefined, nonRetryable: true, details: err.cause.details as unknown[] });
  }
  throw err;
}

export function isNonRetryableActivityFailure(err: unknown): err is ActivityFailure & { cause: ApplicationFailure } {
  return err instanceof ActivityFailure && err.cause instanceof ApplicationFailure && err.cause.nonRetryable === true;
}
