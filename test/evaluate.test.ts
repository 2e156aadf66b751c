// Sampled evaluation through real workers (docs/algorithms.md, "Evaluation"): a tiny run trains two
// steps while a Schedule evaluates its newest unevaluated version every second (each version it
// reaches is evaluated once, the last one included); then `relax eval <run>@2 --k 4 --output json`
// prints pass@1 <= pass@4 in [0, 1], recorded in the evaluations table and the run's metrics; and
// bad inputs fail before sending (client) or at once (workflow), naming the field.
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { WorkflowFailedError } from '@temporalio/client';
import { createEvaluationSchedule, EvaluationInputError, startEvaluation } from '../client/evaluations';
import { deleteSchedule, pauseSchedule } from '../client/schedules';
import type { RunConfigInput } from '../config/run-config';
import { roleTaskQueue } from '../config/task-queues';
import { listEvaluations } from '../store/evaluations';
import { metricSeries } from '../store/metrics';
import { spawnRelax, startWorkerStack, uniqueId, waitFor, type WorkerStack } from './helpers';

// The fixture reward is 0 or 1 from a hash of the response: an untrained policy's samples differ in
// reward, so pass@4 is above pass@1 for some prompts.
const HASH_REWARD = path.resolve(__dirname, '../../test/fixtures/hash-reward.cjs');
const TINY: RunConfigInput = {
  model: { context_length: 16 },
  algorithm: { group_size: 4 },
  rollout: { prompts_per_step: 2, max_new_tokens: 4 },
  train: { steps: 2, eval_every: 100, lr: 1e-2 },
  reward: { module: HASH_REWARD },
};

let stack: WorkerStack;
const runId = uniqueId('evaluated');

before(async () => {
  stack = await startWorkerStack(['control', 'rollout', 'train'], {}, 'relax-evaluate-');
});

after(() => stack?.close());

test('a schedule evaluates each new version of a training run once, the newest included', async () => {
  const client = stack.temporal.client;
  const name = uniqueId('eval-sched');
  const run = await client.workflow.start('trainingRun', { taskQueue: roleTaskQueue('control'), workflowId: runId, args: [{ ...TINY, run_id: runId }] });
  await createEvaluationSchedule(client, { name, input: { run_id: runId, k: 2, temperature: 1, max_prompts: 4 }, every: '1s' });
  try {
    await run.result();
    const rows = await waitFor('an evaluation of the newest version, 2', async () => {
      const all = await listEvaluations(stack.db.pool, runId);
      return all.some((e) => e.policyVersion === 2) ? all : undefined;
    }, 60_000, 300);
    // Ticks go on after v2 was evaluated: they find it evaluated and record nothing more.
    await new Promise((r) => setTimeout(r, 2_500));
    const again = await listEvaluations(stack.db.pool, runId);
    const versions = again.map((e) => e.policyVersion);
    assert.deepEqual(versions, [...new Set(versions)].sort((a, b) => a - b), `each version evaluated once: ${versions}`);
    assert.equal(again.filter((e) => e.policyVersion === 2).length, 1);
    assert.ok(rows.every((e) => e.k === 2 && e.prompts === 4 && e.dataset === 'held_out' && e.workflowId?.startsWith(name)), JSON.stringify(rows));
  } finally {
    await pauseSchedule(client, name).catch(() => undefined);
    await deleteSchedule(client, name).catch(() => undefined);
  }
});

test('relax eval <run>@2 --k 4: pass@1 <= pass@4 in [0, 1], recorded with the run', async () => {
  const env = { TEMPORAL_ADDRESS: process.env.TEMPORAL_ADDRESS, DATABASE_URL: stack.db.url, RELAX_HOME: stack.home };
  const p = spawnRelax(['eval', `${runId}@2`, '--k', '4', '--temperature', '1', '--max-prompts', '8', '--output', 'json'], env);
  const code = await p.exited;
  assert.equal(code, 0, p.output.join('\n'));
  const r = JSON.parse(p.output[p.output.length - 1]) as Record<string, number>;
  for (const key of ['pass@1', 'pass@4', 'maj@4', 'mean@4']) assert.ok(r[key] >= 0 && r[key] <= 1, `${key} = ${r[key]}`);
  assert.ok(r['pass@1'] <= r['pass@4'], JSON.stringify(r));
  assert.ok(r['pass@4'] > r['pass@1'], `the hash reward differs within a prompt's samples: ${JSON.stringify(r)}`);
  // 0/1 rewards: pass@1 = c/n per prompt = the mean reward
  assert.ok(Math.abs(r['pass@1'] - r['mean@4']) < 1e-9, JSON.stringify(r));
  assert.equal(r.policyVersion, 2);
  assert.equal(r.prompts, 8);
  const recorded = (await listEvaluations(stack.db.pool, runId)).find((e) => e.k === 4);
  assert.ok(recorded && Math.abs(recorded.passAtK - r['pass@4']) < 1e-9 && recorded.step === r.step, JSON.stringify(recorded));
  const metrics = await metricSeries(stack.db.pool, runId, ['eval_pass_at_1', 'eval_pass_at_4', 'eval_maj_at_4', 'eval_mean_at_4']);
  assert.deepEqual(metrics.eval_pass_at_4, [[r.step, r['pass@4']]]);
  assert.equal(Object.keys(metrics).length, 4);
});

test('bad evaluation inputs fail before sending (client) and at once (workflow), naming the field', async () => {
  const client = stack.temporal.client;
  await assert.rejects(startEvaluation(client, { run_id: runId, k: 0 }), (e: Error) => e instanceof EvaluationInputError && /^k: must be an integer in \[1, 1024\]/.test(e.message));
  await assert.rejects(startEvaluation(client, { run_id: runId, temperature: 0 }), { message: /^temperature: must be a number in \(0, 10\]/ });
  // The Web UI's form sends whatever JSON it is given: the workflow refuses it.
  const bad = await client.workflow.start('evaluateRun', { taskQueue: roleTaskQueue('control'), workflowId: uniqueId('eval-bad'), args: [{ run_id: runId, kk: 3 }] });
  await assert.rejects(bad.result(), (e: Error) => e instanceof WorkflowFailedError && /kk: is not an evaluation field/.test(String(e.cause?.message)));
  const missing = await startEvaluation(client, { run_id: runId, version: 99, k: 2 });
  await assert.rejects(missing.result(), (e: Error) => e instanceof WorkflowFailedError && /version: run .* has no policy version 99; its retained versions are/.test(String(e.cause?.message)));
});
