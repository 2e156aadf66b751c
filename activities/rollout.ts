// Rollout stage activities, served by every rollout worker on the shared rollout queue: generate one
// slice of an iteration into the transfer queue (rollout/producers.ts does the work), and evaluate
// a policy version on the held-out prompts. Each run's policy lives on one engine per process
// (rollout/policy-engine.ts), switched to the versions the trainer publishes. Errors a retry cannot
// fix leave as non-retryable failures of a stable type (activities/context.ts asActivityFailure).
import { ApplicationFailure } from '@temporalio/activity';
import { backOff } from 'exponential-backoff';
import { withHyperparameters, type Hyperparameters } from '../config/hyperparameters';
import { shortened } from '../config/json-limits';
import { evaluateGreedy } from '../rollout/evaluate';
import type { GenerationEngine } from '../engines/rollout';
import { hasFrozenParameters, type PolicyWeights } from '../engines/model';
import { PolicyEngine } from '../rollout/policy-engine';
import { EngineUnconfirmedError, RemoteRolloutEngine } from '../rollout/remote-engine';
import { rolloutSliceWithStats, type RolloutSlice } from '../rollout/producers';
import type { DapoCounts } from '../engines/rl/dapo';
import { agentEndpoints } from '../serving/agent-endpoint';
import { CheckpointPrunedError, latestCheckpoint } from '../store/checkpoint-registry';
import { recordMetrics } from '../store/metrics';
import { tensorboardScalars } from './run-tensorboard';
import { runningRunIds } from '../store/runs';
import { loadPolicyWeights } from '../training/policy-versions';
import type { RunContext } from '../training/run-context';
import { runState, whenLoaded, type RunSlot } from '../training/run-state';
import { transferQueueBuffer } from '../training/sample-buffer';
import { rolloutStats, type RolloutStats } from '../training/step';
import { assertAttemptCurrent, asActivityFailure, FAILURE_MESSAGE_MAX_CHARS, failuresMapped, runContext, spanned, withHeartbeats, workerInfoActivity, type EngineFigures, type ExternalEngineHandle, type WorkerContext } from './context';
import type { LoadedVersion } from './reports';

export type { LoadedVersion } from './reports';

export interface GenerateActivityInput extends RolloutSlice {
  runId: string;
  policyVersion: number;
  /** The hyperparameters in force (setHyperparameters): sampling uses their temperature and top_p; absent: the config's. */
  hyperparameters?: Hyperparameters;
}

/** A slice's rollout statistics (training/step.ts rolloutStats): the train step merges the iteration's slices. */
export interface GenerateResult extends RolloutStats {
  worker: string;
  /** With algorithm.dapo: the slice's dynamic sampling and overlong counts (the train step records them as metrics). */
  dapo?: DapoCounts;
}

/**
 * One policy engine per run in this process, made on first use and switched between the run's
 * versions (one version's weights kept: versions only move forward here). `loadWeights` defaults
 * to the run's published checkpoints; the colocated step gives the trainer's own weights first.
 */
export class RunPolicies {
  private readonly engines: RunSlot<Promise<PolicyEngine>>;

  /** `slot`: the name of the run state slot its engines live in (training/run-state.ts), released with the run. */
  constructor(
    slot: string,
    private readonly loadWeights: (ctx: WorkerContext, run: RunContext, version: number) => Promise<PolicyWeights> = (ctx, run, v) => loadPolicyWeights(ctx.pool, run, v),
  ) {
    this.engines = runState.slot(slot, whenLoaded((engine: PolicyEngine) => engine.release()));
  }

  of(ctx: WorkerContext, run: RunContext): Promise<PolicyEngine> {
    let policy = this.engines.get(run.runId);
    if (!policy) {
      policy = PolicyEngine.create(
        ctx.pool,
        { runId: run.runId, model: run.model, tokenizer: run.task.tokenizer() },
        { loadWeights: (v) => this.loadWeights(ctx, run, v), cachedVersions: 1, ...(hasFrozenParameters(run.model) && run.policy.baseWeights ? { frozenWeights: run.policy.baseWeights } : {}) },
      );
      this.engines.set(run.runId, policy);
      const failed = policy;
      failed.catch(() => this.engines.delete(run.runId, failed));
    }
    return policy;
  }

  /** The engine of a run already made here (undefined otherwise). */
  get(runId: string): Promise<PolicyEngine> | undefined {
    return this.engines.get(runId);
  }

  runIds(): string[] {
    return this.engines.runIds();
  }
}

const policies = new RunPolicies('rollout.policy');

/**
 * The run's policy at `version`: the local engine, or the external one this worker drives. A switch
 * to another version (the weight sync) and every generate call are counted in the worker's figures.
 */
async function policyAt(ctx: WorkerContext, run: RunContext, version: number): Promise<Pick<PolicyEngine, 'followNewVersions'> & { engine: GenerationEngine }> {
  const t0 = performance.now();
  if (ctx.externalEngine) {
    const before = remotes.get(run.runId)?.policyVersion;
    const remote = await externalAt(ctx, ctx.externalEngine, run, version);
    if (before !== version) ctx.figures?.synced({ engine: 'external', seconds: (performance.now() - t0) / 1000 });
    return { engine: measured(remote.at(version), 'external', ctx.figures), followNewVersions: () => ({ followUpdates: true }) };
  }
  const policy = await policies.of(ctx, run);
  const before = policy.policyVersion;
  await failuresMapped(() => policy.atVersion(version));
  if (before !== version) ctx.figures?.synced({ engine: 'local', seconds: (performance.now() - t0) / 1000 });
  return { engine: measured(policy.engine, 'local', ctx.figures), followNewVersions: () => policy.followNewVersions() };
}

/** The engine with each generate call's batch size, response tokens and time reported to `figures`. */
export function measured(engine: GenerationEngine, kind: 'local' | 'external', figures: EngineFigures | undefined): GenerationEngine {
  if (!figures) return engine;
  return {
    get model() {
      return engine.model;
    },
    get policyVersion() {
      return engine.policyVersion;
    },
    generate: async (prompts, params, media) => {
      const t0 = performance.now();
      const out = await engine.generate(prompts, params, media);
      figures.generated({ engine: kind, sequences: out.length, tokens: out.reduce((n, s) => n + s.tokens.length, 0), seconds: (performance.now() - t0) / 1000 });
      return out;
    },
  };
}

// An external engine's view of each run, in a worker started with RELAX_ENGINE_URL (no resources of its own: released with the run by forgetting it).
const remotes = runState.slot<RemoteRolloutEngine>('rollout.external');

/**
 * The external engine told to load `version` and confirmed; one that cannot confirm is marked
 * failed, this worker stops taking work, and the activity fails retryably (type EngineUnhealthy)
 * so that another worker takes it: never a sample from a stale engine.
 */
async function externalAt(ctx: WorkerContext, ext: ExternalEngineHandle, run: RunContext, version: number): Promise<RemoteRolloutEngine> {
  let remote = remotes.get(run.runId);
  if (!remote) remotes.set(run.runId, (remote = new RemoteRolloutEngine(ctx.pool, run.runId, run.model, run.config, { url: ext.url, token: ext.token, checkpoints: ext.checkpoints })));
  try {
    return await remote.atVersion(version);
  } catch (err) {
    throw await asEngineFailure(ext, err);
  }
}

/** EngineUnconfirmedError: the engine is marked failed and the failure is EngineUnhealthy; anything else is mapped as usual. */
async function asEngineFailure(ext: ExternalEngineHandle | undefined, err: unknown): Promise<unknown> {
  if (!(ext && err instanceof EngineUnconfirmedError)) return asActivityFailure(err);
  await ext.unhealthy(err.message);
  return ApplicationFailure.create({ message: shortened(err.message, FAILURE_MESSAGE_MAX_CHARS), type: 'EngineUnhealthy' });
}

// One OpenAI-compatible endpoint per rollout worker process, started the first time a run uses
// agent rollouts (serving/agent-endpoint.ts).
const agentEndpoint = agentEndpoints(policies);

/**
 * Rollout stage: generates group_size responses for each prompt of a slice of the iteration, scores
 * them, and writes them to the transfer queue (a retry overwrites its own rows). A reward function
 * that throws marks that sample failed with its error; the run goes on.
 */
async function generate(ctx: WorkerContext, input: GenerateActivityInput): Promise<GenerateResult> {
  const run = await runContext(ctx, input.runId);
  const config = input.hyperparameters ? withHyperparameters(run.config, input.hyperparameters) : run.config;
  const policy = await policyAt(ctx, run, input.policyVersion);
  const { samples, dapo } = await rolloutSliceWithStats(
    {
      config,
      task: run.task,
      engine: policy.engine,
      agentEndpoint: () => agentEndpoint(run.runId),
      ...(run.media ? { media: run.media } : {}),
      ...(run.config.rollout.in_flight === 'continue' ? { followUpdates: policy.followNewVersions() } : {}),
    },
    input,
  ).catch(async (err: Error) => {
    if (err instanceof EngineUnconfirmedError) throw await asEngineFailure(ctx.externalEngine, err);
    throw asRolloutFailure(err);
  });
  assertAttemptCurrent(); // an attempt Temporal gave up on (timed out, superseded) writes nothing over its retry's
  // The sampling this iteration used, as metrics of the step that trains on it (step = iteration + 1).
  await Promise.all([transferQueueBuffer(ctx.pool, input.runId, { engine: ctx.identity }).put(samples), recordMetrics(ctx.pool, input.runId, input.iteration + 1, { temperature: config.rollout.temperature, top_p: config.rollout.top_p })]);
  return { ...rolloutStats(samples), ...(dapo ? { dapo } : {}), worker: ctx.identity };
}

/** A rollout's error as a Temporal failure: a known type keeps its type, anything else is RolloutFailed (retryable). */
export function asRolloutFailure(err: Error): unknown {
  const mapped = asActivityFailure(err);
  return mapped !== err ? mapped : ApplicationFailure.create({ message: shortened(`rollout failed: ${err.message}`, FAILURE_MESSAGE_MAX_CHARS), type: 'RolloutFailed' });
}

/** Held-out greedy accuracy of one policy version; recorded as the step's eval metrics when `step` is given. */
async function evaluate(ctx: WorkerContext, { runId, policyVersion, step }: { runId: string; policyVersion: number; step?: number }): Promise<{ accuracy: number }> {
  const run = await runContext(ctx, runId);
  const policy = await policyAt(ctx, run, policyVersion);
  const { accuracy, metrics } = await evaluateGreedy(policy.engine, run.task, run.task.heldOut(), run.config.rollout.max_new_tokens);
  const evalMetrics = Object.fromEntries(Object.entries(metrics ?? {}).map(([k, v]) => [`eval_${k}`, v]));
  if (step !== undefined) {
    await recordMetrics(ctx.pool, runId, step, { ...evalMetrics, eval_accuracy: accuracy });
    tensorboardScalars(run, step, { ...evalMetrics, eval_accuracy: accuracy });
  }
  return { accuracy };
}

const isPruned = (err: unknown) => err instanceof CheckpointPrunedError || (err instanceof ApplicationFailure && err.type === 'PrunedPolicyVersion');

/**
 * The newest published version of `runId` loaded on this engine, or why it could not load. A version
 * is pruned by retention once newer ones are published: the newest is taken again (3 tries in all).
 */
async function loadNewestVersion(ctx: WorkerContext, runId: string): Promise<LoadedVersion | undefined> {
  const attempt: { tried?: LoadedVersion } = {};
  try {
    return await backOff(async () => {
      attempt.tried = undefined;
      const newest = await latestCheckpoint(ctx.pool, runId);
      if (!newest) return undefined;
      attempt.tried = { runId, policyVersion: newest.policyVersion };
      const run = await runContext(ctx, runId);
      await (ctx.externalEngine ? externalAt(ctx, ctx.externalEngine, run, newest.policyVersion) : (await policies.of(ctx, run)).atVersion(newest.policyVersion));
      return { ...attempt.tried, sha256: newest.sha256 };
    }, { numOfAttempts: 3, startingDelay: 0, retry: isPruned });
  } catch (err) {
    // An external engine that cannot confirm fails the weight sync (and is marked failed); so does the registry's own failure.
    if (!attempt.tried || (err instanceof ApplicationFailure && err.type === 'EngineUnhealthy')) throw err;
    return { ...attempt.tried, error: shortened((err as Error).message, 300) };
  }
}

/**
 * Weight sync of a new engine (a scale-out's WEIGHT_SYNCING step, scheduled on this worker's own
 * instance queue): loads the newest published version of every running run from the checkpoint
 * registry (sha256-checked), so its first generate does not wait for it. A run whose version cannot
 * load is reported, not thrown: the engine still loads versions on demand per generate activity.
 */
async function loadLatestVersions(ctx: WorkerContext): Promise<LoadedVersion[]> {
  const loaded: LoadedVersion[] = [];
  for (const runId of await runningRunIds(ctx.pool)) {
    const version = await loadNewestVersion(ctx, runId);
    if (version) loaded.push(version);
  }
  return loaded;
}

export function createRolloutActivities(ctx: WorkerContext) {
  return {
    workerInfo: workerInfoActivity(ctx),
    generate: (input: GenerateActivityInput) =>
      failuresMapped(() => withHeartbeats(() => spanned(ctx, input.runId, 'generate', { iteration: input.iteration, policyVersion: input.policyVersion }, () => generate(ctx, input)))),
    evaluate: (input: { runId: string; policyVersion: number; step?: number }) =>
      failuresMapped(() => withHeartbeats(() => spanned(ctx, input.runId, 'evaluate', { ...(input.step !== undefined ? { step: input.step } : {}), policyVersion: input.policyVersion }, () => evaluate(ctx, input)))),
    loadLatestVersions: () => withHeartbeats(() => loadLatestVersions(ctx)),
  };
}

export type RolloutActivities = ReturnType<typeof createRolloutActivities>;
