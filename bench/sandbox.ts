// `relax bench sandbox`: what running user code in a sandbox thread (envs/sandbox.ts) costs, side by
// side in one run: add2 reward calls per second (examples/rewards/add2-exact.js, groups of 8 scored
// by scoreGroup, 16 groups at once as a rollout slice does) and calculator environment steps per
// second (envs/calculator.ts as an env.module class, test/fixtures/sandbox/calculator-env.cjs: 8
// episodes at once, reset then a tool call and the answer), in-process (RELAX_SANDBOX=off) and
// sandboxed. Options: groups=N (default 16), min_ms=N (time per measurement, default 1500).
import path from 'node:path';
import { add2Task, add2TrainPrompts } from '../envs/add2';
import { calculatorPrompt } from '../envs/calculator';
import type { Environment, EnvironmentClass } from '../envs/interaction';
import { callEnvironment, clearUserModuleCache, loadRewardFunction, loadUserExport, scoreGroup } from '../envs/user-modules';
import type { Bench } from './index';
import { round, timeCalls } from './measure';

const REPO = path.resolve(__dirname, '..', '..');
const REWARD = path.join(REPO, 'examples', 'rewards', 'add2-exact.js');
const ENV = path.join(REPO, 'test', 'fixtures', 'sandbox', 'calculator-env.cjs');
const GROUP = 8;
const TIMEOUT_MS = 10_000;

/** Runs fn with RELAX_SANDBOX set to `mode` ('off' for in-process, unset for the sandbox). */
async function inMode<T>(mode: 'off' | 'on', fn: () => Promise<T>): Promise<T> {
  const saved = process.env.RELAX_SANDBOX;
  if (mode === 'off') process.env.RELAX_SANDBOX = 'off';
  else delete process.env.RELAX_SANDBOX;
  try {
    return await fn();
  } finally {
    if (saved === undefined) delete process.env.RELAX_SANDBOX;
    else process.env.RELAX_SANDBOX = saved;
  }
}

export const sandboxBench: Bench = async (ctx) => {
  const groups = Number(ctx.options.groups ?? 16);
  const minMs = Number(ctx.options.min_ms ?? 1500);
  const prompts = add2TrainPrompts(1, groups);
  const responses = prompts.map((p) => Array.from({ length: GROUP }, (_, i) => (i % 2 ? `${p.answer}<eos>` : `${Number(p.answer) + i}<eos>`)));

  const rewardRate = async (mode: 'off' | 'on') => {
    const started = performance.now();
    const reward = await inMode(mode, () => loadRewardFunction({ module: REWARD, export: 'default', scope: 'sample', timeout_ms: TIMEOUT_MS }, REPO));
    const loadMs = performance.now() - started;
    const slice = async () => {
      const scored = await Promise.all(prompts.map((prompt, g) => scoreGroup({ task: add2Task, reward, prompt, responses: responses[g], timeoutMs: TIMEOUT_MS })));
      if (scored.flat().some((s) => s.error !== null)) throw new Error(`a reward failed: ${scored.flat().find((s) => s.error)?.error}`);
    };
    const t = await timeCalls(slice, { warmup: 3, minCalls: 10, minMs });
    return { perS: (groups * GROUP * 1000) / t.medianMs, loadMs };
  };

  const envRate = async (mode: 'off' | 'on') => {
    const Env = (await inMode(mode, () => loadUserExport('env', ENV, 'default', REPO))) as EnvironmentClass;
    const episodes = Array.from({ length: GROUP }, (_, i) => calculatorPrompt(10 + i, 20 + i));
    const round8 = async () => {
      await Promise.all(
        episodes.map(async (prompt, i) => {
          const env: Environment = new Env({ task: 'calculator', seed: i });
          await callEnvironment(env, 'reset', prompt, TIMEOUT_MS);
          const [a, b] = prompt.text.slice(0, -1).split('*');
          await callEnvironment(env, 'step', `[${a}*${b}]`, TIMEOUT_MS);
          const last = await callEnvironment<{ reward: number }>(env, 'step', `${prompt.answer}<eos>`, TIMEOUT_MS);
          if (last.reward !== 1) throw new Error(`the calculator episode on ${prompt.text} was not solved`);
          await env.close?.();
        }),
      );
    };
    const t = await timeCalls(round8, { warmup: 3, minCalls: 10, minMs });
    return (GROUP * 2 * 1000) / t.medianMs;
  };

  ctx.log(`reward: ${groups} groups of ${GROUP} per call of scoreGroup x ${groups}; env: ${GROUP} calculator episodes of 2 steps`);
  const inprocess = await rewardRate('off');
  const sandboxed = await rewardRate('on');
  ctx.log(`reward calls/s: in-process ${round(inprocess.perS)}, sandboxed ${round(sandboxed.perS)} (first load in a thread ${round(sandboxed.loadMs)} ms)`);
  const envIn = await envRate('off');
  const envSandboxed = await envRate('on');
  ctx.log(`env steps/s: in-process ${round(envIn)}, sandboxed ${round(envSandboxed)}`);
  clearUserModuleCache();
  return {
    group_size: GROUP,
    groups_at_once: groups,
    reward_calls_per_s_inprocess: round(inprocess.perS),
    reward_calls_per_s_sandboxed: round(sandboxed.perS),
    reward_sandbox_over_inprocess: round(sandboxed.perS / inprocess.perS),
    reward_thread_load_ms: round(sandboxed.loadMs),
    env_steps_per_s_inprocess: round(envIn),
    env_steps_per_s_sandboxed: round(envSandboxed),
    env_sandbox_over_inprocess: round(envSandboxed / envIn),
  };
};
