// The training run's public surface, shared by the workflow and its clients: the progress and
// result shapes, the query, signal and Update definitions, and the search attributes a run sets
// (the Web UI's workflow list filters on them; `relax dev` registers them, docs/web-ui.md).
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import { defineSearchAttributeKey } from '@temporalio/common';
import type { HyperparameterUpdate } from '../config/hyperparameters';
import type { HyperparameterUpdateResult, ProgressQueryOptions, TrainingProgress } from './run-types';

export type { HyperparameterUpdateResult, ProgressQueryOptions, RunStatus, TrainingProgress, TrainingResult } from './run-types';

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
