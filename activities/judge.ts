// Judge stage activity (reward.judge): scores an iteration's generated samples with the run's
// generative reward model (rollout/judge.ts), served by judge workers on their own queue. The
// workflow schedules it after the iteration's rollout and before its train step; each verdict moves
// a sample from 'generated' to 'scored' (or 'failed', counted against train.failure_budget like a
// reward module's failure), so a retry judges only what is left. Heartbeats while it works.
import { ApplicationFailure } from '@temporalio/activity';
import { relaxEnvironment } from '../config/environment';
import type { JudgeConfig } from '../config/judge-config';
import { loadRewardFunction } from '../envs/user-modules';
import { iterationPrompts } from '../rollout/producers';
import { judgeItems, loadJudgeModel, type JudgeItem, type JudgeModel } from '../rollout/judge';
import { recordMetrics } from '../store/metrics';
import { readSamples, setJudgedRewards, type SampleRow } from '../store/transfer-queue';
import type { RunContext } from '../training/run-context';
import { RunModelError } from '../training/policy-model';
import { runState, whenLoaded } from '../training/run-state';
import { rolloutStats } from '../training/step';
import { assertAttemptCurrent, failuresMapped, runContext, spanned, withHeartbeats, workerInfoActivity, type WorkerContext } from './context';
import type { GenerateResult } from './rollout';

export interface JudgeSamplesInput {
  runId: string;
  iteration: number;
}

/** The iteration's rollout statistics after judging (every sample: judged now, earlier, or failed in rollout), as one generate slice's. */
export interface JudgeSamplesResult extends GenerateResult {
  /** Samples this attempt judged. */
  judged: number;
}

// Each run's judge model in this process, loaded on first use and released with the run.
const judges = runState.slot<Promise<JudgeModel>>('judge.model', whenLoaded((judge: JudgeModel) => judge.release()));

function judgeOf(ctx: WorkerContext, run: RunContext, judge: JudgeConfig): Promise<JudgeModel> {
  let loading = judges.get(run.runId);
  if (!loading) {
    // A judge that cannot load fails the run at once (InvalidRunConfig), naming the field.
    const loaded = loadJudgeModel(judge.from, { taskTokenizer: run.task.tokenizer(), home: relaxEnvironment().home, device: ctx.device }).catch((err: Error) => {
      throw new RunModelError(`reward.judge.from ${JSON.stringify(judge.from)} cannot be loaded as a judge: ${err.message}`);
    });
    loading = judges.set(run.runId, loaded);
    const failed = loading;
    failed.catch(() => judges.delete(run.runId, failed));
  }
  return loading;
}

/** A judge whose generate hung: forgotten (a fresh one is loaded for the next batch) and released once its thread answers. */
function discardJudge(runId: string, judge: JudgeModel): void {
  const current = judges.get(runId);
  void current?.then((j) => j === judge && judges.delete(runId, current));
}

/** What the judge sees of each sample: the iteration's prompt and answer (the same seeds as rollout) and the decoded response. */
function judgeItemsOf(run: RunContext, iteration: number, samples: readonly SampleRow[]): JudgeItem[] {
  const prompts = iterationPrompts(run.config, run.task, iteration);
  const tokenizer = run.task.tokenizer();
  return samples.map((s) => ({
    prompt: prompts[s.groupIndex]?.text ?? tokenizer.decode(s.promptTokens, { skipSpecial: true }),
    answer: prompts[s.groupIndex]?.answer ?? '',
    response: tokenizer.decode(s.responseTokens, { skipSpecial: true }),
    groupIndex: s.groupIndex,
    sampleIndex: s.sampleIndex,
  }));
}

async function judgeSamples(ctx: WorkerContext, { runId, iteration }: JudgeSamplesInput): Promise<JudgeSamplesResult> {
  const run = await runContext(ctx, runId);
  const judge = run.config.reward.judge;
  if (!judge) throw ApplicationFailure.create({ message: `run ${runId} has no reward.judge: judgeSamples serves runs that configure one`, type: 'InvalidRunConfig', nonRetryable: true });
  const pending = await readSamples(ctx.pool, runId, { iteration, status: 'generated' });
  const parse = judge.parse;
  const reward = 'module' in parse ? await failuresMapped(() => loadRewardFunction({ module: parse.module, export: parse.export, scope: 'sample', timeout_ms: judge.timeout_ms })) : undefined;
  const verdicts = await judgeItems(() => failuresMapped(() => judgeOf(ctx, run, judge)), judgeItemsOf(run, iteration, pending), {
    judge,
    ...(reward ? { parseModule: { reward, task: run.task } } : {}),
    discard: (model) => discardJudge(runId, model),
  });
  assertAttemptCurrent(); // an attempt Temporal gave up on writes nothing
  await setJudgedRewards(ctx.pool, runId, pending.map((s, i) => ({ iteration, groupIndex: s.groupIndex, sampleIndex: s.sampleIndex, ...(verdicts[i].error === null ? { reward: verdicts[i].reward as number } : { error: verdicts[i].error as string }) })));
  const all = await readSamples(ctx.pool, runId, { iteration });
  const stats = rolloutStats(all.map((s) => ({ reward: s.status === 'failed' || s.status === 'generated' ? null : s.reward })));
  const failedNow = verdicts.filter((v) => v.error !== null).length;
  await recordMetrics(ctx.pool, runId, iteration + 1, { judge_samples: pending.length, judge_failed_samples: failedNow });
  return { ...stats, judged: pending.length, worker: ctx.identity };
}

export function createJudgeActivities(ctx: WorkerContext) {
  return {
    workerInfo: workerInfoActivity(ctx),
    judgeSamples: (input: JudgeSamplesInput) =>
      failuresMapped(() => withHeartbeats(() => spanned(ctx, input.runId, 'judge', { iteration: input.iteration }, () => judgeSamples(ctx, input)))),
  };
}

export type JudgeActivities = ReturnType<typeof createJudgeActivities>;
