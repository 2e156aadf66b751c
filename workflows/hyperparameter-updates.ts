// The setHyperparameters Update of a training run: its validator (the config's zod rules against
// the values in force; a refused update leaves no trace in the run) and its handler (the values
// apply from the next rollout iteration, and a run event records them).
import { ApplicationFailure } from '@temporalio/workflow';
import { hyperparametersOf, validateHyperparameterUpdate, withHyperparameters, type Hyperparameters, type HyperparameterUpdate } from '../config/hyperparameters';
import type { HyperparameterUpdateResult } from './definitions';
import { control } from './run-activities';
import { publishProgress } from './run-status';
import type { RunState } from './training-run';

/** The validator of setHyperparameters: throws (the update is rejected, nothing recorded) on bad input. */
export function validateUpdate(run: RunState | undefined, update: HyperparameterUpdate): { hyperparameters: Hyperparameters; changed: string[] } {
  if (!run) throw ApplicationFailure.create({ message: 'the run has not started yet (its config is being validated): retry in a moment', type: 'RunNotStarted', nonRetryable: true });
  if (run.progress.status === 'completed' || run.progress.status === 'stopped' || run.progress.status === 'cancelled') {
    throw ApplicationFailure.create({ message: `the run is ${run.progress.status}: nothing left to change`, type: 'RunFinished', nonRetryable: true });
  }
  try {
    // Colocated steps queued behind the one in flight are already scheduled: they complete.
    const startedSteps = run.config.placement === 'colocated' ? run.iterationsStarted : undefined;
    return validateHyperparameterUpdate(update, hyperparametersOf(run.config), { step: run.progress.step, mode: run.config.mode, ...(startedSteps !== undefined ? { startedSteps } : {}) });
  } catch (err) {
    throw ApplicationFailure.create({ message: (err as Error).message, type: 'InvalidHyperparameters', nonRetryable: true });
  }
}

/** Applies an accepted update from the next rollout iteration on, and records it in run events. */
export async function setHyperparameters(run: RunState | undefined, update: HyperparameterUpdate): Promise<HyperparameterUpdateResult> {
  const { hyperparameters, changed } = validateUpdate(run, update);
  const state = run as RunState;
  state.config = withHyperparameters(state.config, hyperparameters);
  state.progress.totalSteps = hyperparameters.train.steps;
  state.progress.hyperparameters = hyperparameters;
  const fromStep = state.iterationsStarted + 1;
  await control(`record hyperparameters (${changed.join(', ')})`).recordHyperparameters({ runId: state.runId, step: fromStep, changed, hyperparameters });
  publishProgress(state.visibility, state.progress, state.config, true);
  return { fromStep, hyperparameters, changed };
}
