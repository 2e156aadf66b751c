// The run config: defaults, and an error naming the field for each kind of bad input.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseRunConfig, RunConfigError } from '../config/run-config';
import { policyModelConfig } from '../training/options';

test('an empty config gets every default', () => {
  const c = parseRunConfig({});
  assert.equal(c.task, 'add2');
  assert.equal(c.mode, 'sync');
  assert.equal(c.max_staleness, 0);
  assert.equal(policyModelConfig(c.model, 16).nHeads, 8, 'the tiny GPT defaults fill in');
  assert.equal(c.model.from, undefined);
  assert.equal(c.lora, undefined);
  assert.equal(c.data, undefined);
  assert.equal(c.algorithm.group_size, 8);
  assert.equal(c.train.lr, 1e-4);
  assert.equal(c.algorithm.advantage, 'grpo');
  assert.deepEqual(c.algorithm.advantage_options, {});
  assert.equal(c.run_id, undefined);
});

test('given values survive and nested defaults still fill in', () => {
  const c = parseRunConfig({ run_id: 'exp-1', mode: 'async', max_staleness: 2, train: { lr: 3e-4 }, model: { d_model: 96, n_heads: 3 } });
  assert.equal(c.run_id, 'exp-1');
  assert.equal(c.max_staleness, 2);
  assert.equal(c.train.lr, 3e-4);
  assert.equal(c.train.steps, 50);
  assert.equal(c.model.d_model, 96);
  assert.equal(policyModelConfig(c.model, 16).nLayers, 2);
});

// Each bad config, and the field its error must name.
const INVALID: Array<[name: string, input: unknown, field: RegExp]> = [
  ['not an object', 'add2', /^config: expected one JSON object/],
  ['an array', [1, 2], /^config: expected one JSON object/],
  ['null', null, /^config: expected one JSON object/],
  ['unknown top-level key', { lerning_rate: 1 }, /^lerning_rate: unknown field/],
  ['unknown nested key', { train: { learning_rate: 1 } }, /^train\.learning_rate: unknown field/],
  ['run_id with spaces', { run_id: 'my run' }, /^run_id: must be 1-64 characters/],
  ['run_id too long', { run_id: 'x'.repeat(65) }, /^run_id: /],
  ['empty task', { task: '' }, /^task: /],
  ['negative seed', { seed: -1 }, /^seed: .*got -1/],
  ['fractional seed', { seed: 1.5 }, /^seed: /],
  ['unknown mode', { mode: 'turbo' }, /^mode: .*"turbo"/],
  ['staleness in sync mode', { max_staleness: 2 }, /^max_staleness: must be 0 in mode "sync"/],
  ['negative staleness', { mode: 'async', max_staleness: -1 }, /^max_staleness: /],
  ['string where a number goes', { train: { lr: '0.001' } }, /^train\.lr: .*expected number/],
  ['negative learning rate', { train: { lr: -1 } }, /^train\.lr: .*got -1/],
  ['zero steps', { train: { steps: 0 } }, /^train\.steps: /],
  ['warmup longer than training', { train: { steps: 10, warmup_steps: 20 } }, /^train\.warmup_steps: must be <= train\.steps/],
  ['unknown lr decay', { train: { lr_decay: 'step' } }, /^train\.lr_decay: /],
  ['heads do not divide d_model', { model: { d_model: 64, n_heads: 5 } }, /^model\.n_heads: must divide model\.d_model/],
  ['zero layers', { model: { n_layers: 0 } }, /^model\.n_layers: /],
  ['response longer than context', { model: { context_length: 16 }, rollout: { max_new_tokens: 16 } }, /^rollout\.max_new_tokens: must be below/],
  ['tiny-GPT size with a pretrained model', { model: { from: 'smollm2-135m-instruct', d_model: 64 } }, /^model\.d_model: sizes the tiny GPT, but model\.from names a pretrained model/],
  ['LoRA without a pretrained model', { lora: { rank: 8 } }, /^lora: needs a pretrained model: set model\.from/],
  ['data without a pretrained model', { data: { train: 'x.jsonl' } }, /^data: needs a pretrained model with a tokenizer/],
  ['unknown LoRA module', { model: { from: 'x' }, lora: { target_modules: ['qkv'] } }, /^lora\.target_modules\.0: /],
  ['group of one', { algorithm: { group_size: 1 } }, /^algorithm\.group_size: /],
  ['clip_high below clip_low', { algorithm: { clip_low: 0.3, clip_high: 0.2 } }, /^algorithm\.clip_high: must be >= algorithm\.clip_low/],
  ['unknown KL estimator', { algorithm: { kl_estimator: 'k4' } }, /^algorithm\.kl_estimator: /],
  ['negative KL coefficient', { algorithm: { kl_coef: -0.1 } }, /^algorithm\.kl_coef: /],
  ['top_p of zero', { rollout: { top_p: 0 } }, /^rollout\.top_p: /],
  ['temperature of zero', { rollout: { temperature: 0 } }, /^rollout\.temperature: /],
  ['negative top_k', { rollout: { top_k: -5 } }, /^rollout\.top_k: /],
  ['checkpoint every zero steps', { checkpoint: { every: 0 } }, /^checkpoint\.every: /],
  ['section that is not an object', { train: 5 }, /^train: /],
  ['a removed section', { smoke: { samples: 8 } }, /^smoke: unknown field/],
  ['an estimator module without a path', { algorithm: { advantage: { export: 'x' } } }, /^algorithm\.advantage: /],
  // Absurd sizes a fuzz run found accepted before every size had a bound (config/run-bounds.ts).
  ['d_ff of 1e15', { model: { d_ff: 1e15 } }, /^model\.d_ff: .*<=65536 \(got 1000000000000000\)/],
  ['d_model of 1048576', { model: { d_model: 1_048_576 } }, /^model\.d_model: .*<=16384/],
  ['top_k of 1e9', { rollout: { top_k: 1e9 } }, /^rollout\.top_k: .*<=1000000/],
  ['checkpoint every 1e15 steps', { checkpoint: { every: 1e15 } }, /^checkpoint\.every: .*<=1000000/],
  ['entropy coefficient of 1e308', { algorithm: { entropy_coef: 1e308 } }, /^algorithm\.entropy_coef: .*<=10 \(got 1e\+308\)/],
  ['a micro-batch of 1e9', { train: { micro_batch: 1e9 } }, /^train\.micro_batch: /],
  ['a 5,000-character module path', { reward: { module: 'm'.repeat(5000) } }, /^reward\.module: a string of 5000 characters: at most 4096/],
  ['a 2,000-character module path', { reward: { module: 'm'.repeat(2000) } }, /^reward\.module: must be at most 1024 characters \(got "m+\.\.\. \(\d+ more characters\)"\)/],
  ['a config nested 5,000 deep', { algorithm: { advantage_options: JSON.parse(`${'{"a":'.repeat(5000)}1${'}'.repeat(5000)}`) } }, /^algorithm\.advantage_options(\.a)+: nested deeper than 32 levels/],
  ['a tiny GPT over the memory limit', { model: { d_model: 16_384, n_heads: 8, n_layers: 48 } }, /^model\.d_model: 16384 with n_layers 48, .* parameters .*RELAX_MAX_RUN_MEMORY_GB/],
];

for (const [name, input, field] of INVALID) {
  test(`rejects: ${name}`, () => {
    assert.throws(
      () => parseRunConfig(input),
      (err: unknown) => {
        assert.ok(err instanceof RunConfigError, `expected RunConfigError, got ${String(err)}`);
        assert.ok(
          err.problems.some((p) => field.test(p)),
          `no problem matches ${field}; got:\n  ${err.problems.join('\n  ')}`,
        );
        return true;
      },
    );
  });
}

test('every problem is reported at once, not only the first', () => {
  assert.throws(
    () => parseRunConfig({ train: { lr: -1 }, rollout: { top_p: 2 }, bogus: true }),
    (err: RunConfigError) => err.problems.length === 3,
  );
});
