// The activities a training run schedules, with their queues, timeouts and retry policies, and a
// one-line summary per call (the Web UI's timeline then reads "rollout step 12 (1024 samples)").
// Every activity of a run is short or heartbeats while it works: a worker that dies mid-activity is
// noticed within the heartbeat timeout (or, for the short ones, the start-to-close timeout) and the
// activity is retried on another worker of its role.
import { proxyActivities, type ActivityOptions } from '@temporalio/workflow';
import type { ColocatedActivities, ColocatedStepInput, ColocatedStepResult } from '../activities/colocated-step';
import type { ControlActivities } from '../activities/control';
import type { JudgeActivities } from '../activities/judge';
import type { ReferenceActivities } from '../activities/reference';
import type { RolloutActivities } from '../activities/rollout';
import type { TrainActivities, TrainStepInput, TrainStepResult } from '../activities/train';
import { roleTaskQueue } from '../config/task-queues';
import { NON_RETRYABLE_FAILURE_TYPES } from '../config/failure-types';
import { failWorkflowOnNonRetryable, isNonRetryableActivityFailure } from './failures';
import { onOwnQueue } from './task-queue';

const nonRetryableErrorTypes = [...NON_RETRYABLE_FAILURE_TYPES]; // in every activity's retry policy

const CONTROL: ActivityOptions = {
  taskQueue: roleTaskQueue('control'),
  startToCloseTimeout: '10 minutes', // startRun may import a pretrained model the first time it is named
  retry: { initialInterval: '1 second', maximumAttempts: 10, nonRetryableErrorTypes },
};

const TRAIN_SHARED: ActivityOptions = {
  taskQueue: roleTaskQueue('train'),
  startToCloseTimeout: '1 minute',
  retry: { initialInterval: '1 second', maximumAttempts: 10, nonRetryableErrorTypes },
};

// The SFT warm start trains for a while on some train worker; it heartbeats, so a dead worker's
// attempt moves to another one (which finds the cached checkpoint if the first one published it).
const WARM_START: ActivityOptions = { ...TRAIN_SHARED, startToCloseTimeout: '60 minutes', heartbeatTimeout: '30 seconds' };

// Rollout and reference work is stateless between calls (engines reload any version from the
// checkpoint registry), so it goes to the shared queues: a dead worker's activity is retried on
// another one once its heartbeats stop. Retries back off from 0.5 s to at most 10 s (the default cap,
// 100x the first, left a run idle for up to 50 s between attempts after a burst of worker kills).
const ROLLOUT: ActivityOptions = {
  taskQueue: roleTaskQueue('rollout'),
  startToCloseTimeout: '10 minutes',
  heartbeatTimeout: '10 seconds',
  retry: { initialInterval: '500 milliseconds', maximumInterval: '10 seconds', maximumAttempts: 20, nonRetryableErrorTypes },
};

const REFERENCE: ActivityOptions = { ...ROLLOUT, taskQueue: roleTaskQueue('reference') };
// The judge (reward.judge) heartbeats like rollout; a dead judge worker's batch moves to another one.
const JUDGE: ActivityOptions = { ...ROLLOUT, taskQueue: roleTaskQueue('judge') };

/** The options with the call's summary, on the queue of this workflow's task-queue prefix. */
function summarized(options: ActivityOptions, summary: string | undefined): ActivityOptions {
  return onOwnQueue(summary ? { ...options, summary } : options);
}

export const control = (summary?: string) => proxyActivities<ControlActivities>(summarized(CONTROL, summary));
export const trainShared = (summary?: string) => proxyActivities<TrainActivities>(summarized(TRAIN_SHARED, summary));
export const warmStartActivities = (summary?: string) => proxyActivities<TrainActivities>(summarized(WARM_START, summary));
export const rollout = (summary?: string) => proxyActivities<RolloutActivities>(summarized(ROLLOUT, summary));
export const reference = (summary?: string) => proxyActivities<ReferenceActivities>(summarized(REFERENCE, summary));
export const judge = (summary?: string) => proxyActivities<JudgeActivities>(summarized(JUDGE, summary));

/** The trainer instance the run trains on, kept across steps until it fails. */
export interface TrainerChoice {
  instanceQueue?: string;
}

/**
 * The train step runs on one trainer instance's own queue (its weights and optimizer state are in
 * that process's memory). If the instance dies, nobody polls its queue: scheduleToStart fires (or
 * the heartbeat timeout, mid-step) and the step moves to another instance, which rebuilds the
 * trainer from the last published version. The step's sample set was recorded before the update,
 * so the new instance trains on exactly the same samples, once.
 */
export function trainOnSomeInstance(choice: TrainerChoice, input: TrainStepInput): Promise<TrainStepResult> {
  return onSomeInstance(choice, `train step ${input.step} (v${input.fromVersion} -> v${input.fromVersion + 1})`, (pinned) => pinned.trainStep(input));
}

/** Placement "colocated": the step's rollout and update in one activity on the trainer's instance (activities/colocated-step.ts). */
export function colocatedOnSomeInstance(choice: TrainerChoice, input: ColocatedStepInput): Promise<ColocatedStepResult> {
  const versions = input.fromVersion === undefined ? `after step ${input.step - 1}` : `v${input.fromVersion} -> v${input.fromVersion + 1}`;
  const summary = `rollout and train step ${input.step} (${versions}, colocated)`;
  return onSomeInstance(choice, summary, (pinned) => pinned.colocatedStep(input));
}

// A loop, not a retry policy: each try may go to another trainer's queue, which Temporal's retries cannot change.
async function onSomeInstance<T>(choice: TrainerChoice, summary: string, call: (pinned: TrainActivities & ColocatedActivities) => Promise<T>): Promise<T> {
  const MAX_INSTANCES = 10;
  for (let attempt = 1; ; attempt++) {
    let instanceQueue = choice.instanceQueue;
    if (!instanceQueue) {
      const picked = (await trainShared().workerInfo()).instanceQueue;
      // A colocated step queued alongside may have picked one meanwhile: both go to that trainer.
      instanceQueue = choice.instanceQueue ??= picked;
    }
    const pinned = proxyActivities<TrainActivities & ColocatedActivities>({
      taskQueue: instanceQueue,
      scheduleToStartTimeout: '10 seconds',
      startToCloseTimeout: '10 minutes',
      heartbeatTimeout: '10 seconds',
      retry: { initialInterval: '1 second', maximumAttempts: 2, nonRetryableErrorTypes },
      summary,
    });
    try {
      const result = await call(pinned);
      choice.instanceQueue = instanceQueue;
      return result;
    } catch (err) {
      if (choice.instanceQueue === instanceQueue) choice.instanceQueue = undefined;
      if (isNonRetryableActivityFailure(err)) failWorkflowOnNonRetryable(err);
      if (attempt >= MAX_INSTANCES) throw err;
    }
  }
}
