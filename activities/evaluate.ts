// The sampled-evaluation activity, served by rollout workers on the shared rollout queue: loads one
// policy version of a run (any version the checkpoint registry retains, on an engine made for the
// evaluation and released after it, so a training run's rollouts on this worker keep theirs), samples k completions per prompt
// of the held-out set (or a JSONL dataset) at a temperature, scores them with the run's reward, and
// records pass@1, pass@k, maj@k and mean@k in the evaluations table and as the run's metrics at the
// step that published the version (Postgres, Prometheus, TensorBoard).
import { ApplicationFailure, Context } from '@temporalio/activity';
import { evaluationMetrics, HELD_OUT_DATASET, parseEvaluationInput, type EvaluationInput, type EvaluationRequest, type EvaluationResult } from '../config/evaluation';
import { readDatasetRows } from '../envs/datasets';
import { checkDataPathAllowed } from '../envs/module-policy';
import type { TaskPrompt } from '../envs/task';
import { loadRewardFunction } from '../envs/user-modules';
import { evaluateSampled, SampledEvalError } from '../rollout/evaluate';
import { getCheckpoint, retainedVersions } from '../store/checkpoint-registry';
import { findEvaluation, recordEvaluation } from '../store/evaluations';
import { recordMetrics } from '../store/metrics';
import type { RunContext } from '../training/run-context';
import { loadPolicyWeights } from '../training/policy-versions';
import { PolicyEngine } from '../rollout/policy-engine';
import type { ThreadedRolloutEngine } from '../engines/rollout-thread';
import { hasFrozenParameters } from '../engines/model';
import { failuresMapped, runContext, spanned, withHeartbeats, type WorkerContext } from './context';
import { tensorboardScalars } from './run-tensorboard';

/**
 * `fn` on an engine of this evaluation's own at `version`, released when it returns: apart from the
 * engine the run's rollouts generate with on this worker, and outside the run state the worker's
 * reaper releases once a run's workflow has closed (an evaluation of a finished run keeps its engine).
 */
async function withEngineAt<T>(ctx: WorkerContext, run: RunContext, version: number, fn: (engine: ThreadedRolloutEngine) => Promise<T>): Promise<T> {
  const frozen = hasFrozenParameters(run.model) && run.policy.baseWeights ? { frozenWeights: run.policy.baseWeights } : {};
  const policy = await failuresMapped(() => PolicyEngine.create(ctx.pool, { runId: run.runId, model: run.model, tokenizer: run.task.tokenizer() }, { loadWeights: (v) => loadPolicyWeights(ctx.pool, run, v), cachedVersions: 1, ...frozen }));
  try {
    return await fn(await failuresMapped(() => policy.atVersion(version)));
  } finally {
    await policy.release();
  }
}

/** A failure a retry cannot fix, of type `InvalidEvaluation`. */
function invalid(message: string): ApplicationFailure {
  return ApplicationFailure.create({ message, type: 'InvalidEvaluation', nonRetryable: true });
}

function checkedRequest(input: EvaluationInput): EvaluationRequest {
  try {
    return parseEvaluationInput(input);
  } catch (err) {
    throw invalid((err as Error).message);
  }
}

/** The prompts: the run's held-out set or the dataset's rows (raw prompt strings and answers), the first max_prompts of them. */
async function promptsOf(run: RunContext, request: EvaluationRequest): Promise<TaskPrompt[]> {
  let prompts: TaskPrompt[];
  if (request.dataset === undefined) prompts = run.task.heldOut();
  else {
    const data = run.config.data;
    checkDataPathAllowed('dataset', request.dataset); // NotAllowed: outside this worker's RELAX_ALLOWED_DATA_ROOTS
    const rows = await readDatasetRows(request.dataset, data ? { prompt_field: data.prompt_field, answer_field: data.answer_field } : {}).catch((err: Error) => {
      throw invalid(`dataset: ${err.message}`);
    });
    const bad = rows.find((r) => r.prompt === undefined || r.images?.length || r.audio?.length);
    if (bad) throw invalid(`dataset: ${bad.source}: evaluation datasets hold raw prompt strings and answers (no chat messages, no media): write the prompt as the policy sees it`);
    prompts = rows.map((r) => ({ text: r.prompt as string, answer: r.answer }));
  }
  return request.maxPrompts === undefined ? prompts : prompts.slice(0, request.maxPrompts);
}

/** The version asked for: a number (published and retained), or the newest retained one; undefined when the run has none yet. */
async function versionOf(ctx: WorkerContext, request: EvaluationRequest): Promise<number | undefined> {
  if (typeof request.version === 'number') {
    const retained = await retainedVersions(ctx.pool, request.runId);
    if (!(await getCheckpoint(ctx.pool, request.runId, request.version))) {
      throw invalid(`version: run ${request.runId} has no policy version ${request.version}; ${retained.length ? `its retained versions are ${retained.join(', ')}` : 'it has published none yet'}`);
    }
    return request.version;
  }
  const retained = await retainedVersions(ctx.pool, request.runId);
  return retained[retained.length - 1];
}

function skipped(request: EvaluationRequest, why: string, o: { policyVersion?: number; step?: number; prompts?: number } = {}): EvaluationResult {
  const dataset = request.dataset ?? HELD_OUT_DATASET;
  return { runId: request.runId, policyVersion: o.policyVersion ?? -1, step: o.step ?? -1, k: request.k, temperature: request.temperature, dataset, prompts: o.prompts ?? 0, seed: request.seed, pass_at_1: 0, pass_at_k: 0, maj_at_k: 0, mean_at_k: 0, skipped: why };
}

/** Evaluates one version as the request says, records it, and returns the scores (or why it skipped). */
async function evaluateVersion(ctx: WorkerContext, input: EvaluationInput, workflowId?: string): Promise<EvaluationResult> {
  const request = checkedRequest(input);
  const run = await runContext(ctx, request.runId);
  const version = await versionOf(ctx, request);
  if (version === undefined) {
    if (request.version === 'unevaluated') return skipped(request, `run ${request.runId} has published no policy version yet`);
    throw invalid(`version: run ${request.runId} has published no policy version yet (version 0 is published when the run starts): try again once it has`);
  }
  const step = (await getCheckpoint(ctx.pool, request.runId, version))?.step ?? 0;
  const prompts = await promptsOf(run, request);
  if (prompts.length === 0) throw invalid(`${request.dataset ? 'dataset' : 'held-out set'}: has no prompts to evaluate`);
  const key = { runId: request.runId, policyVersion: version, dataset: request.dataset ?? HELD_OUT_DATASET, k: request.k, temperature: request.temperature, prompts: prompts.length, seed: request.seed };
  if (request.version === 'unevaluated' && (await findEvaluation(ctx.pool, key))) {
    return skipped(request, `version ${version} was already evaluated with these settings`, { policyVersion: version, step, prompts: prompts.length });
  }
  const reward = await failuresMapped(() => loadRewardFunction(run.config.reward));
  const sampling = { k: request.k, temperature: request.temperature, topP: run.config.rollout.top_p, seed: request.seed, maxNewTokens: run.config.rollout.max_new_tokens, reward, rewardTimeoutMs: run.config.reward.timeout_ms };
  const scores = await withEngineAt(ctx, run, version, (engine) => evaluateSampled(engine, run.task, prompts, sampling)).catch((err: Error) => {
    throw err instanceof SampledEvalError ? invalid(err.message) : err;
  });
  const result: EvaluationResult = { ...key, step, temperature: request.temperature, ...scores };
  await recordEvaluation(ctx.pool, { ...key, step, passAt1: scores.pass_at_1, passAtK: scores.pass_at_k, majAtK: scores.maj_at_k, meanAtK: scores.mean_at_k, ...(workflowId ? { workflowId } : {}) });
  const metrics = evaluationMetrics(result);
  await recordMetrics(ctx.pool, request.runId, step, metrics);
  tensorboardScalars(run, step, metrics);
  return result;
}

export function createEvaluateActivities(ctx: WorkerContext) {
  return {
    evaluateSamples: (input: EvaluationInput) =>
      failuresMapped(() =>
        withHeartbeats(() => {
          const workflowId = Context.current().info.workflowExecution?.workflowId;
          const where = typeof input.version === 'number' ? { policyVersion: input.version } : {};
          return spanned(ctx, input.run_id, 'evaluate_samples', where, () => evaluateVersion(ctx, input, workflowId));
        }),
      ),
  };
}

export type EvaluateActivities = ReturnType<typeof createEvaluateActivities>;
