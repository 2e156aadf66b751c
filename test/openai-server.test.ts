// The OpenAI-compatible endpoint (serving/openai-server.ts), exercised with the official `openai` client against real
// rollout engines: models, completions and chat completions with log-probs (equal to what the engine
// itself generates for the same seed), stop / max_tokens / finish_reason, OpenAI-shaped errors,
// sessions recorded as one sample, agent programs run as real child processes
// (rollout/agent-rollout.ts, examples/agents/add2-agent.js) whose samples then train the policy, the
// judge reward module, and `relax serve`'s model names over a real database (cli/serve.ts).
//
// Over 400 lines because one real endpoint is driven through every route, parameter check and
// session rule, and then through agent rollouts and relax serve, sharing one engine and database.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { OpenAI } from 'openai';
import { startRunServer } from '../cli/serve';
import { loadTfjsBackend } from '../engines/backends';
import { publishCheckpoint } from '../engines/checkpoint';
import { initWeights, TINY_MODEL, type ModelConfig, type PolicyWeights } from '../engines/model';
import { RolloutEngine, type SamplingParams } from '../engines/rollout';
import { policyLoss } from '../training/losses';
import { Trainer, trainSequenceFromSample } from '../engines/trainer';
import { add2Reward, add2Task, add2Tokenizer, add2TrainPrompts } from '../envs/add2';
import { clearUserModuleCache, loadRewardFunction, scoreGroup } from '../envs/user-modules';
import { runAgentEpisodes, type AgentEpisodeResult } from '../rollout/agent-rollout';
import { modelNotFound, startOpenAIServer, type OpenAIServer, type ResolvedModel } from '../serving/openai-server';
import { registerCheckpoint } from '../store/checkpoint-registry';
import { grpoAdvantages } from '../engines/rl/advantages';
import { promptTokens } from '../rollout/producers';
import { freshDatabase } from './helpers';

const ROOT = path.resolve(__dirname, '../..');
const ADD2_AGENT = path.join(ROOT, 'examples/agents/add2-agent.js');
const FIXTURE_AGENT = path.join(ROOT, 'test/fixtures/openai-agent.cjs');
const JUDGE = path.join(ROOT, 'examples/rewards/judge.js');

const tok = add2Tokenizer();
const EOS = tok.eosId;
const MODEL: ModelConfig = { ...TINY_MODEL, vocabSize: tok.vocabSize, contextLength: 16 };
const VERSION = 3;

/**
 * Random weights, scaled up for a peaked but varied next-token distribution, that never emit pad or
 * bos: the final LayerNorm's bias is 1 everywhere and the output columns of pad and bos are -0.5,
 * so their logits are -0.5 * D (LayerNorm's output sums to D * bias). Completions then always decode
 * to text an agent can send back.
 */
function policyWeights(seed: number): PolicyWeights {
  const w = initWeights(MODEL, seed);
  for (const [name, values] of Object.entries(w)) if (name.endsWith('.weight') && !name.includes('ln')) values.forEach((v, i) => (values[i] = v * 8));
  w['ln_f.bias'].fill(1);
  for (let d = 0; d < MODEL.dModel; d++) for (const id of [tok.padId, tok.bosId]) w['lm_head.weight'][d * MODEL.vocabSize + id] = -0.5;
  return w;
}

/** A "judge" that always answers `text` (one token): its logit is D, every other one 0. */
function constantWeights(text: string): PolicyWeights {
  const w = initWeights(MODEL, 1);
  w['ln_f.weight'].fill(0);
  w['ln_f.bias'].fill(1);
  w['lm_head.weight'].fill(0);
  const id = tok.encode(text)[0];
  for (let d = 0; d < MODEL.dModel; d++) w['lm_head.weight'][d * MODEL.vocabSize + id] = 1;
  return w;
}

/**
 * A policy that answers 7 to any "...=" prompt: the blocks add nothing (zero output projections),
 * so the last hidden state is LayerNorm(tok_emb[last token]); "=" and every other token embed on
 * different axes, and the output head maps the first to "7" and the second to eos. Greedy or
 * sampled, it writes "7<eos>" after "=" (logit gap ~80).
 */
function sevensWeights(): PolicyWeights {
  const w = initWeights(MODEL, 1);
  const D = MODEL.dModel;
  const V = MODEL.vocabSize;
  for (const [name, values] of Object.entries(w)) if (/(attn|mlp)\.proj\./.test(name) || name === 'pos_emb.weight') values.fill(0);
  const equals = tok.encode('=')[0];
  w['tok_emb.weight'].fill(0);
  for (let v = 0; v < V; v++) w['tok_emb.weight'][v * D + (v === equals ? 0 : 1)] = 1;
  w['lm_head.weight'].fill(0);
  w['lm_head.weight'][0 * V + tok.encode('7')[0]] = 10;
  w['lm_head.weight'][1 * V + EOS] = 10;
  return w;
}

let engine: RolloutEngine;
let trainee: RolloutEngine;
let judge: RolloutEngine;
let server: OpenAIServer;
let client: OpenAI;
const weights = policyWeights(11);
/** Fixed policies served on one engine, switched per request (the server runs one request at a time). */
const fixedWeights: Record<string, PolicyWeights> = { 'judge-7': constantWeights('7'), 'judge-plus': constantWeights('+'), sevens: sevensWeights() };

before(async () => {
  [engine, trainee, judge] = await Promise.all([0, 1, 2].map(() => RolloutEngine.create(MODEL, { intraOpNumThreads: 1 })));
  engine.setWeights(VERSION, weights);
  trainee.setWeights(0, weights);
  server = await startOpenAIServer({
    async resolveModel(model): Promise<ResolvedModel> {
      if (model === 'policy') return { engine, tokenizer: tok, policyVersion: VERSION };
      if (model === 'trainee') return { engine: trainee, tokenizer: tok, policyVersion: trainee.policyVersion ?? 0, name: `trainee@${trainee.policyVersion}` };
      if (fixedWeights[model]) {
        judge.setWeights(0, fixedWeights[model]);
        return { engine: judge, tokenizer: tok, policyVersion: 0 };
      }
      throw modelNotFound(model, 'this test serves "policy", "trainee", "judge-7", "judge-plus" and "sevens"');
    },
    listModels: async () => ['policy', 'trainee', 'judge-7', 'judge-plus', 'sevens'],
  });
  client = new OpenAI({ baseURL: server.baseURL, apiKey: 'unused', maxRetries: 0 });
});

after(async () => {
  await server?.close();
  await Promise.all([engine, trainee, judge].map((e) => e?.release()));
});

const encodePrompt = (text: string) => promptTokens(tok, { text, answer: '' });
/** The sampling params the endpoint uses for these request fields. */
const params = (maxNewTokens: number, seed: number, extra: Partial<SamplingParams> = {}): SamplingParams => ({ maxNewTokens, seed, temperature: 1, topP: 1, topK: 0, stopTokens: [EOS], ...extra });
/** The generated tokens a response shows: a final eos is left out of the text. */
const shown = (tokens: number[], finish: string) => (finish === 'stop' ? tokens.slice(0, -1) : tokens);

/** A prompt whose greedy continuation starts with two different non-eos tokens. */
async function promptWithTwoTokens(): Promise<{ text: string; first: number; second: number }> {
  for (const text of ['12+', '5+', '7', '3+4=', '9', '1+1', '88+']) {
    const [g] = await engine.generate([encodePrompt(text)], params(2, 0, { temperature: 0 }));
    if (g.tokens.length === 2 && !g.tokens.includes(EOS) && g.tokens[0] !== g.tokens[1]) return { text, first: g.tokens[0], second: g.tokens[1] };
  }
  throw new Error('no candidate prompt has two distinct non-eos greedy tokens: change policyWeights seed');
}

async function rawPost(route: string, body: string): Promise<{ status: number; json: any }> {
  const res = await fetch(`${server.baseURL}${route}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
  return { status: res.status, json: await res.json() };
}

async function rejects(call: () => Promise<unknown>, status: number): Promise<InstanceType<typeof OpenAI.APIError>> {
  try {
    await call();
  } catch (err) {
    assert.ok(err instanceof OpenAI.APIError, `expected an OpenAI APIError, got ${err}`);
    assert.equal(err.status, status, err.message);
    return err;
  }
  assert.fail(`expected HTTP ${status}`);
}

describe('endpoints', () => {
  test('GET /v1/models lists the models; retrieve resolves one', async () => {
    const ids: string[] = [];
    for await (const m of client.models.list()) ids.push(m.id);
    assert.deepEqual(ids, ['policy', 'trainee', 'judge-7', 'judge-plus', 'sevens']);
    const m = await client.models.retrieve('policy');
    assert.equal(m.id, 'policy');
    assert.equal(m.object, 'model');
  });

  test('completions: text and log-probs are what engine.generate returns for the same seed (sampled and greedy)', async () => {
    const text = '12+34=';
    const p = encodePrompt(text);
    for (const temperature of [1, 0]) {
      const res = await client.completions.create({ model: 'policy', prompt: text, max_tokens: 6, n: 3, seed: 5, temperature, logprobs: 0 });
      const expected = await engine.generate([p, p, p], params(6, 5, { temperature }));
      assert.equal(res.object, 'text_completion');
      assert.equal(res.model, 'policy');
      assert.equal(res.system_fingerprint, `relax-policy-v${VERSION}`);
      assert.equal(res.choices.length, 3);
      res.choices.forEach((c, i) => {
        const e = expected[i];
        const visible = shown(e.tokens, e.finishReason);
        assert.equal(c.index, i);
        assert.equal(c.finish_reason, e.finishReason);
        assert.equal(c.text, tok.decode(visible));
        assert.deepEqual(c.logprobs?.tokens, visible.map((t) => tok.decode([t])));
        assert.deepEqual(c.logprobs?.token_logprobs, e.logprobs.slice(0, visible.length), 'exactly the engine\'s log-probs');
        assert.deepEqual(c.logprobs?.text_offset, visible.map((_, j) => text.length + j), 'offsets count from the start of the prompt');
        assert.equal(c.logprobs?.top_logprobs, null);
      });
      assert.deepEqual(res.usage, { prompt_tokens: p.length, completion_tokens: expected.reduce((n, e) => n + e.tokens.length, 0), total_tokens: p.length + expected.reduce((n, e) => n + e.tokens.length, 0) });
    }
    const sampled = await client.completions.create({ model: 'policy', prompt: [text], max_tokens: 6, n: 8, seed: 5 });
    assert.ok(new Set(sampled.choices.map((c) => c.text)).size > 1, 'the n choices are sampled independently');
    assert.equal(sampled.choices[0].logprobs, null, 'no logprobs unless asked');
  });

  test("vLLM's token-level extensions: a token-id prompt, stop_token_ids, return_tokens_as_token_ids give exactly the engine's tokens and log-probs", async () => {
    const p = encodePrompt('12+34=');
    const stop = tok.encode('7');
    const res = await rawPost('/completions', JSON.stringify({ model: 'policy', prompt: p, max_tokens: 6, n: 4, seed: 9, logprobs: 0, stop_token_ids: stop, include_stop_str_in_output: true, return_tokens_as_token_ids: true }));
    assert.equal(res.status, 200, JSON.stringify(res.json));
    const expected = await engine.generate([p, p, p, p], params(6, 9, { stopTokens: [EOS, ...stop] }));
    res.json.choices.forEach((c: { finish_reason: string; logprobs: { tokens: string[]; token_logprobs: number[] } }, i: number) => {
      assert.equal(c.finish_reason, expected[i].finishReason);
      assert.deepEqual(c.logprobs.tokens, expected[i].tokens.map((t) => `token_id:${t}`), 'every generated token, the stop token included');
      assert.deepEqual(c.logprobs.token_logprobs, expected[i].logprobs);
    });
    assert.equal(res.json.usage.prompt_tokens, p.length, 'the ids are the prompt as they are (no bos added)');
    const outside = await rawPost('/completions', JSON.stringify({ model: 'policy', prompt: [1, MODEL.vocabSize + 3] }));
    assert.equal(outside.status, 400);
    assert.match(outside.json.error.message, /prompt\[1\] is token \d+, but this model's vocabulary has \d+ tokens/);
    const badStop = await rawPost('/completions', JSON.stringify({ model: 'policy', prompt: 'x', stop_token_ids: [-1] }));
    assert.equal(badStop.status, 400);
    assert.equal(badStop.json.error.param, 'stop_token_ids');
  });

  test('chat completions: the message contents concatenated are the prompt; logprobs.content per token', async () => {
    const messages = [
      { role: 'system' as const, content: '12+' },
      { role: 'user' as const, content: [{ type: 'text' as const, text: '34=' }] },
    ];
    const chat = await client.chat.completions.create({ model: 'policy', messages, max_completion_tokens: 6, n: 3, seed: 5, logprobs: true, top_logprobs: 0 });
    const expected = await engine.generate(Array.from({ length: 3 }, () => encodePrompt('12+34=')), params(6, 5));
    assert.equal(chat.object, 'chat.completion');
    chat.choices.forEach((c, i) => {
      const e = expected[i];
      const visible = shown(e.tokens, e.finishReason);
      assert.equal(c.message.role, 'assistant');
      assert.equal(c.message.content, tok.decode(visible));
      assert.equal(c.finish_reason, e.finishReason);
      assert.deepEqual(
        c.logprobs?.content,
        visible.map((t, j) => ({ token: tok.decode([t]), logprob: e.logprobs[j], bytes: [...Buffer.from(tok.decode([t]))], top_logprobs: [] })),
      );
    });
    const plain = await client.chat.completions.create({ model: 'policy', messages: [{ role: 'user', content: '12+34=' }], max_tokens: 6, seed: 5 });
    assert.equal(plain.choices[0].message.content, chat.choices[0].message.content, 'roles are not rendered');
    assert.equal(plain.choices[0].logprobs, null);
  });

  test('stop, include_stop_str_in_output, max_tokens and the context bound set finish_reason', async () => {
    const { text, first, second } = await promptWithTwoTokens();
    const [c1, c2] = [tok.decode([first]), tok.decode([second])];
    const greedy = { model: 'policy', prompt: text, temperature: 0, max_tokens: 8 };
    const stopped = await client.completions.create({ ...greedy, stop: c2 });
    assert.equal(stopped.choices[0].text, c1, 'the stop token is left out of the text');
    assert.equal(stopped.choices[0].finish_reason, 'stop');
    assert.equal(stopped.usage?.completion_tokens, 2, 'but counted as generated');
    const kept = await client.completions.create({ ...greedy, stop: [c2, '<eos>'], include_stop_str_in_output: true, logprobs: 0 } as OpenAI.CompletionCreateParamsNonStreaming);
    assert.equal(kept.choices[0].text, c1 + c2);
    assert.equal(kept.choices[0].logprobs?.tokens?.length, 2);
    const short = await client.completions.create({ ...greedy, max_tokens: 1 });
    assert.equal(short.choices[0].text, c1);
    assert.equal(short.choices[0].finish_reason, 'length');
    // 10 characters + bos leave 5 tokens of the 16-token context, whatever max_tokens says.
    const long = await client.completions.create({ model: 'policy', prompt: '1234567890', max_tokens: 1000, seed: 1 });
    assert.ok((long.usage?.completion_tokens ?? 0) <= 5);
    if (long.choices[0].finish_reason === 'length') assert.equal(long.usage?.completion_tokens, 5);

    const multi = await rejects(() => client.completions.create({ ...greedy, stop: '12' }), 400);
    assert.equal(multi.param, 'stop');
    assert.match(multi.message, /stop sequence "12" is 2 tokens .*only stops on single tokens/);
    const tooLong = await rejects(() => client.completions.create({ model: 'policy', prompt: '123456789012345' }), 400);
    assert.equal(tooLong.code, 'context_length_exceeded');
    assert.match(tooLong.message, /prompt is 16 tokens .* context is 16 tokens/);
  });

  test('errors come back in OpenAI\'s shape with 400 / 404', async () => {
    const missing = await rejects(() => client.completions.create({ model: 'nope', prompt: '1+1=' }), 404);
    assert.ok(missing instanceof OpenAI.NotFoundError);
    assert.equal(missing.code, 'model_not_found');
    assert.equal(missing.param, 'model');
    assert.match(missing.message, /`nope` does not exist/);
    const raw = await rawPost('/completions', JSON.stringify({ model: 'nope', prompt: '1' }));
    assert.equal(raw.status, 404);
    assert.deepEqual(Object.keys(raw.json.error).sort(), ['code', 'message', 'param', 'type']);
    assert.equal(raw.json.error.type, 'invalid_request_error');

    const badChar = await rejects(() => client.completions.create({ model: 'policy', prompt: '1+a=' }), 400);
    assert.ok(badChar instanceof OpenAI.BadRequestError);
    assert.equal(badChar.param, 'prompt');
    assert.match(badChar.message, /character "a" at position 2 of "1\+a=" is not in the alphabet/);
    const badChat = await rejects(() => client.chat.completions.create({ model: 'policy', messages: [{ role: 'user', content: 'hi' }] }), 400);
    assert.equal(badChat.param, 'messages');

    const cases: Array<[Record<string, unknown>, string, RegExp]> = [
      [{ temperature: 5 }, 'temperature', /must be a number >= 0 and <= 2, got 5/],
      [{ max_tokens: 0 }, 'max_tokens', /integer >= 1/],
      [{ n: 1.5 }, 'n', /integer/],
      [{ top_p: 0 }, 'top_p', /> 0/],
      [{ stream: true }, 'stream', /streaming is not supported/],
      [{ prompt: ['1', '2'] }, 'prompt', /exactly one string/],
      [{ prompt: undefined }, 'prompt', /is required/],
      [{ model: undefined }, 'model', /is required/],
      [{ presence_penalty: 1 }, 'presence_penalty', /not supported/],
    ];
    for (const [override, param, message] of cases) {
      const { status, json } = await rawPost('/completions', JSON.stringify({ model: 'policy', prompt: '1+1=', ...override }));
      assert.equal(status, 400, JSON.stringify(override));
      assert.equal(json.error.param, param, JSON.stringify(override));
      assert.match(json.error.message, message);
    }
    const invalidJson = await rawPost('/completions', '{"model": ');
    assert.equal(invalidJson.status, 400);
    assert.equal(invalidJson.json.error.type, 'invalid_request_error');
    const unknownUrl = await rawPost('/embeddings', '{}');
    assert.equal(unknownUrl.status, 404);
    assert.equal(unknownUrl.json.error.code, 'unknown_url');
  });
});

describe('sessions', () => {
  test('two calls of a session are one sample: policy tokens masked 1 with their log-probs, the agent\'s text 0', async () => {
    const { text, first, second } = await promptWithTwoTokens();
    const c1 = tok.decode([first]);
    // Call 1 (session in the header) stops on the second token; its text leaves that token out.
    const one = await client.completions.create({ model: 'policy', prompt: text, temperature: 0, stop: tok.decode([second]), logprobs: 0 }, { headers: { 'x-relax-session': 's1' } });
    assert.equal(one.choices[0].text, c1);
    // Call 2 (session in `user`) continues from the returned text plus the agent's own "3".
    const two = await client.completions.create({ model: 'policy', prompt: `${text}${c1}3`, max_tokens: 3, seed: 9, include_stop_str_in_output: true, logprobs: 0, user: 's1' } as OpenAI.CompletionCreateParamsNonStreaming);
    const pieces = two.choices[0].logprobs?.tokens ?? [];
    const generated = pieces.map((p) => (p === '<eos>' ? EOS : tok.encode(p)[0]));
    const taken = server.sessions.take('s1');
    assert.equal(taken.error, null);
    assert.equal(taken.calls, 2);
    assert.deepEqual(taken.sample, {
      promptTokens: encodePrompt(text),
      responseTokens: [first, ...tok.encode('3'), ...generated],
      lossMask: [1, 0, ...generated.map(() => 1)],
      rolloutLogprobs: [one.choices[0].logprobs?.token_logprobs?.[0], 0, ...(two.choices[0].logprobs?.token_logprobs ?? [])],
      tokenVersions: [VERSION, VERSION, ...generated.map(() => VERSION)],
      policyVersion: VERSION,
    });
    assert.match(server.sessions.take('s1').error ?? '', /made no calls/, 'take() removes the session');
  });

  test('a call that does not extend the transcript fails the session, and take() says so', async () => {
    await client.completions.create({ model: 'policy', prompt: '1+', max_tokens: 2, user: 's2' });
    const diverged = await rejects(() => client.completions.create({ model: 'policy', prompt: '2+', max_tokens: 2, user: 's2' }), 400);
    assert.equal(diverged.code, 'invalid_session');
    assert.match(diverged.message, /call 2's prompt does not extend the session's transcript .* differ at token 1: the transcript has "1" \(id 4\), the prompt "2" \(id 5\)/);
    const again = await rejects(() => client.completions.create({ model: 'policy', prompt: '1+', max_tokens: 2, user: 's2' }), 400);
    assert.match(again.message, /already failed/);
    const taken = server.sessions.take('s2');
    assert.equal(taken.sample, undefined);
    assert.match(taken.error ?? '', /session "s2": call 2's prompt does not extend/);

    const many = await rejects(() => client.completions.create({ model: 'policy', prompt: '1+', n: 2, user: 's3' }), 400);
    assert.match(many.message, /n=2 .* send n=1 in sessions/);
    assert.match(server.sessions.take('s3').error ?? '', /n=2/);
    const conflicting = await rejects(() => client.completions.create({ model: 'policy', prompt: '1+', user: 'a' }, { headers: { 'x-relax-session': 'b' } }), 400);
    assert.match(conflicting.message, /name different sessions/);
    assert.deepEqual(server.sessions.ids(), [], 'no session left behind');
  });
});

describe('agent rollouts', () => {
  const fixture = (mode: string, prompts = [{ text: '12+3=', answer: '' }], extra: Record<string, string> = {}, timeoutMs = 20_000) =>
    runAgentEpisodes({ command: [process.execPath, FIXTURE_AGENT], serverUrl: server.url, model: 'policy', prompts, sessions: server.sessions, timeoutMs, env: { FIXTURE_MODE: mode, ...extra } });

  test('examples/agents/add2-agent.js drives episodes; each is one sample with the reward it reported', async () => {
    const prompts = add2TrainPrompts(3, 6);
    const results = await runAgentEpisodes({ command: [process.execPath, ADD2_AGENT], serverUrl: server.url, model: 'policy', prompts, sessions: server.sessions, timeoutMs: 30_000, concurrency: 3 });
    assert.equal(results.length, 6);
    results.forEach((r, i) => {
      assert.equal(r.error, null, r.error ?? '');
      assert.equal(r.calls, 1);
      assert.equal(r.exitCode, 0);
      const s = r.sample!;
      assert.deepEqual(s.promptTokens, promptTokens(tok, prompts[i]));
      assert.ok(s.responseTokens.length >= 1 && s.responseTokens.length <= 4);
      assert.deepEqual(s.lossMask, s.responseTokens.map(() => 1));
      assert.equal(s.rolloutLogprobs.length, s.responseTokens.length);
      assert.ok(s.rolloutLogprobs.every((lp) => lp < 0));
      assert.equal(s.policyVersion, VERSION);
      // The agent scored exactly what add2's own reward says about the recorded tokens.
      assert.equal(r.reward, add2Reward(prompts[i], tok.decode(s.responseTokens)));
      assert.equal(r.report?.answer, tok.decode(s.responseTokens.filter((t) => t !== EOS)));
    });
    assert.deepEqual(server.sessions.ids(), []);

    // A policy that always answers 7: the agent rewards exactly the prompts whose sum is 7.
    const sevens = [{ text: '3+4=', answer: '7' }, { text: '1+2=', answer: '3' }, { text: '0+7=', answer: '7' }, { text: '7+0=', answer: '7' }];
    const scored = await runAgentEpisodes({ command: [process.execPath, ADD2_AGENT], serverUrl: server.url, model: 'sevens', prompts: sevens, sessions: server.sessions, timeoutMs: 30_000 });
    assert.deepEqual(scored.map((r) => r.reward), [1, 0, 1, 1], scored.map((r) => r.error).join('; '));
    for (const r of scored) assert.deepEqual(r.sample?.responseTokens, [...tok.encode('7'), EOS]);
  });

  test('the agent gets the base URL, model, prompt and session, never the answer', async () => {
    const [r] = await fixture('env', [{ text: '4+5=', answer: '9' }], { RELAX_ANSWER: '9' });
    assert.equal(r.error, null);
    assert.deepEqual(r.report?.env, { answer: null, base: server.baseURL, model: 'policy', prompt: '4+5=', session: r.sessionId });
  });

  test('a multi-call agent (completions, then chat) is recorded with the agent\'s token masked out', async () => {
    const results = await fixture('two-calls', Array.from({ length: 3 }, () => ({ text: '12+', answer: '' })));
    for (const r of results) {
      assert.equal(r.error, null, r.error ?? '');
      assert.equal(r.reward, 0.5);
      assert.equal(r.calls, 2);
      const [t1, t2] = r.report?.texts as string[];
      const [, f2] = r.report?.finish as string[];
      const tail = [...tok.encode(t2), ...(f2 === 'stop' ? [EOS] : [])];
      assert.deepEqual(r.sample?.responseTokens, [...tok.encode(t1), ...tok.encode('+'), ...tail]);
      assert.deepEqual(r.sample?.lossMask, [...tok.encode(t1).map(() => 1), 0, ...tail.map(() => 1)]);
      assert.equal(r.sample?.rolloutLogprobs[tok.encode(t1).length], 0);
    }
  });

  test('failing agents: non-zero exit, no reward line, a non-finite reward, a broken session, a timeout, a missing program', async () => {
    const started = performance.now();
    const [[crash], [silent], [bad], [mismatch], [hang], [missing]] = await Promise.all([
      fixture('crash'),
      fixture('no-reward'),
      fixture('bad-reward'),
      fixture('mismatch'),
      fixture('hang', undefined, {}, 2_000),
      runAgentEpisodes({ command: ['/nonexistent/agent'], serverUrl: server.url, model: 'policy', prompts: [{ text: '1', answer: '' }], sessions: server.sessions, timeoutMs: 5_000 }),
    ]);
    const failed = (r: AgentEpisodeResult, pattern: RegExp) => {
      assert.equal(r.reward, null);
      assert.match(r.error ?? '', pattern);
    };
    failed(crash, /exited with code 3 \(stderr: fixture agent: simulated crash\)/);
    assert.ok(crash.sample, 'the tokens it caused are still returned, for inspection');
    failed(silent, /printed no reward line: print a JSON line like \{"reward": 1\} .*last stdout line was "done, but no reward line"/);
    failed(bad, /reported reward "high" .* not a finite number/);
    failed(mismatch, /call 2's prompt does not extend the session's transcript/);
    failed(hang, /timed out after 2000 ms and was killed/);
    assert.ok(hang.durationMs < 2_000 + 3_000, `killed promptly (${hang.durationMs} ms)`);
    failed(missing, /cannot start the agent command \["\/nonexistent\/agent"\]: spawn \/nonexistent\/agent ENOENT/);
    assert.match(missing.error ?? '', /ENOENT/);
    assert.ok(performance.now() - started < 15_000);
    assert.deepEqual(server.sessions.ids(), []);
  });

  test('agent samples train the policy: one GRPO step on them raises the rewarded token\'s probability', async () => {
    await loadTfjsBackend({ kind: 'cpu' });
    const text = '12+34=';
    const p = encodePrompt(text);
    const G = 16;
    // The fixture agent asks with seed = episode index: find a first character some episodes
    // produce and others do not, and reward it.
    const firsts = await Promise.all(Array.from({ length: G }, (_, i) => trainee.generate([p], params(2, i)).then(([g]) => g.tokens[0])));
    const counts = new Map<number, number>();
    for (const t of firsts) if (t !== EOS) counts.set(t, (counts.get(t) ?? 0) + 1);
    const [target] = [...counts].filter(([, n]) => n < G).sort((a, b) => b[1] - a[1])[0];
    const results = await runAgentEpisodes({
      command: [process.execPath, FIXTURE_AGENT],
      serverUrl: server.url,
      model: 'trainee',
      prompts: Array.from({ length: G }, () => ({ text, answer: '' })),
      sessions: server.sessions,
      timeoutMs: 30_000,
      sessionPrefix: 'grpo',
      env: { FIXTURE_MODE: 'first-char', FIXTURE_TARGET: tok.decode([target]) },
    });
    assert.ok(results.every((r) => r.error === null), results.map((r) => r.error).join('; '));
    const rewards = results.map((r) => r.reward as number);
    assert.deepEqual(rewards, firsts.map((t) => (t === target ? 1 : 0)), 'the rewards the agents reported');

    const advantages = grpoAdvantages(rewards, G);
    const sequences = results.map((r, i) =>
      trainSequenceFromSample(r.sample!.promptTokens, { tokens: r.sample!.responseTokens, logprobs: r.sample!.rolloutLogprobs }, { advantage: advantages[i], lossMask: r.sample!.lossMask }),
    );
    const trainer = Trainer.create({ model: MODEL, weights, optimizer: { lr: 3e-3 } });
    try {
      const probe = [[...p, target]];
      const before = (await trainer.logprobs(probe))[0][p.length - 1];
      const metrics = await trainer.trainStep(sequences, policyLoss({ algorithm: 'ppo' }));
      assert.ok(metrics.lossMetrics.logprobMismatch < 1e-4, `the endpoint's log-probs match the trainer's (mismatch ${metrics.lossMetrics.logprobMismatch})`);
      const afterStep = (await trainer.logprobs(probe))[0][p.length - 1];
      assert.ok(afterStep > before + 1e-3, `log p(target) rose: ${before} -> ${afterStep}`);
      // Weight sync: the endpoint now serves the new version.
      trainee.setWeights(1, await trainer.exportWeights());
      const res = await client.completions.create({ model: 'trainee', prompt: text, max_tokens: 1 });
      assert.equal(res.model, 'trainee@1');
      assert.equal(res.system_fingerprint, 'relax-policy-v1');
    } finally {
      trainer.dispose();
    }
  });
});

describe('judge reward (examples/rewards/judge.js)', () => {
  const saved = { ...process.env };
  after(() => {
    for (const k of ['RELAX_JUDGE_BASE_URL', 'RELAX_JUDGE_MODEL', 'RELAX_JUDGE_TEMPLATE', 'RELAX_JUDGE_API']) {
      if (saved[k] === undefined) delete process.env[k];
      else process.env[k] = saved[k];
    }
    clearUserModuleCache();
  });

  test('a judge served by the endpoint scores responses as digit / 9; a reply without a digit fails the sample', async () => {
    Object.assign(process.env, { RELAX_JUDGE_BASE_URL: server.baseURL, RELAX_JUDGE_MODEL: 'judge-7', RELAX_JUDGE_TEMPLATE: '{prompt}{response}' });
    const reward = await loadRewardFunction({ module: JUDGE, timeout_ms: 10_000 } as Parameters<typeof loadRewardFunction>[0]);
    const prompt = { text: '1+2=', answer: '3' };
    const scored = await scoreGroup({ task: add2Task, reward, prompt, responses: ['3<eos>', '4<eos>'], timeoutMs: 10_000 });
    assert.deepEqual(scored, [{ reward: 7 / 9, error: null }, { reward: 7 / 9, error: null }]);
    // The module runs in a sandbox thread, which copies the environment when it starts: reload it after each change.
    const reloaded = () => (clearUserModuleCache(), loadRewardFunction({ module: JUDGE, timeout_ms: 10_000 } as Parameters<typeof loadRewardFunction>[0]));
    process.env.RELAX_JUDGE_API = 'completions';
    assert.deepEqual(await scoreGroup({ task: add2Task, reward: await reloaded(), prompt, responses: ['3<eos>'], timeoutMs: 10_000 }), [{ reward: 7 / 9, error: null }]);
    process.env.RELAX_JUDGE_MODEL = 'judge-plus';
    const [failed] = await scoreGroup({ task: add2Task, reward: await reloaded(), prompt, responses: ['3<eos>'], timeoutMs: 10_000 });
    assert.equal(failed.reward, null);
    assert.match(failed.error ?? '', /the judge replied "\+\+", which does not start with a digit/);
    delete process.env.RELAX_JUDGE_BASE_URL;
    const [unset] = await scoreGroup({ task: add2Task, reward: await reloaded(), prompt, responses: ['3<eos>'], timeoutMs: 10_000 });
    assert.match(unset.error ?? '', /RELAX_JUDGE_BASE_URL is not set/);
  });
});

describe('relax serve (cli/serve.ts) over a real database', () => {
  test('"<run>" follows the newest published version; "<run>@<n>" pins one; other names are 404', async () => {
    const db = await freshDatabase();
    const root = await mkdtemp(path.join(os.tmpdir(), 'relax-serve-'));
    const runId = `serve-${Date.now().toString(36)}`;
    const config = { run_id: runId, task: 'add2', model: { d_model: 64, n_layers: 2, n_heads: 4, d_ff: 256, context_length: 16 }, checkpoint: { dir: root } };
    await db.pool.query(`INSERT INTO runs (run_id, workflow_id, kind, config) VALUES ($1, $1, 'test', $2)`, [runId, JSON.stringify(config)]);
    const publish = async (version: number, w: PolicyWeights) => {
      const info = await publishCheckpoint(root, version, MODEL, w);
      await registerCheckpoint(db.pool, { runId, policyVersion: version, path: info.dir, sha256: info.sha256, step: version });
    };
    await publish(0, weights);
    const served = await startRunServer(db.pool, { run: runId, host: '127.0.0.1', port: 0, latestCheckMs: 200 });
    try {
      const c = new OpenAI({ baseURL: served.server.baseURL, apiKey: 'unused', maxRetries: 0 });
      const ids: string[] = [];
      for await (const m of c.models.list()) ids.push(m.id);
      assert.deepEqual(ids, [runId, `${runId}@0`]);
      const ask = (model: string) => c.completions.create({ model, prompt: '12+34=', max_tokens: 4, seed: 3, logprobs: 0 });
      const v0 = await ask(runId);
      assert.equal(v0.model, `${runId}@0`);
      const [expected] = await engine.generate([encodePrompt('12+34=')], params(4, 3));
      assert.deepEqual(v0.choices[0].logprobs?.token_logprobs, expected.logprobs.slice(0, shown(expected.tokens, expected.finishReason).length));

      await publish(1, policyWeights(12));
      await new Promise((r) => setTimeout(r, 300));
      const v1 = await ask(runId);
      assert.equal(v1.model, `${runId}@1`, 'the newer version is picked up');
      assert.equal(v1.system_fingerprint, 'relax-policy-v1');
      const pinned = await ask(`${runId}@0`);
      assert.equal(pinned.model, `${runId}@0`);
      assert.deepEqual(pinned.choices[0].logprobs?.token_logprobs, v0.choices[0].logprobs?.token_logprobs, 'version 0 is still version 0');

      const absent = await rejects(() => ask(`${runId}@7`), 404);
      assert.match(absent.message, /has no policy version 7; its retained versions are 0/);
      const other = await rejects(() => ask('another-run'), 404);
      assert.match(other.message, new RegExp(`serves run ${runId} only`));
    } finally {
      await served.close();
      await db.close();
      await rm(root, { recursive: true, force: true });
    }
  });
});
