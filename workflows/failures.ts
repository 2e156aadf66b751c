// How a workflow fails on an activity failure that retrying cannot fix.
import { ActivityFailure, ApplicationFailure } from '@temporalio/workflow';

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
