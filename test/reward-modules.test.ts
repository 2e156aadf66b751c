// User reward modules (envs/user-modules.ts): loading by module path, validation errors, and
// per-sample capture of throws, rejections, bad values and timeouts. No Temporal server needed.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { parseRunConfig, RunConfigError } from '../config/run-config';
import { add2Reward, add2Task, add2TrainPrompts } from '../envs/add2';
import {
  loadRewardFunction,
  UserModuleError,
  scoreGroup,
  validateRewardConfig,
  type GroupReward,
  type LoadedReward,
  type SampleReward,
} from '../envs/user-modules';

const REPO = path.resolve(__dirname, '..', '..');
const EXAMPLES = path.join(REPO, 'examples', 'rewards');
const EOS = '<eos>';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-reward-modules-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

function writeModule(name: string, source: string): string {
  const file = path.join(tmp, name);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, source);
  return file;
}

function spec(module: string, rest: { export?: string; scope?: 'sample' | 'group'; timeout_ms?: number } = {}) {
  return parseRunConfig({ reward: { module, ...rest } }).reward;
}

function inline(fn: SampleReward): LoadedReward;
function inline(fn: GroupReward, scope: 'group'): LoadedReward;
function inline(fn: SampleReward | GroupReward, scope: 'sample' | 'group' = 'sample'): LoadedReward {
  return { module: 'inline', resolvedPath: 'inline', exportName: 'default', scope, fn } as LoadedReward;
}

async function rejectsWith(promise: Promise<unknown>, code: string, ...patterns: RegExp[]): Promise<UserModuleError> {
  const err = await promise.then(
    () => assert.fail('expected a UserModuleError'),
    (e: unknown) => e,
  );
  assert.ok(err instanceof UserModuleError, `expected a UserModuleError, got ${String(err)}`);
  assert.equal(err.code, code, err.message);
  for (const p of patterns) assert.match(err.message, p);
  return err;
}

// ---------------------------------------------------------------------------------------------
// Config

test('config: the reward section defaults to the built-in reward', () => {
  const c = parseRunConfig({});
  assert.deepEqual(c.reward, { export: 'default', scope: 'sample', timeout_ms: 10_000 });
  assert.equal(c.reward.module, undefined);
});

test('config: given reward values survive and the rest default', () => {
  const c = parseRunConfig({ reward: { module: './r.js', scope: 'group', timeout_ms: 250 } });
  assert.deepEqual(c.reward, { module: './r.js', export: 'default', scope: 'group', timeout_ms: 250 });
  assert.equal(parseRunConfig({ reward: { timeout_ms: 5 } }).reward.timeout_ms, 5);
});

const INVALID: Array<[name: string, input: unknown, field: RegExp]> = [
  ['unknown key', { reward: { modul: 'x.js' } }, /^reward\.modul: unknown field/],
  ['zero timeout', { reward: { module: 'x.js', timeout_ms: 0 } }, /^reward\.timeout_ms: .*got 0/],
  ['negative timeout', { reward: { module: 'x.js', timeout_ms: -5 } }, /^reward\.timeout_ms: /],
  ['fractional timeout', { reward: { module: 'x.js', timeout_ms: 1.5 } }, /^reward\.timeout_ms: /],
  ['string timeout', { reward: { module: 'x.js', timeout_ms: '100' } }, /^reward\.timeout_ms: /],
  ['unknown scope', { reward: { module: 'x.js', scope: 'batch' } }, /^reward\.scope: .*"batch"/],
  ['empty module', { reward: { module: '' } }, /^reward\.module: /],
  ['empty export', { reward: { module: 'x.js', export: '' } }, /^reward\.export: /],
  ['scope without module', { reward: { scope: 'group' } }, /^reward\.module: is required when reward\.export or reward\.scope is set/],
  ['export without module', { reward: { export: 'score' } }, /^reward\.module: is required/],
];

for (const [name, input, field] of INVALID) {
  test(`config: rejects ${name}`, () => {
    assert.throws(
      () => parseRunConfig(input),
      (err: unknown) => {
        assert.ok(err instanceof RunConfigError);
        assert.ok(err.problems.some((p) => field.test(p)), `no problem matches ${field}: ${err.problems.join(' | ')}`);
        return true;
      },
    );
  });
}

// ---------------------------------------------------------------------------------------------
// Loading

test('no module: nothing to load, validation passes', async () => {
  assert.equal(await loadRewardFunction(undefined), undefined);
  assert.equal(await loadRewardFunction(parseRunConfig({}).reward), undefined);
  await validateRewardConfig(parseRunConfig({}));
});

test('loads an example by relative path, ./ path and absolute path; cached per file and export', async () => {
  const byRelative = await loadRewardFunction(spec('examples/rewards/add2-flaky.js'), REPO);
  const byDot = await loadRewardFunction(spec('./examples/rewards/add2-flaky'), REPO);
  const byAbsolute = await loadRewardFunction(spec(path.join(EXAMPLES, 'add2-flaky.js')), '/');
  assert.ok(byRelative && byDot && byAbsolute);
  assert.equal(byRelative.resolvedPath, path.join(EXAMPLES, 'add2-flaky.js'));
  assert.equal(byRelative.scope, 'sample');
  assert.equal(typeof byRelative.fn, 'function');
  assert.equal(byDot.fn, byRelative.fn);
  assert.equal(byAbsolute.fn, byRelative.fn);
  const named = await loadRewardFunction(spec('examples/rewards/add2-flaky.js', { export: 'exactMatch' }), REPO);
  assert.ok(named && named.fn !== byRelative.fn);
  const group = await loadRewardFunction(spec('examples/rewards/add2-group.js', { scope: 'group' }), REPO);
  assert.equal(group?.scope, 'group');
  // The default working directory is the process's.
  await validateRewardConfig(parseRunConfig({ reward: { module: path.join(EXAMPLES, 'add2-slow.js') } }));
});

test('"default" export: exports.default, module.exports itself, and an ES module default', async () => {
  const cjsDefault = writeModule('cjs-default.js', 'exports.default = () => 0.5; exports.other = () => 0;');
  const mjs = writeModule('esm-default.mjs', 'export default function reward() { return 0.25; }\nexport const named = () => 0.75;');
  const tla = writeModule('esm-tla.mjs', 'await Promise.resolve();\nexport default () => 0.125;');
  for (const [file, expected] of [[cjsDefault, 0.5], [mjs, 0.25], [tla, 0.125]] as const) {
    const loaded = await loadRewardFunction(spec(file), tmp);
    assert.ok(loaded, file);
    assert.equal(await (loaded.fn as SampleReward)({ prompt: { text: '1+1=', answer: '2' }, response: `2${EOS}`, task: 'add2' }), expected, file);
  }
  const named = await loadRewardFunction(spec(mjs, { export: 'named' }), tmp);
  assert.equal(await (named!.fn as SampleReward)({ prompt: { text: '', answer: '' }, response: '', task: 'add2' }), 0.75);
});

test('a package name resolves from the working directory', async () => {
  writeModule('project/node_modules/my-reward/package.json', JSON.stringify({ name: 'my-reward', main: 'lib/index.js' }));
  writeModule('project/node_modules/my-reward/lib/index.js', 'module.exports = () => 1;');
  const loaded = await loadRewardFunction(spec('my-reward'), path.join(tmp, 'project'));
  assert.equal(loaded?.resolvedPath, path.join(tmp, 'project/node_modules/my-reward/lib/index.js'));
});

test('a missing file names the path and the working directory it was resolved from', async () => {
  const err = await rejectsWith(
    loadRewardFunction(spec('./rewards/nope.js'), tmp),
    'not_found',
    /reward\.module "\.\/rewards\/nope\.js" not found/,
    new RegExp(`working directory ${tmp.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`),
    new RegExp(path.join(tmp, 'rewards', 'nope.js').replace(/[.*+?^${}()|[\]\\]/g, '\\$&')),
    /pass an absolute path/,
  );
  assert.equal(err.cwd, tmp);
  await rejectsWith(loadRewardFunction(spec('no-such-reward-package'), tmp), 'not_found', /neither a file relative to the working directory .* nor a package/);
  await rejectsWith(validateRewardConfig(parseRunConfig({ reward: { module: 'nope.js' } }), tmp), 'not_found');
});

test('a missing export lists the exports that exist', async () => {
  await rejectsWith(
    loadRewardFunction(spec('examples/rewards/add2-slow.js', { export: 'fast' }), REPO),
    'missing_export',
    /has no export "fast": it exports "slow", "SLOW_MS": set reward\.export to one of those/,
  );
  const objectModule = writeModule('object-module.js', 'exports.score = () => 1; exports.helper = () => 2;');
  await rejectsWith(loadRewardFunction(spec(objectModule), tmp), 'missing_export', /has no export "default": it exports "score", "helper"/);
  const empty = writeModule('empty-module.js', '// nothing exported\n');
  await rejectsWith(loadRewardFunction(spec(empty), tmp), 'missing_export', /it exports nothing: export the function/);
});

test('an export that is not a function says what it is', async () => {
  await rejectsWith(
    loadRewardFunction(spec('examples/rewards/add2-slow.js', { export: 'SLOW_MS' }), REPO),
    'not_a_function',
    /export "SLOW_MS" is 1000, not a function: export the reward function itself/,
  );
  const obj = writeModule('default-object.js', 'exports.default = { reward: 1 };');
  await rejectsWith(loadRewardFunction(spec(obj), tmp), 'not_a_function', /is \{"reward":1\} \(object\), not a function/);
});

test('a module that fails to load reports its error; once fixed it loads', async () => {
  const file = writeModule('broken.js', 'module.exports = function (input) { return 1 +; };');
  await rejectsWith(loadRewardFunction(spec(file), tmp), 'load_failed', /\(.*broken\.js\) failed to load: SyntaxError/, /fix the error in the module/);
  const throwing = writeModule('throws-on-load.js', 'throw new Error("missing API key");');
  await rejectsWith(loadRewardFunction(spec(throwing), tmp), 'load_failed', /failed to load: missing API key/);
  fs.writeFileSync(file, 'module.exports = () => 1;');
  const loaded = await loadRewardFunction(spec(file), tmp);
  assert.equal(typeof loaded?.fn, 'function');
});

// ---------------------------------------------------------------------------------------------
// Scoring

/** 125 prompts x 8 responses: a mix of right, wrong and never-stopping answers. */
function groups(): Array<{ prompt: { text: string; answer: string }; responses: string[] }> {
  return add2TrainPrompts(7, 125).map((prompt) => ({
    prompt,
    responses: Array.from({ length: 8 }, (_, i) =>
      i % 4 === 3 ? prompt.answer : `${i % 2 === 0 ? prompt.answer : Number(prompt.answer) + i}${EOS}`,
    ),
  }));
}

test('without a user function the task reward scores every sample', async () => {
  for (const { prompt, responses } of groups().slice(0, 20)) {
    const scored = await scoreGroup({ task: add2Task, prompt, responses, timeoutMs: 1000 });
    assert.deepEqual(scored, responses.map((r) => ({ reward: add2Reward(prompt, r), error: null })));
  }
});

test('the flaky example throws on about 10% of 1000 samples, captured per sample, deterministically', async () => {
  const reward = await loadRewardFunction(spec('examples/rewards/add2-flaky.js'), REPO);
  let failed = 0;
  let total = 0;
  const firstPass: Array<string | null> = [];
  for (const { prompt, responses } of groups()) {
    const scored = await scoreGroup({ task: add2Task, reward, prompt, responses, timeoutMs: 1000 });
    assert.equal(scored.length, responses.length);
    scored.forEach((s, i) => {
      total++;
      firstPass.push(s.error);
      if (s.error !== null) {
        failed++;
        assert.equal(s.reward, null);
        // Sandboxed (envs/sandbox.ts): the error names the module and the export.
        assert.match(s.error, /^reward\.module "examples\/rewards\/add2-flaky\.js" export "default": threw: flaky reward: simulated failure on /);
      } else {
        assert.equal(s.reward, add2Reward(prompt, responses[i]));
      }
    });
  }
  assert.equal(total, 1000);
  assert.ok(failed >= 50 && failed <= 150, `${failed} of 1000 failed; expected about 100`);
  const secondPass: Array<string | null> = [];
  for (const { prompt, responses } of groups()) {
    for (const s of await scoreGroup({ task: add2Task, reward, prompt, responses, timeoutMs: 1000 })) secondPass.push(s.error);
  }
  assert.deepEqual(secondPass, firstPass);
});

test('a reward that never resolves times out per sample, promptly, leaving no timers', async () => {
  const reward = await loadRewardFunction(spec('examples/rewards/add2-slow.js', { timeout_ms: 50 }), REPO);
  const { prompt, responses } = groups()[0];
  const started = Date.now();
  const scored = await scoreGroup({ task: add2Task, reward, prompt, responses, timeoutMs: 50 });
  const elapsed = Date.now() - started;
  assert.deepEqual(scored, responses.map(() => ({ reward: null, error: `reward.module ${JSON.stringify(path.join(EXAMPLES, 'add2-slow.js'))} export "default": timed out after 50 ms` })));
  assert.ok(elapsed >= 45 && elapsed < 1000, `took ${elapsed} ms; the 8 calls time out concurrently after 50 ms`);
  assert.ok(!process.getActiveResourcesInfo().includes('Timeout'), `timers left: ${process.getActiveResourcesInfo().join(', ')}`);
});

test('a slow reward times out under a short timeout and answers under a long one', async () => {
  const slow = await loadRewardFunction(spec('examples/rewards/add2-slow.js', { export: 'slow' }), REPO);
  const { prompt } = groups()[0];
  const responses = [`${prompt.answer}${EOS}`, `x${EOS}`];
  const started = Date.now();
  assert.deepEqual(
    await scoreGroup({ task: add2Task, reward: slow, prompt, responses, timeoutMs: 50 }),
    responses.map(() => ({ reward: null, error: `reward.module ${JSON.stringify(path.join(EXAMPLES, 'add2-slow.js'))} export "slow": timed out after 50 ms` })),
  );
  assert.ok(Date.now() - started < 900);
  assert.deepEqual(await scoreGroup({ task: add2Task, reward: slow, prompt, responses, timeoutMs: 5000 }), [
    { reward: 1, error: null },
    { reward: 0, error: null },
  ]);
});

test('the timeout signal aborts when the call times out', async () => {
  let aborted: unknown;
  const reward = inline(({ signal }) => new Promise<number>(() => signal?.addEventListener('abort', () => (aborted = signal.reason))));
  const [s] = await scoreGroup({ task: add2Task, reward, prompt: { text: '1+1=', answer: '2' }, responses: ['2'], timeoutMs: 20 });
  assert.equal(s.error, 'reward function timed out after 20 ms');
  assert.match(String(aborted), /timed out after 20 ms/);
});

test('a synchronous call that overruns its timeout counts as timed out', async () => {
  const reward = inline(() => {
    const until = Date.now() + 60;
    while (Date.now() < until) {
      // busy
    }
    return 1;
  });
  const [s] = await scoreGroup({ task: add2Task, reward, prompt: { text: '1+1=', answer: '2' }, responses: ['2'], timeoutMs: 20 });
  assert.equal(s.reward, null);
  assert.match(s.error ?? '', /^reward function timed out after 20 ms \(it ran synchronously for \d+ ms\)$/);
});

test('throws, rejections and values that are not finite numbers fail only their own sample', async () => {
  const prompt = { text: '1+1=', answer: '2' };
  const cases: Array<[string, unknown, string]> = [
    ['nan', NaN, 'reward is NaN, not a finite number'],
    ['inf', Infinity, 'reward is Infinity, not a finite number'],
    ['-inf', -Infinity, 'reward is -Infinity, not a finite number'],
    ['string', '1', 'reward is "1" (string), not a finite number'],
    ['undefined', undefined, 'reward is undefined (did the function forget to return it?), not a finite number'],
    ['null', null, 'reward is null, not a finite number'],
    ['array', [1], 'reward is [1] (array), not a finite number'],
  ];
  const reward = inline(async ({ response }) => {
    if (response === 'ok') return 0.5;
    if (response === 'throw-async') throw new Error('sandbox unreachable');
    if (response === 'reject-string') return Promise.reject('plain string');
    const c = cases.find(([name]) => name === response);
    return c ? (c[1] as number) : 0;
  });
  const responses = ['ok', 'throw-async', 'reject-string', ...cases.map(([name]) => name)];
  const scored = await scoreGroup({ task: add2Task, reward, prompt, responses, timeoutMs: 1000 });
  assert.deepEqual(scored, [
    { reward: 0.5, error: null },
    { reward: null, error: 'reward function rejected: sandbox unreachable' },
    { reward: null, error: 'reward function rejected: plain string' },
    ...cases.map(([, , error]) => ({ reward: null, error })),
  ]);
  const sync = inline(({ response }) => {
    if (response === 'bad') throw new TypeError('cannot read x');
    return 1;
  });
  assert.deepEqual(await scoreGroup({ task: add2Task, reward: sync, prompt, responses: ['good', 'bad'], timeoutMs: 1000 }), [
    { reward: 1, error: null },
    { reward: null, error: 'reward function threw: TypeError: cannot read x' },
  ]);
  // The built-in reward goes through the same capture.
  const task = { ...add2Task, reward: () => NaN };
  assert.deepEqual(await scoreGroup({ task, prompt, responses: ['2'], timeoutMs: 1000 }), [{ reward: null, error: 'reward is NaN, not a finite number' }]);
});

test('group scope: the example gives exact answers 1, else partial credit to the closest', async () => {
  const reward = await loadRewardFunction(spec('examples/rewards/add2-group.js', { scope: 'group' }), REPO);
  const prompt = { text: '20+22=', answer: '42' };
  assert.deepEqual(
    (await scoreGroup({ task: add2Task, reward, prompt, responses: [`42${EOS}`, `41${EOS}`, '42', `4${EOS}`], timeoutMs: 1000 })).map((s) => s.reward),
    [1, 0, 0, 0],
  );
  assert.deepEqual(
    (await scoreGroup({ task: add2Task, reward, prompt, responses: [`40${EOS}`, `41${EOS}`, `43${EOS}`, '42', `=${EOS}`], timeoutMs: 1000 })).map((s) => s.reward),
    [0, 0.1, 0.1, 0, 0],
  );
});

test('group scope: one call per group; a wrong-length, non-array, failing or late result fails every sample', async () => {
  const prompt = { text: '1+1=', answer: '2' };
  const responses = ['a', 'b', 'c'];
  let calls = 0;
  const score = (result: unknown) =>
    scoreGroup({
      task: add2Task,
      reward: inline(() => {
        calls++;
        return result as number[];
      }, 'group'),
      prompt,
      responses,
      timeoutMs: 1000,
    });
  assert.deepEqual(await score([1, 0, 0.5]), [
    { reward: 1, error: null },
    { reward: 0, error: null },
    { reward: 0.5, error: null },
  ]);
  assert.equal(calls, 1);
  const wrongLength = 'group reward function returned 2 rewards for 3 responses: return one number per response, in order';
  assert.deepEqual(await score([1, 0]), responses.map(() => ({ reward: null, error: wrongLength })));
  assert.deepEqual(await score(Float64Array.of(1, 0, 1)), [1, 0, 1].map((reward) => ({ reward, error: null })));
  const notArray = await score(1);
  assert.ok(notArray.every((s) => s.reward === null && /^group reward function returned 1, not an array: return one number per response/.test(s.error ?? '')), JSON.stringify(notArray));
  // One bad element fails only its sample.
  assert.deepEqual(await score([1, NaN, 0]), [
    { reward: 1, error: null },
    { reward: null, error: 'reward is NaN, not a finite number' },
    { reward: 0, error: null },
  ]);
  const throwing = inline(() => {
    throw new Error('judge offline');
  }, 'group');
  assert.deepEqual(
    await scoreGroup({ task: add2Task, reward: throwing, prompt, responses, timeoutMs: 1000 }),
    responses.map(() => ({ reward: null, error: 'reward function threw: judge offline' })),
  );
  const never = inline(() => new Promise<number[]>(() => {}), 'group');
  assert.deepEqual(
    await scoreGroup({ task: add2Task, reward: never, prompt, responses, timeoutMs: 30 }),
    responses.map(() => ({ reward: null, error: 'reward function timed out after 30 ms' })),
  );
  assert.deepEqual(await scoreGroup({ task: add2Task, reward: never, prompt, responses: [], timeoutMs: 30 }), []);
});

test('the function receives the prompt, the response with specials kept and the task name', async () => {
  const seen: unknown[] = [];
  const reward = inline((input) => {
    seen.push({ prompt: { ...input.prompt }, response: input.response, task: input.task });
    input.prompt.answer = 'mutated';
    return 0;
  });
  const prompt = { text: '1+1=', answer: '2' };
  await scoreGroup({ task: add2Task, reward, prompt, responses: [`2${EOS}`, `3${EOS}`], timeoutMs: 1000 });
  assert.deepEqual(seen, [
    { prompt: { text: '1+1=', answer: '2' }, response: `2${EOS}`, task: 'add2' },
    { prompt: { text: '1+1=', answer: '2' }, response: `3${EOS}`, task: 'add2' },
  ]);
  assert.equal(prompt.answer, '2', 'a function cannot change the caller\'s prompt');
});
