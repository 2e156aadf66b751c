// Fuzzes the OpenAI-compatible endpoint's request bodies with fast-check against a real server on a
// tiny random-weights engine: valid requests, random JSON, deep nesting, prototype keys, unknown
// parameters, wrong types, huge strings and numbers, and bytes that are not JSON, posted to both
// generation routes. Asserts that no body gets a 5xx, that every 4xx is OpenAI's error object with
// a message under 1 KB, and that the server still answers a valid request afterwards.
// RELAX_FUZZ_RUNS sets the number of bodies (default 200); a failure prints fast-check's seed and
// the shrunk body.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import fc from 'fast-check';
import { initWeights, TINY_MODEL, type ModelConfig } from '../engines/model';
import { RolloutEngine } from '../engines/rollout';
import { add2Tokenizer } from '../envs/add2';
import { startOpenAIServer, type OpenAIServer } from '../serving/openai-server';

const tok = add2Tokenizer();
const MODEL: ModelConfig = { ...TINY_MODEL, vocabSize: tok.vocabSize, contextLength: 16 };
const RUNS = Number(process.env.RELAX_FUZZ_RUNS ?? 200);

let engine: RolloutEngine;
let server: OpenAIServer;

before(async () => {
  engine = await RolloutEngine.create(MODEL, { intraOpNumThreads: 1 });
  engine.setWeights(1, initWeights(MODEL, 3));
  server = await startOpenAIServer({
    resolveModel: async () => ({ engine, tokenizer: tok, policyVersion: 1 }),
    listModels: async () => ['policy'],
    // Small enough that "huge" strings reach it; fuzzed `user` ids make sessions, kept few.
    bodyLimit: 4 * 1024 * 1024,
    sessionLimits: { maxSessions: 50, log: () => undefined },
  });
});

after(async () => {
  await server?.close();
  await engine?.release();
});

const text = fc.stringMatching(/^[0-9+=]{0,10}$/);
const json = fc.jsonValue({ maxDepth: 4 });

/** A body that passes validation, or nearly. */
const valid = fc.oneof(
  fc.record(
    { model: fc.constant('policy'), prompt: text, max_tokens: fc.integer({ min: 1, max: 4 }), temperature: fc.double({ min: 0, max: 2, noNaN: true }), seed: fc.integer(), n: fc.integer({ min: 1, max: 3 }), logprobs: fc.integer({ min: 0, max: 5 }), stop: fc.constantFrom('=', ['+', '<eos>']), user: fc.string({ maxLength: 8 }) },
    { requiredKeys: ['model', 'prompt'] },
  ),
  fc.record(
    { model: fc.constant('policy'), messages: fc.array(fc.record({ role: fc.constantFrom('user', 'system', 'assistant'), content: fc.oneof(text, fc.array(fc.record({ type: fc.constant('text'), text }), { maxLength: 3 })) }), { minLength: 1, maxLength: 3 }), max_completion_tokens: fc.integer({ min: 1, max: 4 }), logprobs: fc.boolean(), top_logprobs: fc.integer({ min: 0, max: 20 }), top_k: fc.integer({ min: -1, max: 20 }) },
    { requiredKeys: ['model', 'messages'] },
  ),
);

/** A valid body with one thing wrong. */
function mutate(base: fc.Arbitrary<Record<string, unknown>>): fc.Arbitrary<Record<string, unknown>> {
  return fc.oneof(
    // A parameter replaced by any JSON value (wrong types, huge numbers, nulls).
    fc.tuple(base, fc.constantFrom('model', 'prompt', 'messages', 'max_tokens', 'temperature', 'top_p', 'n', 'seed', 'stop', 'user', 'logprobs', 'stream', 'tools', 'logit_bias', 'response_format', 'stream_options', 'metadata'), fc.oneof(json, fc.constantFrom(1e308, -1e308, 2 ** 53 + 1, -0, 0.5))).map(([b, k, v]) => ({ ...b, [k]: v })),
    // Unknown parameters.
    fc.tuple(base, fc.dictionary(fc.string({ minLength: 1, maxLength: 30 }), json, { minKeys: 1, maxKeys: 3 })).map(([b, extra]) => ({ ...extra, ...b })),
    // A message that is not a message.
    fc.tuple(base, fc.array(json, { minLength: 1, maxLength: 3 })).map(([b, messages]) => ({ ...b, messages })),
  );
}

/** JSON text with a prototype key somewhere (JSON.stringify cannot write a `__proto__` key, so it is spliced in). */
const protoKey = fc.tuple(valid, fc.constantFrom('__proto__', 'constructor', 'prototype'), json, fc.boolean()).map(([b, key, v, nested]) => {
  const inner = JSON.stringify(b);
  const entry = `${JSON.stringify(key)}: ${JSON.stringify(v)}`;
  return nested && inner.includes('{"role"') ? inner.replace('{"role"', `{${entry}, "role"`) : `{${entry}, ${inner.slice(1)}`;
});

const deep = fc.tuple(fc.integer({ min: 20, max: 50_000 }), fc.constantFrom('[', '{"a":'), fc.constantFrom('prompt', 'messages', 'user')).map(([depth, open, key]) => {
  const close = open === '[' ? ']' : '}';
  return `{"model": "policy", "${key}": ${open.repeat(depth)}1${close.repeat(depth)}}`;
});

const huge = fc.tuple(fc.integer({ min: 10_000, max: 2_000_000 }), fc.constantFrom('1', 'x', 'é', '"'), fc.constantFrom('prompt', 'content', 'key', 'user', 'model')).map(([n, ch, where]) => {
  const s = ch.repeat(n);
  if (where === 'content') return JSON.stringify({ model: 'policy', messages: [{ role: 'user', content: s }] });
  if (where === 'key') return JSON.stringify({ model: 'policy', prompt: '1', [s]: 1 });
  return JSON.stringify({ model: 'policy', prompt: '1+1=', [where]: s });
});

const bodies: fc.Arbitrary<{ route: string; body: string }> = fc.record({
  route: fc.constantFrom('/completions', '/chat/completions'),
  body: fc.oneof(
    { arbitrary: valid.map((b) => JSON.stringify(b)), weight: 3 },
    { arbitrary: mutate(valid).map((b) => JSON.stringify(b)), weight: 4 },
    { arbitrary: json.map((v) => JSON.stringify(v)), weight: 2 },
    { arbitrary: protoKey, weight: 2 },
    { arbitrary: deep, weight: 1 },
    { arbitrary: huge, weight: 1 },
    { arbitrary: fc.string({ maxLength: 200 }), weight: 1 },
    { arbitrary: fc.uint8Array({ maxLength: 200 }).map((b) => Buffer.from(b).toString('latin1')), weight: 1 },
  ),
});

test(`${RUNS} fuzzed bodies: never a 5xx, every 4xx in OpenAI's error shape under 1 KB, and the server stays up`, async () => {
  const statuses = new Map<number, number>();
  await fc.assert(
    fc.asyncProperty(bodies, async ({ route, body }) => {
      const res = await fetch(`${server.baseURL}${route}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
      const reply = (await res.json()) as { error?: { message: string; type: string; param: unknown; code: unknown } };
      statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
      assert.ok(res.status < 500, `HTTP ${res.status}: ${JSON.stringify(reply).slice(0, 500)}`);
      if (res.status >= 400) {
        assert.ok(reply.error, `HTTP ${res.status} without an error object`);
        assert.deepEqual(Object.keys(reply.error).sort(), ['code', 'message', 'param', 'type']);
        assert.equal(reply.error.type, 'invalid_request_error');
        assert.equal(typeof reply.error.message, 'string');
        assert.ok(Buffer.byteLength(reply.error.message) < 1024, `a message of ${Buffer.byteLength(reply.error.message)} bytes`);
        assert.ok(reply.error.param === null || (typeof reply.error.param === 'string' && reply.error.param.length <= 200));
      } else {
        assert.equal(res.status, 200);
      }
    }),
    { numRuns: RUNS },
  );
  console.log(`statuses over ${RUNS} bodies: ${JSON.stringify(Object.fromEntries(statuses))}; sessions ${JSON.stringify(server.stats().sessions)}`);
  assert.ok((statuses.get(200) ?? 0) > 0 && (statuses.get(400) ?? 0) > 0, 'the bodies reach both outcomes');
  assert.ok(server.stats().sessions.sessions <= 50);
  const after = await fetch(`${server.baseURL}/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'policy', prompt: '1+1=', max_tokens: 2 }) });
  assert.equal(after.status, 200);
  assert.equal(((await after.json()) as { object: string }).object, 'text_completion');
});
