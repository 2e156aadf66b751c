// The judge (reward.judge, rollout/judge.ts): template filling, regex parsing (map, number, default,
// errors), batching, the config's fields and what it refuses, and judgeItems with a scripted engine:
// one generate per batch_size samples, a generate that outlasts timeout_ms fails only its batch (and
// the judge is discarded), a parse function that hangs fails only its sample.
import assert from 'node:assert/strict';
import test from 'node:test';
import { parseRunConfig, RunConfigError } from '../config/run-config';
import type { GeneratedSample, GenerationEngine } from '../engines/rollout';
import { add2Tokenizer } from '../envs/add2';
import type { LoadedReward } from '../envs/user-modules';
import { fillJudgePrompt, judgeBatches, judgeItems, parseJudgeOutput, type JudgeItem, type JudgeModel, type JudgeParsePrompt } from '../rollout/judge';
import { rolloutSliceWithStats } from '../rollout/producers';
import { loadTask } from '../envs/registry';

test('fillJudgePrompt fills {prompt}, {response} and {answer}, every occurrence, and keeps other braces', () => {
  const filled = fillJudgePrompt('Q: {prompt} A: {response} (gold {answer}; {prompt}) {other}', { prompt: '2+3=', response: '5', answer: '5' });
  assert.equal(filled, 'Q: 2+3= A: 5 (gold 5; 2+3=) {other}');
  // A response that itself holds a placeholder is not filled again.
  assert.equal(fillJudgePrompt('{response}|{answer}', { prompt: 'p', response: '{answer}', answer: '7' }), '{answer}|7');
});

test('parseJudgeOutput: the first capture through map, or read as a number; default when it does not match; else an error naming the output', () => {
  assert.equal(parseJudgeOutput({ pattern: 'Verdict: (yes|no)', map: { yes: 1, no: 0 } }, 'Verdict: yes.'), 1);
  assert.equal(parseJudgeOutput({ pattern: 'Verdict: (yes|no)', map: { yes: 1, no: 0 } }, 'Verdict: no'), 0);
  assert.equal(parseJudgeOutput({ pattern: 'Score: (-?\\d+(?:\\.\\d+)?)' }, 'Score: 7.5/10'), 7.5);
  assert.equal(parseJudgeOutput({ pattern: '^(\\d)', default: 0.25 }, 'no digits'), 0.25);
  assert.equal(parseJudgeOutput({ pattern: '^(\\w+)', map: { yes: 1 }, default: 0 }, 'maybe'), 0, 'a capture the map lacks takes the default');
  assert.throws(() => parseJudgeOutput({ pattern: 'Score: (\\d+)' }, 'I refuse'), /the judge's output "I refuse" does not match reward\.judge\.parse\.pattern .*reward\.judge\.parse\.default/);
  assert.throws(() => parseJudgeOutput({ pattern: '(\\w+)', map: { yes: 1 } }, 'maybe'), /captured "maybe", which reward\.judge\.parse\.map has no entry for/);
  assert.throws(() => parseJudgeOutput({ pattern: '(\\w*)' }, 'abc'), /captured "abc", not a number/);
});

test('judgeBatches splits into consecutive batches of at most batch_size', () => {
  assert.deepEqual(judgeBatches([1, 2, 3, 4, 5], 2), [[1, 2], [3, 4], [5]]);
  assert.deepEqual(judgeBatches([1, 2], 4), [[1, 2]]);
  assert.deepEqual(judgeBatches([], 3), []);
});

const JUDGE = { from: '/models/judge', prompt_template: '{prompt}{response}', parse: { pattern: '^(\\d)' } };

test('reward.judge in the run config: defaults, and each field it refuses named with the fix', () => {
  const judge = parseRunConfig({ reward: { judge: JUDGE } }).reward.judge!;
  assert.deepEqual({ max: judge.max_new_tokens, timeout: judge.timeout_ms, batch: judge.batch_size }, { max: 8, timeout: 60_000, batch: 32 });
  const problem = (input: object) => {
    try {
      parseRunConfig(input);
    } catch (err) {
      assert.ok(err instanceof RunConfigError, String(err));
      return err.message;
    }
    return assert.fail('the config was accepted');
  };
  assert.match(problem({ reward: { judge: { ...JUDGE, prompt_template: 'Is {prompt} right?' } } }), /reward\.judge\.prompt_template.*must contain \{response\}/);
  assert.match(problem({ reward: { judge: { ...JUDGE, parse: { pattern: '\\d+' } } } }), /reward\.judge\.parse\.pattern.*no capture group/);
  assert.match(problem({ reward: { judge: { ...JUDGE, parse: { pattern: '(' } } } }), /reward\.judge\.parse\.pattern.*not a valid regular expression/);
  assert.match(problem({ reward: { judge: { ...JUDGE, batch_size: 0 } } }), /reward\.judge\.batch_size/);
  assert.match(problem({ placement: 'colocated', reward: { judge: JUDGE } }), /reward\.judge.*needs placement "stages"/);
  assert.match(problem({ algorithm: { dapo: { dynamic_sampling: { max_extra_rounds: 2 } } }, reward: { judge: JUDGE } }), /algorithm\.dapo\.dynamic_sampling.*cannot be used with reward\.judge/);
  assert.equal((parseRunConfig({ reward: { judge: { ...JUDGE, parse: { module: './parse.cjs' } } } }).reward.judge!.parse as { export: string }).export, 'default', 'a module parse defaults to the default export');
});

/** A judge whose output for each prompt is `answer(promptText)`; `hangOn(call)` makes that generate call never answer. */
function scriptedJudge(answer: (prompt: string) => string, hangOn: (call: number) => boolean = () => false) {
  const tok = add2Tokenizer();
  const calls: number[] = [];
  const engine: GenerationEngine = {
    model: undefined as never,
    policyVersion: 0,
    async generate(contexts: number[][]): Promise<GeneratedSample[]> {
      calls.push(contexts.length);
      if (hangOn(calls.length - 1)) return new Promise(() => undefined);
      return contexts.map((c) => {
        const tokens = [...tok.encode(answer(tok.decode(c, { skipSpecial: true }))), tok.eosId];
        return { tokens, logprobs: tokens.map(() => 0), samplingLogprobs: tokens.map(() => 0), finishReason: 'stop', policyVersion: 0 };
      });
    },
  };
  const model: JudgeModel = { engine, tokenizer: tok, contextLength: 32, release: async () => undefined };
  return { model, calls };
}

const items = (responses: string[]): JudgeItem[] => responses.map((response, i) => ({ prompt: '2+3=', response, answer: '5', groupIndex: 0, sampleIndex: i }));
const options = { prompt_template: '{prompt}{response}', max_new_tokens: 4, timeout_ms: 200, batch_size: 2 };

test('judgeItems: one generate per batch_size samples, each output parsed into the sample\'s reward', async () => {
  // The judge says 1 when the response is the sum, 0 otherwise.
  const { model, calls } = scriptedJudge((p) => (p === '2+3=5' ? '1' : '0'));
  const verdicts = await judgeItems(async () => model, items(['5', '6', '5', '4', '5']), { judge: { ...options, parse: { pattern: '^(\\d)' } }, discard: () => assert.fail('nothing hung') });
  assert.deepEqual(calls, [2, 2, 1]);
  assert.deepEqual(verdicts, [1, 0, 1, 0, 1].map((reward) => ({ reward, error: null })));
});

test('judgeItems: a generate that outlasts timeout_ms fails only its batch, and that judge is discarded', async () => {
  const { model, calls } = scriptedJudge(() => '1', (call) => call === 1);
  const discarded: JudgeModel[] = [];
  const verdicts = await judgeItems(async () => model, items(['5', '5', '5', '5', '5']), { judge: { ...options, parse: { pattern: '^(\\d)' } }, discard: (m) => discarded.push(m) });
  assert.deepEqual(calls, [2, 2, 1]);
  assert.deepEqual(verdicts.map((v) => v.reward), [1, 1, null, null, 1]);
  assert.match(verdicts[2].error!, /^judge: the judge's generate timed out after 200 ms/);
  assert.deepEqual(discarded, [model]);
});

test('judgeItems: a parse module (a reward function given the judge\'s output) that hangs fails only its own sample; a non-number fails its sample', async () => {
  const { model } = scriptedJudge(() => '1');
  const seen: JudgeParsePrompt[] = [];
  // The reward-function contract: `response` is the judge's output, `prompt` the sample's prompt, answer, response and key.
  const fn = ({ prompt, response }: { prompt: JudgeParsePrompt; response: string }) => {
    seen.push(prompt);
    return prompt.sampleIndex === 1 ? new Promise(() => undefined) : prompt.sampleIndex === 2 ? 'high' : Number(response) * 0.5;
  };
  const reward = { module: 'm', resolvedPath: 'm', exportName: 'default', scope: 'sample', fn } as unknown as LoadedReward;
  const verdicts = await judgeItems(async () => model, items(['5', '6', '7', '8']), { judge: { ...options, parse: { module: 'm', export: 'default' } }, parseModule: { reward, task: await loadTask('add2') }, discard: () => undefined });
  assert.deepEqual(verdicts.map((v) => v.reward), [0.5, null, null, 0.5]);
  assert.match(verdicts[1].error!, /^judge: reward\.judge\.parse: .*timed out after 200 ms/);
  assert.match(verdicts[2].error!, /^judge: reward\.judge\.parse: .*high.*not a finite number/);
  assert.deepEqual(seen.find((p) => p.sampleIndex === 3), { text: '2+3=', answer: '5', response: '8', groupIndex: 0, sampleIndex: 3 });
});

test('judgeItems: a judge prompt longer than the judge\'s context fails its sample, naming the fields to change', async () => {
  const { model, calls } = scriptedJudge(() => '1');
  const verdicts = await judgeItems(async () => model, items(['5', '1'.repeat(40)]), { judge: { ...options, parse: { pattern: '^(\\d)' } }, discard: () => undefined });
  assert.deepEqual(calls, [1], 'only the prompt that fits is generated');
  assert.equal(verdicts[0].reward, 1);
  assert.match(verdicts[1].error!, /over the judge's context \(32\) less reward\.judge\.max_new_tokens \(4\)/);
});

test('with reward.judge, rollout writes unfailed samples as generated: they wait for the judge, never trained before it', async () => {
  const config = parseRunConfig({ algorithm: { group_size: 2 }, rollout: { prompts_per_step: 2, max_new_tokens: 4 }, reward: { judge: JUDGE } });
  const { model } = scriptedJudge(() => '5');
  const { samples } = await rolloutSliceWithStats({ config, task: await loadTask('add2'), engine: model.engine }, { iteration: 0, firstGroup: 0, groups: 2 });
  assert.deepEqual(samples.map((s) => s.status), ['generated', 'generated', 'generated', 'generated']);
  const plain = await rolloutSliceWithStats({ config: parseRunConfig({ algorithm: { group_size: 2 }, rollout: { prompts_per_step: 2, max_new_tokens: 4 } }), task: await loadTask('add2'), engine: model.engine }, { iteration: 0, firstGroup: 0, groups: 2 });
  assert.deepEqual(plain.samples.map((s) => s.status), ['scored', 'scored', 'scored', 'scored']);
});
