// `relax bench algorithms` at smoke size: two algorithms (GRPO and PPO with a critic, whose value head
// the in-process loop adds to a warm start without one) x 2 steps of 4 prompts from random weights
// (no warm start to train), plus the OPD entry, skipped with its reason here (no teacher given).
// Checks the summary's keys and shapes, and the options' errors. The full bench is not for CI.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ALGORITHMS, algorithmConfig, baseConfig, parseAlgorithmsOptions, runAlgorithmsBench } from '../bench/algorithms';
import { parseRunConfig } from '../config/run-config';
import { loadTfjsBackend } from '../engines/backends';
import { initWeights } from '../engines/model';
import { loadTask } from '../envs/registry';
import { policyModelConfig } from '../training/options';

test('bench algorithms: 2 algorithms x 2 steps print initial_accuracy, final_accuracy_by_algorithm, wall_s_by_algorithm; opd is skipped with a reason', async () => {
  await loadTfjsBackend({ kind: 'cpu' });
  const options = { steps: '2', prompts: '4', eval_every: '1', algorithms: 'grpo,ppo_critic,opd' };
  const config = algorithmConfig(baseConfig(parseAlgorithmsOptions(options)), ALGORITHMS[0]);
  const task = await loadTask(config.task);
  const weights = initWeights(policyModelConfig(config.model, task.tokenizer().vocabSize, task), 0);
  const lines: string[] = [];
  const out = JSON.parse(JSON.stringify(await runAlgorithmsBench({ json: true, options, log: (l) => lines.push(l) }, { weights }))) as Record<string, unknown>;

  const ran = ['grpo', 'ppo_critic'];
  assert.equal(typeof out.initial_accuracy, 'number');
  for (const key of ['final_accuracy_by_algorithm', 'wall_s_by_algorithm', 'best_accuracy_by_algorithm', 'samples_to_95_by_algorithm', 'gain_points_by_algorithm', 'samples']) {
    assert.deepEqual(Object.keys(out[key] as object), ran, key);
  }
  for (const name of ran) {
    const final = (out.final_accuracy_by_algorithm as Record<string, number>)[name];
    assert.ok(final >= 0 && final <= 1, `${name}: final accuracy ${final}`);
    assert.ok((out.wall_s_by_algorithm as Record<string, number>)[name] > 0, `${name}: wall_s`);
    assert.equal((out.samples as Record<string, number>)[name], 2 * 4 * 8, `${name}: 2 steps x 4 prompts x 8 samples`);
    // The initial evaluation and one per step.
    assert.deepEqual((out.curve_by_algorithm as Record<string, Array<{ step: number }>>)[name].map((p) => p.step), [0, 1, 2]);
  }
  // Every algorithm starts from the same weights: the same initial accuracy.
  assert.deepEqual(Object.values(out.initial_accuracy_by_algorithm as object), [out.initial_accuracy, out.initial_accuracy]);
  const skipped = out.skipped_by_algorithm as Record<string, string>;
  assert.match(skipped.opd, /"opd".*skipped/); // no teacher given here
  assert.ok(!('opd' in (out.final_accuracy_by_algorithm as object)), 'no numbers for a skipped algorithm');
  assert.ok(lines.some((l) => l.split('\n').some((row) => row.startsWith('| ppo_critic |'))), 'the table has a row per algorithm');
});

test('bench algorithms: options are checked, and each algorithm config parses', () => {
  assert.throws(() => parseAlgorithmsOptions({ algorithms: 'grpo,ppo' }), /unknown ppo \(known: grpo, dr_grpo/);
  assert.throws(() => parseAlgorithmsOptions({ stepz: '3' }), /unknown option stepz/);
  assert.throws(() => parseAlgorithmsOptions({ steps: '0' }), /steps/);
  const base = baseConfig(parseAlgorithmsOptions({ steps: '40' }));
  for (const spec of ALGORITHMS.filter((s) => s.name !== 'opd')) {
    const c = algorithmConfig(base, spec);
    assert.equal(c.train.steps, 40, spec.name);
    assert.equal(c.rollout.prompts_per_step * c.algorithm.group_size, 1024, `${spec.name}: the same samples per step`);
    assert.deepEqual(parseRunConfig(c), c, spec.name);
  }
  // OPD needs no group: one sample for each of 8x the prompts, the same 1024 samples per step (and a teacher).
  const opd = algorithmConfig(base, ALGORITHMS.find((s) => s.name === 'opd')!, '/teacher');
  assert.deepEqual([opd.algorithm.group_size, opd.rollout.prompts_per_step, opd.algorithm.teacher?.from], [1, 1024, '/teacher']);
  const small = algorithmConfig(baseConfig(parseAlgorithmsOptions({ prompts: '4' })), ALGORITHMS.find((s) => s.name === 'opd')!, '/teacher');
  assert.equal(small.rollout.prompts_per_step, 32, '--set prompts=4: 4 prompts x 8 samples become 32 prompts x 1');
  const dapo = algorithmConfig(base, ALGORITHMS.find((s) => s.name === 'dapo')!);
  assert.equal(dapo.algorithm.dapo?.overlong_penalty?.cache_tokens, 1);
  assert.equal(algorithmConfig(base, ALGORITHMS.find((s) => s.name === 'ppo_critic')!).algorithm.critic?.lambda, 0.95);
});
