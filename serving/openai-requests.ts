// Request bodies of the OpenAI-compatible endpoint, validated into plain structs, and the errors the
// endpoint answers with. Every rejection names the parameter, what was wrong and what to send
// instead, in OpenAI's error shape ({ error: { message, type, param, code } }), so the official
// clients raise their usual BadRequestError / NotFoundError with a useful message.
//
// Every top-level parameter is accounted for: honoured, accepted and ignored (IGNORED: metadata
// that cannot change a sample), refused unless it has its no-op value (UNSUPPORTED), or unknown
// (refused, naming it). docs/openai-endpoint.md lists them.
import { shortened } from '../config/json-limits';

/** An error the endpoint answers with, in OpenAI's shape. */
export class OpenAIError extends Error {
  override readonly name = 'OpenAIError';
  constructor(
    readonly status: number,
    message: string,
    readonly param: string | null = null,
    readonly code: string | null = null,
    readonly type: string = status >= 500 ? 'server_error' : 'invalid_request_error',
  ) {
    super(message);
  }

  toBody(): { error: { message: string; type: string; param: string | null; code: string | null } } {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

/** A 400 about one request parameter. */
export function badParam(param: string, message: string, code: string | null = 'invalid_value'): OpenAIError {
  return new OpenAIError(400, message, param, code);
}

/** The 404 a resolveModel callback throws for a model name it does not serve. */
export function modelNotFound(model: string, detail?: string): OpenAIError {
  return new OpenAIError(404, `The model \`${model}\` does not exist${detail ? `: ${detail}` : ''}`, 'model', 'model_not_found');
}

type Body = Record<string, unknown>;

/** The request body as an object; anything else is a 400. */
export function requestBody(body: unknown): Body {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw new OpenAIError(400, 'the request body must be a JSON object (send Content-Type: application/json)', null, 'invalid_body');
  }
  return body as Body;
}

function present(body: Body, name: string): boolean {
  return body[name] !== undefined && body[name] !== null;
}

function describe(value: unknown): string {
  // A long string is cut before it is quoted; the body was checked for depth and size (serving/openai-http.ts).
  const text = JSON.stringify(typeof value === 'string' ? shortened(value, 80) : value);
  return text === undefined ? String(value) : shortened(text, 100);
}

function requiredString(body: Body, name: string): string {
  const value = body[name];
  if (typeof value !== 'string' || value === '') throw badParam(name, `\`${name}\` is required and must be a non-empty string, got ${describe(value)}`, present(body, name) ? 'invalid_type' : 'missing_required_parameter');
  return value;
}

function optionalNumber(body: Body, name: string, range: { min: number; max: number; minExclusive?: boolean; integer?: boolean }): number | undefined {
  if (!present(body, name)) return undefined;
  const value = body[name];
  const kind = range.integer ? 'an integer' : 'a number';
  const low = range.minExclusive ? `> ${range.min}` : `>= ${range.min}`;
  const ok =
    typeof value === 'number' &&
    Number.isFinite(value) &&
    (!range.integer || Number.isSafeInteger(value)) &&
    (range.minExclusive ? value > range.min : value >= range.min) &&
    value <= range.max;
  if (!ok) throw badParam(name, `\`${name}\` must be ${kind} ${low} and <= ${range.max}, got ${describe(value)}`);
  return value as number;
}

function optionalBoolean(body: Body, name: string): boolean | undefined {
  if (!present(body, name)) return undefined;
  if (typeof body[name] !== 'boolean') throw badParam(name, `\`${name}\` must be true or false, got ${describe(body[name])}`, 'invalid_type');
  return body[name] as boolean;
}

function optionalString(body: Body, name: string): string | undefined {
  if (!present(body, name)) return undefined;
  if (typeof body[name] !== 'string') throw badParam(name, `\`${name}\` must be a string, got ${describe(body[name])}`, 'invalid_type');
  return body[name] as string;
}

/**
 * Parameters that would change what is generated but that this endpoint does not implement. Sent
 * with a value other than their no-op default, they are refused rather than silently ignored (an
 * agent that asks for a penalty or a tool call must not get a sample it did not ask for).
 */
const UNSUPPORTED: Array<{ name: string; isNoop: (v: unknown) => boolean; why: string }> = [
  { name: 'stream', isNoop: (v) => v === false, why: 'streaming is not supported: send stream false (or omit it)' },
  { name: 'echo', isNoop: (v) => v === false, why: 'echo is not supported: send the prompt yourself' },
  { name: 'suffix', isNoop: (v) => v === '', why: 'suffix (insertion) is not supported by these left-to-right policies' },
  { name: 'best_of', isNoop: (v) => v === 1, why: 'best_of is not supported: use n and pick yourself' },
  { name: 'presence_penalty', isNoop: (v) => v === 0, why: 'presence_penalty is not supported: send 0 (it would change the sampled distribution without the log-probs saying so)' },
  { name: 'frequency_penalty', isNoop: (v) => v === 0, why: 'frequency_penalty is not supported: send 0 (it would change the sampled distribution without the log-probs saying so)' },
  { name: 'logit_bias', isNoop: (v) => typeof v === 'object' && v !== null && Object.keys(v).length === 0, why: 'logit_bias is not supported' },
  { name: 'tools', isNoop: (v) => Array.isArray(v) && v.length === 0, why: 'tool calling is not supported: describe tools in the prompt text and parse the reply yourself' },
  { name: 'tool_choice', isNoop: (v) => v === 'none', why: 'tool calling is not supported' },
  { name: 'functions', isNoop: (v) => Array.isArray(v) && v.length === 0, why: 'function calling is not supported' },
  { name: 'response_format', isNoop: (v) => typeof v === 'object' && v !== null && (v as { type?: unknown }).type === 'text', why: 'structured output is not supported (only {"type": "text"})' },
  { name: 'function_call', isNoop: (v) => v === 'none', why: 'function calling is not supported' },
  { name: 'modalities', isNoop: (v) => Array.isArray(v) && v.length === 1 && v[0] === 'text', why: 'only text output is supported (send ["text"] or omit it)' },
  { name: 'audio', isNoop: () => false, why: 'audio output is not supported (audio input goes in input_audio content parts)' },
  { name: 'prediction', isNoop: () => false, why: 'predicted outputs are not supported' },
  { name: 'reasoning_effort', isNoop: () => false, why: 'these policies have no reasoning modes' },
  { name: 'verbosity', isNoop: () => false, why: 'these policies have no verbosity setting' },
  { name: 'web_search_options', isNoop: () => false, why: 'web search is not supported' },
];

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

/**
 * OpenAI parameters accepted and ignored: they describe the call (for OpenAI's own bookkeeping) and
 * cannot change what is generated. Their type is still checked.
 */
const IGNORED: Array<{ name: string; ok: (v: unknown) => boolean; expect: string; chatOnly?: boolean }> = [
  { name: 'stream_options', ok: isObject, expect: 'an object (it only matters with stream, which is not supported)' },
  { name: 'store', ok: (v) => typeof v === 'boolean', expect: 'true or false', chatOnly: true },
  { name: 'metadata', ok: (v) => isObject(v) && Object.values(v).every((x) => typeof x === 'string'), expect: 'an object of strings', chatOnly: true },
  { name: 'service_tier', ok: (v) => typeof v === 'string', expect: 'a string', chatOnly: true },
  { name: 'parallel_tool_calls', ok: (v) => typeof v === 'boolean', expect: 'true or false (tools are not supported anyway)', chatOnly: true },
  { name: 'prompt_cache_key', ok: (v) => typeof v === 'string', expect: 'a string', chatOnly: true },
  { name: 'safety_identifier', ok: (v) => typeof v === 'string', expect: 'a string', chatOnly: true },
];

/** Parameters this endpoint implements, per endpoint (vLLM's top_k and include_stop_str_in_output included). */
const HONOURED_COMMON = ['model', 'max_tokens', 'temperature', 'top_p', 'top_k', 'n', 'seed', 'stop', 'include_stop_str_in_output', 'user', 'logprobs'];
const HONOURED = {
  // vLLM's extensions for token-level clients (Relax's external-engine rollout: rollout/remote-engine.ts).
  completions: new Set([...HONOURED_COMMON, 'prompt', 'stop_token_ids', 'return_tokens_as_token_ids']),
  chat: new Set([...HONOURED_COMMON, 'messages', 'max_completion_tokens', 'top_logprobs']),
};

type Endpoint = keyof typeof HONOURED;
const ROUTE: Record<Endpoint, string> = { completions: 'POST /v1/completions', chat: 'POST /v1/chat/completions' };

/** Refuses unknown parameters (naming them), unsupported ones with a value other than their no-op, and ignored ones of the wrong type. */
function checkParameters(body: Body, endpoint: Endpoint): void {
  const unknown = Object.keys(body).filter(
    (k) => !HONOURED[endpoint].has(k) && !UNSUPPORTED.some((u) => u.name === k) && !IGNORED.some((i) => i.name === k && (endpoint === 'chat' || !i.chatOnly)),
  );
  if (unknown.length) {
    const names = unknown.slice(0, 5).map((k) => `\`${shortened(k, 40)}\``).join(', ') + (unknown.length > 5 ? ` and ${unknown.length - 5} more` : '');
    throw badParam(
      shortened(unknown[0], 40),
      `unknown parameter${unknown.length === 1 ? '' : 's'} ${names} for ${ROUTE[endpoint]}: this endpoint takes ${[...HONOURED[endpoint]].join(', ')} ` +
        `(and accepts a few OpenAI parameters it ignores or refuses unless they are no-ops; docs/openai-endpoint.md lists them): remove ${unknown.length === 1 ? 'it' : 'them'}`,
      'unknown_parameter',
    );
  }
  for (const u of UNSUPPORTED) {
    if (present(body, u.name) && !u.isNoop(body[u.name])) throw badParam(u.name, `\`${u.name}\`: ${u.why}`, 'unsupported_parameter');
  }
  for (const i of IGNORED) {
    if (present(body, i.name) && !i.ok(body[i.name])) throw badParam(i.name, `\`${i.name}\` must be ${i.expect}, got ${describe(body[i.name])} (it is accepted and ignored)`, 'invalid_type');
  }
}

/** What both endpoints share: sampling, the session and the stop strings (mapped to tokens later). */
export interface CommonRequest {
  model: string;
  /** Undefined: the endpoint's default (16 for completions, the rest of the context for chat). */
  maxTokens?: number;
  temperature: number;
  topP: number;
  topK: number;
  n: number;
  /** Undefined: a random seed per request. */
  seed?: number;
  stop: string[];
  /** vLLM's parameter: keep the stop token's text in the returned text and log-probs. */
  includeStop: boolean;
  /** The `user` field; a session id when the server records sessions. */
  user?: string;
  /** Return log-probs. */
  logprobs: boolean;
}

/** n choices per request at most: the engine generates them as one batch. */
export const MAX_N = 128;

function commonRequest(body: Body, maxTokensField: string, endpoint: Endpoint): CommonRequest {
  checkParameters(body, endpoint);
  const stop = body.stop;
  let stops: string[] = [];
  if (typeof stop === 'string') stops = [stop];
  else if (Array.isArray(stop) && stop.every((s) => typeof s === 'string')) stops = stop as string[];
  else if (present(body, 'stop')) throw badParam('stop', `\`stop\` must be a string or an array of up to 4 strings, got ${describe(stop)}`, 'invalid_type');
  if (stops.length > 4) throw badParam('stop', `\`stop\` has ${stops.length} entries; send at most 4`);
  const topK = optionalNumber(body, 'top_k', { min: -1, max: 1e9, integer: true });
  return {
    model: requiredString(body, 'model'),
    maxTokens: optionalNumber(body, maxTokensField, { min: 1, max: 1e9, integer: true }),
    temperature: optionalNumber(body, 'temperature', { min: 0, max: 2 }) ?? 1,
    topP: optionalNumber(body, 'top_p', { min: 0, max: 1, minExclusive: true }) ?? 1,
    // vLLM's extension; -1 and 0 both mean "off".
    topK: topK === undefined || topK < 0 ? 0 : topK,
    n: optionalNumber(body, 'n', { min: 1, max: MAX_N, integer: true }) ?? 1,
    seed: optionalNumber(body, 'seed', { min: Number.MIN_SAFE_INTEGER, max: Number.MAX_SAFE_INTEGER, integer: true }),
    stop: stops,
    includeStop: optionalBoolean(body, 'include_stop_str_in_output') ?? false,
    user: optionalString(body, 'user'),
    logprobs: false,
  };
}

export interface CompletionRequest extends CommonRequest {
  /** The prompt text; for a token-id prompt, empty (promptTokens holds it). */
  prompt: string;
  /** A token-id prompt (OpenAI's array-of-integers form), used as it is: no bos added, nothing encoded. */
  promptTokens?: number[];
  /** vLLM's extension: token ids that also end a choice (besides eos and `stop`). */
  stopTokenIds: number[];
  /** vLLM's extension: log-prob tokens as "token_id:<id>" instead of their text. */
  tokensAsIds: boolean;
}

/** A token-id prompt or stop list: integers >= 0, at most `max` of them (checked against the vocabulary later). */
function tokenIds(v: unknown, param: string, max: number): number[] {
  if (!Array.isArray(v) || v.length > max || !v.every((t) => Number.isSafeInteger(t) && (t as number) >= 0)) {
    throw badParam(param, `\`${param}\` must be an array of at most ${max} token ids (integers >= 0), got ${describe(v)}`, 'invalid_type');
  }
  return v as number[];
}

/** The longest token-id prompt accepted (the model's context length bounds it further). */
const MAX_PROMPT_TOKENS = 1 << 20;

/** POST /v1/completions */
export function parseCompletionRequest(raw: unknown): CompletionRequest {
  const body = requestBody(raw);
  const common = commonRequest(body, 'max_tokens', 'completions');
  const stopTokenIds = present(body, 'stop_token_ids') ? tokenIds(body.stop_token_ids, 'stop_token_ids', 64) : [];
  const tokensAsIds = optionalBoolean(body, 'return_tokens_as_token_ids') ?? false;
  let prompt = body.prompt;
  let promptTokens: number[] | undefined;
  if (Array.isArray(prompt) && prompt.length > 0 && prompt.every((t) => typeof t === 'number')) {
    promptTokens = tokenIds(prompt, 'prompt', MAX_PROMPT_TOKENS);
    prompt = '';
  } else if (Array.isArray(prompt)) {
    if (prompt.length !== 1 || typeof prompt[0] !== 'string') {
      throw badParam('prompt', `\`prompt\` must be a string, an array of exactly one string, or one prompt of token ids (batches of prompts are not supported: send one request per prompt, and n for several completions), got ${describe(prompt)}`);
    }
    prompt = prompt[0];
  }
  if (typeof prompt !== 'string') throw badParam('prompt', `\`prompt\` is required and must be a string, got ${describe(prompt)}`, present(body, 'prompt') ? 'invalid_type' : 'missing_required_parameter');
  // OpenAI's legacy logprobs: an integer, the number of top alternatives (0 = only the chosen token).
  const logprobs = optionalNumber(body, 'logprobs', { min: 0, max: 5, integer: true });
  return { ...common, prompt, ...(promptTokens ? { promptTokens } : {}), stopTokenIds, tokensAsIds, logprobs: logprobs !== undefined };
}

/** A medium in a chat message, validated for shape only (decoded against the model by the server). */
export type ChatMediaPart =
  /** `image_url.url`: a data URL (data:image/png;base64,...); an http(s) URL is refused when resolved. */
  | { type: 'image'; url: string; param: string }
  /** `input_audio.data`: the WAV file's bytes, base64. */
  | { type: 'audio'; data: string; param: string };

/** One piece of a chat prompt, in order: text, or a medium that becomes a placeholder at that place. */
export type ChatPart = { type: 'text'; text: string } | ChatMediaPart;

export interface ChatMessage {
  role: string;
  /** The message's text (its text parts joined; media parts contribute none). */
  content: string;
  /** Set only when the content has image or audio parts: every part, in order. */
  parts?: ChatPart[];
}

export interface ChatRequest extends CommonRequest {
  messages: ChatMessage[];
}

const PART_TYPES = '{"type": "text", "text": "..."}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}} or {"type": "input_audio", "input_audio": {"data": "<base64 WAV>", "format": "wav"}}';

/** One content part, shape-checked; `param` is its path in the request (messages[i].content[j]). */
function contentPart(part: unknown, param: string): ChatPart {
  const p = isObject(part) ? part : {};
  if (p.type === 'text') {
    if (typeof p.text !== 'string') throw badParam(param, `${param} is a text part without a string \`text\`: send {"type": "text", "text": "..."}`, 'invalid_type');
    return { type: 'text', text: p.text };
  }
  if (p.type === 'image_url') {
    const image = p.image_url;
    // OpenAI's clients also accept image_url as a bare string; take both.
    const url = typeof image === 'string' ? image : isObject(image) ? image.url : undefined;
    if (typeof url !== 'string' || url === '') {
      throw badParam(`${param}.image_url`, `${param} is an image part without \`image_url.url\`: send {"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}`, 'invalid_type');
    }
    const detail = isObject(image) ? image.detail : undefined;
    if (detail !== undefined && detail !== null && detail !== 'auto') {
      throw badParam(
        `${param}.image_url.detail`,
        `${param}.image_url.detail is ${describe(detail)}, but this endpoint has one resolution: every image is resized to the vision encoder's fixed patch grid. Send "auto" or omit it`,
        'unsupported_parameter',
      );
    }
    return { type: 'image', url, param: `${param}.image_url.url` };
  }
  if (p.type === 'input_audio') {
    const audio = isObject(p.input_audio) ? p.input_audio : undefined;
    if (!audio || typeof audio.data !== 'string' || audio.data === '') {
      throw badParam(`${param}.input_audio`, `${param} is an audio part without \`input_audio.data\`: send {"type": "input_audio", "input_audio": {"data": "<base64 of a WAV file>", "format": "wav"}}`, 'invalid_type');
    }
    if (audio.format !== 'wav') {
      throw badParam(`${param}.input_audio.format`, `${param}.input_audio.format is ${describe(audio.format)}, but only "wav" audio is supported: convert the clip to WAV (PCM or float) and send format "wav"`);
    }
    return { type: 'audio', data: audio.data, param: `${param}.input_audio.data` };
  }
  throw badParam(param, `${param} is ${describe(part)}: the supported content parts are ${PART_TYPES}`);
}

/** A message's content: a string, or an array of text / image_url / input_audio parts. */
function messageContent(message: Record<string, unknown>, i: number): Pick<ChatMessage, 'content' | 'parts'> {
  const content = message.content;
  if (typeof content === 'string') return { content };
  if (content === null || content === undefined) {
    // An assistant message may carry only tool calls (content null); it then contributes no text.
    if (message.role === 'assistant') return { content: '' };
    throw badParam(`messages[${i}].content`, `messages[${i}].content is missing: send the message text`, 'missing_required_parameter');
  }
  if (Array.isArray(content)) {
    const parts = content.map((part, j) => contentPart(part, `messages[${i}].content[${j}]`));
    const text = parts.map((p) => (p.type === 'text' ? p.text : '')).join('');
    return parts.some((p) => p.type !== 'text') ? { content: text, parts } : { content: text };
  }
  throw badParam(`messages[${i}].content`, `messages[${i}].content must be a string or an array of content parts (${PART_TYPES}), got ${describe(content)}`, 'invalid_type');
}

/** POST /v1/chat/completions */
export function parseChatRequest(raw: unknown): ChatRequest {
  const body = requestBody(raw);
  // max_completion_tokens is the current name, max_tokens the deprecated one; either works.
  const maxField = present(body, 'max_completion_tokens') ? 'max_completion_tokens' : 'max_tokens';
  const common = commonRequest(body, maxField, 'chat');
  if (!Array.isArray(body.messages) || body.messages.length === 0) {
    throw badParam('messages', `\`messages\` is required and must be a non-empty array of {role, content}, got ${describe(body.messages)}`, present(body, 'messages') ? 'invalid_type' : 'missing_required_parameter');
  }
  const messages = body.messages.map((m, i): ChatMessage => {
    if (m === null || typeof m !== 'object' || typeof (m as { role?: unknown }).role !== 'string') {
      throw badParam(`messages[${i}]`, `messages[${i}] must be an object with a string role and content, got ${describe(m)}`, 'invalid_type');
    }
    const message = m as Record<string, unknown>;
    return { role: message.role as string, ...messageContent(message, i) };
  });
  const logprobs = optionalBoolean(body, 'logprobs') ?? false;
  const top = optionalNumber(body, 'top_logprobs', { min: 0, max: 20, integer: true });
  if (top !== undefined && top > 0 && !logprobs) throw badParam('top_logprobs', '`top_logprobs` needs `logprobs: true`');
  return { ...common, messages, logprobs };
}

/**
 * The chat template of these tiny character-level policies: the prompt text is the concatenation
 * of the messages' contents in order; roles are not rendered (the policies were never trained on
 * role markers, and their alphabets usually cannot even spell them). An agent that needs turn
 * structure writes it into the contents itself.
 */
export function renderChat(messages: readonly ChatMessage[]): string {
  return messages.map((m) => m.content).join('');
}

/**
 * The same template as renderChat, as parts: the messages' text and media in order, adjacent text
 * joined. Undefined when no message has media (the prompt is then renderChat's text).
 */
export function renderChatParts(messages: readonly ChatMessage[]): ChatPart[] | undefined {
  if (!messages.some((m) => m.parts)) return undefined;
  const out: ChatPart[] = [];
  for (const part of messages.flatMap((m): ChatPart[] => m.parts ?? [{ type: 'text', text: m.content }])) {
    const last = out[out.length - 1];
    if (part.type === 'text' && last?.type === 'text') out[out.length - 1] = { type: 'text', text: last.text + part.text };
    else out.push(part);
  }
  return out;
}
