// Train stage activities. The trainer holds weights and optimizer state in memory, so its stateful
// activities run on the worker's own instance queue; `workerInfo` on the shared queue picks one.
// A train step is four named pieces: claimBatch (exactly-once bookkeeping), updateTrainer (the
// update, training/step.ts), publishVersion (training/policy-versions.ts), recordStep. The train
// step activity first applies the failure budget's verdict to its iteration's rollout (training/step.ts
// stepVerdict): a step whose samples all failed is skipped (skipStep), one over the budget fails the
// run. Errors a retry cannot fix leave as non-retryable failures of a stable type
// (activities/context.ts asActivityFailure).
// Over 400 lines because the step's pieces and its exactly-once rules read best side by side.
// Placement "colocated" drives the same pieces (startStep, claimBatch, trainOnBatch) with a batch
// of its own making and its pipelining (activities/colocated-step.ts); trainStep knows nothing of it.
import { ApplicationFailure } from '@temporalio/activity';
import { parseDevice } from '../engines/device';
import { NonFiniteUpdateError } from '../engines/trainer';
import { getCheckpoint, type CheckpointRecord } from '../store/checkpoint-registry';
import { CheckpointOverwriteError, loadCheckpoint } from '../engines/checkpoint';
import type { PolicyWeights } from '../engines/model';
import { recordMetrics } from '../store/metrics';
import { tensorboardScalars } from './run-tensorboard';
import { previousSpanEnd, recordSpan } from '../store/spans';
import { getTrainStep, markStepApplied, markStepSkipped, pruneConsumed, readSamples, recordStepAdvantages, type TrainStep } from '../store/transfer-queue';
import { checkTrainerFitsMemory, trainerOptions } from '../training/options';
import { initialPolicyWeights, withBaseWeights } from '../training/policy-model';
import { loadOptimizerState, loadPolicyWeights, prunePolicyVersions, publishPolicyVersion, resolveInitFrom } from '../training/policy-versions';
import type { RunContext } from '../training/run-context';
import { RemoteTrainer } from '../training/trainer-thread';
import { runState } from '../training/run-state';
import { transferQueueBuffer, type TrainSample } from '../training/sample-buffer';
import { computeUpdate, FailureBudgetExceededError, mergeRolloutStats, resolveUpdateRule, rolloutStatsMetrics, scorerOf, skipReason, stalenessMetrics, stepAdvantages, stepVerdict, withSequenceMedia, type RolloutStats, type UpdateRule } from '../training/step';
import type { NonRetryableFailureType, RetryableFailureType } from '../config/failure-types';
import { referenceLogprobsNeeded } from '../config/reference-role';
import { shortened } from '../config/json-limits';
import { protectedVersions } from '../config/placement';
import { withHyperparameters, type Hyperparameters } from '../config/hyperparameters';
import { assertAttemptCurrent, FAILURE_MESSAGE_MAX_CHARS, heartbeatWhile, failuresMapped, recordStageEvent, runContext, withHeartbeats, workerInfoActivity, type WorkerContext } from './context';
import { warmStart, type WarmStartInput } from './warm-start';
import { componentLog } from '../telemetry/log';
import { dapoMetrics, sumDapoCounts, type DapoCounts } from '../engines/rl/dapo';

const trainLog = componentLog('train');

export interface PolicyVersionInfo {
  policyVersion: number;
  sha256: string;
  path: string;
}

export interface TrainStepInput {
  runId: string;
  step: number;
  /** The policy version the update starts from; it publishes fromVersion + 1. */
  fromVersion: number;
  /** The iteration's rollout statistics, one per generate slice: merged, they decide the step's verdict (train, skip, fail). */
  rollout?: ReadonlyArray<Pick<RolloutStats, 'samples' | 'failed' | 'rewardSum'> & { dapo?: DapoCounts }>;
  /** More of the rollout's figures (e.g. rollout_busy_ms), recorded with the step's own metrics. */
  rolloutMetrics?: Record<string, number>;
  /** The rollout iteration this step trains on (default step - 1: sync mode). */
  iteration?: number;
  /** Refuse samples generated more than this many versions before fromVersion (async mode's bound). */
  maxStaleness?: number;
  /** The hyperparameters in force (setHyperparameters): used instead of the run config's; absent: the config's. */
  hyperparameters?: Hyperparameters;
}

export interface TrainStepResult extends PolicyVersionInfo {
  step: number;
  samples: number;
  metrics: Record<string, number>;
  /** True when the step had been applied before (a retry): nothing was trained again. */
  alreadyApplied: boolean;
  /** Set when the step published no version: its samples all failed, or its update was not finite and train.on_non_finite is "skip". */
  skipped?: string;
  worker: string;
  /** The iteration's rollout statistics (the input's slices merged), for the workflow's progress. */
  rollout?: RolloutStats;
}

// The trainer of each run this process serves (on the process's trainer thread), with the policy
// version its weights are at (and those weights as published). Its optimizer state lives only
// there; a new instance rebuilds both from the last published version (its checkpoint and optimizer
// state). Both slots are released with the run (training/run-state.ts).
const trainers = runState.slot<{ trainer: RemoteTrainer; version: number; weights?: PolicyWeights }>('train.trainer', (held) => held.trainer.dispose());
// The advantage estimator and policy loss of each run (a user module loads once), with the
// algorithm hyperparameters they were built with: an update of those rebuilds them.
const rules = runState.slot<{ key: string; rule: Promise<UpdateRule> }>('train.rule');
// The train step each run is running in this process: a second attempt of a step (Temporal retried
// it after a missed heartbeat while the first still runs) waits for the first instead of updating
// the same trainer concurrently; it then finds the step applied and reports it.
const stepsRunning = new Map<string, Promise<unknown>>();

/** Runs `fn` after the run's train step already running in this process (if any) has ended, heartbeating while it waits. */
export async function oneStepAtATime<T>(runId: string, fn: () => Promise<T>): Promise<T> {
  const before = stepsRunning.get(runId);
  const mine = (before ? heartbeatWhile(() => before.catch(() => undefined)) : Promise.resolve()).then(fn);
  stepsRunning.set(runId, mine);
  try {
    return await mine;
  } finally {
    if (stepsRunning.get(runId) === mine) stepsRunning.delete(runId);
  }
}

function ruleOf(run: RunContext): Promise<UpdateRule> {
  const { kl_coef, entropy_coef, clip_low, clip_high } = run.config.algorithm;
  const key = JSON.stringify([kl_coef, entropy_coef, clip_low, clip_high]);
  const held = rules.get(run.runId);
  if (held?.key === key) return held.rule;
  const rule = failuresMapped(() => resolveUpdateRule(run.config.algorithm, { maxCompletionTokens: run.config.rollout.max_new_tokens }));
  const entry = { key, rule };
  rules.set(run.runId, entry);
  rule.catch(() => rules.delete(run.runId, entry));
  return rule;
}

/** The run with the hyperparameters in force (a setHyperparameters update) in place of its config's. */
function withRunHyperparameters(run: RunContext, h: Hyperparameters | undefined): RunContext {
  return h ? { ...run, config: withHyperparameters(run.config, h) } : run;
}

/** The hyperparameters a train step used, recorded with its metrics (lr is the trainer's own). */
function hyperparameterMetrics(config: RunContext['config']): Record<string, number> {
  const { kl_coef, entropy_coef, clip_low, clip_high } = config.algorithm;
  return { kl_coef, entropy_coef, clip_low, clip_high };
}

/** The weights of the run's trainer in this process when it is at `version` (placement "colocated" generates with them). */
export async function heldTrainerWeights(runId: string, version: number): Promise<PolicyWeights | undefined> {
  const held = trainers.get(runId);
  return held?.version === version ? (held.weights ?? held.trainer.exportWeights()) : undefined;
}

function dropTrainer(runId: string): void {
  trainers.get(runId)?.trainer.dispose().catch((err: Error) => trainLog.warn({ run: runId, err }, 'disposing its trainer failed'));
  trainers.delete(runId);
}

/** The run's trainer must fit this worker's memory (RELAX_MAX_RUN_MEMORY_GB): else ResourceLimit, before anything is allocated. */
function checkFitsThisWorker(run: RunContext): void {
  try {
    checkTrainerFitsMemory(run.config, run.model);
  } catch (err) {
    throw ApplicationFailure.create({ message: shortened((err as Error).message, FAILURE_MESSAGE_MAX_CHARS), type: 'ResourceLimit' satisfies NonRetryableFailureType, nonRetryable: true });
  }
}

async function trainerAt(ctx: WorkerContext, run: RunContext, version: number): Promise<RemoteTrainer> {
  const held = trainers.get(run.runId);
  if (held && held.version === version && !held.trainer.lost) {
    // The kept trainer follows the learning rate in force (setHyperparameters) from this step on.
    const { optimizer, schedule, valueHeadLr } = trainerOptions(run.config, run.model, {});
    await held.trainer.setLearningRate(optimizer.lr, schedule ?? { kind: 'constant' }, valueHeadLr);
    return held.trainer;
  }
  dropTrainer(run.runId);
  checkFitsThisWorker(run);
  const [weights, optimizerState] = await failuresMapped(() => Promise.all([loadPolicyWeights(ctx.pool, run, version), loadOptimizerState(run, version)]));
  const trainer = await RemoteTrainer.create(trainerOptions(run.config, run.model, await withBaseWeights(run.policy, weights)), parseDevice(ctx.device));
  if (optimizerState) await trainer.importOptimizerState(optimizerState);
  else if (version > 0) trainLog.warn({ run: run.runId }, `no optimizer state for version ${version}; continuing with fresh AdamW moments`);
  trainers.set(run.runId, { trainer, version });
  return trainer;
}

export interface InitPolicyInput {
  runId: string;
  /** The SFT warm start's checkpoint (train.warmStart's dir): version 0 when checkpoint.init_from does not resolve. */
  warmStartDir?: string;
}

/** The weights checkpoint.init_from names, or undefined when it names nothing yet (`schedule:<name>@latest` before the schedule's first completed run). */
async function initFromWeights(ctx: WorkerContext, run: RunContext): Promise<PolicyWeights | undefined> {
  const spec = run.config.checkpoint.init_from;
  if (!spec) return undefined;
  try {
    // A checkpoint directory, <run_id>@<version> / <run_id>@latest from the registry, or schedule:<name>@latest.
    const source = await resolveInitFrom(ctx.pool, spec, { runId: run.runId });
    return source ? (await loadCheckpoint(source.path, { model: run.model, sha256: source.sha256 })).weights : undefined;
  } catch (err) {
    throw ApplicationFailure.create({ message: `checkpoint.init_from: ${(err as Error).message}`, type: 'InvalidInitCheckpoint', nonRetryable: true });
  }
}

/** The SFT warm start's weights (its checkpoint directory, made by the warmStart activity). */
async function warmStartWeights(run: RunContext, dir: string): Promise<PolicyWeights> {
  try {
    return (await loadCheckpoint(dir, { model: run.model })).weights;
  } catch (err) {
    throw ApplicationFailure.create({ message: `init.sft: the warm start at ${dir} cannot be loaded: ${(err as Error).message}`, type: 'InvalidInitCheckpoint', nonRetryable: true });
  }
}

/**
 * Publishes policy version 0 of a run: the checkpoint named by checkpoint.init_from when it
 * resolves, else the SFT warm start (warmStartDir), else a pretrained model's weights (with LoRA:
 * fresh adapters), else a seeded random initialization. Idempotent: a registered version 0 is returned as it is.
 */
async function initPolicy(ctx: WorkerContext, { runId, warmStartDir }: InitPolicyInput): Promise<PolicyVersionInfo> {
  const run = await runContext(ctx, runId);
  checkFitsThisWorker(run);
  const existing = await getCheckpoint(ctx.pool, runId, 0);
  if (existing) return { policyVersion: 0, sha256: existing.sha256, path: existing.path };
  const weights =
    (await initFromWeights(ctx, run)) ??
    (warmStartDir !== undefined ? await warmStartWeights(run, warmStartDir) : await initialPolicyWeights(run.policy, run.config.seed));
  const published = await publishPolicyVersion(ctx.pool, run, 0, 0, weights);
  return { policyVersion: 0, sha256: published.sha256, path: published.path };
}

/**
 * A step's batch: its samples, a version an earlier attempt published before it died (adopted, not
 * trained again), and `record`, which records what each sample is trained with while the update
 * runs; the version is published only after it resolves. From the transfer queue (claimBatch) it
 * records the advantages of the claimed set; a colocated step's batch (activities/colocated-step.ts)
 * writes the samples it generated and records them as the step's set with them.
 */
export interface StepBatch {
  samples: TrainSample[];
  publishedBefore: CheckpointRecord | undefined;
  record(advantages: number[]): Promise<void>;
  rolloutMetrics?: Record<string, number>;
}

/** What claiming found: a step already done (a retry), or the step's batch. */
export type Claim = { done: TrainStepResult } | StepBatch;

/**
 * Claim the batch: the step's sample set is chosen and recorded before the update (a retry gets the
 * same set); a step already applied or skipped is reported as it was, not trained again.
 */
export async function claimBatch(ctx: WorkerContext, run: RunContext, input: Required<Pick<TrainStepInput, 'iteration'>> & TrainStepInput, recorded: TrainStep | undefined): Promise<Claim> {
  const { runId, step, fromVersion, iteration, maxStaleness } = input;
  const base = { step, samples: recorded?.sampleCount ?? 0, alreadyApplied: true, worker: ctx.identity };
  if (recorded?.status === 'skipped') return { done: { ...base, policyVersion: fromVersion, sha256: '', path: '', metrics: recorded.metrics ?? { skipped_non_finite: 1 }, skipped: recorded.skipReason ?? 'skipped' } };
  if (recorded?.status === 'applied') {
    const cp = await getCheckpoint(ctx.pool, runId, recorded.policyVersion as number);
    return { done: { ...base, policyVersion: recorded.policyVersion as number, sha256: cp?.sha256 ?? '', path: cp?.path ?? '', metrics: recorded.metrics ?? {} } };
  }
  const c = run.config;
  // Whether an earlier attempt already published this step's version, read alongside the claim.
  const [samples, publishedBefore] = await Promise.all([
    transferQueueBuffer(ctx.pool, runId).claim(step, { size: c.rollout.prompts_per_step * c.algorithm.group_size, iteration, requireRefLogprobs: referenceLogprobsNeeded(c.algorithm, c.algorithm.kl_coef), fromVersion, ...(maxStaleness !== undefined ? { maxStaleness } : {}) }),
    getCheckpoint(ctx.pool, runId, fromVersion + 1),
  ]);
  if (!samples) {
    const bound = maxStaleness === undefined ? '' : ` generated by policy version ${Math.max(0, fromVersion - maxStaleness)} or later (max_staleness ${maxStaleness})`;
    throw ApplicationFailure.create({ message: `no scored samples of iteration ${iteration}${bound} are ready for step ${step} of run ${runId}`, type: 'NoSamples' satisfies RetryableFailureType });
  }
  const record = async (advantages: number[]) => void (await recordStepAdvantages(ctx.pool, runId, step, samples.map((s, i) => ({ iteration: s.iteration, groupIndex: s.groupIndex, sampleIndex: s.sampleIndex, advantage: advantages[i] }))));
  return { samples, publishedBefore, record };
}

/**
 * Compute the update: one policy-gradient step on this process's trainer at fromVersion
 * (training/step.ts). A non-finite update is never applied: NonFiniteUpdateError is rethrown for
 * the caller to skip or stop; after any failure the next attempt rebuilds the trainer.
 */
async function updateTrainer(ctx: WorkerContext, run: RunContext, rule: UpdateRule, fromVersion: number, samples: TrainSample[], advantages: number[]): Promise<{ trainer: RemoteTrainer; metrics: Record<string, number> }> {
  const trainer = await trainerAt(ctx, run, fromVersion);
  try {
    const withMedia = await withSequenceMedia(samples, run.media);
    return { trainer, metrics: await computeUpdate((sequences, r, batch) => trainer.trainStep(sequences, r.algorithm, { batch }), rule, withMedia, advantages, fromVersion, (sequences) => trainer.values(sequences)) };
  } catch (err) {
    dropTrainer(run.runId);
    throw err;
  }
}

/**
 * Publish the version: the trainer's weights and optimizer state as `version`, registered once. A
 * concurrent attempt of this same step (one Temporal retried after a missed heartbeat while it
 * still ran) may have published it first, with weights that differ in the last bits (native
 * backends do not reduce in a fixed order): then its version is adopted, not refused. Files of
 * anything else at that path (no registry row for this step appears) stay a non-retryable conflict.
 */
async function publishVersion(ctx: WorkerContext, run: RunContext, state: TrainerSnapshot, version: number, step: number): Promise<CheckpointRecord> {
  try {
    return await publishPolicyVersion(ctx.pool, run, version, step, state.weights, state.optimizerState);
  } catch (err) {
    if (!(err instanceof CheckpointOverwriteError)) throw err;
    const theirs = await heartbeatWhile(() => registeredBySameStep(ctx, run.runId, version, step));
    if (!theirs) throw err;
    trainLog.warn({ run: run.runId }, `version ${version} was published by a concurrent attempt of step ${step}; adopting it`);
    dropTrainer(run.runId);
    return theirs;
  }
}

type TrainerSnapshot = { weights: PolicyWeights; optimizerState: Uint8Array };

/** The trainer's state after an update, exported once; the trainer is kept at `version` from here (a colocated step after it may start before the files are written). */
async function snapshotAt(runId: string, trainer: RemoteTrainer, version: number): Promise<TrainerSnapshot> {
  const state = { weights: await trainer.exportWeights(), optimizerState: await trainer.exportOptimizerState() };
  trainers.set(runId, { trainer, version, weights: state.weights });
  return state;
}

/** The registry row of `version` once the attempt that wrote its files registers it for `step` (files are written before the row). */
async function registeredBySameStep(ctx: WorkerContext, runId: string, version: number, step: number, waitMs = 15_000): Promise<CheckpointRecord | undefined> {
  const until = Date.now() + waitMs;
  for (;;) {
    const cp = await getCheckpoint(ctx.pool, runId, version);
    if (cp) return cp.step === step ? cp : undefined;
    if (Date.now() >= until) return undefined;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

/**
 * Record the step: its advantages (written while the update ran), applied status and metrics; then
 * the transfer queue's and the checkpoints' retention. Retention keeps version 0, the versions a rollout engine may still be
 * asked for (config/placement.ts protectedVersions) and every checkpoint.every-th (keep_last of them).
 */
async function recordStep(ctx: WorkerContext, run: RunContext, step: number, version: number, advantagesRecorded: Promise<unknown>, metrics: Record<string, number>): Promise<void> {
  const c = run.config;
  await advantagesRecorded;
  await markStepApplied(ctx.pool, run.runId, step, { policyVersion: version, metrics });
  await Promise.all([
    recordMetrics(ctx.pool, run.runId, step, metrics),
    pruneConsumed(ctx.pool, run.runId, { keepLastSteps: c.train.keep_consumed_steps }),
    prunePolicyVersions(ctx.pool, { runId: run.runId, checkpointRoot: run.checkpointRoot, latest: version, every: c.checkpoint.every, keepLast: c.checkpoint.keep_last, protect: protectedVersions(c) }),
  ]);
  tensorboardScalars(run, step, metrics);
}

/** The step's update was not finite: skip it (train.on_non_finite "skip") or fail the run, applying nothing. */
async function onNonFinite(ctx: WorkerContext, run: RunContext, input: TrainStepInput, err: NonFiniteUpdateError, metrics: Record<string, number>): Promise<string> {
  if (run.config.train.on_non_finite !== 'skip') {
    throw ApplicationFailure.create({ message: `step ${input.step}: ${err.message}; nothing was applied or published. Set train.on_non_finite to "skip" to drop such updates and go on`, type: 'NonFiniteUpdate', nonRetryable: true });
  }
  // The sample set stays consumed (recorded), no version is published, the run goes on.
  const reason = `step ${input.step}: ${err.message}`;
  trainLog.warn({ run: run.runId }, `skipping ${reason} (train.on_non_finite = "skip")`);
  await markStepSkipped(ctx.pool, run.runId, input.step, reason);
  await recordMetrics(ctx.pool, run.runId, input.step, { ...metrics, skipped_non_finite: 1 });
  tensorboardScalars(run, input.step, { ...metrics, skipped_non_finite: 1 });
  return reason;
}

/**
 * Placement "colocated" pipelines its steps in one process (activities/colocated-step.ts):
 * `updated` is told once the trainer holds the new version (the next step may generate with it),
 * and `beforePublish` holds the version back until the step before it is durable.
 */
export interface Pipelining {
  updated(version: number): void;
  beforePublish(): Promise<void>;
}

/** What a step reads before it trains: the run (with the hyperparameters in force), its record, when the trainer's previous step ended. */
export interface StepStart {
  run: RunContext;
  startedAt: Date;
  recorded: TrainStep | undefined;
  previousEnd: Date | undefined;
}

export async function startStep(ctx: WorkerContext, input: Pick<TrainStepInput, 'runId' | 'step' | 'hyperparameters'>, event: Record<string, unknown>): Promise<StepStart> {
  const run = withRunHyperparameters(await runContext(ctx, input.runId), input.hyperparameters);
  const startedAt = new Date();
  const [recorded, previousEnd] = await Promise.all([
    getTrainStep(ctx.pool, input.runId, input.step),
    previousSpanEnd(ctx.pool, input.runId, 'train', startedAt),
    recordStageEvent(ctx, input.runId, 'activity_started', event),
  ]);
  return { run, startedAt, recorded, previousEnd };
}

/**
 * Train stage, on this trainer's instance queue: step `step` takes the policy from `fromVersion` to
 * fromVersion + 1, exactly once: the step's start, its claimed batch, the update on it.
 */
export async function trainStep(ctx: WorkerContext, input: TrainStepInput): Promise<TrainStepResult> {
  const { step, fromVersion, iteration = step - 1 } = input;
  const start = await startStep(ctx, input, { step, fromVersion });
  const claim = await claimBatch(ctx, start.run, { ...input, iteration }, start.recorded);
  return 'done' in claim ? claim.done : trainOnBatch(ctx, { ...input, iteration }, start, claim);
}

/** The update on a claimed batch: advantages, update, publish, record (the four pieces above). */
export async function trainOnBatch(ctx: WorkerContext, input: TrainStepInput, start: StepStart, claim: StepBatch, pipelining?: Pipelining): Promise<TrainStepResult> {
  const { runId, step, fromVersion, iteration = step - 1 } = input;
  const { run, startedAt, previousEnd } = start;
  const { samples } = claim;
  // How long the trainer waited for this step's data since its previous step ended, and samples per
  // second through the pipeline: this step's batch over the time since the previous step ended.
  const timing = (trained: number) => ({
    train_busy_ms: Date.now() - startedAt.getTime(),
    ...(previousEnd ? { train_wait_ms: startedAt.getTime() - previousEnd.getTime(), ...(trained ? { samples_per_s: trained / Math.max(0.001, (Date.now() - previousEnd.getTime()) / 1000) } : {}) } : {}),
  });
  const context = { ...input.rolloutMetrics, ...claim.rolloutMetrics, ...stalenessMetrics(samples, fromVersion), ...hyperparameterMetrics(run.config) };
  const span = (policyVersion: number, detail: Record<string, unknown> = {}) =>
    recordSpan(ctx.pool, { runId, role: ctx.role, stage: 'train', worker: ctx.identity, step, iteration, policyVersion, startedAt, endedAt: new Date(), detail });
  const rule = await ruleOf(run);
  const advantages = stepAdvantages(rule, samples);
  // What each sample is trained with, written to the transfer queue while the update runs.
  const recording = claim.record(advantages);
  recording.catch(() => undefined); // awaited below on every path
  const version = fromVersion + 1;
  let published = claim.publishedBefore;
  let metrics: Record<string, number> = { adopted: 1 };
  if (published) {
    // Published by an attempt that died before recording it: adopt it, train nothing again.
    dropTrainer(runId);
  } else {
    let update;
    try {
      const t0 = performance.now();
      update = await updateTrainer(ctx, run, rule, fromVersion, samples, advantages);
      ctx.figures?.trained({ sequences: samples.length, tokens: samples.reduce((n, s) => n + s.promptTokens.length + s.responseTokens.length, 0), seconds: (performance.now() - t0) / 1000 });
    } catch (err) {
      await recording.catch(() => undefined);
      if (!(err instanceof NonFiniteUpdateError)) throw err;
      await recording;
      const skipped = await onNonFinite(ctx, run, input, err, { ...context, ...timing(0) });
      await span(fromVersion, { skipped: true });
      return { step, policyVersion: fromVersion, sha256: '', path: '', samples: samples.length, metrics: { skipped_non_finite: 1 }, alreadyApplied: false, skipped, worker: ctx.identity };
    }
    metrics = update.metrics;
    const state = await snapshotAt(runId, update.trainer, version);
    pipelining?.updated(version);
    // The set is recorded while the version is published (a version published without its set is
    // adopted by the retry, which records the same set: colocated-step.ts). A step that cannot be
    // recorded, or whose predecessor failed, fails: the updated trainer is not kept.
    const notKept = (err: unknown) => Promise.reject((dropTrainer(runId), err));
    // An attempt Temporal gave up on (timed out, superseded) publishes nothing; its trainer is not kept.
    await Promise.resolve().then(assertAttemptCurrent).catch(notKept);
    await pipelining?.beforePublish().catch(notKept);
    [, published] = await Promise.all([recording.catch(notKept), publishVersion(ctx, run, state, version, step).catch(notKept)]);
  }
  await recordStep(ctx, run, step, version, recording, { ...context, ...metrics, ...timing(samples.length) });
  await span(version);
  return { step, policyVersion: version, sha256: published.sha256, path: published.path, samples: samples.length, metrics, alreadyApplied: false, worker: ctx.identity };
}

export interface SkipStepInput {
  runId: string;
  step: number;
  /** The policy version the run stays at (nothing is published). */
  fromVersion: number;
  /** Why: e.g. "all 32 samples of iteration 4 failed". */
  reason: string;
  rolloutMetrics?: Record<string, number>;
}

/**
 * A step with nothing to train on (every sample of its iteration failed, within
 * train.failure_budget): recorded as a `step_skipped` stage event and a metrics row
 * (skipped_all_failed 1 with the rollout's statistics); no version is published and the run goes
 * on. A retry records the same again.
 */
export async function skipStep(ctx: WorkerContext, input: SkipStepInput): Promise<TrainStepResult> {
  const { runId, step, fromVersion, reason } = input;
  const run = await runContext(ctx, runId);
  const metrics = { ...input.rolloutMetrics, skipped_all_failed: 1 };
  trainLog.warn({ run: runId }, `skipping step ${step}: ${reason}`);
  await Promise.all([recordMetrics(ctx.pool, runId, step, metrics), recordStageEvent(ctx, runId, 'step_skipped', { step, fromVersion, reason })]);
  tensorboardScalars(run, step, metrics);
  return { step, policyVersion: fromVersion, sha256: '', path: '', samples: 0, metrics, alreadyApplied: false, skipped: reason, worker: ctx.identity };
}

/**
 * stepVerdict on iteration `iteration`'s rollout; over the budget, the failure names the run's
 * scorers and quotes the iteration's first failed sample's error (from the transfer queue).
 */
export async function budgetVerdict(ctx: WorkerContext, run: RunContext, stats: RolloutStats, step: number, iteration: number, budget = run.config.train.failure_budget): Promise<'train' | 'skip'> {
  try {
    return stepVerdict(stats, budget, step);
  } catch (err) {
    if (!(err instanceof FailureBudgetExceededError)) throw err;
    const [first] = await readSamples(ctx.pool, run.runId, { iteration, status: 'failed', limit: 1 }).catch(() => []);
    const quoted = first?.error ? { first: { key: `${first.iteration}/${first.groupIndex}/${first.sampleIndex}`, error: first.error } } : {};
    return stepVerdict(stats, budget, step, { scorer: scorerOf(run.config), ...quoted });
  }
}

/**
 * The workflow's train step: the failure budget's verdict on the iteration's rollout (its slices
 * merged) comes first: over the budget the run fails (FailureBudgetExceeded, non-retryable), a
 * rollout that failed entirely is skipped (skipStep), else the step trains (trainStep). The same
 * input always gets the same verdict, so a retry skips or trains as the first attempt did.
 */
async function trainStepActivity(ctx: WorkerContext, input: TrainStepInput): Promise<TrainStepResult> {
  // Builds before the step spine (2026-12-06) judge the rollout themselves and send no slices.
  if (!input.rollout) return trainStep(ctx, input);
  const { runId, step, fromVersion } = input;
  const rollout = mergeRolloutStats(input.rollout);
  const run = await runContext(ctx, runId);
  const budget = run.config.train.failure_budget;
  const rolloutMetrics = { ...rolloutStatsMetrics(rollout), ...dapoMetrics(sumDapoCounts(input.rollout.map((s) => s.dapo))), ...input.rolloutMetrics };
  const result =
    (await budgetVerdict(ctx, run, rollout, step, input.iteration ?? step - 1)) === 'skip'
      ? await skipStep(ctx, { runId, step, fromVersion, reason: skipReason(rollout, budget, step), rolloutMetrics })
      : await trainStep(ctx, { ...input, rolloutMetrics });
  return { ...result, rollout };
}

export function createTrainActivities(ctx: WorkerContext) {
  return {
    workerInfo: workerInfoActivity(ctx),
    initPolicy: (input: InitPolicyInput) => failuresMapped(() => withHeartbeats(() => initPolicy(ctx, input))),
    warmStart: (input: WarmStartInput) => failuresMapped(() => warmStart(ctx, input)),
    // Heartbeats for the whole step: building a trainer (its weights copied to the trainer thread) and
    // publishing take seconds on a real model, like the update itself.
    trainStep: (input: TrainStepInput) => failuresMapped(() => withHeartbeats(() => oneStepAtATime(input.runId, () => trainStepActivity(ctx, input)))),
    // Train workers are unversioned: runs pinned to builds before the step spine still schedule it.
    skipStep: (input: SkipStepInput) => failuresMapped(() => skipStep(ctx, input)),
  };
}

export type TrainActivities = ReturnType<typeof createTrainActivities>;
