// The sandbox for user code (envs/sandbox.ts): a hanging or memory-hungry reward fails only its own
// samples and the next call gets a fresh thread, threads see no secrets, a group is one message,
// environments and task modules behave through their proxies as they do in-process, generate
// functions reach the host's engine and tokenizer, a module that never finishes loading fails
// within the load timeout, and the allow-list refuses modules outside the allowed roots. No
// Temporal server needed.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { parseRunConfig } from '../config/run-config';
import { CharTokenizer } from '../engines/tokenizers/char';
import { add2Task } from '../envs/add2';
import { calculatorPrompt, CalculatorEnv } from '../envs/calculator';
import type { Environment, EnvironmentClass } from '../envs/interaction';
import { NotAllowedError } from '../envs/module-policy';
import { loadTask } from '../envs/registry';
import { sandboxModule } from '../envs/sandbox';
import { isSecretVariable, sandboxEnv } from '../envs/sandbox-protocol';
import { SandboxEnvironment } from '../envs/sandbox-proxies';
import { taskFromModule, type TaskModule } from '../envs/task-modules';
import { callEnvironment, callUserFunction, clearUserModuleCache, loadRewardFunction, loadUserExport, scoreGroup, UserModuleError } from '../envs/user-modules';

const REPO = path.resolve(__dirname, '..', '..');
const FIXTURES = path.join(REPO, 'test', 'fixtures', 'sandbox');
const HANG = path.join(FIXTURES, 'hang-reward.cjs');
const PROMPT = { text: '1+1=', answer: '2' };

after(() => clearUserModuleCache());

function reward(module: string, rest: Record<string, unknown> = {}) {
  return loadRewardFunction(parseRunConfig({ reward: { module, ...rest } }).reward, REPO);
}

/** Sets process.env for the duration of fn (sandbox threads copy it when they start). */
async function withEnv<T>(vars: Record<string, string | undefined>, fn: () => Promise<T>): Promise<T> {
  const saved = Object.fromEntries(Object.keys(vars).map((k) => [k, process.env[k]]));
  for (const [k, v] of Object.entries(vars)) if (v === undefined) delete process.env[k];
  else process.env[k] = v;
  try {
    return await fn();
  } finally {
    for (const [k, v] of Object.entries(saved)) if (v === undefined) delete process.env[k];
    else process.env[k] = v;
  }
}

test('a reward stuck in for(;;){} fails only its own sample, naming module, export and the timeout; the next call works on a fresh thread', async () => {
  const r = await reward(HANG, { timeout_ms: 200 });
  assert.ok(r);
  const responses = ['2<eos>', 'hang', '3<eos>', '2<eos>'];
  const started = Date.now();
  const scored = await scoreGroup({ task: add2Task, reward: r, prompt: PROMPT, responses, timeoutMs: 200 });
  const elapsed = Date.now() - started;
  assert.deepEqual(scored[0], { reward: 1, error: null });
  assert.deepEqual(scored[2], { reward: 0, error: null });
  assert.deepEqual(scored[3], { reward: 1, error: null });
  assert.equal(scored[1].reward, null);
  assert.equal(scored[1].error, `reward.module ${JSON.stringify(HANG)} export "default": timed out after 200 ms (the sandbox thread was stopped)`);
  assert.ok(elapsed < 3000, `took ${elapsed} ms`);
  const first = sandboxModule({ field: 'reward', label: 'reward.module', spec: HANG, resolved: HANG, cwd: REPO }).live;
  assert.deepEqual(await scoreGroup({ task: add2Task, reward: r, prompt: PROMPT, responses: ['2<eos>', '1<eos>'], timeoutMs: 200 }), [
    { reward: 1, error: null },
    { reward: 0, error: null },
  ]);
  assert.equal(sandboxModule({ field: 'reward', label: 'reward.module', spec: HANG, resolved: HANG, cwd: REPO }).live, first, 'the fresh thread serves later calls');
});

test('two groups at once: the hanging sample fails, the other group (collateral on the stopped thread) is retried and scores', async () => {
  const r = await reward(HANG, { timeout_ms: 200 });
  const [bad, good] = await Promise.all([
    scoreGroup({ task: add2Task, reward: r, prompt: PROMPT, responses: ['hang', '2<eos>'], timeoutMs: 200 }),
    scoreGroup({ task: add2Task, reward: r, prompt: PROMPT, responses: ['2<eos>', '0<eos>', '2<eos>'], timeoutMs: 200 }),
  ]);
  assert.match(bad[0].error ?? '', /timed out after 200 ms \(the sandbox thread was stopped\)/);
  assert.deepEqual(bad[1], { reward: 1, error: null });
  assert.deepEqual(good.map((s) => s.reward), [1, 0, 1]);
});

test('a reward that allocates without bound runs out of memory in its thread only (RELAX_SANDBOX_MEMORY_MB)', async () => {
  await withEnv({ RELAX_SANDBOX_MEMORY_MB: '64' }, async () => {
    const hog = path.join(FIXTURES, 'hog-reward.cjs');
    const r = await reward(hog, { timeout_ms: 20_000 });
    const scored = await scoreGroup({ task: add2Task, reward: r, prompt: PROMPT, responses: ['hog', 'fine'], timeoutMs: 20_000 });
    assert.equal(scored[0].reward, null);
    assert.match(scored[0].error ?? '', /^reward\.module ".*hog-reward\.cjs" export "default": ran out of memory \(limit 64 MB/);
    assert.deepEqual(scored[1], { reward: 1, error: null });
  });
});

test('sandbox threads get the environment without DATABASE_URL, TEMPORAL_*, PG* or secret-looking names', async () => {
  assert.ok(['DATABASE_URL', 'TEMPORAL_ADDRESS', 'TEMPORAL_API_KEY', 'PGPASSWORD', 'RELAX_API_TOKEN', 'HF_TOKEN', 'MY_SECRET', 'OPENAI_API_KEY', 'X_CREDENTIALS'].every(isSecretVariable));
  assert.ok(!['PATH', 'HOME', 'RELAX_HOME', 'NODE_OPTIONS'].some(isSecretVariable));
  assert.deepEqual(Object.keys(sandboxEnv({ PATH: '/bin', DATABASE_URL: 'x', RELAX_JUDGE_API_KEY: 'k', RELAX_SANDBOX_PASS_ENV: 'RELAX_JUDGE_API_KEY,DATABASE_URL' })).sort(), ['PATH', 'RELAX_JUDGE_API_KEY', 'RELAX_SANDBOX_PASS_ENV']);
  clearUserModuleCache();
  await withEnv({ DATABASE_URL: 'postgres://user:pw@db/relax', TEMPORAL_ADDRESS: 'temporal:7233', RELAX_FIXTURE_TOKEN: 'secret', RELAX_FIXTURE_PLAIN: 'ok' }, async () => {
    const leaks = await reward(HANG, { export: 'leaks' });
    const [s] = await scoreGroup({ task: add2Task, reward: leaks, prompt: PROMPT, responses: [''], timeoutMs: 5000 });
    assert.deepEqual(s, { reward: 1, error: null }, 'only RELAX_FIXTURE_PLAIN is visible in the thread');
    // RELAX_SANDBOX=off (debugging only) runs the module in this process, which sees everything.
    await withEnv({ RELAX_SANDBOX: 'off' }, async () => {
      const inProcess = await reward(HANG, { export: 'leaks' });
      assert.equal((await scoreGroup({ task: add2Task, reward: inProcess, prompt: PROMPT, responses: [''], timeoutMs: 5000 }))[0].reward, 4);
    });
  });
  clearUserModuleCache();
});

test('a group of 8 sample-scope calls is one message to the thread', async () => {
  const r = await reward(HANG);
  await scoreGroup({ task: add2Task, reward: r, prompt: PROMPT, responses: ['2<eos>'], timeoutMs: 5000 });
  const thread = sandboxModule({ field: 'reward', label: 'reward.module', spec: HANG, resolved: HANG, cwd: REPO }).live;
  assert.ok(thread);
  const before = thread.posted;
  const scored = await scoreGroup({ task: add2Task, reward: r, prompt: PROMPT, responses: Array.from({ length: 8 }, (_, i) => `${i}<eos>`), timeoutMs: 5000 });
  assert.deepEqual(scored.map((s) => s.reward), [0, 0, 1, 0, 0, 0, 0, 0]);
  assert.equal(thread.posted - before, 1);
});

test('an env.module class through its proxy plays the same episodes as in-process; a hanging step loses its thread mates as collateral', async () => {
  const module = path.join(FIXTURES, 'calculator-env.cjs');
  const Sandboxed = (await loadUserExport('env', module, 'default', REPO)) as EnvironmentClass;
  const turns = ['[12*34]', '[1*]', `408<eos>`];
  const play = async (env: Environment) => {
    const out: unknown[] = [await callEnvironment(env, 'reset', calculatorPrompt(12, 34), 2000)];
    for (const t of turns) out.push(await callEnvironment(env, 'step', t, 2000));
    return out;
  };
  const sandboxed = new Sandboxed({ task: 'calculator', seed: 1 });
  assert.ok(sandboxed instanceof SandboxEnvironment);
  assert.deepEqual(await play(sandboxed), await play(new CalculatorEnv()));
  await sandboxed.close();

  const Hang = (await loadUserExport('env', module, 'Hang', REPO)) as EnvironmentClass;
  const [a, b] = [new Hang({ task: 'calculator', seed: 1 }), new Hang({ task: 'calculator', seed: 2 })];
  await callEnvironment(a, 'reset', calculatorPrompt(1, 2), 2000);
  await callEnvironment(b, 'reset', calculatorPrompt(1, 2), 2000);
  const [hung, mate] = await Promise.allSettled([callEnvironment(a, 'step', '[hang]', 200), callEnvironment(b, 'step', '[1*2]', 5000).then(() => callEnvironment(b, 'step', '2<eos>', 5000))]);
  assert.equal(hung.status, 'rejected');
  assert.match(String((hung as PromiseRejectedResult).reason), /env\.module ".*calculator-env\.cjs" export "Hang": timed out after 200 ms \(the sandbox thread was stopped\)/);
  assert.equal(mate.status, 'rejected');
  assert.match(String((mate as PromiseRejectedResult).reason), /export "Hang": .*collateral/);
  // A new instance gets the fresh thread.
  const c = new Hang({ task: 'calculator', seed: 3 });
  assert.equal(await callEnvironment(c, 'reset', calculatorPrompt(1, 2), 2000), '1*2=');
});

test('a task module through its proxy behaves as in-process: prompts, held-out set, tokenizer, reward, environment', async () => {
  const file = path.join(REPO, 'examples', 'envs', 'parity.js');
  const sandboxed = await loadTask(file);
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const inProcess = taskFromModule(file, require(file) as TaskModule);
  assert.equal(sandboxed.name, 'parity');
  assert.deepEqual(sandboxed.trainPrompts(7, 5), inProcess.trainPrompts(7, 5));
  assert.deepEqual(sandboxed.heldOut(), inProcess.heldOut());
  assert.deepEqual(sandboxed.tokenizer().encode('12eo'), inProcess.tokenizer().encode('12eo'));
  assert.equal(sandboxed.interaction?.maxTurns, 4);
  assert.equal(sandboxed.interaction?.maxTurnTokens, 2);
  const prompt = sandboxed.heldOut()[0];
  const env = sandboxed.interaction!.createEnv({ seed: 0 });
  const local = inProcess.interaction!.createEnv({ seed: 0 });
  assert.equal(await callEnvironment(env, 'reset', prompt, 2000), await local.reset(prompt));
  for (const said of ['e<eos>', 'o<eos>', 'e<eos>', 'o<eos>']) assert.deepEqual(await callEnvironment(env, 'step', said, 2000), await local.step(said));
});

test('a generate function runs in the thread; its generate() and tokenizer answer from the host', async () => {
  const fixture = path.join(REPO, 'test', 'fixtures', 'echo-generate.cjs');
  const fn = (await loadUserExport('generate', fixture, 'default', REPO)) as (input: never) => unknown;
  const tokenizer = new CharTokenizer('0123456789+=');
  const asked: number[][][] = [];
  const out = (await callUserFunction('the generate function', 5000, fn, {
    prompt: PROMPT,
    groupSize: 2,
    task: 'add2',
    seed: 1,
    tokenizer,
    generate: async (contexts: number[][]) => {
      asked.push(contexts);
      return contexts.map(() => ({ tokens: [3, tokenizer.eosId], logprobs: [-0.5, -0.1], policyVersion: 0 }));
    },
  })) as Array<{ promptTokens: number[]; reward?: number }>;
  const context = [tokenizer.bosId, ...tokenizer.encode('1+1=')];
  assert.deepEqual(asked, [[context, context]], 'the thread encoded the prompt with the host tokenizer (synchronous call)');
  assert.equal(out.length, 2);
  assert.deepEqual(out[0].promptTokens, context);
  assert.equal(out[0].reward, 0.5);
});

test('a task module that never finishes loading fails within RELAX_SANDBOX_LOAD_TIMEOUT_MS, naming the module', async () => {
  await withEnv({ RELAX_SANDBOX_LOAD_TIMEOUT_MS: '700' }, async () => {
    const started = Date.now();
    const file = path.join(FIXTURES, 'loop-task.cjs');
    const err = await loadTask(file).then(
      () => assert.fail('expected the load to time out'),
      (e: unknown) => e,
    );
    assert.ok(err instanceof UserModuleError, String(err));
    assert.match(err.message, /^task ".*loop-task\.cjs" \(.*\) timed out while loading after 700 ms \(the sandbox thread was stopped\)/);
    assert.ok(Date.now() - started < 5000, `took ${Date.now() - started} ms`);
  });
});

test('modules outside the allowed roots are refused, naming RELAX_ALLOWED_MODULE_ROOTS', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-sandbox-'));
  try {
    const file = path.join(dir, 'r.js');
    fs.writeFileSync(file, 'module.exports = () => 1;');
    await assert.rejects(reward(file), (e: unknown) => e instanceof NotAllowedError && e.setting === 'RELAX_ALLOWED_MODULE_ROOTS' && /reward\.module .* outside the directories/.test(e.message));
    await withEnv({ RELAX_ALLOWED_MODULE_ROOTS: `${REPO}:${dir}` }, async () => assert.ok(await reward(file)));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
