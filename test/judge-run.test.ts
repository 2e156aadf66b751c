// A judge-rewarded run (reward.judge) through the trainingRun workflow on real worker processes
// (control, rollout, train, judge): every iteration's judgeSamples activity runs on the judge queue,
// the rewards the run trains on are the judge's (recomputed here with the same judge model and parse
// function), and a judge call that hangs (the parse fixture never answers for sample 0 of a group)
// fails only those samples, counted against train.failure_budget, while the run completes.
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { relaxEnvironment } from '../config/environment';
import { parseRunConfig, type RunConfigInput } from '../config/run-config';
import { roleTaskQueue } from '../config/task-queues';
import { loadTfjsBackend } from '../engines/backends';
import { add2Tokenizer } from '../envs/add2';
import type { LoadedReward } from '../envs/user-modules';
import { judgeItems, loadJudgeModel, type JudgeItem } from '../rollout/judge';
import { insertSamples, readSamples, setJudgedRewards } from '../store/transfer-queue';
import { loadTask } from '../envs/registry';
import { iterationPrompts } from '../rollout/producers';
import { loadOrTrainWarmStart } from '../training/warm-start';
import type { TrainingResult } from '../workflows/definitions';
import { startWorkerStack, uniqueId, type WorkerStack } from './helpers';

const STEPS = 2;
const PROMPTS = 4;
const G = 4;
const PARSE = path.resolve(__dirname, '..', '..', 'test', 'fixtures', 'judge-parse.cjs');
const JUDGE = { prompt_template: '{prompt}{response}', parse: { module: PARSE }, max_new_tokens: 2, timeout_ms: 1500, batch_size: 6 };
let RUN: RunConfigInput = {
  model: { context_length: 16 },
  algorithm: { group_size: G },
  rollout: { prompts_per_step: PROMPTS, max_new_tokens: 4, parallelism: 2 },
  // Sample 0 of every group hangs in the judge: a quarter of the samples fail.
  train: { steps: STEPS, lr: 1e-3, eval_every: 100, keep_consumed_steps: 10, failure_budget: 0.5 },
};
let judgeDir = '';
let stack: WorkerStack;

before(async () => {
  stack = await startWorkerStack(['control', 'rollout', 'train', 'judge'], {}, 'relax-judge-run-');
  await loadTfjsBackend({ kind: 'cpu' });
  // The judge is the tiny add2 policy after the short SFT other suites share (the same cache key).
  const warm = await loadOrTrainWarmStart(parseRunConfig(RUN), { lr: 3e-3, batchSize: 64, maxSteps: 2000, evalEvery: 10, band: [0.05, 0.6] }, relaxEnvironment().warmStartCache);
  judgeDir = warm.dir;
  RUN = { ...RUN, reward: { judge: { from: judgeDir, ...JUDGE } } };
});

after(async () => {
  await stack?.close();
});

test('a judge-rewarded run trains on the judge queue with the judge\'s rewards; hung judge calls fail only their samples', { timeout: 60_000 }, async () => {
  const id = uniqueId('judge');
  const handle = await stack.temporal.client.workflow.start('trainingRun', { taskQueue: roleTaskQueue('control'), workflowId: id, args: [RUN] });
  const result = (await handle.result()) as TrainingResult;
  assert.equal(result.steps, STEPS, 'the run completes every step');
  assert.equal(result.skippedSteps ?? 0, 0);

  // Every iteration's judgeSamples ran on the judge role's queue.
  const scheduled: Array<{ name: string; queue: string }> = [];
  for (const e of (await handle.fetchHistory()).events ?? []) {
    const a = e.activityTaskScheduledEventAttributes;
    if (a) scheduled.push({ name: a.activityType?.name ?? '', queue: a.taskQueue?.name ?? '' });
  }
  const judged = scheduled.filter((s) => s.name === 'judgeSamples');
  assert.equal(judged.length, STEPS, 'one judgeSamples per iteration');
  assert.ok(judged.every((s) => s.queue === roleTaskQueue('judge')), `on ${roleTaskQueue('judge')}: ${JSON.stringify(judged)}`);

  const { rows } = await stack.db.pool.query<{ iteration: number; group_index: number; sample_index: number; status: string; reward: number | null; rewards: Record<string, number> | null; error: string | null; response_tokens: number[] }>(
    'SELECT iteration, group_index, sample_index, status, reward, rewards, error, response_tokens FROM samples WHERE run_id = $1 ORDER BY 1, 2, 3',
    [id],
  );
  assert.equal(rows.length, STEPS * PROMPTS * G);
  const hung = rows.filter((r) => r.sample_index === 0);
  assert.ok(hung.every((r) => r.status === 'failed' && /judge: reward\.judge\.parse: .*timed out after 1500 ms/.test(r.error ?? '')), `sample 0 of each group failed by the judge's timeout: ${JSON.stringify(hung.map((r) => [r.status, r.error]))}`);
  const scored = rows.filter((r) => r.sample_index !== 0);
  assert.ok(scored.every((r) => r.status === 'consumed'), 'every other sample was trained on');

  // The rewards are the judge's: the same judge model and parse function, run here, give them again.
  const tok = add2Tokenizer();
  const task = await loadTask('add2');
  const config = parseRunConfig(RUN);
  const items: JudgeItem[] = scored.map((r) => {
    const p = iterationPrompts(config, task, r.iteration)[r.group_index];
    return { prompt: p.text, answer: p.answer, response: tok.decode(r.response_tokens, { skipSpecial: true }), groupIndex: r.group_index, sampleIndex: r.sample_index };
  });
  const judge = await loadJudgeModel(judgeDir, { taskTokenizer: tok, home: relaxEnvironment().home });
  try {
    // The parse fixture in this process (the samples it hangs on are not among these).
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const reward = { module: PARSE, resolvedPath: PARSE, exportName: 'default', scope: 'sample', fn: require(PARSE) } as unknown as LoadedReward;
    const expected = await judgeItems(async () => judge, items, { judge: { ...JUDGE, parse: { module: PARSE, export: 'default' } }, parseModule: { reward, task }, discard: () => undefined });
    assert.deepEqual(scored.map((r) => r.reward), expected.map((v) => v.reward));
  } finally {
    await judge.release();
  }
  assert.ok(scored.every((r) => r.rewards?.judge === r.reward && typeof r.rewards?.task === 'number'), 'rewards.judge is the reward; the task reward is kept as rewards.task');

  const metrics = await stack.db.pool.query<{ step: number; value: number }>("SELECT step, value FROM metrics WHERE run_id = $1 AND name = 'judge_failed_samples' ORDER BY step", [id]);
  assert.deepEqual(metrics.rows.map((m) => [m.step, Number(m.value)]), [[1, PROMPTS], [2, PROMPTS]]);
});

test('setJudgedRewards: a verdict moves a generated sample to scored (task reward kept) or failed; a retry touches nothing judged', { timeout: 10_000 }, async () => {
  const runId = uniqueId('judge-rows');
  const pool = stack.db.pool;
  await pool.query(`INSERT INTO runs (run_id, workflow_id, kind, config) VALUES ($1, $1, 'test', '{}')`, [runId]);
  const sample = (sampleIndex: number) => ({ iteration: 0, groupIndex: 0, sampleIndex, promptTokens: [1, 2], responseTokens: [3], lossMask: [1], reward: 0.5, policyVersion: 0, status: 'generated' as const });
  await insertSamples(pool, runId, [sample(0), sample(1), { ...sample(2), status: 'scored' }]);
  const verdicts = [{ iteration: 0, groupIndex: 0, sampleIndex: 0, reward: 0.25 }, { iteration: 0, groupIndex: 0, sampleIndex: 1, error: 'judge: timed out' }, { iteration: 0, groupIndex: 0, sampleIndex: 2, reward: 1 }];
  assert.equal(await setJudgedRewards(pool, runId, verdicts), 2, 'only the generated samples');
  const rows = await readSamples(pool, runId);
  assert.deepEqual(rows.map((r) => [r.status, r.reward, r.rewards, r.error]), [
    ['scored', 0.25, { task: 0.5, judge: 0.25 }, null],
    ['failed', null, null, 'judge: timed out'],
    ['scored', 0.5, null, null],
  ]);
  assert.equal(await setJudgedRewards(pool, runId, verdicts), 0, 'a retry changes nothing already judged');
});
