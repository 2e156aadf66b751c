// The `evaluateRun` workflow: a sampled evaluation of one policy version of one run (k samples per
// prompt at a temperature; pass@1, pass@k, maj@k, mean@k), started by `relax eval`, the client, the
// Web UI's Start Workflow form (input: {"run_id": "...", "k": 8}) or a Schedule (version
// "unevaluated": the run's newest version, skipped when already evaluated). The work is one
// activity on the rollout queue (activities/evaluate.ts); a bad input fails at once.
import { ApplicationFailure, proxyActivities, type ActivityOptions } from '@temporalio/workflow';
import type { EvaluateActivities } from '../activities/evaluate';
import { parseEvaluationInput, type EvaluationInput, type EvaluationResult } from '../config/evaluation';
import { NON_RETRYABLE_FAILURE_TYPES } from '../config/failure-types';
import { roleTaskQueue } from '../config/task-queues';
import { failWorkflowOnNonRetryable } from './failures';
import { onOwnQueue } from './task-queue';

// Like the training run's rollout activities: heartbeats, retried on another rollout worker when one dies.
const EVALUATE: ActivityOptions = {
  taskQueue: roleTaskQueue('rollout'),
  startToCloseTimeout: '60 minutes',
  heartbeatTimeout: '30 seconds',
  retry: { initialInterval: '1 second', maximumAttempts: 10, nonRetryableErrorTypes: [...NON_RETRYABLE_FAILURE_TYPES] },
};

export async function evaluateRun(input: EvaluationInput): Promise<EvaluationResult> {
  let request;
  try {
    request = parseEvaluationInput(input);
  } catch (err) {
    throw ApplicationFailure.create({ message: (err as Error).message, type: 'InvalidEvaluation', nonRetryable: true });
  }
  const version = typeof request.version === 'number' ? `v${request.version}` : request.version;
  const summary = `evaluate ${request.runId}@${version}: ${request.k} samples/prompt at T=${request.temperature}`;
  const activities = proxyActivities<EvaluateActivities>(onOwnQueue({ ...EVALUATE, summary }));
  return activities.evaluateSamples(input).catch(failWorkflowOnNonRetryable);
}
