// The limits of the OpenAI-compatible endpoint (serving/openai-http.ts, serving/sessions.ts), each
// against a real server on a tiny random-weights engine: the session LRU cap (the count never
// exceeds it, memory stays flat over tens of thousands of users, evicted sessions say so), the idle
// and media-bytes limits, slow-drip sockets closed within the header / request timeouts, the
// connection cap, requests per socket, and JSON bodies refused with 400s that name the problem
// (prototype keys, deep nesting, unknown parameters) instead of a 500 or "invalid JSON".
import assert from 'node:assert/strict';
import net from 'node:net';
import v8 from 'node:v8';
import vm from 'node:vm';
import { after, before, describe, test } from 'node:test';
import { initWeights, TINY_MODEL, type ModelConfig } from '../engines/model';
import { RolloutEngine } from '../engines/rollout';
import { add2Tokenizer } from '../envs/add2';
import { startOpenAIServer, type OpenAIServer } from '../serving/openai-server';
import { SessionRecorder, type SessionMedium } from '../serving/sessions';

const tok = add2Tokenizer();
const MODEL: ModelConfig = { ...TINY_MODEL, vocabSize: tok.vocabSize, contextLength: 16 };

let engine: RolloutEngine;
let server: OpenAIServer;
const started: OpenAIServer[] = [];

async function serve(extra: Partial<Parameters<typeof startOpenAIServer>[0]> = {}): Promise<OpenAIServer> {
  const s = await startOpenAIServer({
    resolveModel: async () => ({ engine, tokenizer: tok, policyVersion: 1 }),
    listModels: async () => ['policy'],
    sessionLimits: { log: () => undefined },
    ...extra,
  });
  started.push(s);
  return s;
}

before(async () => {
  engine = await RolloutEngine.create(MODEL, { intraOpNumThreads: 1 });
  engine.setWeights(1, initWeights(MODEL, 5));
  server = await serve({ sessionLimits: { maxSessions: 20, log: () => undefined } });
});

after(async () => {
  await Promise.all(started.map((s) => s.close()));
  await engine?.release();
});

async function post(s: OpenAIServer, route: string, body: string | object, headers: Record<string, string> = {}): Promise<{ status: number; json: any }> {
  const res = await fetch(`${s.baseURL}${route}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: typeof body === 'string' ? body : JSON.stringify(body) });
  return { status: res.status, json: await res.json() };
}

function assertOpenAIError(json: any, status: number, actual: number): void {
  assert.equal(actual, status, JSON.stringify(json));
  assert.deepEqual(Object.keys(json.error).sort(), ['code', 'message', 'param', 'type']);
  assert.equal(json.error.type, 'invalid_request_error');
  assert.ok(Buffer.byteLength(json.error.message) < 1024, `message of ${Buffer.byteLength(json.error.message)} bytes`);
}

/** A raw TCP connection to `s`: what it receives, and when it closed (ms after open). */
function rawSocket(s: OpenAIServer): { socket: net.Socket; received: () => string; closed: Promise<number> } {
  const socket = net.connect(s.port, '127.0.0.1');
  const t0 = performance.now();
  let data = '';
  socket.on('data', (d) => (data += d.toString()));
  socket.on('error', () => undefined);
  const closed = new Promise<number>((resolve) => socket.on('close', () => resolve(performance.now() - t0)));
  return { socket, received: () => data, closed };
}

/** Writes `text` one byte every `everyMs` until the socket closes. */
function drip(socket: net.Socket, text: string, everyMs: number): void {
  let i = 0;
  const timer = setInterval(() => {
    if (socket.destroyed || i >= text.length) return clearInterval(timer);
    socket.write(text[i++]);
  }, everyMs);
  socket.on('close', () => clearInterval(timer));
}

describe('sessions are bounded', () => {
  test('distinct users beyond the cap evict the least recently used: the count never exceeds it, and an evicted session says so', async () => {
    for (let i = 0; i < 60; i++) {
      const { status } = await post(server, '/completions', { model: 'policy', prompt: '1+1=', max_tokens: 1, user: `user-${i}` });
      assert.equal(status, 200);
      assert.ok(server.sessions.stats().sessions <= 20, `held ${server.sessions.stats().sessions}`);
    }
    const stats = server.stats().sessions;
    assert.equal(stats.sessions, 20);
    assert.equal(stats.evicted.cap, 40);
    assert.deepEqual(server.sessions.ids(), Array.from({ length: 20 }, (_, i) => `user-${40 + i}`), 'the 20 most recent are held');
    const again = await post(server, '/completions', { model: 'policy', prompt: '1+1=', max_tokens: 1, user: 'user-35' });
    assertOpenAIError(again.json, 400, again.status);
    assert.equal(again.json.error.code, 'invalid_session');
    assert.match(again.json.error.message, /was evicted: the endpoint holds at most 20 sessions .* its earlier calls are lost/);
    assert.match(server.sessions.take('user-36').error ?? '', /session "user-36" was evicted/);
    for (const id of server.sessions.ids()) server.sessions.discard(id);
  });

  test('memory stays flat over 45,000 users with a cap of 1,000', () => {
    v8.setFlagsFromString('--expose-gc');
    const gc = vm.runInNewContext('gc') as () => void;
    const recorder = new SessionRecorder({ maxSessions: 1000, log: () => undefined });
    const prompt = Array.from({ length: 12 }, (_, i) => i % tok.vocabSize);
    const users = (from: number, to: number) => {
      for (let i = from; i < to; i++) {
        recorder.begin(`user-${i}-${'x'.repeat(40)}`, prompt).complete({ tokens: [1, 2, 3, 4], logprobs: [-1, -1, -1, -1], versions: 1, hiddenStop: false });
        if (recorder.stats().sessions > 1000) assert.fail(`held ${recorder.stats().sessions} sessions`);
      }
    };
    users(0, 15_000);
    gc();
    const base = process.memoryUsage().heapUsed;
    users(15_000, 45_000);
    gc();
    const grown = process.memoryUsage().heapUsed - base;
    console.log(`heap growth over 30,000 more users: ${(grown / 1e6).toFixed(2)} MB; ${JSON.stringify(recorder.stats())}`);
    // Unbounded, 30,000 sessions of ~20 tokens and a 50-character id take well over 20 MB.
    assert.ok(grown < 5e6, `heap grew ${grown} bytes`);
    assert.equal(recorder.stats().evicted.cap, 44_000);
  });

  test('idle sessions are forgotten, media bytes are capped, and a call in flight is never evicted', async () => {
    const idle = new SessionRecorder({ maxIdleMs: 50, log: () => undefined });
    idle.begin('old', [1, 2]).complete({ tokens: [3], logprobs: [-1], versions: 1, hiddenStop: false });
    await new Promise((r) => setTimeout(r, 80));
    idle.begin('new', [1, 2]);
    assert.deepEqual(idle.ids(), ['new']);
    assert.equal(idle.stats().evicted.idle, 1);
    assert.match(idle.take('old').error ?? '', /forgotten after 50 ms without a call/);

    const medium = (n: number): SessionMedium => ({ id: `sha256:${n}`, kind: 'image', format: 'png', bytes: new Uint8Array(400) });
    const media = new SessionRecorder({ maxMediaBytes: 1000, log: () => undefined });
    for (const n of [1, 2, 3]) media.begin(`m${n}`, [1, 2], undefined, [medium(n)]).complete({ tokens: [3], logprobs: [-1], versions: 1, hiddenStop: false });
    assert.deepEqual(media.ids(), ['m2', 'm3']);
    assert.deepEqual(media.stats(), { sessions: 2, mediaBytes: 800, evicted: { cap: 0, idle: 0, media: 1 } });

    const lines: string[] = [];
    const capped = new SessionRecorder({ maxSessions: 1, log: (l) => lines.push(l) });
    const running = capped.begin('running', [1, 2]);
    capped.begin('other', [1, 2]).complete({ tokens: [3], logprobs: [-1], versions: 1, hiddenStop: false });
    assert.ok(capped.ids().includes('running'), 'the call in flight keeps its session');
    running.complete({ tokens: [4], logprobs: [-0.5], versions: 1, hiddenStop: false });
    assert.equal(capped.take('running').sample?.responseTokens.length, 1);
    capped.begin('third', [1, 2]);
    assert.deepEqual(capped.ids(), ['third'], 'the least recently used session is evicted');
    assert.equal(lines.length, 1, 'the first eviction is logged');
    assert.match(lines[0], /1 evicted so far \(1 over the cap of 1/);
  });
});

describe('sockets are bounded', () => {
  test('a client dripping its headers or its body is answered 408 and closed within the timeout', async () => {
    const slow = await serve({ http: { headersTimeoutMs: 500, requestTimeoutMs: 1000 } });
    const body = JSON.stringify({ model: 'policy', prompt: '1+1=' });
    const headers = rawSocket(slow);
    drip(headers.socket, `POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`, 50);
    const bodies = Array.from({ length: 10 }, () => rawSocket(slow));
    for (const b of bodies) {
      b.socket.write(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`);
      drip(b.socket, body, 100);
    }
    const headerClosed = await headers.closed;
    const bodyClosed = await Promise.all(bodies.map((b) => b.closed));
    console.log(`slow headers closed after ${headerClosed.toFixed(0)} ms (timeout 500), slow bodies after ${Math.max(...bodyClosed).toFixed(0)} ms (timeout 1000)`);
    assert.ok(headerClosed < 1200, `headers: ${headerClosed} ms`);
    assert.ok(Math.max(...bodyClosed) < 2000, `bodies: ${bodyClosed}`);
    for (const r of [headers, ...bodies]) {
      assert.match(r.received(), /^HTTP\/1\.1 408 /);
      assertOpenAIError(JSON.parse(r.received().split('\r\n\r\n')[1]), 408, 408);
    }
    const ok = await post(slow, '/completions', { model: 'policy', prompt: '1+1=', max_tokens: 1 });
    assert.equal(ok.status, 200, 'a prompt client is still served');
  });

  test('connections over the cap are closed at once; requests per socket are capped', async () => {
    const capped = await serve({ http: { maxConnections: 3, maxRequestsPerSocket: 2 } });
    const held = Array.from({ length: 3 }, () => rawSocket(capped));
    await Promise.all(held.map((h) => new Promise((r) => h.socket.once('connect', r))));
    await new Promise((r) => setTimeout(r, 100));
    const extra = rawSocket(capped);
    const closedAfter = await extra.closed;
    assert.ok(closedAfter < 1000, `the connection over the cap closed after ${closedAfter} ms`);
    assert.equal(extra.received(), '', 'nothing is served to it');
    assert.equal(capped.stats().refusedConnections, 1);
    for (const h of held) h.socket.destroy();
    await Promise.all(held.map((h) => h.closed));
    await new Promise((r) => setTimeout(r, 100));

    const one = rawSocket(capped);
    const json = JSON.stringify({ model: 'policy', prompt: '1+1=', max_tokens: 1 });
    const request = `POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${json.length}\r\n\r\n${json}`;
    one.socket.write(request + request);
    // Node marks the last reply Connection: close (the client then reconnects); the socket itself
    // lingers until the keep-alive timeout.
    const deadline = Date.now() + 5000;
    while (one.received().split('HTTP/1.1 ').length < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    const responses = one.received().split('HTTP/1.1 ').filter(Boolean);
    assert.equal(responses.length, 2, one.received());
    assert.doesNotMatch(responses[0], /connection: close/i);
    assert.match(responses[1], /^200 [^]*connection: close/i, 'the second reply tells the client to reconnect');
    one.socket.destroy();
  });
});

describe('bodies are checked before they are used', () => {
  test('__proto__, constructor and prototype keys are a 400 naming the key, not "invalid JSON"', async () => {
    const top = await post(server, '/completions', '{"model": "policy", "prompt": "1+1=", "__proto__": {"admin": true}}');
    assertOpenAIError(top.json, 400, top.status);
    assert.equal(top.json.error.code, 'forbidden_key');
    assert.equal(top.json.error.param, '__proto__');
    assert.match(top.json.error.message, /forbidden key "__proto__" at the top level/);
    assert.doesNotMatch(top.json.error.message, /invalid JSON/i);
    const nested = await post(server, '/chat/completions', { model: 'policy', messages: [{ role: 'user', content: '1', constructor: { prototype: 1 } }] });
    assertOpenAIError(nested.json, 400, nested.status);
    assert.equal(nested.json.error.param, 'messages[0].constructor');
    assert.match(nested.json.error.message, /"constructor" at messages\[0\]/);
  });

  test('deep nesting, huge numbers, empty and non-JSON bodies are 400s (415 for another content type)', async () => {
    const deep = await post(server, '/chat/completions', `{"model": "policy", "messages": ${'['.repeat(200_000)}${']'.repeat(200_000)}}`);
    assertOpenAIError(deep.json, 400, deep.status);
    assert.match(deep.json.error.message, /refused at messages(\[0\])+: nested deeper than 32 levels/);
    const huge = await post(server, '/completions', '{"model": "policy", "prompt": "1+1=", "max_tokens": 1e999}');
    assertOpenAIError(huge.json, 400, huge.status);
    assert.equal(huge.json.error.param, 'max_tokens');
    for (const body of ['', '{"model": ', '[1, 2', 'null']) {
      const r = await post(server, '/completions', body);
      assertOpenAIError(r.json, 400, r.status);
    }
    const text = await fetch(`${server.baseURL}/completions`, { method: 'POST', headers: { 'content-type': 'text/plain' }, body: 'hello' });
    const json = (await text.json()) as any;
    assertOpenAIError(json, 415, text.status);
    assert.match(json.error.message, /Content-Type: application\/json/);
  });

  test('unknown parameters are a 400 naming them; ignored OpenAI parameters are accepted', async () => {
    const unknown = await post(server, '/completions', { model: 'policy', prompt: '1+1=', frobnicate: 1, min_p: 0.1 });
    assertOpenAIError(unknown.json, 400, unknown.status);
    assert.equal(unknown.json.error.code, 'unknown_parameter');
    assert.equal(unknown.json.error.param, 'frobnicate');
    assert.match(unknown.json.error.message, /unknown parameters `frobnicate`, `min_p` for POST \/v1\/completions/);
    const wrongEndpoint = await post(server, '/chat/completions', { model: 'policy', messages: [{ role: 'user', content: '1' }], prompt: '1' });
    assert.equal(wrongEndpoint.json.error.param, 'prompt');
    const ignored = await post(server, '/chat/completions', {
      model: 'policy',
      messages: [{ role: 'user', content: '1+1=' }],
      max_tokens: 1,
      stream_options: { include_usage: true },
      metadata: { run: 'x' },
      store: false,
      parallel_tool_calls: false,
    });
    assert.equal(ignored.status, 200, JSON.stringify(ignored.json));
    const badIgnored = await post(server, '/completions', { model: 'policy', prompt: '1', stream_options: 'yes' });
    assertOpenAIError(badIgnored.json, 400, badIgnored.status);
    assert.equal(badIgnored.json.error.param, 'stream_options');
    const longUser = await post(server, '/completions', { model: 'policy', prompt: '1', user: 'u'.repeat(10_000) });
    assertOpenAIError(longUser.json, 400, longUser.status);
    assert.match(longUser.json.error.message, /session id .* is 10000 characters/);
  });
});
