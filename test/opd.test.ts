// On-policy distillation (engines/rl/distillation.ts, training/opd-step.ts, training/teacher-model.ts):
// the per-token advantage A_t = kl_coef * (log pi_T - log pi_S)_t + task_coef * A_task against numbers
// written here, the config's checks, the train step's per-token rows, the teacher loaded from a
// checkpoint or a warm start directory (and refused when it cannot score the student's tokens), and
// a few OPD steps on a tiny model pulling the student's log-probs toward the teacher's.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { before, test } from 'node:test';
import { parseRunConfig, RunConfigError } from '../config/run-config';
import { referenceLogprobsNeeded } from '../config/reference-role';
import { loadTfjsBackend } from '../engines/backends';
import { checkpointDir, publishCheckpoint } from '../engines/checkpoint';
import { initWeights, TINY_MODEL, type ModelConfig } from '../engines/model';
import { meanReverseKl, opdAdvantages, reverseKlPerToken } from '../engines/rl/distillation';
import { Trainer } from '../engines/trainer';
import { batchAdvantages, resolveAdvantageEstimator } from '../training/advantages';
import { opdOf } from '../training/opd-step';
import { RunModelError } from '../training/policy-model';
import type { TrainSample } from '../training/sample-buffer';
import { computeUpdate, resolveUpdateRule } from '../training/step';
import { loadTeacher } from '../training/teacher-model';

before(async () => {
  await loadTfjsBackend({ kind: 'cpu' });
});

const close = (a: ArrayLike<number>, b: number[], eps = 1e-9) => {
  assert.equal(a.length, b.length);
  for (let i = 0; i < b.length; i++) assert.ok(Math.abs(a[i] - b[i]) < eps, `index ${i}: ${a[i]} vs ${b[i]}`);
};

test('OPD advantage: A_t = kl_coef * (log pi_T - log pi_S)_t + task_coef * A_task, by hand', () => {
  const student = [-1.0, -0.5, -2.0];
  const teacher = [-0.2, -1.5, -2.0];
  // reverse KL per token: log pi_S - log pi_T = [-0.8, 1.0, 0]
  close(reverseKlPerToken(student, teacher), [-0.8, 1.0, 0]);
  // pure distillation (kl_coef 1, task_coef 0): A = [0.8, -1.0, 0]
  close(opdAdvantages(student, teacher, 0.7, { klCoef: 1, taskCoef: 0 }), [0.8, -1.0, 0]);
  // mixed: 0.5 * [0.8, -1.0, 0] + 2 * 0.7 = [1.8, 0.9, 1.4]
  close(opdAdvantages(student, teacher, 0.7, { klCoef: 0.5, taskCoef: 2 }), [1.8, 0.9, 1.4]);
  // the mean reverse KL over masked tokens: (-0.8 + 1.0) / 2 = 0.1 (the third token is masked out)
  close([meanReverseKl([{ student, teacher, mask: [1, 1, 0] }])], [0.1]);
  assert.throws(() => opdAdvantages([-1], [-1, -2], 0, { klCoef: 1, taskCoef: 0 }), /student has 1 log-probs and the teacher 2/);
  assert.throws(() => opdAdvantages([NaN], [-1], 0, { klCoef: 1, taskCoef: 0 }), /token 0.*finite/);
});

test('config: algorithm.teacher with its coefficients, "opd" needs a teacher, an unused teacher is refused', () => {
  const c = parseRunConfig({ task: 'add2', algorithm: { advantage: 'opd', teacher: { from: '/tmp/teacher' } } });
  assert.deepEqual(c.algorithm.teacher, { from: '/tmp/teacher', kl_coef: 1, task_coef: 0 });
  assert.equal(opdOf(c.algorithm)?.from, '/tmp/teacher');
  assert.ok(referenceLogprobsNeeded(c.algorithm, 0), 'a teacher runs the reference stage without a KL term');
  assert.ok(!referenceLogprobsNeeded(parseRunConfig({ task: 'add2' }).algorithm, 0));
  assert.throws(() => parseRunConfig({ task: 'add2', algorithm: { advantage: 'opd' } }), (e: unknown) => e instanceof RunConfigError && /algorithm\.advantage: "opd".*add algorithm\.teacher/.test(e.message));
  assert.throws(() => parseRunConfig({ task: 'add2', algorithm: { teacher: { from: 'x' } } }), /algorithm\.teacher: is unused: set algorithm\.advantage to "opd"/);
  // A teacher as the KL term's reference (kl_coef > 0) is allowed with any advantage.
  assert.equal(parseRunConfig({ task: 'add2', algorithm: { kl_coef: 0.1, teacher: { from: 'x' } } }).algorithm.teacher?.kl_coef, 1);
  assert.throws(() => parseRunConfig({ task: 'add2', algorithm: { advantage: 'opd', teacher: { from: 'x', kl_coef: -1 } } }), /algorithm\.teacher\.kl_coef/);
  assert.throws(() => parseRunConfig({ task: 'add2', algorithm: { advantage: 'opd', teacher: { from: 'x', klcoef: 1 } } }), /algorithm\.teacher\.klcoef: unknown field/);
  assert.throws(() => parseRunConfig({ task: 'add2', algorithm: { advantage: 'opd', teacher: {} } }), /algorithm\.teacher\.from/);
});

test('config: group_size 1 (one sample per prompt) for advantages that need no group (opd, gae, reinforce_pp), refused for group baselines and dynamic sampling', async () => {
  assert.equal(parseRunConfig({ task: 'add2', algorithm: { advantage: 'opd', group_size: 1, teacher: { from: 'x' } } }).algorithm.group_size, 1);
  assert.equal(parseRunConfig({ task: 'add2', algorithm: { advantage: 'gae', group_size: 1, critic: {} } }).algorithm.group_size, 1);
  assert.equal(parseRunConfig({ task: 'add2', algorithm: { advantage: 'reinforce_pp', group_size: 1 } }).algorithm.group_size, 1);
  assert.throws(() => parseRunConfig({ task: 'add2', algorithm: { group_size: 1 } }), /algorithm\.group_size: must be >= 2 for advantage "grpo", which compares the samples of a prompt; 1 \(one sample per prompt\) suits "gae", "opd", "reinforce_pp"/);
  assert.throws(() => parseRunConfig({ task: 'add2', algorithm: { advantage: 'gae', critic: {}, group_size: 1, dapo: { dynamic_sampling: {} } } }), /algorithm\.group_size: must be >= 2 with algorithm\.dapo\.dynamic_sampling/);
  assert.throws(() => parseRunConfig({ task: 'add2', algorithm: { group_size: 0 } }), /algorithm\.group_size/);
  // With one sample per prompt, the opd estimator's task advantage is 0 (no group baseline), not NaN.
  const algorithm = parseRunConfig({ task: 'add2', algorithm: { advantage: 'opd', group_size: 1, teacher: { from: 'x' } } }).algorithm;
  const rule = await resolveAdvantageEstimator(algorithm);
  assert.deepEqual(batchAdvantages(rule, algorithm, [{ groupKey: '0/0', reward: 1 }, { groupKey: '0/1', reward: 0 }]), [0, 0]);
});

/** One group of three responses to the prompt [1, 2, 3], rewards 1, 0, 0, with student and teacher log-probs. */
function group(): TrainSample[] {
  const rows = [
    { r: [4, 5], s: [-1, -2], t: [-0.5, -2.5], reward: 1 },
    { r: [6, 7], s: [-3, -1], t: [-1, -1], reward: 0 },
    { r: [8, 9], s: [-2, -2], t: [-2, -4], reward: 0 },
  ];
  return rows.map((x, i) => ({
    iteration: 0, groupIndex: 0, sampleIndex: i, promptTokens: [1, 2, 3], responseTokens: x.r, lossMask: [1, 1],
    rolloutLogprobs: x.s, refLogprobs: x.t, tokenVersions: null, policyVersion: 0, reward: x.reward,
  })) as unknown as TrainSample[];
}

test('the train step: per-token OPD rows (zeros on the prompt), the task advantage mixed by task_coef, metrics', async () => {
  const algorithm = parseRunConfig({ task: 'add2', algorithm: { advantage: 'opd', teacher: { from: 'x', kl_coef: 1, task_coef: 0.5 } } }).algorithm;
  const rule = await resolveUpdateRule(algorithm);
  const samples = group();
  // A_task: GRPO over rewards [1, 0, 0]: mean 1/3, sample std sqrt(1/3); (1 - 1/3) / (0.57735 + 1e-6) = 1.1547, others -0.57735.
  const task = batchAdvantages(rule.estimator, algorithm, samples.map((s) => ({ groupKey: '0/0', reward: s.reward as number })));
  close(task, [1.1547, -0.57735, -0.57735], 1e-4);
  let seen: Array<{ advantages?: unknown; lossMask: ArrayLike<number> }> = [];
  const metrics = await computeUpdate(async (sequences) => {
    seen = [...sequences];
    return { loss: 0, gradNorm: 0, lr: 0, entropy: 0, durationMs: 0, microBatches: 1, paddedTokens: 0, lossMetrics: {} } as never;
  }, rule, samples, task, 0);
  assert.equal(seen.length, 3, 'every sample trains (the reverse KL is a signal even where the task advantage is 0)');
  // Response 0: teacher - student = [0.5, -0.5]; + 0.5 * 1.1547 = 0.57735 -> [1.07735, 0.07735], after the prompt's two zero targets.
  close(seen[0].advantages as Float32Array, [0, 0, 1.07735, 0.07735], 1e-4);
  // Response 1: [2, 0] - 0.288675 = [1.711325, -0.288675].
  close(seen[1].advantages as Float32Array, [0, 0, 1.711325, -0.288675], 1e-4);
  // Response 2: [0, -2] - 0.288675.
  close(seen[2].advantages as Float32Array, [0, 0, -0.288675, -2.288675], 1e-4);
  // Reverse KL over the six tokens: (-0.5 + 0.5 - 2 + 0 + 0 + 2) / 6 = 0.
  assert.ok(Math.abs(metrics.opd_reverse_kl) < 1e-9, `opd_reverse_kl ${metrics.opd_reverse_kl}`);
  assert.equal(metrics.trained_samples, 3);
  const missing = group().map((s) => ({ ...s, refLogprobs: null }));
  await assert.rejects(computeUpdate(async () => ({}) as never, rule, missing, task, 0), /sample 0\/0\/0 has no teacher log-probs/);
  assert.equal((await resolveAdvantageEstimator(algorithm)).name, 'opd');
});

test('the teacher loads from a policy checkpoint or a warm start directory; another vocabulary or a registry reference without a database is refused', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-opd-teacher-'));
  try {
    const bigger: ModelConfig = { ...TINY_MODEL, dModel: 32, nHeads: 4, dFF: 64 };
    const weights = initWeights(bigger, 5);
    const info = await publishCheckpoint(path.join(dir, 'run'), 3, bigger, weights);
    const student = { model: TINY_MODEL };
    const fromCheckpoint = await loadTeacher(undefined, info.dir, student);
    assert.equal(fromCheckpoint.model.dModel, 32, 'a teacher of another size, read with its own config');
    assert.deepEqual(fromCheckpoint.weights['tok_emb.weight'], weights['tok_emb.weight']);
    // A warm start's cache directory: its version 0.
    const warm = path.join(dir, 'add2-sft-abc');
    await publishCheckpoint(warm, 0, bigger, weights);
    fs.writeFileSync(path.join(warm, 'warm-start.json'), '{"accuracy":0.97,"sftSteps":1,"sftWallS":1}\n');
    assert.equal((await loadTeacher(undefined, warm, student)).source, checkpointDir(warm, 0));
    const otherVocab = await publishCheckpoint(path.join(dir, 'other'), 0, { ...TINY_MODEL, vocabSize: 20 }, initWeights({ ...TINY_MODEL, vocabSize: 20 }, 1));
    await assert.rejects(loadTeacher(undefined, otherVocab.dir, student), (e: unknown) => e instanceof RunModelError && /algorithm\.teacher\.from .*20-token vocabulary and the student 16/.test(e.message));
    await assert.rejects(loadTeacher(undefined, 'some-run@latest', student), /algorithm\.teacher\.from "some-run@latest": names a run's version in the checkpoint registry/);
    await assert.rejects(loadTeacher(undefined, path.join(dir, 'nothing-here'), student), /algorithm\.teacher\.from .*not found/);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('OPD steps pull the student toward the teacher: the reverse KL on its own tokens falls', async () => {
  const student = Trainer.create({ model: TINY_MODEL, seed: 1, optimizer: { lr: 1e-2 } });
  const teacher = Trainer.create({ model: TINY_MODEL, seed: 2, optimizer: { lr: 1 } });
  const algorithm = parseRunConfig({ task: 'add2', algorithm: { advantage: 'opd', teacher: { from: 'x' }, group_size: 4 } }).algorithm;
  const rule = await resolveUpdateRule(algorithm);
  const responses = [[4, 5, 6], [7, 8, 9], [10, 11, 12], [13, 14, 15]];
  const full = responses.map((r) => [1, 2, 3, ...r]);
  const teacherRows = (await teacher.logprobs(full)).map((row) => Array.from(row.slice(2)));
  // The gap mean |log pi_S - log pi_T| over the tokens (the mean signed KL can cancel out).
  const gaps: number[] = [];
  try {
    for (let step = 0; step < 12; step++) {
      const studentRows = (await student.logprobs(full)).map((row) => Array.from(row.slice(2)));
      gaps.push(studentRows.flat().reduce((a, x, k) => a + Math.abs(x - teacherRows.flat()[k]), 0) / 12);
      const samples = responses.map((r, i) => ({
        iteration: step, groupIndex: 0, sampleIndex: i, promptTokens: [1, 2, 3], responseTokens: r, lossMask: [1, 1, 1],
        rolloutLogprobs: studentRows[i], refLogprobs: teacherRows[i], tokenVersions: null, policyVersion: step, reward: 0,
      })) as unknown as TrainSample[];
      const m = await computeUpdate((sequences) => student.trainStep(sequences, rule.loss), rule, samples, [0, 0, 0, 0], step);
      assert.ok(Number.isFinite(m.opd_reverse_kl) && m.trained_samples === 4);
    }
  } finally {
    student.dispose();
    teacher.dispose();
  }
  assert.ok(gaps[gaps.length - 1] < gaps[0] * 0.5, `mean |log pi_S - log pi_T| ${gaps[0].toFixed(3)} -> ${gaps[gaps.length - 1].toFixed(3)}`);
});
