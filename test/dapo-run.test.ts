// DAPO through the trainingRun workflow in async mode, on real worker processes (control, rollout,
// train): dynamic sampling drops groups without signal and refills the batch with extra rounds (the
// dapo_filtered_groups metric counts them; every step still trains prompts_per_step whole groups),
// overlong shaping adds R_len to the stored rewards and overlong filtering masks truncated samples.
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { relaxEnvironment } from '../config/environment';
import { parseRunConfig, type RunConfigInput } from '../config/run-config';
import { roleTaskQueue } from '../config/task-queues';
import { loadTfjsBackend } from '../engines/backends';
import { add2Tokenizer } from '../envs/add2';
import { loadOrTrainWarmStart } from '../training/warm-start';
import type { TrainingResult } from '../workflows/definitions';
import { startWorkerStack, uniqueId, type WorkerStack } from './helpers';

const STEPS = 3;
const PROMPTS = 8;
const G = 8;
const MAX_NEW = 4;
const CACHE = 2;
// The tiny add2 policy after the short SFT other suites share (the same cache key): rarely right,
// so most groups are all wrong and dynamic sampling has groups to filter (measured: 19-60 a step).
let RUN: RunConfigInput = {
  model: { context_length: 16 },
  mode: 'async',
  max_staleness: 1,
  algorithm: { group_size: G, loss_aggregation: 'dapo', dapo: { dynamic_sampling: { max_extra_rounds: 16 }, overlong_penalty: { cache_tokens: CACHE, factor: 1 }, overlong_filter: true } },
  rollout: { prompts_per_step: PROMPTS, max_new_tokens: MAX_NEW, parallelism: 2 },
  // Samples every group from the policy, member 0 without a stop token: a truncated response in each group.
  generate: { module: path.resolve(__dirname, '..', '..', 'test', 'fixtures', 'dapo-overlong-generate.cjs') },
  train: { steps: STEPS, lr: 1e-3, eval_every: 100, keep_consumed_steps: 10 },
};

let stack: WorkerStack;

before(async () => {
  stack = await startWorkerStack(['control', 'rollout', 'train'], {}, 'relax-dapo-run-');
  await loadTfjsBackend({ kind: 'cpu' });
  const warm = await loadOrTrainWarmStart(parseRunConfig(RUN), { lr: 3e-3, batchSize: 64, maxSteps: 2000, evalEvery: 10, band: [0.05, 0.6] }, relaxEnvironment().warmStartCache);
  RUN = { ...RUN, checkpoint: { init_from: warm.dir } };
});

after(async () => {
  await stack?.close();
});

const near = (a: number, b: number) => Math.abs(a - b) < 1e-6;

test('DAPO in async mode: zero-signal groups filtered and refilled, overlong shaping and filtering applied', { timeout: 120_000 }, async () => {
  const id = uniqueId('dapo');
  const result = (await stack.temporal.client.workflow.execute('trainingRun', { taskQueue: roleTaskQueue('control'), workflowId: id, args: [RUN] })) as TrainingResult;
  assert.equal(result.steps, STEPS);
  const pool = stack.db.pool;
  const metric = async (name: string) =>
    new Map((await pool.query<{ step: number; value: number }>('SELECT step, value FROM metrics WHERE run_id = $1 AND name = $2', [id, name])).rows.map((r) => [r.step, Number(r.value)]));
  const [filtered, filled, masked] = await Promise.all(['dapo_filtered_groups', 'dapo_filled_groups', 'dapo_masked_samples'].map(metric));
  const total = (m: Map<number, number>) => [...m.values()].reduce((a, b) => a + b, 0);
  console.log(`[dapo-run] filtered groups per step ${JSON.stringify([...filtered])}, filled ${JSON.stringify([...filled])}, masked samples ${JSON.stringify([...masked])}`);
  assert.equal(filtered.size, STEPS, 'every step records its filtered groups');
  assert.ok(total(filtered) > 0, 'dynamic sampling filtered zero-signal groups');

  // Each step trained a full batch of whole groups; those without signal are only the ones the round cap let through.
  const { rows } = await pool.query<{ step: number; group_index: number; iteration: number; n: string; signal: boolean }>(
    `SELECT t.step, s.iteration, s.group_index, count(*) AS n, max((s.rewards->>'task')::float) > min((s.rewards->>'task')::float) AS signal
       FROM train_step_samples t JOIN samples s USING (run_id, iteration, group_index, sample_index)
      WHERE t.run_id = $1 GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`,
    [id],
  );
  for (let step = 1; step <= STEPS; step++) {
    const groups = rows.filter((r) => r.step === step);
    assert.equal(groups.length, PROMPTS, `step ${step} trained ${PROMPTS} groups (the batch was refilled)`);
    assert.ok(groups.every((g) => Number(g.n) === G && g.iteration === step - 1), `step ${step}: whole groups of its own iteration`);
    assert.equal(groups.filter((g) => !g.signal).length, filled.get(step) ?? 0, `step ${step}: groups without signal are exactly the filled ones`);
  }
  assert.ok(total(filled) <= 1, `16 extra rounds leave (almost) no batch short of signal groups: ${total(filled)}`);

  // Overlong shaping and filtering on every stored sample.
  const eos = add2Tokenizer().eosId;
  const samples = await pool.query<{ response_tokens: number[]; loss_mask: number[]; reward: number; rewards: Record<string, number> }>('SELECT response_tokens, loss_mask, reward, rewards FROM samples WHERE run_id = $1', [id]);
  let truncated = 0;
  for (const s of samples.rows) {
    const length = s.response_tokens.length;
    // R_len with L_max 4, L_cache 2: 0 up to 2 tokens, then (2 - |y|) / 2.
    const rLen = length <= MAX_NEW - CACHE ? 0 : ((MAX_NEW - CACHE) - length) / CACHE;
    assert.ok(near(s.rewards.overlong_penalty, rLen), `penalty of a ${length}-token response: ${s.rewards.overlong_penalty}, expected ${rLen}`);
    assert.ok(near(s.reward, s.rewards.task + rLen), 'the reward is the task reward plus the penalty');
    const isTruncated = length === MAX_NEW && s.response_tokens[length - 1] !== eos;
    truncated += Number(isTruncated);
    assert.deepEqual(s.loss_mask, s.response_tokens.map(() => (isTruncated ? 0 : 1)), 'truncated samples are masked, the others not');
  }
  assert.ok(truncated > 0, 'some sample was truncated');
  assert.equal(total(masked), truncated, 'dapo_masked_samples counts the masked samples');
});
