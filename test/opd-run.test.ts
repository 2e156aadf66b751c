// On-policy distillation through the trainingRun workflow in async mode on real worker processes
// (control, rollout, train, reference): the reference worker serves algorithm.teacher (a warm start
// directory) in place of the reference policy, the student samples, the teacher's log-probs on the
// student's tokens become the per-token "opd" advantage, and the student moves toward the teacher
// (the reverse KL on its own samples falls). CI-sized: the teacher is the quickstart's warm start
// (ADD2_SFT, ~56%, which grpo-learning caches) and the student the short SFT other suites share
// (~9%, dapo-run's and hyperparameters-run's cache key), so nothing is trained for this suite alone.
// That the student's accuracy rises past 95% with a 99% teacher is the bench's (relax bench
// algorithms, ADD2_TEACHER_SFT, which takes about 6 minutes to train cold): 95% after 81,920 samples.
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { relaxEnvironment } from '../config/environment';
import { ADD2_GRPO } from '../config/recipes';
import { parseRunConfig, type RunConfigInput } from '../config/run-config';
import { roleTaskQueue } from '../config/task-queues';
import { loadTfjsBackend } from '../engines/backends';
import { ADD2_SFT, loadOrTrainWarmStart, type WarmStart } from '../training/warm-start';
import type { TrainingResult } from '../workflows/definitions';
import { startWorkerStack, uniqueId, type WorkerStack } from './helpers';

const STEPS = 20;
let RUN: RunConfigInput = {
  model: { context_length: 16 },
  mode: 'async',
  max_staleness: 1,
  algorithm: { advantage: 'opd', teacher: { from: 'set below' }, group_size: 4 },
  rollout: { prompts_per_step: 32, max_new_tokens: 4 },
  // OPD wants a lower learning rate than GRPO (measured in process: 1e-3 stays flat, 5e-3 collapses, 3e-4 learns).
  train: { steps: STEPS, lr: 5e-4, eval_every: STEPS, keep_consumed_steps: STEPS },
};

let stack: WorkerStack;
let teacher: WarmStart;

before(async () => {
  stack = await startWorkerStack(['control', 'rollout', 'train', 'reference'], {}, 'relax-opd-run-');
  await loadTfjsBackend({ kind: 'cpu' });
  const cache = relaxEnvironment().warmStartCache;
  // The teacher: the quickstart's warm start (grpo-learning's cache key), ~56%, given as its cache directory.
  teacher = await loadOrTrainWarmStart(parseRunConfig(ADD2_GRPO), ADD2_SFT, cache);
  // The student: the short SFT other suites share (the same cache key as dapo-run's), ~9%.
  const student = await loadOrTrainWarmStart(parseRunConfig(RUN), { lr: 3e-3, batchSize: 64, maxSteps: 2000, evalEvery: 10, band: [0.05, 0.6] }, cache);
  RUN = { ...RUN, algorithm: { ...RUN.algorithm, teacher: { from: path.dirname(teacher.dir) } }, checkpoint: { init_from: student.dir } };
});

after(async () => {
  await stack?.close();
});

test('OPD in async mode: the reference worker serves the teacher, and the weak student moves toward it', { timeout: 120_000 }, async () => {
  const started = performance.now();
  const id = uniqueId('opd');
  const result = (await stack.temporal.client.workflow.execute('trainingRun', { taskQueue: roleTaskQueue('control'), workflowId: id, args: [RUN] })) as TrainingResult;
  const wallS = (performance.now() - started) / 1000;
  assert.equal(result.steps, STEPS);
  const pool = stack.db.pool;
  const metric = async (name: string) => (await pool.query<{ value: number }>('SELECT value FROM metrics WHERE run_id = $1 AND name = $2 ORDER BY step', [id, name])).rows.map((r) => Number(r.value));
  const kl = await metric('opd_reverse_kl');
  assert.equal(kl.length, STEPS, 'every step records the reverse KL to the teacher');
  // The teacher (not the student's version 0) scored the samples: its log-probs differ from the rollout's.
  const { rows } = await pool.query<{ n: string; differ: string }>(
    `SELECT count(*) AS n, count(*) FILTER (WHERE ref_logprobs IS DISTINCT FROM rollout_logprobs) AS differ FROM samples WHERE run_id = $1 AND iteration = 0`,
    [id],
  );
  assert.ok(Number(rows[0].n) > 0 && Number(rows[0].differ) === Number(rows[0].n), `teacher log-probs on every sample of iteration 0: ${JSON.stringify(rows[0])}`);
  console.log(
    `[opd-run] teacher ${teacher.accuracy}; student held-out ${result.initialAccuracy} -> ${result.evalAccuracy} in ${STEPS} steps; ` +
      `reverse KL ${kl[0].toFixed(3)} -> ${kl[kl.length - 1].toFixed(3)}; workflow ${wallS.toFixed(1)} s`,
  );
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  const [first, last] = [mean(kl.slice(0, 4)), mean(kl.slice(-4))];
  assert.ok(last < first * 0.95, `reverse KL to the teacher ${first.toFixed(3)} -> ${last.toFixed(3)} (means of the first and last 4 steps): expected it to fall`);
});
