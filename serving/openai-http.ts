// The HTTP limits of the OpenAI-compatible endpoint (serving/openai-server.ts, docs/openai-endpoint.md):
// timeouts and caps on sockets (headers, whole request, inactivity, keep-alive, requests per socket,
// connections), the body limit, and the JSON body parser that checks a body's depth, size and keys
// (config/json-limits.ts) before any code walks it recursively. Every refusal that can still be
// answered is answered in OpenAI's error shape: JSON problems as 400s naming the path, a request
// that arrives too slowly as a 408, a malformed request as a 400.
import { STATUS_CODES, type Server } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { checkJsonLimits, HTTP_BODY_JSON_LIMITS, shortened } from '../config/json-limits';
import { OpenAIError } from './openai-requests';
import { componentLog } from '../telemetry/log';

export interface HttpLimits {
  /** The largest request body, in bytes (media arrive base64 in the body). */
  bodyLimit: number;
  /** The request line and headers must arrive within this (node's http.Server headersTimeout). */
  headersTimeoutMs: number;
  /** The whole request, body included, must arrive within this (fastify's requestTimeout). The reply may take longer. */
  requestTimeoutMs: number;
  /** A socket with no traffic either way for this long is closed (fastify's connectionTimeout), e.g. while a reply waits in the queue. */
  connectionTimeoutMs: number;
  /** An idle keep-alive socket is closed after this (fastify's keepAliveTimeout). */
  keepAliveTimeoutMs: number;
  /** Requests one socket may carry; the last reply says Connection: close (clients reconnect). */
  maxRequestsPerSocket: number;
  /** Open connections at most (http.Server maxConnections); more are closed at once. */
  maxConnections: number;
}

/** Room for a few media of MEDIA_LIMITS.maxBytes each, base64 (4/3 of the bytes) in one request. */
export const DEFAULT_BODY_LIMIT = 48 * 1024 * 1024;

/**
 * Defaults for a loopback service: a client that sends its headers slower than 10 s or its request
 * slower than 2 minutes (48 MiB at 0.4 MB/s) is cut off; 1024 connections leave room for 256
 * agents per rollout (rollout.agent.concurrency <= 256) on several runs.
 */
export const DEFAULT_HTTP_LIMITS: HttpLimits = {
  bodyLimit: DEFAULT_BODY_LIMIT,
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 120_000,
  connectionTimeoutMs: 300_000,
  keepAliveTimeoutMs: 30_000,
  maxRequestsPerSocket: 1000,
  maxConnections: 1024,
};

/** `given` over the defaults, checked: positive integers, and headers due no later than the whole request. */
export function resolveHttpLimits(given: Partial<HttpLimits> = {}): HttpLimits {
  const limits: HttpLimits = { ...DEFAULT_HTTP_LIMITS };
  for (const [name, value] of Object.entries(given) as Array<[keyof HttpLimits, number | undefined]>) {
    if (value === undefined) continue;
    if (!(name in DEFAULT_HTTP_LIMITS)) throw new Error(`unknown HTTP limit ${JSON.stringify(name)}: the limits are ${Object.keys(DEFAULT_HTTP_LIMITS).join(', ')}`);
    if (!(Number.isSafeInteger(value) && value > 0)) throw new Error(`HTTP limit ${name} is ${value}: pass a positive integer`);
    limits[name] = value;
  }
  if (limits.headersTimeoutMs > limits.requestTimeoutMs) {
    throw new Error(`HTTP limit headersTimeoutMs (${limits.headersTimeoutMs}) is over requestTimeoutMs (${limits.requestTimeoutMs}): the headers are part of the request, so give them at most as long`);
  }
  return limits;
}

/** Fastify's options for these limits. */
export function fastifyLimitOptions(limits: HttpLimits) {
  return {
    bodyLimit: limits.bodyLimit,
    connectionTimeout: limits.connectionTimeoutMs,
    keepAliveTimeout: limits.keepAliveTimeoutMs,
    requestTimeout: limits.requestTimeoutMs,
    maxRequestsPerSocket: limits.maxRequestsPerSocket,
    clientErrorHandler,
  };
}

/**
 * The limits fastify has no option for, on its node server (before it listens): the header timeout,
 * how often node checks the header and request timeouts (its default, 30 s, would let a slow client
 * stay up to 30 s past them), and the connection cap. Returns a counter of refused connections.
 */
export function applySocketLimits(server: Server, limits: HttpLimits, log: (line: string) => void = (l) => componentLog('openai-http').warn(l)): { dropped(): number } {
  server.headersTimeout = limits.headersTimeoutMs;
  // Read when the server starts listening (node's setupConnectionsTracking); @types/node lacks it.
  (server as Server & { connectionsCheckingInterval: number }).connectionsCheckingInterval = Math.max(10, Math.min(1000, Math.floor(limits.headersTimeoutMs / 4)));
  server.maxConnections = limits.maxConnections;
  let dropped = 0;
  server.on('drop', () => {
    dropped += 1;
    if (dropped === 1 || dropped % 100 === 0) log(`[relax serve] ${dropped} connection${dropped === 1 ? '' : 's'} refused so far: over the cap of ${limits.maxConnections} open connections (raise it with \`relax serve --max-connections\`)`);
  });
  return { dropped: () => dropped };
}

/** A socket-level error (a request too slow, headers too big, bytes that are not HTTP) answered in OpenAI's shape, then closed. */
function clientErrorHandler(err: Error & { code?: string }, socket: Socket): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  const [status, message, code] =
    err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
      ? [408, 'the request did not arrive in time (the endpoint allows limited time for the headers and for the whole request): send it at once', 'request_timeout']
      : err.code === 'HPE_HEADER_OVERFLOW'
        ? [431, 'the request headers are too large: send fewer or shorter headers', 'headers_too_large']
        : [400, `the request is not valid HTTP/1.1: ${shortened(err.message, 200)}`, 'invalid_http'];
  if (socket.writable) {
    const body = JSON.stringify(new OpenAIError(status, message, null, code).toBody());
    socket.write(`HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
  }
  socket.destroy(err);
}

/** Keys that can change an object's prototype in code that copies or merges it. */
const FORBIDDEN_KEYS = new Set(['__proto__', 'constructor', 'prototype']);

function childPath(parent: string, key: string | number): string {
  if (typeof key === 'number') return `${parent}[${key}]`;
  const safe = /^[A-Za-z_$][A-Za-z0-9_$-]*$/.test(key) ? key : JSON.stringify(shortened(key, 40));
  return parent ? `${parent}.${safe}` : safe;
}

/** The first forbidden key of `value` and where it is. Iterative; call after checkJsonLimits (bounded size). */
function forbiddenKey(value: unknown): { key: string; path: string } | null {
  const stack: Array<{ value: unknown; path: string }> = [{ value, path: '' }];
  while (stack.length) {
    const { value: v, path } = stack.pop()!;
    if (v === null || typeof v !== 'object') continue;
    if (Array.isArray(v)) {
      for (let i = v.length - 1; i >= 0; i--) stack.push({ value: v[i], path: childPath(path, i) });
      continue;
    }
    for (const key of Object.keys(v)) {
      if (FORBIDDEN_KEYS.has(key)) return { key, path };
      stack.push({ value: (v as Record<string, unknown>)[key], path: childPath(path, key) });
    }
  }
  return null;
}

const where = (path: string) => (path === '' ? 'at the top level' : `at ${shortened(path, 200)}`);

/** A request body's text as JSON, refused with a 400 when it is not JSON, is too deep or large (HTTP_BODY_JSON_LIMITS), or has a forbidden key. */
export function parseJsonBody(text: string): unknown {
  if (text.trim() === '') throw new OpenAIError(400, 'the request body is empty: send a JSON object, e.g. {"model": "...", "prompt": "..."}', null, 'invalid_body');
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new OpenAIError(400, `the request body is not valid JSON (${shortened(err instanceof Error ? err.message : String(err), 200)}): send a JSON object`, null, 'invalid_json');
  }
  const problem = checkJsonLimits(value, HTTP_BODY_JSON_LIMITS);
  if (problem) {
    throw new OpenAIError(400, `the request body is refused ${where(problem.path)}: ${problem.message}`, problem.path === '' ? null : shortened(problem.path, 200), 'invalid_body');
  }
  const forbidden = forbiddenKey(value);
  if (forbidden) {
    throw new OpenAIError(
      400,
      `the request body has the forbidden key ${JSON.stringify(forbidden.key)} ${where(forbidden.path)}: keys named __proto__, constructor and prototype are refused (they can change the prototype of objects built from the body); rename or remove it`,
      forbidden.path === '' ? forbidden.key : shortened(`${forbidden.path}.${forbidden.key}`, 200),
      'forbidden_key',
    );
  }
  return value;
}

/** Makes parseJsonBody the only body parser (another content type is a 415); the body limit still applies while reading. */
export function registerJsonParser(app: FastifyInstance): void {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (_request, body, done) => {
    try {
      done(null, parseJsonBody(body as string));
    } catch (err) {
      done(err as Error, undefined);
    }
  });
}

/** `message` cut to under 1 KB (UTF-8) for an error reply. */
export function shortMessage(message: string): string {
  let max = 900;
  let out = shortened(message, max);
  while (Buffer.byteLength(out) > 1000 && max > 60) out = shortened(message, (max = Math.floor(max / 2)));
  return out;
}
