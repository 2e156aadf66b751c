// The training run's public surface, shared by the workflow and its clients: the progress and
// result shapes, the query, signal and Update definitions, and the search attributes a run sets
// (the Web UI's workflow list filters on them; `relax dev` registers them, docs/web-ui.md).
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import { defineSearchAttributeKey } from '@temporalio/common';
import type { Hyperparameters, HyperparameterUpdate } from '../config/hyperparameters';

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

export const trainingProgressQuery = defineQuery<TrainingProgress, [ProgressQueryOptions?]>('progress');
export const pauseSignal = defineSignal('pause');
export const resumeSignal = defineSignal('resume');
/** Finish the current step (publish its version), then end the run. */
export const stopSignal = defineSignal('stop');
/** Changes the safe hyperparameters from the next step on; the validator refuses bad values without touching the run. */
export const setHyperparametersUpdate = defineUpdate<HyperparameterUpdateResult, [HyperparameterUpdate]>('setHyperparameters');

export const RelaxRunIdKey = defineSearchAttributeKey('RelaxRunId', 'KEYWORD');
export const RelaxStatusKey = defineSearchAttributeKey('RelaxStatus', 'KEYWORD');
export const RelaxTaskKey = defineSearchAttributeKey('RelaxTask', 'KEYWORD');
export const RelaxModelKey = defineSearchAttributeKey('RelaxModel', 'KEYWORD');
export const RelaxStepKey = defineSearchAttributeKey('RelaxStep', 'INT');
export const RelaxAccuracyKey = defineSearchAttributeKey('RelaxAccuracy', 'DOUBLE');

/** Every search attribute a run sets, with its Temporal type (for `temporal operator search-attribute create`). */
export const RELAX_SEARCH_ATTRIBUTES = {
  RelaxRunId: 'Keyword',
  RelaxStatus: 'Keyword',
  RelaxTask: 'Keyword',
  RelaxModel: 'Keyword',
  RelaxStep: 'Int',
  RelaxAccuracy: 'Double',
} as const;
