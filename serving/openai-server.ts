// An OpenAI-compatible HTTP endpoint over the rollout engine (docs/openai-endpoint.md):
//   GET  /v1/models, GET /v1/models/:model
//   POST /v1/completions        (legacy logprobs: {tokens, token_logprobs, text_offset, top_logprobs: null})
//   POST /v1/chat/completions   (logprobs.content: [{token, logprob, bytes, top_logprobs: []}])
// What a model name means is the caller's business (resolveModel): `relax serve` maps "<run_id>" to
// the run's newest policy version and "<run_id>@<n>" to version n (rollout/policy-engine.ts).
//
// A request with a session id (the `user` field or the x-relax-session header) is recorded in
// `sessions` (serving/sessions.ts), so an external agent program's whole conversation becomes one
// training sample.
//
// Chat messages may carry images (`image_url` parts with a data URL) and audio (`input_audio` parts,
// base64 WAV): each becomes its encoder's placeholder token at its place in the prompt, expanded to
// one token per embedding, and its processed input goes to the engine with the tokens. Media are
// never fetched from the network.
//
// Limits (serving/openai-http.ts): socket timeouts and caps, the body limit, and a JSON parser that
// refuses too deep or large bodies and prototype keys before anything walks them; sessions are
// bounded in count, idle time and media bytes (serving/sessions.ts).
//
// Requests are served one at a time: the tiny policies generate in milliseconds, a request's n
// choices are generated as one batch, and one-at-a-time lets a resolver switch an engine between
// policy versions safely (resolve + generate never interleave with another request's).
import { randomInt, randomUUID } from 'node:crypto';
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { shortened } from '../config/json-limits';
import { MEDIA_LIMITS } from '../engines/media/model-inputs';
import type { GeneratedSample, GenerationEngine, SamplingParams } from '../engines/rollout';
import type { Tokenizer } from '../engines/tokenizers/tokenizer';
import { ModelNotFoundError, type ResolvedModel } from '../rollout/resolved-model';
import { applySocketLimits, fastifyLimitOptions, registerJsonParser, resolveHttpLimits, shortMessage, type HttpLimits } from './openai-http';
import { describeError, mediaPrompt, stopTokens, textPrompt, tokenPrompt, type PromptInput } from './openai-prompts';
import { badParam, modelNotFound, OpenAIError, parseChatRequest, parseCompletionRequest, renderChat, renderChatParts, type ChatPart, type CommonRequest } from './openai-requests';
import { SessionError, SessionRecorder, type SessionCall, type SessionRecorderOptions, type SessionStats } from './sessions';
import { fastifyLogging } from '../telemetry/http-log';
import { componentLog } from '../telemetry/log';

const serveLog = componentLog('openai-server');

export { OpenAIError, modelNotFound } from './openai-requests';
export { DEFAULT_BODY_LIMIT, DEFAULT_HTTP_LIMITS, type HttpLimits } from './openai-http';
export { SessionRecorder, type SessionRecorderOptions, type SessionStats } from './sessions';
export type { AgentSample, SessionTake } from '../rollout/agent-rollout';
export type { ResolvedModel } from '../rollout/resolved-model';

export interface OpenAIServerOptions {
  /** Throw modelNotFound(model) or ModelNotFoundError (a 404) for names it does not serve. */
  resolveModel(model: string): Promise<ResolvedModel>;
  listModels(): Promise<string[]>;
  /** GET /ready: whether it can serve now, with detail; default ready. (GET /health is liveness: always ok.) */
  readiness?(): Promise<{ ready: boolean } & Record<string, unknown>>;
  /** Extra fields of a listed model's object (e.g. the version and sha256 an engine holds). */
  modelInfo?(id: string): Record<string, unknown> | undefined;
  /** More routes (`relax serve --engine`'s load call); `serially` is generation's queue, so a version switch never races a request. */
  routes?(app: FastifyInstance, serially: <T>(task: () => Promise<T>) => Promise<T>): void;
  /** Default 127.0.0.1. */
  host?: string;
  /** Default 0: a free port. */
  port?: number;
  /** Where sessions are recorded; default a new recorder with `sessionLimits`. */
  sessions?: SessionRecorder;
  /** The limits of the default recorder (count cap, idle time, media bytes); ignored with `sessions`. */
  sessionLimits?: SessionRecorderOptions;
  /** `owned_by` of the listed models. Default "relax". */
  ownedBy?: string;
  /** Timeouts, caps and the body limit; each defaults to DEFAULT_HTTP_LIMITS. */
  http?: Partial<HttpLimits>;
  /** The largest request body accepted, in bytes (media arrive base64 in the body); overrides http.bodyLimit. Default DEFAULT_BODY_LIMIT. */
  bodyLimit?: number;
}

export interface OpenAIServerStats {
  sessions: SessionStats;
  /** Connections closed at once because the connection cap was reached. */
  refusedConnections: number;
}

export interface OpenAIServer {
  /** http://host:port */
  url: string;
  /** url + "/v1": what OpenAI clients take as baseURL. */
  baseURL: string;
  port: number;
  sessions: SessionRecorder;
  /** The limits in force. */
  limits: HttpLimits;
  stats(): OpenAIServerStats;
  close(): Promise<void>;
}

/** The header an agent can send its session id in (instead of, or with the same value as, `user`). */
export const SESSION_HEADER = 'x-relax-session';

/** A session id is at most this long (the recorder keeps ids, also of evicted sessions). */
export const MAX_SESSION_ID_CHARS = 256;

/** OpenAI's default max_tokens for /v1/completions. */
const COMPLETIONS_DEFAULT_MAX_TOKENS = 16;

/** One choice as both endpoints return it: the tokens the caller sees, and their texts. */
interface Choice {
  sample: GeneratedSample;
  /** The generated tokens minus a stop token the text leaves out. */
  shown: number[];
  shownLogprobs: number[];
  pieces: string[];
  text: string;
}

interface Generation {
  model: string;
  policyVersion: number;
  promptTokens: number[];
  choices: Choice[];
}

/** Runs one task at a time, in arrival order. */
function serialQueue(): <T>(task: () => Promise<T>) => Promise<T> {
  let tail: Promise<unknown> = Promise.resolve();
  return (task) => {
    const run = tail.then(task, task);
    tail = run.catch(() => undefined);
    return run;
  };
}


/** The session id of a request: `user` or the header; both given must agree. */
function sessionIdOf(request: FastifyRequest, req: CommonRequest): string | undefined {
  const header = request.headers[SESSION_HEADER];
  const fromHeader = Array.isArray(header) ? header[0] : header;
  if (fromHeader !== undefined && req.user !== undefined && fromHeader !== req.user) {
    throw badParam('user', `the \`user\` field (${JSON.stringify(req.user)}) and the ${SESSION_HEADER} header (${JSON.stringify(fromHeader)}) name different sessions: send one of them, or the same id in both`);
  }
  const id = fromHeader ?? req.user;
  if (id !== undefined && id.length > MAX_SESSION_ID_CHARS) {
    throw badParam('user', `the session id (\`user\` or the ${SESSION_HEADER} header) is ${id.length} characters, ${JSON.stringify(shortened(id, 40))}: send at most ${MAX_SESSION_ID_CHARS}`);
  }
  return id === '' ? undefined : id;
}

async function resolve(options: OpenAIServerOptions, model: string): Promise<ResolvedModel> {
  let resolved: ResolvedModel;
  try {
    resolved = await options.resolveModel(model);
  } catch (err) {
    if (err instanceof OpenAIError) throw err;
    if (err instanceof ModelNotFoundError) throw modelNotFound(err.model, err.detail);
    throw new OpenAIError(500, `cannot load model ${JSON.stringify(model)}: ${describeError(err)}`, 'model', 'model_load_failed');
  }
  if (resolved.tokenizer.vocabSize !== resolved.engine.model.vocabSize) {
    throw new OpenAIError(500, `model ${JSON.stringify(model)} is misconfigured: its tokenizer has ${resolved.tokenizer.vocabSize} ids, its engine ${resolved.engine.model.vocabSize}`, 'model', 'model_load_failed');
  }
  return resolved;
}

/** Starts the session's record of this call; a call that cannot be part of its session is a 400. */
function beginSessionCall(sessions: SessionRecorder, sessionId: string, req: CommonRequest, prompt: PromptInput, tokenizer: Tokenizer, promptParam: string): SessionCall {
  if (req.n !== 1) {
    const message = `a call asked for n=${req.n} completions, but a session is one conversation: send n=1 in sessions (several samples of one prompt are several sessions)`;
    sessions.fail(sessionId, message);
    throw badParam('n', `session ${JSON.stringify(sessionId)}: ${message}`, 'invalid_session');
  }
  try {
    return sessions.begin(sessionId, prompt.tokens, tokenizer, prompt.sessionMedia);
  } catch (err) {
    if (err instanceof SessionError) throw badParam(promptParam, err.message, 'invalid_session');
    throw err;
  }
}

/** One request as both endpoints see it. */
interface GenerateRequest {
  req: CommonRequest;
  /** The prompt text (for chat: the rendered messages). */
  text: string;
  /** Chat messages with media: the rendered prompt as text and media parts (`text` is then its text only). */
  parts?: ChatPart[];
  /** A token-id prompt (completions only): used instead of `text`. */
  promptTokens?: number[];
  /** Token ids that also end a choice (vLLM's stop_token_ids). */
  stopTokenIds?: number[];
  /** The request field the prompt came from, named in errors. */
  promptParam: string;
  sessionId: string | undefined;
  /** max_tokens when the request gives none; undefined: the rest of the context. */
  defaultMaxTokens: number | undefined;
}

/** Resolves, encodes, checks, records the session call and generates: the shared body of both endpoints. */
async function generate(options: OpenAIServerOptions, sessions: SessionRecorder, r: GenerateRequest): Promise<Generation> {
  const { req } = r;
  const resolved = await resolve(options, req.model);
  const { engine, tokenizer } = resolved;
  const prompt = r.parts
    ? await mediaPrompt(resolved, req.model, r.parts, r.promptParam)
    : r.promptTokens
      ? tokenPrompt(resolved, r.promptTokens, r.promptParam)
      : textPrompt(resolved, r.text, r.promptParam);
  const outside = (r.stopTokenIds ?? []).find((t) => t >= engine.model.vocabSize);
  if (outside !== undefined) throw badParam('stop_token_ids', `stop_token_ids has token ${outside}, but this model's vocabulary has ${engine.model.vocabSize} tokens`);
  const promptTokens = prompt.tokens;
  // A completion stops where the context ends (finish_reason "length"), whatever max_tokens says.
  const room = engine.model.contextLength - promptTokens.length;
  const params: SamplingParams = {
    maxNewTokens: Math.min(req.maxTokens ?? r.defaultMaxTokens ?? room, room),
    temperature: req.temperature,
    topP: req.topP,
    topK: req.topK,
    stopTokens: [...stopTokens(tokenizer, req.stop), ...(r.stopTokenIds ?? [])],
    // Without a seed every request samples afresh, as OpenAI's endpoint does.
    seed: req.seed ?? randomInt(0, 2 ** 31),
  };
  const call = r.sessionId === undefined ? undefined : beginSessionCall(sessions, r.sessionId, req, prompt, tokenizer, r.promptParam);
  let samples: GeneratedSample[];
  try {
    const prompts = Array.from({ length: req.n }, () => promptTokens);
    samples = await (prompt.media ? engine.generate(prompts, params, prompts.map(() => prompt.media)) : engine.generate(prompts, params));
  } catch (err) {
    call?.fail(`generation failed: ${describeError(err)}`);
    throw new OpenAIError(500, `generation failed: ${describeError(err)}`, null, 'generation_failed');
  }
  // OpenAI's convention: the stop token that ended a choice is not part of its text.
  const hidesStop = (s: GeneratedSample) => s.finishReason === 'stop' && !req.includeStop;
  const choices = samples.map((sample): Choice => {
    const shown = hidesStop(sample) ? sample.tokens.slice(0, -1) : sample.tokens;
    const pieces = shown.map((t) => tokenizer.decode([t]));
    return { sample, shown, shownLogprobs: sample.logprobs.slice(0, shown.length), pieces, text: tokenizer.decode(shown) };
  });
  if (call) {
    const s = samples[0];
    call.complete({ tokens: s.tokens, logprobs: s.logprobs, versions: s.tokenVersions ?? s.policyVersion, hiddenStop: hidesStop(s) });
  }
  return { model: resolved.name ?? req.model, policyVersion: Math.min(...samples.map((s) => s.policyVersion)), promptTokens, choices };
}

function usage(g: Generation) {
  const completion = g.choices.reduce((n, c) => n + c.sample.tokens.length, 0);
  return { prompt_tokens: g.promptTokens.length, completion_tokens: completion, total_tokens: g.promptTokens.length + completion };
}

/**
 * Legacy completions logprobs; text_offset counts from the start of the prompt text, as OpenAI's
 * does. `tokensAsIds` (vLLM's return_tokens_as_token_ids): each token as "token_id:<id>".
 */
function legacyLogprobs(c: Choice, promptText: string, tokensAsIds = false) {
  const offsets: number[] = [];
  let at = promptText.length;
  for (const piece of c.pieces) {
    offsets.push(at);
    at += piece.length;
  }
  return { tokens: tokensAsIds ? c.shown.map((t) => `token_id:${t}`) : c.pieces, token_logprobs: c.shownLogprobs, text_offset: offsets, top_logprobs: null };
}

function chatLogprobs(c: Choice) {
  return {
    content: c.pieces.map((piece, j) => ({ token: piece, logprob: c.shownLogprobs[j], bytes: [...Buffer.from(piece, 'utf8')], top_logprobs: [] })),
    refusal: null,
  };
}

function registerRoutes(app: FastifyInstance, options: OpenAIServerOptions, sessions: SessionRecorder): void {
  const serially = serialQueue();
  options.routes?.(app, serially);
  const created = Math.floor(Date.now() / 1000);
  const ownedBy = options.ownedBy ?? 'relax';
  const modelObject = (id: string) => ({ id, object: 'model', created, owned_by: ownedBy, ...options.modelInfo?.(id) });

  app.get('/health', async () => ({ status: 'ok' }));
  app.get('/ready', async (_request, reply) => {
    const r = (await options.readiness?.()) ?? { ready: true };
    return reply.code(r.ready ? 200 : 503).send({ status: r.ready ? 'ready' : 'not_ready', ...r });
  });

  app.get('/v1/models', async () => ({ object: 'list', data: (await options.listModels()).map(modelObject) }));

  app.get<{ Params: { model: string } }>('/v1/models/:model', async (request) => {
    const resolved = await serially(() => resolve(options, request.params.model));
    return modelObject(resolved.name ?? request.params.model);
  });

  app.post('/v1/completions', async (request) => {
    const req = parseCompletionRequest(request.body);
    const sessionId = sessionIdOf(request, req);
    const g = await serially(() =>
      generate(options, sessions, {
        req,
        text: req.prompt,
        ...(req.promptTokens ? { promptTokens: req.promptTokens } : {}),
        stopTokenIds: req.stopTokenIds,
        promptParam: 'prompt',
        sessionId,
        defaultMaxTokens: COMPLETIONS_DEFAULT_MAX_TOKENS,
      }),
    );
    return {
      id: `cmpl-${randomUUID()}`,
      object: 'text_completion',
      created: Math.floor(Date.now() / 1000),
      model: g.model,
      system_fingerprint: `relax-policy-v${g.policyVersion}`,
      choices: g.choices.map((c, index) => ({ index, text: c.text, logprobs: req.logprobs ? legacyLogprobs(c, req.prompt, req.tokensAsIds) : null, finish_reason: c.sample.finishReason })),
      usage: usage(g),
    };
  });

  app.post('/v1/chat/completions', async (request) => {
    const req = parseChatRequest(request.body);
    const sessionId = sessionIdOf(request, req);
    const parts = renderChatParts(req.messages);
    const g = await serially(() => generate(options, sessions, { req, text: renderChat(req.messages), ...(parts ? { parts } : {}), promptParam: 'messages', sessionId, defaultMaxTokens: undefined }));
    return {
      id: `chatcmpl-${randomUUID()}`,
      object: 'chat.completion',
      created: Math.floor(Date.now() / 1000),
      model: g.model,
      system_fingerprint: `relax-policy-v${g.policyVersion}`,
      choices: g.choices.map((c, index) => ({
        index,
        message: { role: 'assistant', content: c.text, refusal: null },
        logprobs: req.logprobs ? chatLogprobs(c) : null,
        finish_reason: c.sample.finishReason,
      })),
      usage: usage(g),
    };
  });
}

/** The 4xx Fastify raises itself (body, content type), in our words. */
function fastifyClientError(err: { code?: string; message?: string }, status: number, bodyLimit: number): OpenAIError {
  const code = err.code ?? null;
  if (code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
    return new OpenAIError(
      413,
      `the request body is over this endpoint's limit of ${bodyLimit % 1048576 === 0 ? `${bodyLimit / 1048576} MiB` : `${bodyLimit} bytes`}: send fewer or smaller images and clips (each medium is limited to ${MEDIA_LIMITS.maxBytes / 1048576} MiB)`,
      null,
      'request_too_large',
    );
  }
  if (code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') return new OpenAIError(415, `${shortened(describeError(err), 200)}: send the body as JSON with Content-Type: application/json`, null, 'unsupported_media_type');
  return new OpenAIError(status, `invalid request: ${shortened(describeError(err), 300)}`, null, code);
}

/** Every error leaves in OpenAI's shape (message under 1 KB): our own as thrown, Fastify's (a body too large, ...) with their status, anything else a 500. */
function errorReply(err: unknown, reply: FastifyReply, bodyLimit: number): FastifyReply {
  let e: OpenAIError;
  const status = (err as { statusCode?: number }).statusCode;
  if (err instanceof OpenAIError) e = err;
  else if (status && status >= 400 && status < 500) e = fastifyClientError(err as { code?: string }, status, bodyLimit);
  else {
    serveLog.error({ err }, 'internal error');
    e = new OpenAIError(500, `internal error: ${describeError(err)}`, null, (err as { code?: string }).code ?? null);
  }
  const body = e.toBody();
  body.error.message = shortMessage(body.error.message);
  if (body.error.param !== null) body.error.param = shortened(body.error.param, 200);
  return reply.status(e.status).send(body);
}

/** Starts the endpoint; resolves once it listens. */
export async function startOpenAIServer(options: OpenAIServerOptions): Promise<OpenAIServer> {
  const sessions = options.sessions ?? new SessionRecorder(options.sessionLimits);
  const limits = resolveHttpLimits({ ...options.http, ...(options.bodyLimit !== undefined ? { bodyLimit: options.bodyLimit } : {}) });
  const { bodyLimit } = limits;
  const app = Fastify({ ...fastifyLogging('openai-server'), ...fastifyLimitOptions(limits) });
  const connections = applySocketLimits(app.server, limits);
  registerJsonParser(app);
  app.setErrorHandler((err, _request, reply) => errorReply(err, reply, bodyLimit));
  app.setNotFoundHandler((request, reply) =>
    errorReply(new OpenAIError(404, `Unknown request URL: ${request.method} ${shortened(request.url, 200)}. This endpoint serves GET /v1/models, POST /v1/completions and POST /v1/chat/completions`, null, 'unknown_url'), reply, bodyLimit),
  );
  registerRoutes(app, options, sessions);
  const host = options.host ?? '127.0.0.1';
  await app.listen({ host, port: options.port ?? 0 });
  const address = app.server.address();
  if (address === null || typeof address === 'string') throw new Error(`the server listens on ${String(address)}, not a TCP port`);
  // Listening on every interface: clients on this machine reach it through loopback.
  const reachable = address.address === '0.0.0.0' ? '127.0.0.1' : address.address === '::' ? '::1' : address.address;
  const urlHost = reachable.includes(':') ? `[${reachable}]` : reachable;
  const url = `http://${urlHost}:${address.port}`;
  return {
    url,
    baseURL: `${url}/v1`,
    port: address.port,
    sessions,
    limits,
    stats: () => ({ sessions: sessions.stats(), refusedConnections: connections.dropped() }),
    close: () => app.close(),
  };
}
