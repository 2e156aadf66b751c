// Run configs as users write them: YAML or JSON files and inline text (config/config-file.ts), with
// clear errors naming the file and line:col; Hydra-style key=value overrides (config/overrides.ts)
// validated by the one schema so a bad key is reported by its dot path like a file error; and the
// preflight (config/preflight.ts) that names a missing task, model or dataset file before any start.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import fc from 'fast-check';
import { ConfigInputError, configSourceOf, parseConfigText, readRunConfigInput } from '../config/config-file';
import { applyOverrides, parseOverrideValue, withOverrides } from '../config/overrides';
import { PreflightError, preflightProblems, preflightRunConfig, type PreflightProbes } from '../config/preflight';
import { parseRunConfig, RunConfigError } from '../config/run-config';
import { taskNames } from '../envs/registry';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-config-'));
const write = (name: string, text: string) => {
  const file = path.join(tmp, name);
  fs.writeFileSync(file, text);
  return file;
};
const problemsOf = (fn: () => unknown): string[] => {
  try {
    fn();
  } catch (err) {
    if (err instanceof RunConfigError) return err.problems;
    throw err;
  }
  assert.fail('expected a RunConfigError');
};

test('a YAML file, the same config as JSON, and inline JSON read to the same input; the shipped example parses', () => {
  const yaml = write('run.yaml', '# a run\ntask: add2\ntrain:\n  steps: 5\n  lr: 3e-4\nrollout: {temperature: 0.7}\n');
  const json = write('run.json', '{"task": "add2", "train": {"steps": 5, "lr": 0.0003}, "rollout": {"temperature": 0.7}}');
  const expected = { task: 'add2', train: { steps: 5, lr: 3e-4 }, rollout: { temperature: 0.7 } };
  assert.deepEqual(readRunConfigInput(configSourceOf(yaml)), expected);
  assert.deepEqual(readRunConfigInput(configSourceOf(json)), expected);
  assert.deepEqual(readRunConfigInput(configSourceOf(' {"task": "add2", "train": {"steps": 5, "lr": 3e-4}, "rollout": {"temperature": 0.7}}')), expected);
  assert.deepEqual(readRunConfigInput(undefined), {}, 'no --config: all defaults');
  assert.deepEqual(parseConfigText('', 'empty.yaml'), {}, 'an empty file is the empty config');
  const example = readRunConfigInput(configSourceOf(path.resolve(__dirname, '../../examples/add2-grpo.yaml')));
  assert.equal(parseRunConfig(example).task, 'add2');
});

test('unreadable and malformed configs: the error names the path, the flag, and line:col', () => {
  const missing = path.join(tmp, 'nope.yaml');
  assert.throws(() => readRunConfigInput(configSourceOf(missing)), (e: Error) => e instanceof ConfigInputError && e.message.startsWith(`--config ${missing}: no such file`));
  assert.throws(() => readRunConfigInput(configSourceOf(tmp)), /--config .*: not a file/);
  const bad = write('bad.yaml', 'task: add2\ntrain:\n  steps: 3\n\tlr: 1\n');
  assert.throws(() => readRunConfigInput(configSourceOf(bad)), (e: Error) => e instanceof ConfigInputError && e.message.startsWith(`${bad}:4:1: not valid YAML or JSON: Tabs are not allowed`));
  assert.throws(() => readRunConfigInput(configSourceOf('{not json')), /^ConfigInputError: --config \(inline\):1:10: not valid YAML or JSON: Flow map must end with a \}$/);
  assert.throws(() => parseConfigText('train: 1\ntrain: 2\n', 'dup.yaml'), /dup\.yaml:2:1: .*Map keys must be unique/);
  assert.throws(() => parseConfigText('- task: add2\n', 'list.yaml'), /list\.yaml: a run config is one mapping of keys .*got a list/);
  assert.throws(() => parseConfigText('add2', 'scalar.yaml'), /got the string "add2"/);
});

test('overrides set dotted keys in the raw input with YAML values; ~ removes; the input is not changed', () => {
  const input = { task: 'add2', train: { steps: 50, lr: 1e-4 } };
  const out = applyOverrides(input, ['train.steps=3', 'rollout.temperature=0.7', 'train.share_prompts=false', '+rollout.agent.command=[python, agent.py]', '~train.lr', 'data.reward.pattern=answer: (\\S+)', 'run_id=', 'seed=null']);
  assert.deepEqual(out, {
    task: 'add2',
    train: { steps: 3, share_prompts: false },
    rollout: { temperature: 0.7, agent: { command: ['python', 'agent.py'] } },
    data: { reward: { pattern: 'answer: (\\S+)' } },
    run_id: '',
    seed: null,
  });
  assert.deepEqual(input, { task: 'add2', train: { steps: 50, lr: 1e-4 } }, 'the input is untouched');
  assert.deepEqual(applyOverrides({ rollout: { agent: { command: ['a', 'b'] } } }, ['rollout.agent.command.1=c', 'rollout.agent.command.2=d']).rollout, { agent: { command: ['a', 'c', 'd'] } });
  assert.equal(parseOverrideValue('3e-4'), 3e-4);
  assert.equal(parseOverrideValue('"3"'), '3', 'quoted: a string');
  assert.equal(parseOverrideValue('cosine'), 'cosine');
  assert.deepEqual(parseOverrideValue('{a: 1}'), { a: 1 });
});

test('withOverrides validates with the schema: an unknown key or a wrong type is named by its dot path, like a file error', () => {
  assert.deepEqual(withOverrides({ task: 'add2' }, ['train.steps=3', 'rollout.temperature=0.7']), { task: 'add2', train: { steps: 3 }, rollout: { temperature: 0.7 } });
  const fromOverrides = problemsOf(() => withOverrides({}, ['train.stepz=3', 'rollout.temperature=hot']));
  const fromFile = problemsOf(() => parseRunConfig(readRunConfigInput(configSourceOf(write('typos.yaml', 'train:\n  stepz: 3\nrollout:\n  temperature: hot\n')))));
  assert.deepEqual(fromOverrides, fromFile);
  assert.ok(fromOverrides.some((p) => p.startsWith('train.stepz: unknown field')), fromOverrides.join('\n'));
  assert.ok(fromOverrides.some((p) => /^rollout\.temperature: .*expected number.*\(got "hot"\)/.test(p)), fromOverrides.join('\n'));
  assert.match(problemsOf(() => withOverrides({}, ['train.steps=-1']))[0], /^train\.steps: /);
});

test('malformed overrides are refused naming the argument', () => {
  const refused = (args: string[], pattern: RegExp) => assert.throws(() => applyOverrides({}, args), (e: Error) => e instanceof ConfigInputError && pattern.test(e.message), args.join(' '));
  refused(['train.steps'], /override "train\.steps": expected key=value/);
  refused(['run.yaml'], /to read run\.yaml as the config, write --config run\.yaml/);
  refused(['=3'], /override "=3": expected key=value with a dotted key/);
  refused(['train..steps=3'], /expected key=value with a dotted key/);
  refused(['__proto__.polluted=1'], /expected key=value with a dotted key/);
  refused(['train.constructor=1'], /expected key=value with a dotted key/);
  refused(['rollout.agent.command=[a, b', ''].slice(0, 1), /not a valid YAML flow list/);
  refused(['task=add2', 'task.name=x'], /task is "add2", not a section/);
  refused(['rollout.agent.command=[a]', 'rollout.agent.command.5=x'], /is a list of 1: index it by position 0-1/);
  refused(['~train.steps=3'], /~key removes a key and takes no value/);
  assert.equal(({} as Record<string, unknown>).polluted, undefined);
});

test('property: an override of a number at any schema path reads back as that number, other keys untouched', () => {
  const keys = ['train.steps', 'train.lr', 'rollout.temperature', 'rollout.top_p', 'algorithm.group_size', 'seed', 'train.eval_every'];
  fc.assert(
    fc.property(fc.constantFrom(...keys), fc.oneof(fc.integer({ min: 0, max: 1e6 }), fc.double({ min: 1e-6, max: 1e3, noNaN: true })), fc.dictionary(fc.constantFrom('task', 'mode'), fc.constant('x')), (key, value, rest) => {
        const out = applyOverrides(rest, [`${key}=${value}`]);
        const [section, leaf] = key.includes('.') ? key.split('.') : [undefined, key];
        const got = section ? (out[section] as Record<string, unknown>)[leaf] : out[leaf];
        assert.equal(got, value);
        for (const [k, v] of Object.entries(rest)) assert.equal(out[k], v);
      }),
    { numRuns: 200 },
  );
});

test('property: string values that are not YAML syntax round-trip as the same string', () => {
  fc.assert(
    fc.property(fc.stringMatching(/^[a-z][a-z0-9_./-]{0,20}$/), (s) => {
      fc.pre(!['true', 'false', 'null', 'yes', 'no', 'on', 'off'].includes(s) && !/^[0-9.+-]/.test(s));
      assert.equal(applyOverrides({}, [`task=${s}`]).task, s);
    }),
    { numRuns: 200 },
  );
});

test('preflight names the unknown task, a missing model and missing dataset files; a scheduled {date} path waits for the tick', async () => {
  const probes: PreflightProbes = {
    taskNames,
    isTaskModule: (n) => /[\\/]/.test(n) || /\.[cm]?js$/.test(n),
    checkModelSource: async (from) => {
      if (from !== 'ok-model') throw new Error(`model source "${from}" is not found`);
    },
  };
  assert.deepEqual(await preflightProblems(parseRunConfig({ task: 'add2' }), probes), []);
  const problems = await preflightProblems(parseRunConfig({ task: 'add3', model: { from: 'nope/nothing' }, data: { train: path.join(tmp, 'missing.jsonl'), eval: 'also/{date}.jsonl' }, reward: { module: './no-such-reward.js' } }), probes);
  assert.deepEqual(problems.map((p) => p.field), ['task', 'reward.module', 'model.from', 'data.train']);
  assert.match(problems[1].message, /module "\.\/no-such-reward\.js" is not found/);
  assert.deepEqual(await preflightProblems(parseRunConfig({ task: 'examples/envs/parity.js', reward: { module: 'examples/rewards/judge.js' } }), probes), [], 'module files of the repo (tests run from its root)');
  assert.match(problems[0].message, /^unknown task "add3": known tasks are add2, /);
  assert.match(problems[2].message, /model source "nope\/nothing" is not found/);
  assert.match(problems[3].message, /missing\.jsonl: no such file/);
  assert.deepEqual((await preflightProblems(parseRunConfig({ task: './no/such-task.js' }), probes)).map((p) => p.field), ['task']);
  await assert.rejects(preflightRunConfig({ task: 'add3' }, probes), (e: Error) => e instanceof PreflightError && /\(no workflow was started\): task: unknown task "add3"/.test(e.message));
  await assert.rejects(preflightRunConfig({ train: { steps: -1 } }, probes), RunConfigError, 'an invalid config is a RunConfigError first');
});

test("preflight names a missing teacher, judge model and judge parse module; an existing directory or a registry reference passes", async () => {
  const probes: PreflightProbes = { taskNames, isTaskModule: () => false, checkModelSource: async (from) => Promise.reject(new Error(`model source "${from}" is not found`)) };
  const judge = (from: string, parse: object) => ({ judge: { from, prompt_template: 'Is {response} right? ', parse } });
  const missing = await preflightProblems(
    parseRunConfig({ algorithm: { advantage: 'opd', teacher: { from: 'no/such-teacher' } }, reward: judge('no/such-judge', { module: './no-such-parse.js' }) }),
    probes,
  );
  assert.deepEqual(missing.map((p) => p.field), ['algorithm.teacher.from', 'reward.judge.from', 'reward.judge.parse.module']);
  assert.match(missing[0].message, /model source "no\/such-teacher" is not found \(or <run_id>@<version\|latest> of a run in the checkpoint registry\)/);
  assert.match(missing[2].message, /module "\.\/no-such-parse\.js" is not found/);
  const fine = await preflightProblems(parseRunConfig({ algorithm: { advantage: 'opd', teacher: { from: 'teacher-run@latest' } }, reward: judge(tmp, { pattern: '(yes|no)', map: { yes: 1, no: 0 } }) }), probes);
  assert.deepEqual(fine, [], 'a registry reference and an existing directory pass (their loaders check the format)');
});
