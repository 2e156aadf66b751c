// Rollout stage activities: served by every rollout worker, on the shared rollout queue.
import { ApplicationFailure } from '@temporalio/activity';
import { RolloutEngine, type SamplingParams } from '../engines/rollout';
import { latestCheckpoint } from '../store/checkpoint-registry';
import { mulberry32 } from '../envs/random';
import { UserModuleError } from '../envs/user-modules';
import { insertSamples, type NewSample } from '../store/transfer-queue';
import { evaluateGreedy } from '../training/evaluate';
import { samplingParams } from '../training/grpo';
import { agentRows, customGenerateRows, episodeRows, singleTurnRows, type AgentEndpoint } from '../training/rollout-rows';
import { modelNotFound, startOpenAIServer, type OpenAIServer } from '../serve/openai-server';
import { recordMetrics } from '../store/metrics';
import { checkpointToLoad, recordStageEvent, spanned, sleepWithHeartbeats, withHeartbeats, workerInfoActivity, type WorkerContext } from './context';
import { runContext, type RunContext } from './run-context';

export interface GenerateInput {
  runId: string;
  iteration: number;
  /** This activity's slice of the iteration's prompt groups. */
  firstGroup: number;
  groups: number;
  policyVersion: number;
}

export interface GenerateResult {
  samples: number;
  failed: number;
  rewardSum: number;
  worker: string;
}

/** The prompts of one iteration, the same on every rollout worker and every retry. */
export function iterationPrompts(run: RunContext, iteration: number) {
  return run.task.trainPrompts(run.config.seed * 1_000_003 + iteration + 1, run.config.rollout.prompts_per_step);
}

// One engine per run in this process, switched to new policy versions as the trainer publishes them
// (weights are graph inputs, so a version switch is a file read, not a session rebuild).
const engines = new Map<string, RolloutEngine>();

async function engineAt(ctx: WorkerContext, run: RunContext, version: number): Promise<RolloutEngine> {
  let engine = engines.get(run.runId);
  if (!engine) {
    engine = await RolloutEngine.create(run.model, { intraOpNumThreads: 1 });
    engines.set(run.runId, engine);
  }
  if (engine.policyVersion !== version) {
    const checkpoint = await checkpointToLoad(ctx, run.runId, version);
    await engine.loadCheckpoint(checkpoint.path, { sha256: checkpoint.sha256 });
  }
  return engine;
}

/**
 * Partial rollout (rollout.in_flight "continue"): before each decode step, at most every 20 ms, look
 * for a newer published version of the run and switch the engine to it; the rest of the call's
 * tokens come from it and record so.
 */
function followNewVersions(ctx: WorkerContext, run: RunContext, engine: RolloutEngine): Pick<SamplingParams, 'followUpdates' | 'beforeDecodeStep'> {
  let lastCheck = 0;
  return {
    followUpdates: true,
    beforeDecodeStep: async () => {
      if (Date.now() - lastCheck < 20) return;
      lastCheck = Date.now();
      const latest = await latestCheckpoint(ctx.pool, run.runId);
      if (latest && !latest.prunedAt && latest.policyVersion > (engine.policyVersion ?? -1)) {
        await engine.loadCheckpoint(latest.path, { sha256: latest.sha256 });
      }
    },
  };
}

// One OpenAI-compatible endpoint per rollout worker process, started the first time a run uses
// agent rollouts: model "<run_id>" is that run's engine at whatever version its current generate
// activity loaded. Agents reach it on loopback.
let endpoint: Promise<OpenAIServer> | undefined;
async function agentEndpoint(ctx: WorkerContext, run: RunContext): Promise<AgentEndpoint> {
  endpoint ??= startOpenAIServer({
    resolveModel: async (model) => {
      const engine = engines.get(model);
      if (!engine || engine.policyVersion === undefined) throw modelNotFound(model, 'this rollout worker serves the runs it is generating for, by run id');
      // An engine exists only for a run this worker generated for, so its context is cached too.
      return { engine, tokenizer: (await runContext(ctx.pool, model)).task.tokenizer(), policyVersion: engine.policyVersion };
    },
    listModels: async () => [...engines.keys()],
  });
  const server = await endpoint;
  return { url: server.url, sessions: server.sessions, model: run.runId };
}
export interface SmokeRolloutInput {
  runId: string;
  iteration: number;
  samples: number;
  groupSize: number;
  /** Stretches the activity so tests can kill the worker while it runs. */
  delayMs: number;
  seed: number;
}

export function createRolloutActivities(ctx: WorkerContext) {
  return {
    workerInfo: workerInfoActivity(ctx),

    /** Smoke stage: writes `samples` synthetic samples to the transfer queue (idempotent per key). */
    async smokeRollout(input: SmokeRolloutInput): Promise<{ samples: number; worker: string }> {
      await recordStageEvent(ctx, input.runId, 'activity_started');
      await sleepWithHeartbeats(input.delayMs);
      // Seeded: a retried rollout writes the same samples.
      const next = mulberry32(input.seed * 1_000_003 + input.iteration);
      const rows: unknown[][] = [];
      for (let i = 0; i < input.samples; i++) {
        const prompt = [1, 2, 3].map(() => Math.floor(next() * 100));
        const response = [Math.floor(next() * 100), 0];
        const logprobs = response.map(() => Math.log(0.05 + 0.9 * next()));
        rows.push([input.runId, input.iteration, Math.floor(i / input.groupSize), i % input.groupSize, prompt, response, response.map(() => 1), logprobs, next() < 0.5 ? 1 : 0]);
      }
      // One multi-row INSERT: the embedded database pays ~1 ms per statement.
      const values = rows.map((_, r) => `(${Array.from({ length: 9 }, (_, c) => `$${r * 9 + c + 1}`).join(', ')}, 0)`).join(', ');
      await ctx.pool.query(
        `INSERT INTO samples (run_id, iteration, group_index, sample_index, prompt_tokens, response_tokens, loss_mask, rollout_logprobs, reward, policy_version)
         VALUES ${values}
         ON CONFLICT (run_id, iteration, group_index, sample_index) DO UPDATE
           SET response_tokens = EXCLUDED.response_tokens, rollout_logprobs = EXCLUDED.rollout_logprobs,
               reward = EXCLUDED.reward, updated_at = now()`,
        rows.flat(),
      );
      await recordStageEvent(ctx, input.runId, 'activity_completed', { samples: rows.length });
      return { samples: rows.length, worker: ctx.identity };
    },
  };
}

export function createRolloutTrainingActivities(ctx: WorkerContext) {
  return {
    /**
     * Rollout stage: generates group_size responses for each prompt of a slice of the iteration,
     * scores them, and writes them to the transfer queue (a retry overwrites its own rows). A reward
     * function that throws marks that sample failed with its error; the run goes on.
     */
    generate: (input: GenerateInput): Promise<GenerateResult> => withHeartbeats(() => spanned(ctx, input.runId, 'generate', { iteration: input.iteration, policyVersion: input.policyVersion }, async () => {
      const run = await runContext(ctx.pool, input.runId);
      const engine = await engineAt(ctx, run, input.policyVersion);
      const G = run.config.algorithm.group_size;
      const tokenizer = run.task.tokenizer();
      const prompts = iterationPrompts(run, input.iteration).slice(input.firstGroup, input.firstGroup + input.groups);
      const seed = run.config.seed * 7_919 + input.iteration * 1_009 + input.firstGroup;
      const sampling = samplingParams(run.config.rollout, tokenizer.eosId, seed);
      if (run.config.rollout.in_flight === 'continue') Object.assign(sampling, followNewVersions(ctx, run, engine));
      const rowsCtx = { config: run.config, task: run.task, engine, sampling, seed };
      // A user generate function, multi-turn episodes against an environment, or single-turn.
      const produce = run.config.rollout.agent
        ? async (c: typeof rowsCtx, p: typeof prompts) => agentRows(c, await agentEndpoint(ctx, run), p)
        : run.config.generate.module
          ? customGenerateRows
          : run.task.interaction
            ? episodeRows
            : singleTurnRows;
      const produced = await produce(rowsCtx, prompts).catch((err: Error) => {
        if (err instanceof UserModuleError) throw ApplicationFailure.create({ message: err.message, type: 'InvalidUserModule', nonRetryable: true });
        throw ApplicationFailure.create({ message: `rollout failed: ${err.message}`, type: 'RolloutFailed' });
      });
      const rows: NewSample[] = produced.map((r, i) => ({
        iteration: input.iteration,
        groupIndex: input.firstGroup + Math.floor(i / G),
        sampleIndex: i % G,
        promptTokens: r.promptTokens,
        responseTokens: r.responseTokens,
        lossMask: r.lossMask,
        rolloutLogprobs: r.rolloutLogprobs,
        reward: r.reward,
        ...(r.rewards ? { rewards: r.rewards } : {}),
        policyVersion: r.policyVersion,
        ...(r.tokenVersions ? { tokenVersions: r.tokenVersions } : {}),
        // Scored: ready to train on (advantages come from the train batch). A failed reward or
        // episode marks only its own sample, with the error; the rest of its group still trains.
        ...(r.error !== null ? { status: 'failed' as const, error: `on prompt ${JSON.stringify(prompts[Math.floor(i / G)].text)}: ${r.error}` } : { status: 'scored' as const }),
      }));
      await insertSamples(ctx.pool, input.runId, rows);
      const ok = rows.filter((r) => r.reward !== null);
      return { samples: rows.length, failed: rows.length - ok.length, rewardSum: ok.reduce((a, r) => a + (r.reward as number), 0), worker: ctx.identity };
    })),

    /** Held-out greedy accuracy of one policy version. */
    evaluate: ({ runId, policyVersion, step }: { runId: string; policyVersion: number; step?: number }): Promise<{ accuracy: number }> =>
      withHeartbeats(() =>
        spanned(ctx, runId, 'evaluate', { ...(step !== undefined ? { step } : {}), policyVersion }, async () => {
          const run = await runContext(ctx.pool, runId);
          const engine = await engineAt(ctx, run, policyVersion);
          const { accuracy, metrics } = await evaluateGreedy(engine, run.task, run.task.heldOut(), run.config.rollout.max_new_tokens);
          const evalMetrics = Object.fromEntries(Object.entries(metrics ?? {}).map(([k, v]) => [`eval_${k}`, v]));
          if (step !== undefined) await recordMetrics(ctx.pool, runId, step, { ...evalMetrics, eval_accuracy: accuracy });
          return { accuracy };
        }),
      ),
  };
}

export type RolloutTrainingActivities = ReturnType<typeof createRolloutTrainingActivities>;

export type RolloutActivities = ReturnType<typeof createRolloutActivities>;
