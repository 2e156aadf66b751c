// The sampled evaluation's pure pieces: its input's checks and defaults (config/evaluation.ts), the
// `relax eval` ref and output (cli/eval.ts), and one prompt's scores from its samples (rollout/evaluate.ts).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { evalInput, evalJson, formatEval } from '../cli/eval';
import { datasetLabel, evaluationMetrics, parseEvaluationInput, parseEvaluationRef } from '../config/evaluation';
import { promptScores, sampleAnswer } from '../rollout/evaluate';

test('evaluation input: defaults, versions, and errors that name the field', () => {
  assert.deepEqual(parseEvaluationInput({ run_id: 'r1' }), { runId: 'r1', version: 'latest', k: 8, temperature: 0.7, seed: 0 });
  assert.deepEqual(parseEvaluationInput({ run_id: 'r1', version: '3', k: 4, max_prompts: 10, dataset: 'd.jsonl', seed: 5 }), { runId: 'r1', version: 3, k: 4, temperature: 0.7, maxPrompts: 10, dataset: 'd.jsonl', seed: 5 });
  assert.equal(parseEvaluationInput({ run_id: 'r1', version: 'unevaluated' }).version, 'unevaluated');
  const refused = (input: unknown, pattern: RegExp) => assert.throws(() => parseEvaluationInput(input), { message: pattern });
  refused({ run_id: 'bad id' }, /^run_id: must name a run/);
  refused({ run_id: 'r', k: 2000 }, /^k: must be an integer in \[1, 1024\]/);
  refused({ run_id: 'r', version: -1 }, /^version: must be a published version/);
  refused({ run_id: 'r', temperature: 0 }, /^temperature: must be a number in \(0, 10\]/);
  refused({ run_id: 'r', top_k: 3 }, /^top_k: is not an evaluation field/);
  refused([], /^input: must be a JSON object/);
});

test('relax eval refs and flags become the workflow input; its output names pass@1, pass@k, maj@k, mean@k', () => {
  assert.deepEqual(parseEvaluationRef('my-run@12'), { run_id: 'my-run', version: 12 });
  assert.deepEqual(parseEvaluationRef('my-run'), { run_id: 'my-run' });
  assert.deepEqual(parseEvaluationRef('my-run@unevaluated'), { run_id: 'my-run', version: 'unevaluated' });
  assert.throws(() => parseEvaluationRef('my-run@v2'), { message: /^version: must be a published version/ });
  assert.deepEqual(evalInput('a@1', { k: 8, temperature: 0.5, maxPrompts: 3 }), { run_id: 'a', version: 1, k: 8, temperature: 0.5, max_prompts: 3 });
  const r = { runId: 'a', policyVersion: 1, step: 1, k: 8, temperature: 0.5, dataset: 'held_out', prompts: 3, seed: 0, pass_at_1: 0.25, pass_at_k: 0.75, maj_at_k: 0.5, mean_at_k: 0.25 };
  const json = evalJson(r);
  assert.deepEqual([json['pass@1'], json['pass@8'], json['maj@8'], json['mean@8']], [0.25, 0.75, 0.5, 0.25]);
  assert.match(formatEval(r), /^a@1 \(step 1\), held-out: 3 prompts x 8 samples at temperature 0.5\n {2}pass@1 +0\.2500\n {2}pass@8 +0\.7500\n {2}maj@8 +0\.5000\n {2}mean@8 +0\.2500$/);
  assert.deepEqual(evaluationMetrics(r), { eval_pass_at_1: 0.25, eval_pass_at_8: 0.75, eval_maj_at_8: 0.5, eval_mean_at_8: 0.25 });
  assert.equal(Object.keys(evaluationMetrics({ ...r, dataset: 'data/GSM8K-test.jsonl' }))[0], 'eval_gsm8k_test_pass_at_1');
  assert.equal(datasetLabel('x/y.z/a b.jsonl'), 'a_b');
});

test("one prompt's scores: a sample is correct at reward >= 1; the answer is the text before the stop token", () => {
  // rewards 1, 0, 0, 1 with answers "7", "7", "5", "7": c = 2 of n = 4
  //   pass@1 = 2/4; pass@4 = 1; majority "7" (3 votes), its first sample correct: maj@4 = 1; mean@4 = 0.5
  assert.deepEqual(promptScores([1, 0, 0, 1], ['7', '7', '5', '7'], 4), { pass_at_1: 0.5, pass_at_k: 1, maj_at_k: 1, mean_at_k: 0.5 });
  // pass@2 = 1 - C(2,2)/C(4,2) = 1 - 1/6
  assert.ok(Math.abs(promptScores([1, 0, 0, 1], ['7', '7', '5', '7'], 2).pass_at_k - 5 / 6) < 1e-12);
  assert.deepEqual(promptScores([0.5, 0.5], ['x', 'y'], 2), { pass_at_1: 0, pass_at_k: 0, maj_at_k: 0, mean_at_k: 0.5 }, 'partial rewards are not correct');
  const decode = (t: number[]) => t.map((x) => String.fromCharCode(96 + x)).join('');
  const sample = (tokens: number[]) => ({ tokens, logprobs: [], samplingLogprobs: [], finishReason: 'stop' as const, policyVersion: 0 });
  assert.equal(sampleAnswer(sample([1, 2, 0, 3]), new Set([0]), decode), 'ab');
  assert.equal(sampleAnswer(sample([1, 2]), new Set([0]), decode), 'ab');
});
