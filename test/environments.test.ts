// Interaction environments and the multi-turn rollout loop on a real ONNX Runtime engine: each
// environment's rules (hand-worked), the loop's bookkeeping (loss mask 0 and no log-prob on
// observations, rewards summed over turns, limits, failures captured per episode), user task,
// environment and generate modules.
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { parseRunConfig } from '../config/run-config';
import { initWeights, type ModelConfig } from '../engines/model';
import { RolloutEngine } from '../engines/rollout';
import { calculate, calculatorPrompt, calculatorTask, CalculatorEnv } from '../envs/calculator';
import { GridworldEnv, gridworldPrompt } from '../envs/gridworld';
import { GuessNumberEnv, guessReward } from '../envs/guess-number';
import type { Environment, StepResult } from '../envs/interaction';
import { loadTask } from '../envs/registry';
import type { Task } from '../envs/task';
import { rolloutEpisodes } from '../rollout/episodes';
import { customGenerateRows, episodeRows } from '../rollout/producers';
import { sftSequence } from '../training/sft';

const EXAMPLES = path.resolve(__dirname, '..', '..', 'examples');
const FIXTURES = path.resolve(__dirname, '..', '..', 'test', 'fixtures');

test('calculator: a tool call returns the product, a final answer ends the episode, malformed calls cost 0.1', () => {
  assert.equal(calculate('37*64'), 2368);
  assert.equal(calculate('37+64'), undefined);
  const env = new CalculatorEnv();
  assert.equal(env.reset(calculatorPrompt(37, 64)), '37*64=');
  assert.deepEqual(env.step('[37*64]'), { observation: '2368;', reward: 0, terminated: false, truncated: false, info: { success: 0, tool_calls: 1, tool_use: 1, malformed_calls: 0 } });
  assert.deepEqual(env.step('[3*]'), { observation: '?;', reward: -0.1, terminated: false, truncated: false, info: { success: 0, tool_calls: 1, tool_use: 1, malformed_calls: 1 } });
  const end = env.step('2368<eos>');
  assert.equal(end.reward, 1);
  assert.ok(end.terminated);
  assert.equal((end.info as { success: number }).success, 1);
  env.reset(calculatorPrompt(10, 10));
  assert.equal(env.step('99<eos>').reward, 0, 'a wrong answer');
  assert.ok(env.step('[12345').truncated, 'a turn that never closed ends the episode');
});

test('guess-number: higher / lower hints, reward falls with every extra turn', () => {
  const env = new GuessNumberEnv();
  assert.equal(env.reset({ text: '?', answer: '6' }), '?');
  assert.equal(env.step('4<eos>').observation, 'h');
  assert.equal(env.step('8<eos>').observation, 'l');
  const found = env.step('6<eos>');
  assert.ok(found.terminated);
  assert.equal(found.reward, guessReward(3));
  assert.equal(guessReward(1), 1);
  assert.ok(Math.abs(guessReward(3) - 0.7) < 1e-12);
  assert.equal(env.step('<eos>').reward, -0.05, 'no digit: an invalid guess');
});

test('gridworld: moves clamp at the edges, the goal ends the episode', () => {
  const env = new GridworldEnv();
  assert.equal(env.reset(gridworldPrompt([1, 1], [0, 0])), '11:00;');
  assert.equal(env.step('u<eos>').observation, '00;', 'the top edge holds');
  assert.equal(env.step('r<eos>').observation, '10;');
  const goal = env.step('d<eos>');
  assert.ok(goal.terminated);
  assert.equal(goal.reward, 1);
});

test('calculator demonstrations: tool episodes train the call and the answer, never the observation', () => {
  const seq = sftSequence(calculatorTask, calculatorPrompt(12, 34), () => 0); // random() 0 < toolShare: a tool episode
  const text = calculatorTask.tokenizer().decode(Array.from(seq.tokens));
  assert.equal(text, '<bos>12*34=[12*34]408;408<eos>');
  const trained = Array.from(seq.tokens).slice(1).filter((_, t) => seq.lossMask[t] === 1);
  assert.equal(calculatorTask.tokenizer().decode(trained), '[12*34]408<eos>');
  const direct = sftSequence(calculatorTask, calculatorPrompt(12, 34), () => 0.99);
  assert.equal(calculatorTask.tokenizer().decode(Array.from(direct.tokens)), '<bos>12*34=408<eos>');
});

// ---- the rollout loop on a real engine

let engine: RolloutEngine;
const MODEL = (task: Task): ModelConfig => ({ vocabSize: task.tokenizer().vocabSize, dModel: 16, nLayers: 1, nHeads: 2, dFF: 32, contextLength: 32 });

before(async () => {
  engine = await RolloutEngine.create(MODEL(calculatorTask), { intraOpNumThreads: 1 });
  engine.setWeights(2, initWeights(MODEL(calculatorTask), 1));
});
after(async () => {
  await engine.release();
});

/** A scripted environment: observation "1;" each turn, reward 0.5 per turn, ends after 2 turns. */
class TwoTurns implements Environment {
  turns = 0;
  reset(): string {
    return '12*34=';
  }
  step(): StepResult {
    this.turns += 1;
    return { observation: '1;', reward: 0.5, terminated: this.turns === 2, truncated: false, info: { success: 1, turns: this.turns } };
  }
}

test('episodes: policy tokens are trained (mask 1, their log-probs), observations are context (mask 0, log-prob 0); rewards sum over turns', async () => {
  const episodes = await rolloutEpisodes(engine, calculatorTask, [calculatorPrompt(12, 34), calculatorPrompt(56, 78)], { maxNewTokens: 1, seed: 3 }, { timeoutMs: 1000, envSeed: 0, createEnv: () => new TwoTurns() });
  const tokenizer = calculatorTask.tokenizer();
  for (const e of episodes) {
    assert.equal(e.error, null);
    assert.equal(e.turns, 2);
    assert.equal(e.reward, 1);
    assert.deepEqual(e.turnRewards, [0.5, 0.5]);
    assert.equal(e.end, 'terminated');
    assert.deepEqual(e.promptTokens, [tokenizer.bosId, ...tokenizer.encode('12*34=')]);
    assert.equal(e.lossMask.length, e.responseTokens.length);
    assert.equal(e.logprobs.length, e.responseTokens.length);
    // exactly one observation "1;" (2 tokens, mask 0) between the two turns
    const observed = e.responseTokens.filter((_, t) => e.lossMask[t] === 0);
    assert.equal(tokenizer.decode(observed), '1;');
    e.lossMask.forEach((m, t) => (m === 0 ? assert.equal(e.logprobs[t], 0) : assert.ok(e.logprobs[t] < 0)));
    assert.equal(e.policyVersion, 2);
    assert.ok(e.tokenVersions.every((v) => v === 2));
  }
});

test('episodes: an environment that throws or hangs fails only its own episode, with the error', async () => {
  let n = 0;
  const flaky = (): Environment => {
    const i = n++;
    return {
      reset: () => '1*1=',
      step: () => (i === 0 ? Promise.reject(new Error('boom')) : i === 1 ? new Promise<StepResult>(() => undefined) : { observation: '', reward: 1, terminated: true, truncated: false }),
    };
  };
  const started = Date.now();
  const episodes = await rolloutEpisodes(engine, calculatorTask, [0, 1, 2].map(() => calculatorPrompt(1, 1)), { maxNewTokens: 1 }, { timeoutMs: 100, envSeed: 0, createEnv: flaky });
  assert.ok(Date.now() - started < 5000);
  assert.match(episodes[0].error ?? '', /environment step 1 failed: boom/);
  assert.match(episodes[1].error ?? '', /environment step timed out after 100 ms/);
  assert.equal(episodes[0].reward, null);
  assert.equal(episodes[2].error, null);
  assert.equal(episodes[2].reward, 1);
});

test('episodes: max turns and the context length end an episode', async () => {
  const endless = (): Environment => ({ reset: () => '1*1=', step: () => ({ observation: '12;', reward: 0, terminated: false, truncated: false }) });
  const [e] = await rolloutEpisodes(engine, calculatorTask, [calculatorPrompt(1, 1)], { maxNewTokens: 1 }, { timeoutMs: 1000, envSeed: 0, createEnv: endless });
  assert.ok(e.end === 'max_turns' || e.end === 'context_full', e.end);
  assert.ok(e.promptTokens.length + e.responseTokens.length <= 32);
  assert.ok(e.turns <= calculatorTask.interaction!.maxTurns);
});

test('a task module (examples/envs/parity.js) loads as a multi-turn task and rolls out', async () => {
  const parity = await loadTask(path.join(EXAMPLES, 'envs', 'parity.js'));
  assert.equal(parity.name, 'parity');
  assert.ok(parity.interaction);
  assert.deepEqual(parity.trainPrompts(1, 3), parity.trainPrompts(1, 3));
  const own = await RolloutEngine.create(MODEL(parity), { intraOpNumThreads: 1 });
  try {
    own.setWeights(0, initWeights(MODEL(parity), 0));
    const [e] = await rolloutEpisodes(own, parity, parity.heldOut().slice(0, 1), { maxNewTokens: 1, greedy: true }, { timeoutMs: 1000, envSeed: 0 });
    assert.equal(e.error, null);
    assert.equal(e.turns, 4);
    assert.equal(e.end, 'terminated');
  } finally {
    await own.release();
  }
  await assert.rejects(loadTask('./no/such/task.js'), /task "\.\/no\/such\/task\.js" not found/);
  await assert.rejects(loadTask(path.join(FIXTURES, 'not-a-task.cjs')), /task .*not-a-task\.cjs.*: export an alphabet/);
});

test('env.module replaces the task environment; generate.module takes over a whole group', async () => {
  const config = parseRunConfig({ task: 'calculator', algorithm: { group_size: 2 }, model: { context_length: 32 }, env: { module: path.join(FIXTURES, 'always-right-env.cjs') }, generate: {} });
  const rows = await episodeRows({ config, task: calculatorTask, engine, sampling: { maxNewTokens: 1, seed: 1 }, seed: 5 }, [calculatorPrompt(2, 3)]);
  assert.equal(rows.length, 2);
  assert.ok(rows.every((r) => r.reward === 1 && r.error === null), JSON.stringify(rows.map((r) => r.error)));
  assert.deepEqual(rows[0].rewards, { turn_1: 1 });

  const custom = parseRunConfig({ task: 'calculator', algorithm: { group_size: 2 }, model: { context_length: 32 }, generate: { module: path.join(FIXTURES, 'echo-generate.cjs') } });
  const generated = await customGenerateRows({ config: custom, task: calculatorTask, engine, sampling: { maxNewTokens: 2, seed: 1 }, seed: 5 }, [calculatorPrompt(2, 3)]);
  assert.equal(generated.length, 2);
  assert.equal(generated[0].reward, 0.5, 'the reward the function returned');
  assert.equal(generated[1].error, null);
  assert.equal(typeof generated[1].reward, 'number', 'no reward returned: the task scores the decoded response');
  assert.deepEqual(generated[0].lossMask, generated[0].responseTokens.map(() => 1));

  const broken = parseRunConfig({ ...custom, generate: { module: path.join(FIXTURES, 'echo-generate.cjs'), export: 'wrongCount' } });
  const failed = await customGenerateRows({ config: broken, task: calculatorTask, engine, sampling: { maxNewTokens: 2, seed: 1 }, seed: 5 }, [calculatorPrompt(2, 3)]);
  assert.ok(failed.every((r) => r.reward === null && /returned 1 trajectories for a group of 2/.test(r.error ?? '')));
});
