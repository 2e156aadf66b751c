// The shapes a training run shows its clients: its status words, its progress (the `progress`
// query), its result, and what setHyperparameters answers. Types only, with no Temporal workflow
// import, so the client's declarations (@relax-rl/client) carry them without @temporalio/workflow;
// workflows/definitions.ts re-exports them beside the query, signal and Update definitions.
import type { Hyperparameters } from '../config/hyperparameters';

export type RunStatus =
  | 'starting'
  | 'warming_up'
  | 'running'
  | 'paused'
  | 'stopping'
  | 'cancelling'
  | 'completed'
  | 'stopped'
  | 'cancelled'
  | 'continued';

export interface TrainingProgress {
  runId?: string;
  status: RunStatus;
  step: number;
  totalSteps: number;
  policyVersion: number;
  lastReward?: number;
  lastAccuracy?: number;
  /** The step the newest held-out accuracy was measured at (0: the initial policy). */
  lastEvalStep?: number;
  /** The best held-out accuracy so far (step 0 included): accuracy milestones count from it. */
  bestAccuracy?: number;
  /** Recent (step, mean reward) and (step, held-out accuracy) points, newest last: only when the query asks `{ curves: true }`. */
  rewards?: Array<[number, number]>;
  accuracies?: Array<[number, number]>;
  samplesPerSecond?: number;
  /** Mean wall time of this execution's steps, and the estimated seconds left at that pace. */
  stepSeconds?: number;
  etaSeconds?: number;
  /** Steps that published no version: every sample failed (within train.failure_budget) or the update was not finite ("skip"). */
  skippedSteps?: number;
  /** The hyperparameters the next step uses (setHyperparameters changes them). */
  hyperparameters?: Hyperparameters;
  /** The SFT warm start the run began from (init.sft), once it is done. */
  warmStart?: { accuracy: number; sftSteps: number; cached: boolean };
}

export interface TrainingResult {
  runId: string;
  steps: number;
  policyVersion: number;
  evalAccuracy?: number;
  initialAccuracy?: number;
  stopped: boolean;
  /** True when the run ended because its workflow was cancelled (it then ends CANCELED, and this is in the memo). */
  cancelled?: boolean;
  accuracies: Array<[number, number]>;
  rewards: Array<[number, number]>;
  /** Steps skipped (see TrainingProgress.skippedSteps); absent when none were. */
  skippedSteps?: number;
}

export interface ProgressQueryOptions {
  /** Include the reward and accuracy curves (up to 200 points each). Default: the latest values only. */
  curves?: boolean;
}

/** What setHyperparameters answers: the values in force and the first step that uses them. */
export interface HyperparameterUpdateResult {
  fromStep: number;
  hyperparameters: Hyperparameters;
  /** The fields the update changed, as dotted paths (e.g. "train.lr"). */
  changed: string[];
}
