// The stable types of the failures a run's activities and workflow raise, in ONE place: the
// non-retryable ones (a retry cannot fix them: the run fails at once, naming the cause) and the
// retryable ones (a retry may succeed). activities/context.ts maps the core's errors to them, the
// workflow lists the non-retryable ones in its activities' retry policies, and
// test/failure-types.test.ts produces each from its real cause.

export const NON_RETRYABLE_FAILURE_TYPES = [
  /** The run config is invalid (schema, bounds, memory estimate, names that do not load). */
  'InvalidRunConfig',
  /** No run with that id is registered. */
  'UnknownRun',
  /** The run's task cannot be loaded. */
  'UnknownTask',
  /** A user module (reward, env, generate, task, algorithm) cannot be used. */
  'InvalidUserModule',
  /** The worker's allow-list (envs/module-policy.ts) refuses a module or agent command. */
  'NotAllowed',
  /** A policy version was deleted by checkpoint retention. */
  'PrunedPolicyVersion',
  /** A published policy version would be overwritten with different content. */
  'CheckpointConflict',
  /** A train step would be applied twice or with another version. */
  'TrainStepConflict',
  /** An allocation out of range (a model too large for this machine). */
  'ResourceLimit',
  /** checkpoint.init_from cannot be loaded. */
  'InvalidInitCheckpoint',
  /** The run_id belongs to another workflow. */
  'DuplicateRunId',
  /** A step's loss or gradient is not finite (train.on_non_finite "stop"). */
  'NonFiniteUpdate',
  /** More of a step's samples failed than train.failure_budget allows (training/step.ts stepVerdict). */
  'FailureBudgetExceeded',
  /** A setHyperparameters Update the validator refuses (bad value, unknown or unsafe field). */
  'InvalidHyperparameters',
  /** An Update sent before the run registered its config (retry in a moment). */
  'RunNotStarted',
  /** An Update sent to a run that has already ended. */
  'RunFinished',
  /** An evaluation that cannot run as asked (config/evaluation.ts: bad k, dataset, version or run). */
  'InvalidEvaluation',
] as const;

export const RETRYABLE_FAILURE_TYPES = [
  /** A policy version not published yet (it may be, soon). */
  'MissingPolicyVersion',
  /** A step's samples are not all scored yet. */
  'NoSamples',
  /** Generation failed for another reason than the ones above (a worker problem may pass). */
  'RolloutFailed',
  /**
   * An external engine could not confirm the policy version it was told to load: it is marked
   * failed and its worker stops taking work; another worker retries the activity.
   */
  'EngineUnhealthy',
] as const;

export type NonRetryableFailureType = (typeof NON_RETRYABLE_FAILURE_TYPES)[number];
export type RetryableFailureType = (typeof RETRYABLE_FAILURE_TYPES)[number];
