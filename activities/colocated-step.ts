// Placement "colocated" (config `placement`): a sync step's rollout and update in the trainer's own
// process, one activity on its instance queue (verl's hybrid engine, slime's --colocate). The
// engine generates with the weights the trainer holds (no checkpoint read), the update trains on the
// batch in memory, and the same samples go to the transfer queue and are recorded as the step's set
// while the update runs; the version is published only once they are (activities/train.ts
// trainStep). A step that already has a record (a retry after its set was recorded) trains on the
// recorded set like any train step, so each step is still applied exactly once, and what Postgres
// holds (samples, advantages, spans, metrics) is what placement "stages" records.
import { ApplicationFailure } from '@temporalio/activity';
import type { RetryableFailureType } from '../config/failure-types';
import { withHyperparameters } from '../config/hyperparameters';
import { referenceLogprobsNeeded } from '../config/reference-role';
import { getCheckpoint, latestCheckpoint } from '../store/checkpoint-registry';
import { rolloutSliceWithStats } from '../rollout/producers';
import { dapoMetrics, type DapoCounts } from '../engines/rl/dapo';
import { getTrainStep, insertSamples, readSamples, recordGeneratedStep, type NewSample } from '../store/transfer-queue';
import { loadPolicyWeights } from '../training/policy-versions';
import type { RunContext } from '../training/run-context';
import { InMemorySampleBuffer, type TrainSample } from '../training/sample-buffer';
import { attachReferenceLogprobs, rolloutStats, rolloutStatsFromMetrics, rolloutStatsMetrics, skipReason, stepVerdict, type RolloutStats } from '../training/step';
import { failuresMapped, spanned, withHeartbeats, type WorkerContext } from './context';
import { referenceOf } from './reference';
import { asRolloutFailure, measured, RunPolicies } from './rollout';
import { budgetVerdict, claimBatch, heldTrainerWeights, oneStepAtATime, skipStep, startStep, trainOnBatch, type Claim, type Pipelining, type TrainStepInput, type TrainStepResult } from './train';

/** What the step's rollout produced, for the workflow's progress (the samples stay in Postgres). */
export interface ColocatedRollout extends RolloutStats {
  busyMs: number;
}

export interface ColocatedStepResult extends TrainStepResult {
  rollout: ColocatedRollout;
}

// One engine per run in this process, switched to the trainer's versions as it publishes them: the
// trainer's own weights when it holds that version (every step but a new instance's first).
const policies = new RunPolicies('colocated.policy', async (ctx, run, v) => (await heldTrainerWeights(run.runId, v)) ?? loadPolicyWeights(ctx.pool, run, v));

/** Generates iteration step - 1 here, with the reference log-probs when the KL term is on. */
async function generateHere(ctx: WorkerContext, run: RunContext, input: TrainStepInput, iteration: number): Promise<{ samples: NewSample[]; dapo?: DapoCounts }> {
  const config = input.hyperparameters ? withHyperparameters(run.config, input.hyperparameters) : run.config;
  const policy = await policies.of(ctx, run);
  await failuresMapped(() => policy.atVersion(input.fromVersion));
  return spanned(ctx, run.runId, 'generate', { iteration, policyVersion: input.fromVersion }, async () => {
    const engine = measured(policy.engine, 'local', ctx.figures);
    const { samples, dapo } = await rolloutSliceWithStats({ config, task: run.task, engine, ...(run.media ? { media: run.media } : {}) }, { iteration, firstGroup: 0, groups: config.rollout.prompts_per_step }).catch((err: Error) => {
      throw asRolloutFailure(err);
    });
    if (referenceLogprobsNeeded(config.algorithm, config.algorithm.kl_coef)) await attachReferenceLogprobs(await referenceOf(ctx, run), samples, run.media);
    return { samples, ...(dapo ? { dapo } : {}) };
  });
}

/** The step's batch made here: generated, checked against the failure budget, held in memory and recorded in the transfer queue meanwhile. */
async function freshBatch(ctx: WorkerContext, run: RunContext, input: TrainStepInput, iteration: number, report: (r: ColocatedRollout) => void): Promise<Claim> {
  const { runId, step, fromVersion } = input;
  const c = input.hyperparameters ? withHyperparameters(run.config, input.hyperparameters) : run.config;
  const started = Date.now();
  // A version an earlier attempt published before it died (its set unrecorded) is adopted, not trained again.
  const [{ samples, dapo }, publishedBefore] = await Promise.all([generateHere(ctx, run, input, iteration), getCheckpoint(ctx.pool, runId, fromVersion + 1)]);
  const rollout = { ...rolloutStats(samples), busyMs: Date.now() - started };
  report(rollout);
  const rolloutMetrics = { ...rolloutStatsMetrics(rollout), ...dapoMetrics(dapo), rollout_busy_ms: rollout.busyMs, temperature: c.rollout.temperature, top_p: c.rollout.top_p };
  // Over the budget (the run fails) or skipped, the samples are written for their errors to be read.
  const budget = c.train.failure_budget;
  const write = () => insertSamples(ctx.pool, runId, samples, { engine: ctx.identity });
  let verdict: 'train' | 'skip';
  try {
    verdict = stepVerdict(rollout, budget, step);
  } catch (err) {
    await write();
    verdict = await budgetVerdict(ctx, run, rollout, step, iteration, budget); // throws again, naming the scorer and the first error
  }
  if (verdict === 'skip') {
    await write();
    return { done: await skipStep(ctx, { runId, step, fromVersion, reason: skipReason(rollout, budget, step), rolloutMetrics }) };
  }
  // The same rules as the transfer queue (float32 numbers, key order), applied in memory.
  const request = { size: rollout.samples, iteration, requireRefLogprobs: referenceLogprobsNeeded(c.algorithm, c.algorithm.kl_coef), fromVersion };
  const buffer = new InMemorySampleBuffer();
  await buffer.put(samples);
  const batch = (await buffer.claim(step, request)) ?? [];
  // The samples written and recorded as the step's set in one transaction, with the advantages.
  const record = async (advantages: number[]) => {
    const trained = batch.map((b, i) => ({ iteration: b.iteration, groupIndex: b.groupIndex, sampleIndex: b.sampleIndex, advantage: advantages[i] }));
    const recorded = await recordGeneratedStep(ctx.pool, runId, step, samples, trained, { engine: ctx.identity });
    if (recorded.reused && !sameKeys(recorded.keys, batch)) {
      throw ApplicationFailure.create({ message: `step ${step} of run ${runId}: the transfer queue recorded another sample set (${recorded.keys.length} samples) than the ${batch.length} generated for it; retrying the step trains on the recorded set`, type: 'NoSamples' satisfies RetryableFailureType });
    }
  };
  return { samples: batch, record, rolloutMetrics, publishedBefore };
}

function sameKeys(a: ReadonlyArray<{ iteration: number; groupIndex: number; sampleIndex: number }>, b: readonly TrainSample[]): boolean {
  return a.length === b.length && a.every((k, i) => k.iteration === b[i].iteration && k.groupIndex === b[i].groupIndex && k.sampleIndex === b[i].sampleIndex);
}

/** The step's rollout figures when it was not generated by this attempt: its recorded metrics, else its samples in the transfer queue. */
async function recordedRollout(ctx: WorkerContext, result: TrainStepResult, runId: string, iteration: number): Promise<ColocatedRollout> {
  const recorded = rolloutStatsFromMetrics(result.metrics);
  if (recorded) return { ...recorded, busyMs: result.metrics.rollout_busy_ms ?? 0 };
  return { ...rolloutStats(await readSamples(ctx.pool, runId, { iteration })), busyMs: 0 };
}

/** A colocated step's input: without `fromVersion`, the version the step before it leaves (the workflow queued it behind that step). */
export type ColocatedStepInput = Omit<TrainStepInput, 'fromVersion' | 'iteration' | 'maxStaleness' | 'rollout'> & { fromVersion?: number };

interface Deferred<T> {
  promise: Promise<T>;
  resolve(value: T): void;
  reject(err: unknown): void;
}

function deferred<T>(): Deferred<T> {
  const d = {} as Deferred<T>;
  d.promise = new Promise<T>((resolve, reject) => Object.assign(d, { resolve, reject }));
  d.promise.catch(() => undefined); // read by the next step, if any
  return d;
}

// The colocated steps in flight in this process, by run and step: the version each leaves the
// trainer at (known once its update is done) and whether it completed (samples recorded, version
// published, step applied). The step queued behind one generates as soon as the first is known and
// publishes only after the second.
const inFlight = new Map<string, { updated: Deferred<number>; done: Deferred<void>; updatedAt: number }>();

/** The version step `step` left the trainer at: told by that step in this process, else read from its record once another attempt has applied or skipped it. */
async function versionAfter(ctx: WorkerContext, runId: string, step: number, here: { updated: Deferred<number> } | undefined): Promise<{ version: number; fromHere: boolean }> {
  if (here) {
    const version = await here.updated.promise.catch(() => undefined);
    if (version !== undefined) return { version, fromHere: true };
  }
  return { version: await recordedVersionAfter(ctx, runId, step), fromHere: false };
}

async function recordedVersionAfter(ctx: WorkerContext, runId: string, step: number): Promise<number> {
  if (step === 0) return 0;
  const until = Date.now() + PREVIOUS_STEP_WAIT_MS;
  for (;;) {
    const recorded = await getTrainStep(ctx.pool, runId, step);
    if (recorded?.status === 'applied') return recorded.policyVersion as number;
    if (recorded?.status === 'skipped') return (await latestCheckpoint(ctx.pool, runId))?.policyVersion ?? 0;
    if (Date.now() > until) {
      throw ApplicationFailure.create({ message: `step ${step + 1} of run ${runId} starts from the version step ${step} publishes, and step ${step} is not applied yet`, type: 'MissingPolicyVersion' satisfies RetryableFailureType });
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** How long a queued step waits for the step before it to be applied by another attempt. */
const PREVIOUS_STEP_WAIT_MS = 60_000;

/** Rollout of iteration step - 1 and train step `step`, here, exactly once. */
async function colocatedStep(ctx: WorkerContext, input: ColocatedStepInput): Promise<ColocatedStepResult> {
  const { runId, step } = input;
  const iteration = step - 1;
  const mine = { updated: deferred<number>(), done: deferred<void>(), updatedAt: 0 };
  const before = inFlight.get(`${runId}#${step - 1}`);
  inFlight.set(`${runId}#${step}`, mine);
  try {
    // What does not depend on the step ahead is read while it trains.
    const early = startStep(ctx, input, input.fromVersion === undefined ? { step, afterStep: step - 1 } : { step, fromVersion: input.fromVersion });
    early.catch(() => undefined); // awaited below, unless the wait for the step ahead fails first
    const after = input.fromVersion === undefined ? await versionAfter(ctx, runId, step - 1, before) : { version: input.fromVersion, fromHere: false };
    const fromVersion = after.version;
    // Pipelined: the step starts when the one ahead of it is updated, and the trainer waited no longer than that.
    const started = after.fromHere && before ? early.then((s) => ({ ...s, startedAt: new Date(), previousEnd: new Date(before.updatedAt) })) : early;
    const stepInput: TrainStepInput = { ...input, fromVersion, iteration };
    let rollout: ColocatedRollout | undefined;
    const pipelining: Pipelining = {
      updated: (version) => {
        mine.updatedAt = Date.now();
        mine.updated.resolve(version);
      },
      // Trained from the step before's weights in this process: published only if that step completes here.
      beforePublish: async () => {
        if (after.fromHere) await before?.done.promise;
      },
    };
    // A step with no record yet generates its batch here; one with a record (a retry after its set
    // was recorded) claims the recorded set like any train step, or finds it done.
    const start = await started;
    const claim = start.recorded ? await claimBatch(ctx, start.run, { ...stepInput, iteration }, start.recorded) : await freshBatch(ctx, start.run, stepInput, iteration, (r) => (rollout = r));
    const result = 'done' in claim ? claim.done : await trainOnBatch(ctx, stepInput, start, claim, pipelining);
    mine.updatedAt ||= Date.now();
    mine.updated.resolve(result.policyVersion);
    mine.done.resolve();
    return { ...result, rollout: rollout ?? (await recordedRollout(ctx, result, runId, iteration)) };
  } catch (err) {
    mine.updated.reject(err);
    mine.done.reject(err);
    throw err;
  } finally {
    if (inFlight.get(`${runId}#${step}`) === mine) inFlight.delete(`${runId}#${step}`);
  }
}

export function createColocatedActivities(ctx: WorkerContext) {
  return {
    colocatedStep: (input: ColocatedStepInput) => failuresMapped(() => oneStepAtATime(`${input.runId}#${input.step}`, () => withHeartbeats(() => colocatedStep(ctx, input)))),
  };
}

export type ColocatedActivities = ReturnType<typeof createColocatedActivities>;
