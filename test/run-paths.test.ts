// The worker-side allow-list for the files a run names (envs/module-policy.ts): checkpoint.dir,
// checkpoint.init_from, data files, model, teacher and judge paths lie under RELAX_ALLOWED_DATA_ROOTS
// (default: the working directory, RELAX_HOME, the warm-start cache, the Hugging Face cache), after
// symlinks are followed; registry references, named models and Hub ids are not paths. Refusals name
// the field. And export names every object inherits are refused by the validator.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { fileCreationMask } from '../config/environment';
import { parseRunConfig, RunConfigError } from '../config/run-config';
import { tightenModes } from '../workers/local-stack';
import { allowedDataRoots, checkDataPathAllowed, checkRunPathsAllowed, NotAllowedError, runConfigPaths } from '../envs/module-policy';
import { pickExport } from '../envs/user-modules';

const tmp = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'relax-run-paths-')));
const cwd = path.join(tmp, 'project');
const home = path.join(tmp, 'home');
fs.mkdirSync(cwd);
fs.mkdirSync(home);
const env = { RELAX_HOME: home, HF_HUB_CACHE: path.join(tmp, 'hf') };

/** The NotAllowedError `fn` throws. */
function refusal(fn: () => void): NotAllowedError {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof NotAllowedError, String(err));
    return err;
  }
  return assert.fail('expected a refusal');
}

test('default roots: the working directory, RELAX_HOME, the warm-start cache and the Hugging Face cache', () => {
  assert.deepEqual(allowedDataRoots(env, cwd), [cwd, home, path.join(home, 'warm-starts'), path.join(tmp, 'hf')]);
  assert.deepEqual(allowedDataRoots({ ...env, RELAX_ALLOWED_DATA_ROOTS: `/srv/relax:${tmp}/shared` }, cwd), ['/srv/relax', path.join(tmp, 'shared')]);
});

test('checkpoint.dir "/" and init_from "../../../../etc" are refused, naming the field, the real path and the setting', () => {
  const dir = refusal(() => checkRunPathsAllowed(parseRunConfig({ checkpoint: { dir: '/' } }), env, cwd));
  assert.match(dir.message, /^checkpoint\.dir "\/" resolves to \/, outside the directories this worker keeps run files in \(/);
  assert.match(dir.message, /add its directory to RELAX_ALLOWED_DATA_ROOTS in the workers' environment$/);
  assert.equal(dir.setting, 'RELAX_ALLOWED_DATA_ROOTS');
  const up = refusal(() => checkRunPathsAllowed(parseRunConfig({ checkpoint: { init_from: '../../../../etc' } }), env, cwd));
  assert.match(up.message, /^checkpoint\.init_from "\.\.\/\.\.\/\.\.\/\.\.\/etc" resolves to \/etc, outside/);
  for (const [field, config] of [
    ['data.train', { model: { from: 'smollm2-135m-instruct' }, data: { train: '/etc/passwd' } }],
    ['data.eval', { model: { from: 'smollm2-135m-instruct' }, data: { train: 'train.jsonl', eval: '../eval.jsonl' } }],
    ['model.from', { model: { from: '/opt/models/llama' } }],
    ['algorithm.teacher.from', { algorithm: { advantage: 'opd', teacher: { from: '/root/teacher' } } }],
    ['reward.judge.from', { reward: { judge: { from: '../judge', prompt_template: '{response}', parse: { pattern: '(\\d)' } } } }],
  ] as const) {
    assert.match(refusal(() => checkRunPathsAllowed(parseRunConfig(config), env, cwd)).message, new RegExp(`^${field.replace(/\./g, '\\.')} "`), field);
  }
  assert.match(refusal(() => checkDataPathAllowed('dataset', '/var/data.jsonl', env, cwd)).message, /^dataset "\/var\/data\.jsonl" resolves to/);
});

test('paths under a root pass, relative ones from the working directory; a symlink out of a root is followed and refused', () => {
  const config = parseRunConfig({
    checkpoint: { dir: path.join(home, 'checkpoints', 'not-made-yet', 'deeper'), init_from: 'warm/v00000000' },
    algorithm: { advantage: 'opd', teacher: { from: 'teacher-run@latest' } },
    model: { from: 'smollm2-135m-instruct' },
    data: { train: './data/train.jsonl' },
  });
  checkRunPathsAllowed(config, env, cwd);
  assert.deepEqual(runConfigPaths(config, cwd).map(([f]) => f), ['checkpoint.dir', 'checkpoint.init_from', 'data.train'], 'registry references and named models are not paths');
  assert.deepEqual(runConfigPaths(parseRunConfig({ model: { from: 'HuggingFaceTB/SmolLM2-135M' } }), cwd), [], 'a Hub id that is no local path is not a path');
  fs.symlinkSync('/etc', path.join(cwd, 'escape'));
  const link = refusal(() => checkRunPathsAllowed(parseRunConfig({ checkpoint: { dir: 'escape/relax' } }), env, cwd));
  assert.match(link.message, /^checkpoint\.dir "escape\/relax" resolves to \/etc\/relax, outside/);
});

test('export names every object inherits are refused: by the validator (naming the field) and by the loader', () => {
  for (const [field, config] of [
    ['reward.export', { reward: { module: './r.js', export: 'constructor' } }],
    ['env.export', { env: { module: './e.js', export: '__proto__' } }],
    ['generate.export', { generate: { module: './g.js', export: 'prototype' } }],
  ] as const) {
    assert.throws(() => parseRunConfig(config), (e: unknown) => e instanceof RunConfigError && e.message.includes(`${field}: must name the module's own export`), field);
  }
  function reward(): number {
    return 1;
  }
  assert.throws(() => pickExport(reward, './r.js', 'prototype', '/x/r.js', cwd), /reward\.export "prototype" is inherited by every object/);
  assert.equal(pickExport({ score: reward }, './r.js', 'score', '/x/r.js', cwd), reward);
});

test('RELAX_UMASK: 077 by default, group access configurable, other users never; tightenModes applies it to an older tree', () => {
  assert.equal(fileCreationMask({}), 0o077);
  assert.equal(fileCreationMask({ RELAX_UMASK: '027' }), 0o027);
  assert.equal(fileCreationMask({ RELAX_UMASK: '0007' }), 0o007);
  assert.throws(() => fileCreationMask({ RELAX_UMASK: '022' }), /RELAX_UMASK=022 would give other users access .*keep the last digit 7/);
  assert.throws(() => fileCreationMask({ RELAX_UMASK: 'private' }), /RELAX_UMASK=private is not an octal file-creation mask/);
  const old = path.join(tmp, 'older-data');
  fs.mkdirSync(path.join(old, 'pglite'), { recursive: true });
  fs.writeFileSync(path.join(old, 'pglite', 'pg_authid'), 'x');
  fs.chmodSync(path.join(old, 'pglite', 'pg_authid'), 0o666);
  fs.chmodSync(old, 0o755);
  fs.symlinkSync('/etc/hostname', path.join(old, 'link'));
  assert.equal(tightenModes(old, 0o027), 3, 'the directory, pglite/ and the file');
  assert.deepEqual([old, path.join(old, 'pglite'), path.join(old, 'pglite', 'pg_authid')].map((p) => (fs.statSync(p).mode & 0o777).toString(8)), ['750', '750', '640']);
  assert.equal(fs.statSync('/etc/hostname').mode & 0o004, 0o004, 'a symlink target is not touched');
});
