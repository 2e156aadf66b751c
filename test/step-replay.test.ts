// `relax replay`, a train step recomputed (test/replay.test.ts replays workflow histories): two
// short runs on real workers (GRPO with PPO-clip, and RLOO with CISPO) are recorded; replaying a
// step recomputes its prompts, rewards, advantages and update and matches the record (the update
// bitwise: the same CPU backend, weights and AdamW moments); a corrupted advantage or reward planted
// in the transfer queue is found, at its stage and sample; the CLI prints the verdict and exits 1 on
// a divergence, 2 for a step that cannot be replayed.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { RunConfigInput } from '../config/run-config';
import { roleTaskQueue } from '../config/task-queues';
import { loadTfjsBackend } from '../engines/backends';
import { replayStep, ReplayError } from '../training/replay';
import type { TrainingResult } from '../workflows/training-run';
import { spawnRelax, startWorkerStack, uniqueId, type WorkerStack } from './helpers';

const RUN: RunConfigInput = {
  model: { context_length: 16 },
  algorithm: { group_size: 4 },
  rollout: { prompts_per_step: 4, max_new_tokens: 4 },
  train: { steps: 3, eval_every: 100, keep_consumed_steps: 3 },
  checkpoint: { every: 1 },
};
const OTHER: RunConfigInput = { ...RUN, seed: 3, algorithm: { group_size: 4, advantage: 'rloo', policy_loss: 'cispo' } };

let stack: WorkerStack;
const ids = { grpo: uniqueId('replay-grpo'), rloo: uniqueId('replay-rloo') };

before(async () => {
  stack = await startWorkerStack(['control', 'rollout', 'train'], {}, 'relax-replay-');
  await loadTfjsBackend({ kind: 'cpu' });
  const run = (config: RunConfigInput, workflowId: string) => stack.temporal.client.workflow.execute('trainingRun', { taskQueue: roleTaskQueue('control'), workflowId, args: [config] }) as Promise<TrainingResult>;
  const results = await stack.whileAlive(Promise.all([run(RUN, ids.grpo), run(OTHER, ids.rloo)]));
  assert.deepEqual(results.map((r) => r.steps), [3, 3]);
});

after(() => stack?.close());

test('a recorded step replays to the same prompts, rewards, advantages and weights (GRPO / PPO-clip and RLOO / CISPO)', async () => {
  for (const [id, estimator, loss] of [[ids.grpo, 'grpo', 'ppo_clip'], [ids.rloo, 'rloo', 'cispo']] as const) {
    const report = await replayStep(stack.db.pool, id, 2);
    assert.equal(report.firstDivergence, null, JSON.stringify(report.stages));
    assert.deepEqual(report.stages.map((s) => [s.stage, s.status]), [['prompt', 'match'], ['reward', 'match'], ['advantage', 'match'], ['update', 'match']]);
    assert.deepEqual([report.estimator, report.loss, report.fromVersion, report.toVersion, report.samples], [estimator, loss, 1, 2, 16]);
    assert.equal(report.stages[3].maxAbsDiff, 0, 'the update is recomputed bitwise');
  }
});

test('a planted corrupted advantage is found at the advantage stage, naming the sample; a corrupted reward at the reward stage', async () => {
  const pool = stack.db.pool;
  const { rows } = await pool.query<{ iteration: number; group_index: number; sample_index: number }>(
    `UPDATE samples SET advantage = advantage + 0.5
      WHERE (run_id, iteration, group_index, sample_index) = (SELECT run_id, iteration, group_index, sample_index FROM samples WHERE run_id = $1 AND consumed_by_step = 2 ORDER BY group_index DESC, sample_index DESC LIMIT 1)
      RETURNING iteration, group_index, sample_index`,
    [ids.grpo],
  );
  const planted = `${rows[0].iteration}/${rows[0].group_index}/${rows[0].sample_index}`;
  const report = await replayStep(pool, ids.grpo, 2);
  assert.deepEqual(report.firstDivergence, { stage: 'advantage', sample: planted });
  const stage = report.stages.find((s) => s.stage === 'advantage')!;
  assert.ok(Math.abs((stage.first!.recorded as number) - (stage.first!.recomputed as number) - 0.5) < 1e-5, JSON.stringify(stage.first));
  assert.equal(report.stages.find((s) => s.stage === 'reward')!.status, 'match', 'the rewards before it still match');

  const reward = await pool.query<{ iteration: number; group_index: number; sample_index: number }>(
    `UPDATE samples SET reward = reward + 1
      WHERE (run_id, iteration, group_index, sample_index) = (SELECT run_id, iteration, group_index, sample_index FROM samples WHERE run_id = $1 AND consumed_by_step = 3 ORDER BY group_index, sample_index LIMIT 1)
      RETURNING iteration, group_index, sample_index`,
    [ids.rloo],
  );
  const other = await replayStep(pool, ids.rloo, 3);
  assert.deepEqual(other.firstDivergence, { stage: 'reward', sample: `${reward.rows[0].iteration}/${reward.rows[0].group_index}/${reward.rows[0].sample_index}` });
  assert.equal(other.stages.find((s) => s.stage === 'advantage')!.status, 'differs', "RLOO's advantages from the corrupted reward differ from the recorded ones too");
});

test('relax replay prints the verdict and exits 1 on a divergence; a step that cannot be replayed is a usage error naming why', async () => {
  await assert.rejects(replayStep(stack.db.pool, ids.grpo, 9), (e: unknown) => e instanceof ReplayError && /has no train step 9/.test((e as Error).message));
  await stack.db.pool.query('DELETE FROM samples WHERE run_id = $1 AND consumed_by_step = 1 AND sample_index = 0', [ids.rloo]);
  await assert.rejects(replayStep(stack.db.pool, ids.rloo, 1), /step 1 trained 16 samples and 12 are left in the transfer queue: the rest were pruned \(train\.keep_consumed_steps/);
  const env = { DATABASE_URL: stack.db.url };
  const json = spawnRelax(['replay', ids.grpo, '--step', '2', '--output', 'json'], env);
  assert.equal(await json.exited, 1);
  const printed = JSON.parse(json.output.filter((l) => l.startsWith('{')).at(-1)!) as { firstDivergence: { stage: string } };
  assert.equal(printed.firstDivergence.stage, 'advantage');
  const text = spawnRelax(['replay', ids.grpo, '--step', '1'], env);
  assert.equal(await text.exited, 0, text.output.join('\n'));
  assert.ok(text.output.some((l) => l.includes('every stage recomputed matches the record')), text.output.join('\n'));
  const diverged = spawnRelax(['replay', ids.grpo, '--step', '2'], env);
  assert.equal(await diverged.exited, 1);
  console.log(`[step-replay] relax replay ${ids.grpo} --step 2:\n${diverged.output.filter((l) => !/^(I0000|WARNING)/.test(l)).join('\n')}`);
  const missing = spawnRelax(['replay', ids.grpo, '--step', '0'], env);
  assert.equal(await missing.exited, 2);
  assert.ok(missing.output.some((l) => l.includes('--step must be a train step')), missing.output.join('\n'));
});
