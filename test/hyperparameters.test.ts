// The mid-run hyperparameter validator (config/hyperparameters.ts): the run config's bounds, strict
// keys naming the allowed fields, the cross-field rules against the values in force; that it bundles
// into a workflow (no Node modules); and the trainer's learning rate changing on a kept trainer.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { bundleWorkflowCode } from '@temporalio/worker';
import { RUN_CONFIG_BOUNDS } from '../config/bounded';
import {
  HYPERPARAMETER_PATHS,
  HyperparameterUpdateError,
  hyperparametersOf,
  validateHyperparameterUpdate,
  withHyperparameters,
  type HyperparameterPath,
  type Hyperparameters,
  type RunPosition,
} from '../config/hyperparameters';
import { parseRunConfig } from '../config/run-config';
import { loadTfjsBackend } from '../engines/backends';
import { TINY_MODEL } from '../engines/model';
import { learningRate, Trainer } from '../engines/trainer';
import { sftLoss } from '../training/losses';

const config = parseRunConfig({ train: { steps: 20, lr: 1e-3 } });
const current: Hyperparameters = hyperparametersOf(config);
const SYNC = { step: 5, mode: 'sync' as const };

/** The problems the validator reports for `update` (it must throw). */
function problems(update: unknown, at: RunPosition = SYNC, values: Hyperparameters = current): string[] {
  try {
    validateHyperparameterUpdate(update, values, at);
  } catch (err) {
    assert.ok(err instanceof HyperparameterUpdateError, `a HyperparameterUpdateError, got ${(err as Error).name}`);
    return err.problems;
  }
  assert.fail(`expected ${JSON.stringify(update)} to be refused`);
}

test('a valid update returns the new values and the paths it changed', () => {
  const { hyperparameters, changed } = validateHyperparameterUpdate({ train: { lr: 3e-4, lr_decay: 'cosine' }, rollout: { temperature: 0.7 } }, current, SYNC);
  assert.deepEqual(changed.sort(), ['rollout.temperature', 'train.lr', 'train.lr_decay']);
  assert.equal(hyperparameters.train.lr, 3e-4);
  assert.equal(hyperparameters.train.lr_decay, 'cosine');
  assert.equal(hyperparameters.rollout.temperature, 0.7);
  assert.equal(hyperparameters.rollout.top_p, current.rollout.top_p, 'fields not in the update keep their values');
  assert.equal(hyperparameters.train.steps, 20);
  // A value equal to the one in force is accepted and is not a change.
  assert.deepEqual(validateHyperparameterUpdate({ train: { lr: 1e-3, steps: 30 } }, current, SYNC).changed, ['train.steps']);
  // The new values go into a config without touching anything else.
  const next = withHyperparameters(config, hyperparameters);
  assert.equal(next.train.lr, 3e-4);
  assert.equal(next.train.micro_batch, config.train.micro_batch);
  assert.equal(next.algorithm.group_size, config.algorithm.group_size);
});

test('each field has the run config bounds (the same table)', () => {
  // Just outside each numeric field's bound is refused naming the field; the bound itself is accepted.
  const numeric = HYPERPARAMETER_PATHS.filter((p): p is Exclude<HyperparameterPath, 'train.lr_decay'> => p !== 'train.lr_decay');
  for (const p of numeric) {
    const b = RUN_CONFIG_BOUNDS[p];
    const tooBig = b.exclusiveMax ? b.max : b.max + (b.integer ? 1 : b.max);
    const update = p === 'max_staleness' ? { max_staleness: tooBig } : { [p.split('.')[0]]: { [p.split('.')[1]]: tooBig } };
    const found = problems(update, { step: 0, mode: 'async' });
    assert.ok(found.some((x) => x.startsWith(`${p}:`)), `${p} = ${tooBig} is refused naming ${p}: ${found.join('; ')}`);
  }
  assert.match(problems({ train: { lr: -1 } }).join('; '), /^train\.lr: .*>0.* \(got -1\)/);
  assert.match(problems({ train: { lr: 0 } }).join('; '), /^train\.lr: /);
  assert.match(problems({ train: { lr: '3e-4' } }).join('; '), /^train\.lr: .*number.*\(got "3e-4"\)/);
  assert.match(problems({ train: { warmup_steps: 1.5 } }).join('; '), /^train\.warmup_steps: .*int/i);
  assert.match(problems({ rollout: { top_p: 1.5 } }).join('; '), /^rollout\.top_p: /);
  assert.match(problems({ rollout: { temperature: 0 } }).join('; '), /^rollout\.temperature: /);
  assert.match(problems({ train: { lr_decay: 'exp' } }).join('; '), /^train\.lr_decay: .*constant.*linear.*cosine/);
  assert.match(problems({ train: { lr: Number.NaN } }).join('; '), /^train\.lr: /);
  // Several bad fields: each one named.
  const many = problems({ train: { lr: -1, eval_every: 0 }, algorithm: { kl_coef: -2 } });
  for (const p of ['train.lr', 'train.eval_every', 'algorithm.kl_coef']) assert.ok(many.some((x) => x.startsWith(`${p}:`)), `${p} named in ${many.join('; ')}`);
});

test('unknown fields and fields unsafe to change are refused, naming the ones that can change', () => {
  for (const [update, field] of [
    [{ train: { lr: 1e-3, micro_batch: 8 } }, 'train.micro_batch'],
    [{ train: { learning_rate: 1e-3 } }, 'train.learning_rate'],
    [{ model: { d_model: 8 } }, 'model'],
    [{ mode: 'async' }, 'mode'],
    [{ rollout: { max_new_tokens: 8 } }, 'rollout.max_new_tokens'],
    [{ algorithm: { group_size: 4 } }, 'algorithm.group_size'],
  ] as const) {
    const text = problems(update).join('; ');
    assert.ok(text.startsWith(`${field}: cannot change while a run trains`), text);
    for (const allowed of ['train.lr', 'train.warmup_steps', 'train.lr_decay', 'train.steps', 'train.eval_every', 'algorithm.kl_coef', 'algorithm.entropy_coef', 'algorithm.clip_low', 'algorithm.clip_high', 'rollout.temperature', 'rollout.top_p', 'max_staleness']) {
      assert.ok(text.includes(allowed), `the message names ${allowed}: ${text}`);
    }
  }
});

test('an empty update, or one that is not an object, is refused', () => {
  for (const empty of [{}, { train: {} }, { train: {}, rollout: {} }]) assert.match(problems(empty).join('; '), /^update: empty: set at least one of train\.lr/);
  for (const bad of [null, 3, 'train.lr=1', [{ train: { lr: 1 } }], undefined]) assert.match(problems(bad).join('; '), /^update: expected an object/);
  assert.match(problems({ train: 5 }).join('; '), /^train: .*object/);
  // A deep value is not walked: it is refused by kind.
  let deep: unknown = 1;
  for (let i = 0; i < 100_000; i++) deep = [deep];
  assert.match(problems({ train: deep }).join('; '), /^train: .*\(got an array\)/);
});

test('cross-field rules hold against the values in force', () => {
  // clip_high >= clip_low: with the current clip_low 0.2, and with both changed.
  assert.match(problems({ algorithm: { clip_high: 0.1 } }).join('; '), /^algorithm\.clip_high: must be >= algorithm\.clip_low \(0\.2\); got 0\.1/);
  assert.match(problems({ algorithm: { clip_low: 0.5 } }).join('; '), /^algorithm\.clip_high: must be >= algorithm\.clip_low \(0\.5\); got 0\.28/);
  assert.equal(validateHyperparameterUpdate({ algorithm: { clip_low: 0.5, clip_high: 0.6 } }, current, SYNC).hyperparameters.algorithm.clip_low, 0.5);
  // warmup_steps <= steps, against the steps in force or the new ones.
  assert.match(problems({ train: { warmup_steps: 21 } }).join('; '), /^train\.warmup_steps: must be <= train\.steps \(20\); got 21/);
  assert.match(problems({ train: { steps: 8, warmup_steps: 9 } }).join('; '), /^train\.warmup_steps: must be <= train\.steps \(8\)/);
  // steps >= the steps done + 1: the run cannot end before a step already done.
  assert.match(problems({ train: { steps: 5 } }).join('; '), /^train\.steps: must be at least 6: the run has done 5 steps .*got 5/);
  assert.deepEqual(validateHyperparameterUpdate({ train: { steps: 6 } }, current, SYNC).changed, ['train.steps']);
  // Placement colocated: steps queued behind the one in flight (started up to 8 here) complete, so steps >= 8.
  const colocated = { ...SYNC, startedSteps: 8 };
  assert.match(problems({ train: { steps: 7 } }, colocated).join('; '), /^train\.steps: must be at least 8: the run has done 5 steps and has started steps up to 8 .*got 7/);
  assert.deepEqual(validateHyperparameterUpdate({ train: { steps: 8 } }, current, colocated).changed, ['train.steps']);
  // max_staleness stays 0 in sync mode; may change in async mode (within its bound).
  assert.match(problems({ max_staleness: 2 }).join('; '), /^max_staleness: must stay 0 in mode "sync"/);
  assert.equal(validateHyperparameterUpdate({ max_staleness: 0 }, current, SYNC).changed.length, 0);
  const asyncValues = { ...current, max_staleness: 1 };
  assert.equal(validateHyperparameterUpdate({ max_staleness: 3 }, asyncValues, { step: 5, mode: 'async' }).hyperparameters.max_staleness, 3);
  // The KL term cannot be turned on mid-run in async mode (older samples have no reference log-probs); it can be changed or in sync mode.
  assert.match(problems({ algorithm: { kl_coef: 0.1 } }, { step: 5, mode: 'async' }, asyncValues).join('; '), /^algorithm\.kl_coef: cannot turn the KL term on mid-run in mode "async"/);
  assert.equal(validateHyperparameterUpdate({ algorithm: { kl_coef: 0.1 } }, current, SYNC).hyperparameters.algorithm.kl_coef, 0.1);
  const withKl = { ...asyncValues, algorithm: { ...asyncValues.algorithm, kl_coef: 0.05 } };
  assert.equal(validateHyperparameterUpdate({ algorithm: { kl_coef: 0.2 } }, withKl, { step: 5, mode: 'async' }).hyperparameters.algorithm.kl_coef, 0.2);
  // Every problem is reported at once.
  assert.equal(problems({ algorithm: { clip_high: 0.1 }, train: { steps: 3 } }).length, 2);
});

test('the validator bundles into a workflow: zod and Node-free modules only', { timeout: 180_000 }, async () => {
  // The bundler resolves packages from the workflow file's folder: a scratch folder beside this test.
  const dir = fs.mkdtempSync(path.join(__dirname, '.hyperparameters-bundle-'));
  const quiet = { log() {}, trace() {}, debug() {}, info() {}, warn() {}, error() {} };
  const bundle = (module: string) => {
    const file = path.join(dir, `${path.basename(module)}.js`);
    fs.writeFileSync(file, `const m = require(${JSON.stringify(path.join(__dirname, '..', 'config', `${module}.js`))});\nexports.keys = async () => Object.keys(m);\n`);
    return bundleWorkflowCode({ workflowsPath: file, logger: quiet });
  };
  try {
    const { code } = await bundle('hyperparameters');
    assert.ok(code.includes('validateHyperparameterUpdate'), 'the bundle holds the validator');
    // The control: a module that imports node:os (run-bounds' memory limit) does not bundle.
    await assert.rejects(bundle('run-bounds'), /Webpack finished with errors/);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('a kept trainer follows a new learning rate and schedule from its next step', async () => {
  await loadTfjsBackend({ kind: 'cpu' });
  const model = { ...TINY_MODEL, contextLength: 16 };
  const trainer = Trainer.create({ model, seed: 1, optimizer: { lr: 1e-3 }, schedule: { kind: 'constant' } });
  const sequences = [{ tokens: [1, 2, 3, 4, 5, 6], lossMask: [0, 1, 1, 1, 1] }];
  try {
    assert.equal((await trainer.trainStep(sequences, sftLoss())).lr, 1e-3);
    trainer.setLearningRate(5e-3, { kind: 'constant' });
    assert.equal((await trainer.trainStep(sequences, sftLoss())).lr, 5e-3, 'the next step uses the new lr');
    // A new schedule is read at the trainer's step count (2 steps done): linear decay over 4 steps.
    trainer.setLearningRate(4e-3, { kind: 'linear', totalSteps: 4 });
    assert.equal((await trainer.trainStep(sequences, sftLoss())).lr, learningRate(4e-3, { kind: 'linear', totalSteps: 4 }, 2));
    assert.deepEqual(trainer.learningRateSchedule, { lr: 4e-3, schedule: { kind: 'linear', totalSteps: 4 } });
    assert.throws(() => trainer.setLearningRate(0, { kind: 'constant' }), /optimizer\.lr must be > 0/);
    assert.throws(() => trainer.setLearningRate(1e-3, { kind: 'cosine' }), /schedule\.totalSteps is required/);
    assert.equal(trainer.learningRateSchedule.lr, 4e-3, 'a refused change leaves the values in force');
  } finally {
    trainer.dispose();
  }
});
