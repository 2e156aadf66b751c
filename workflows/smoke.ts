// The plumbing smoke run: one activity per role, each on its role's queue, each reading from and
// writing to the transfer queue in Postgres. It is the RL loop's skeleton (rollout -> reference ->
// advantage -> train) with synthetic data, kept until the real training workflow replaces it.
import { defineQuery, proxyActivities, setHandler, sleep, workflowInfo } from '@temporalio/workflow';
import type { ControlActivities } from '../activities/control';
import type { ReferenceActivities } from '../activities/reference';
import type { RolloutActivities } from '../activities/rollout';
import type { TrainActivities } from '../activities/train';
import type { RunConfig } from '../config/run-config';
import { roleTaskQueue } from '../config/task-queues';
import { failWorkflowOnNonRetryable } from './failures';

export interface SmokeResult {
  runId: string;
  samples: number;
  rolloutWorker: string;
  trainWorker: string;
  meanAdvantage: number;
}

export interface SmokeProgress {
  stage: 'starting' | 'rollout' | 'reference' | 'advantage' | 'holding' | 'train' | 'done';
  runId?: string;
}

export const smokeProgressQuery = defineQuery<SmokeProgress>('progress');

const control = proxyActivities<ControlActivities>({
  taskQueue: roleTaskQueue('control'),
  startToCloseTimeout: '1 minute',
  retry: { initialInterval: '1 second', maximumAttempts: 10 },
});

const reference = proxyActivities<ReferenceActivities>({
  taskQueue: roleTaskQueue('reference'),
  startToCloseTimeout: '5 minutes',
  retry: { initialInterval: '1 second', maximumAttempts: 10 },
});

// Picking a trainer instance is quick; what runs on the chosen instance's own queue is not.
const trainShared = proxyActivities<TrainActivities>({
  taskQueue: roleTaskQueue('train'),
  startToCloseTimeout: '30 seconds',
  retry: { initialInterval: '1 second', maximumAttempts: 10 },
});

export async function smokeWorkflow(input: unknown): Promise<SmokeResult> {
  const progress: SmokeProgress = { stage: 'starting' };
  setHandler(smokeProgressQuery, () => progress);

  const config: RunConfig = await control
    .startRun({ input, workflowId: workflowInfo().workflowId, kind: 'smoke' })
    .catch(failWorkflowOnNonRetryable);
  const runId = config.run_id as string;
  progress.runId = runId;
  const iteration = 0;

  // The heartbeat timeout bounds how long a dead rollout worker holds its activity before the
  // retry goes to another rollout worker.
  const rollout = proxyActivities<RolloutActivities>({
    taskQueue: roleTaskQueue('rollout'),
    startToCloseTimeout: '10 minutes',
    heartbeatTimeout: `${config.smoke.heartbeat_timeout_s} seconds`,
    retry: { initialInterval: '500 milliseconds', maximumAttempts: 10 },
  });

  progress.stage = 'rollout';
  const generated = await rollout.smokeRollout({
    runId,
    iteration,
    samples: config.smoke.samples,
    groupSize: Math.min(config.algorithm.group_size, config.smoke.samples),
    delayMs: config.smoke.rollout_delay_ms,
    seed: config.seed,
  });

  progress.stage = 'reference';
  await reference.smokeReference({ runId, iteration });

  progress.stage = 'advantage';
  await control.smokeAdvantage({ runId, iteration });

  if (config.smoke.hold_seconds > 0) {
    progress.stage = 'holding';
    await sleep(config.smoke.hold_seconds * 1000);
  }

  progress.stage = 'train';
  const trained = await trainOnSomeInstance(runId, iteration);

  const result: SmokeResult = {
    runId,
    samples: generated.samples,
    rolloutWorker: generated.worker,
    trainWorker: trained.worker,
    meanAdvantage: trained.meanAdvantage,
  };
  await control.finishRun({ runId, status: 'completed', summary: { ...result } });
  progress.stage = 'done';
  return result;
}

/**
 * Runs the train step on one trainer instance's own queue. If that instance dies, its queue has no
 * poller: scheduleToStart fires, and the step moves to another instance (which would rebuild its
 * state from the last checkpoint).
 */
async function trainOnSomeInstance(runId: string, iteration: number): Promise<{ worker: string; meanAdvantage: number }> {
  const MAX_INSTANCES = 5;
  for (let attempt = 1; ; attempt++) {
    const instance = await trainShared.workerInfo();
    const pinned = proxyActivities<TrainActivities>({
      taskQueue: instance.instanceQueue,
      scheduleToStartTimeout: '30 seconds',
      startToCloseTimeout: '10 minutes',
      retry: { initialInterval: '1 second', maximumAttempts: 3 },
    });
    try {
      const r = await pinned.smokeTrain({ runId, iteration, step: iteration });
      return { worker: instance.identity, meanAdvantage: r.meanAdvantage };
    } catch (err) {
      if (attempt >= MAX_INSTANCES) throw err;
    }
  }
}
