// TensorBoard event files, read back by TensorBoard's own reader (the PyPI package tensorboard in the
// project's .venv: EventAccumulator checks every record's CRCs): the writer's scalars, text and
// framing (telemetry/tensorboard.ts); the run hook (activities/run-tensorboard.ts) through the real
// activities of a colocated run on an embedded database: every metric the steps and the evaluation
// record in Postgres is in TensorBoard at the same step with the same value, the config is there as
// text once, the run's release closes the file and a later step opens a new one; a TensorBoard that
// cannot write never fails the step; and `relax tensorboard` prints the log dir and the command.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { MockActivityEnvironment } from '@temporalio/testing';
import type { WorkerContext } from '../activities/context';
import { createColocatedActivities } from '../activities/colocated-step';
import { createControlActivities } from '../activities/control';
import { createRolloutActivities } from '../activities/rollout';
import { tensorboardScalars } from '../activities/run-tensorboard';
import { createTrainActivities } from '../activities/train';
import { tensorboardLines } from '../cli/tensorboard';
import type { RunConfig, RunConfigInput } from '../config/run-config';
import { parseRunConfig } from '../config/run-config';
import { readMetrics } from '../store/metrics';
import { FILE_VERSION, TensorboardWriter } from '../telemetry/tensorboard';
import { runState } from '../training/run-state';
import { freshDatabase, uniqueId, type TestDatabase } from './helpers';

const ROOT = path.resolve(__dirname, '..', '..');
const PYTHON = path.join(ROOT, '.venv', 'bin', 'python');
const INSTALL = `cd ${ROOT} && (test -x .venv/bin/pip || python3 -m venv .venv) && .venv/bin/pip install tensorboard==2.21.0   (or: npm run setup -- --tensorboard)`;
const HASH_REWARD = path.resolve(ROOT, 'test/fixtures/hash-reward.cjs');

// TensorBoard's reader over a log dir: the file version, the event files, every scalar series and text summary.
const READER = `
import json, os, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(sys.argv[1], size_guidance={'scalars': 0, 'tensors': 0})
acc.Reload()
tags = acc.Tags()
print(json.dumps({
  'files': sorted(f for f in os.listdir(sys.argv[1]) if f.startswith('events.out.tfevents.')),
  'file_version': acc.file_version,
  'scalars': {t: [[e.step, e.value] for e in acc.Scalars(t)] for t in tags['scalars']},
  'text': {t: [[e.step, [s.decode() for s in e.tensor_proto.string_val]] for e in acc.Tensors(t)] for t in tags['tensors']},
  'text_plugin_tags': sorted(acc.PluginTagToContent('text').keys()),
}))
`;

interface ReadBack {
  files: string[];
  file_version: number;
  scalars: Record<string, Array<[number, number]>>;
  text: Record<string, Array<[number, string[]]>>;
  text_plugin_tags: string[];
}

/** The log dir as TensorBoard reads it; fails, with the command that installs it, when the project venv has no tensorboard. */
function readWithTensorboard(dir: string): ReadBack {
  try {
    execFileSync(PYTHON, ['-c', 'import tensorboard'], { stdio: 'pipe' });
  } catch {
    assert.fail(`TensorBoard's reader (the PyPI package tensorboard in ${path.join(ROOT, '.venv')}) is not installed: run\n  ${INSTALL}`);
  }
  return JSON.parse(execFileSync(PYTHON, ['-c', READER, dir], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] })) as ReadBack;
}

let tmp: string;
before(() => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-tensorboard-'));
});
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

test('the writer: scalars per step (float32, non-finite left out), text for the text plugin, a second file merged; TensorBoard reads it all', () => {
  const dir = path.join(tmp, 'writer');
  const first = TensorboardWriter.open(dir);
  first.text('config', 0, '```json\n{"task": "add2"}\n```');
  first.scalars(1, { loss: 0.1, reward_mean: 0.25, 'grad/norm': 3.5, kl: Number.NaN });
  first.scalars(2, { loss: 0.05, reward_mean: 0.5 });
  first.close();
  assert.throws(() => first.scalars(3, { loss: 1 }), /is closed/);
  const second = TensorboardWriter.open(dir); // a restarted worker: a new file in the same directory
  second.scalars(3, { loss: 0.025 });
  second.close();
  assert.notEqual(first.file, second.file);
  assert.match(path.basename(first.file), new RegExp(`^events\\.out\\.tfevents\\.\\d{10}\\.${os.hostname().replace(/\./g, '\\.')}\\.${process.pid}\\.\\d+$`));

  const read = readWithTensorboard(dir);
  assert.equal(read.files.length, 2);
  assert.equal(`brain.Event:${read.file_version}`, FILE_VERSION);
  assert.deepEqual(read.scalars, {
    loss: [[1, Math.fround(0.1)], [2, Math.fround(0.05)], [3, Math.fround(0.025)]],
    reward_mean: [[1, 0.25], [2, 0.5]],
    'grad/norm': [[1, 3.5]],
  });
  assert.deepEqual(read.text, { config: [[0, ['```json\n{"task": "add2"}\n```']]] });
  assert.deepEqual(read.text_plugin_tags, ['config']);
});

describe('the run hook (activities/run-tensorboard.ts)', () => {
  let db: TestDatabase;
  const saved = process.env.RELAX_TENSORBOARD_DIR;
  before(async () => {
    db = await freshDatabase();
  });
  after(async () => {
    if (saved === undefined) delete process.env.RELAX_TENSORBOARD_DIR;
    else process.env.RELAX_TENSORBOARD_DIR = saved;
    await db?.close();
  });
  const ctx = (role: 'control' | 'train' | 'rollout'): WorkerContext => ({ pool: db.pool, role, device: 'cpu', identity: `test-${role}`, instanceQueue: `test-${role}-instance` });

  test('a run through the real activities: every recorded metric in TensorBoard at its step, the config as text once, a new file after the run is released', async () => {
    process.env.RELAX_TENSORBOARD_DIR = path.join(tmp, 'runs');
    const env = new MockActivityEnvironment();
    const input: RunConfigInput = {
      placement: 'colocated',
      model: { context_length: 16 },
      algorithm: { group_size: 4, kl_coef: 0.01 },
      rollout: { prompts_per_step: 2, max_new_tokens: 4 },
      train: { steps: 3, eval_every: 100 },
      reward: { module: HASH_REWARD },
      checkpoint: { dir: path.join(tmp, 'checkpoints'), every: 1 },
    };
    const config: RunConfig = await env.run(createControlActivities(ctx('control')).startRun, { input, workflowId: uniqueId('wf') });
    const runId = config.run_id as string;
    await env.run(createTrainActivities(ctx('train')).initPolicy, { runId });
    const { colocatedStep } = createColocatedActivities(ctx('train'));
    await env.run(colocatedStep, { runId, step: 1, fromVersion: 0 });
    await env.run(colocatedStep, { runId, step: 2 });
    await env.run(createRolloutActivities(ctx('rollout')).evaluate, { runId, policyVersion: 2, step: 2 });
    // The reaper's release closes the file; the next step (as on a restarted worker) opens another.
    assert.ok((await runState.release(runId)).includes('tensorboard.writer'), 'the writer is held in the run state and released with the run');
    await env.run(colocatedStep, { runId, step: 3, fromVersion: 2 });
    await runState.release(runId);

    const read = readWithTensorboard(path.join(tmp, 'runs', runId));
    assert.equal(read.files.length, 2, 'one file per writer: before and after the release');
    const recorded = await readMetrics(db.pool, runId);
    for (const tag of ['reward_mean', 'loss', 'kl', 'entropy', 'grad_norm', 'samples_per_s', 'eval_accuracy']) assert.ok(read.scalars[tag], `scalar ${tag} is written`);
    const asFloat32 = Object.fromEntries(Object.entries(recorded).map(([name, series]) => [name, series.map(([step, v]) => [step, Math.fround(v)])]));
    assert.deepEqual(read.scalars, asFloat32, 'TensorBoard holds exactly what the metrics table holds');
    assert.deepEqual(read.scalars.loss.map(([step]) => step), [1, 2, 3]);
    assert.deepEqual(read.text.config?.length, 1, 'the config is written once, by the run\'s first writer');
    const [[step, [text]]] = read.text.config;
    assert.equal(step, 0);
    assert.match(text, /^```json\n\{[^]*\}\n```$/, 'a JSON code block (the text plugin renders Markdown)');
    assert.deepEqual(JSON.parse(text.slice('```json\n'.length, -'\n```'.length)), JSON.parse(JSON.stringify(config)), 'the run config as registered');
  });

  test('TensorBoard never fails a step: a directory that cannot be written is logged and the run goes on; RELAX_TENSORBOARD_DIR=off writes nothing', () => {
    const blocker = path.join(tmp, 'a-file');
    fs.writeFileSync(blocker, '');
    process.env.RELAX_TENSORBOARD_DIR = blocker; // mkdir <file>/<run> fails
    const run = { runId: uniqueId('broken'), config: parseRunConfig({}) };
    assert.doesNotThrow(() => tensorboardScalars(run, 1, { loss: 1 }));
    assert.doesNotThrow(() => tensorboardScalars(run, 2, { loss: 1 }));
    process.env.RELAX_TENSORBOARD_DIR = 'off';
    const off = { runId: uniqueId('off'), config: parseRunConfig({}) };
    tensorboardScalars(off, 1, { loss: 1 });
    assert.deepEqual(fs.readdirSync(tmp).filter((f) => f.startsWith('off-')), []);
    return Promise.all([runState.release(run.runId), runState.release(off.runId)]).then(() => undefined);
  });
});

test('relax tensorboard <run>: the log dir under RELAX_HOME (or RELAX_TENSORBOARD_DIR) and the tensorboard command', () => {
  const home = path.join(tmp, 'home');
  const dir = path.join(home, 'runs', 'r1', 'tensorboard');
  const lines = tensorboardLines('r1', { RELAX_HOME: home });
  assert.match(lines[0], new RegExp(`^log dir: ${dir} \\(no event file yet: `));
  assert.equal(lines[1], `tensorboard --logdir ${dir}`);
  fs.mkdirSync(dir, { recursive: true });
  TensorboardWriter.open(dir).close();
  assert.equal(tensorboardLines('r1', { RELAX_HOME: home })[0], `log dir: ${dir} (1 event file)`);
  assert.equal(tensorboardLines('r1', { RELAX_TENSORBOARD_DIR: '/data/tb' })[1], 'tensorboard --logdir /data/tb/r1');
  assert.throws(() => tensorboardLines('r1', { RELAX_TENSORBOARD_DIR: 'off' }), /RELAX_TENSORBOARD_DIR is off/);
  assert.throws(() => tensorboardLines('../etc', {}), /is not a run id/);
});
