// The environment variables of the services a Relax process talks to and how it proves itself: the
// Temporal connection's TLS, mTLS and API key (the temporal CLI's TEMPORAL_TLS* / TEMPORAL_API_KEY*;
// config/temporal-connection.ts), the bearer tokens of the HTTP listeners (RELAX_API_TOKEN,
// RELAX_ENGINE_TOKEN, each or its *_FILE; config/bearer-token.ts) and OpenTelemetry tracing
// (OTEL_*; config/tracing.ts). Read only here (config/environment.ts re-exports it). Nothing here
// ever returns or prints a secret except as the option or token itself.
import fs from 'node:fs';
import path from 'node:path';

// ---------------------------------------------------------------------------------------------
// Temporal connection

/** The variables read here, so a process that starts a plaintext local server can drop them. */
export const TEMPORAL_CONNECTION_ENV = [
  'TEMPORAL_TLS',
  'TEMPORAL_TLS_CERT',
  'TEMPORAL_TLS_KEY',
  'TEMPORAL_TLS_CA',
  'TEMPORAL_TLS_SERVER_NAME',
  'TEMPORAL_API_KEY',
  'TEMPORAL_API_KEY_FILE',
] as const;

/** The SDK's TLSConfig (client `Connection` and worker `NativeConnection` take the same shape). */
export interface TemporalTlsOptions {
  serverNameOverride?: string;
  serverRootCACertificate?: Buffer;
  clientCertPair?: { crt: Buffer; key: Buffer };
}

export interface TemporalConnectionOptions {
  /** `false`: plaintext. An object (possibly empty: system roots): TLS. */
  tls: TemporalTlsOptions | false;
  /** Sent as `Authorization: Bearer <key>`; never logged. */
  apiKey?: string;
  /** What is in use, for `relax doctor` and error messages: "plaintext", "TLS (...)", "mTLS (...)", "..., API key (from ...)". Never the key. */
  summary: string;
}

export class TemporalConnectionConfigError extends Error {}

function set(env: NodeJS.ProcessEnv, name: string): string | undefined {
  const v = env[name];
  return v === undefined || v.trim() === '' ? undefined : v.trim();
}

function readFileNamedBy(variable: string, file: string): Buffer {
  try {
    return fs.readFileSync(file);
  } catch (err) {
    const reason = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
    throw new TemporalConnectionConfigError(`${variable}=${file}: cannot read the file (${reason}): fix the path, or unset ${variable}`);
  }
}

function parseTlsSwitch(value: string | undefined): boolean | undefined {
  if (value === undefined) return undefined;
  if (/^(1|true|yes|on)$/i.test(value)) return true;
  if (/^(0|false|no|off)$/i.test(value)) return false;
  throw new TemporalConnectionConfigError(`TEMPORAL_TLS=${value}: expected 1 (TLS) or 0 (plaintext)`);
}

/**
 * The connection options the environment asks for. TLS is on when TEMPORAL_TLS=1, when any of
 * TEMPORAL_TLS_CERT/KEY/CA/SERVER_NAME is set, or when an API key is given (as the SDK does: an API
 * key enables TLS unless TEMPORAL_TLS=0 says plaintext, e.g. behind a local TLS-terminating proxy).
 * Throws TemporalConnectionConfigError naming the variable for an unreadable file, a certificate
 * without its key (or the reverse), or contradicting settings.
 */
export function temporalConnectionOptions(env: NodeJS.ProcessEnv = process.env): TemporalConnectionOptions {
  const tlsSwitch = parseTlsSwitch(set(env, 'TEMPORAL_TLS'));
  const certFile = set(env, 'TEMPORAL_TLS_CERT');
  const keyFile = set(env, 'TEMPORAL_TLS_KEY');
  const caFile = set(env, 'TEMPORAL_TLS_CA');
  const serverName = set(env, 'TEMPORAL_TLS_SERVER_NAME');
  if (certFile && !keyFile) throw new TemporalConnectionConfigError(`TEMPORAL_TLS_CERT is set but TEMPORAL_TLS_KEY is not: mTLS needs the client certificate's private key too (--tls-key <file>)`);
  if (keyFile && !certFile) throw new TemporalConnectionConfigError(`TEMPORAL_TLS_KEY is set but TEMPORAL_TLS_CERT is not: mTLS needs the client certificate too (--tls-cert <file>)`);
  const tlsFiles = [certFile && 'TEMPORAL_TLS_CERT', caFile && 'TEMPORAL_TLS_CA', serverName && 'TEMPORAL_TLS_SERVER_NAME'].filter(Boolean);
  if (tlsSwitch === false && tlsFiles.length) {
    throw new TemporalConnectionConfigError(`TEMPORAL_TLS=0 (plaintext) contradicts ${tlsFiles.join(', ')}: unset one or the other`);
  }

  const keyText = set(env, 'TEMPORAL_API_KEY');
  const keyPath = set(env, 'TEMPORAL_API_KEY_FILE');
  if (keyText && keyPath) throw new TemporalConnectionConfigError('both TEMPORAL_API_KEY and TEMPORAL_API_KEY_FILE are set: give one');
  let apiKey: string | undefined;
  let apiKeySource: string | undefined;
  if (keyPath) {
    apiKey = readFileNamedBy('TEMPORAL_API_KEY_FILE', keyPath).toString('utf8').trim();
    if (!apiKey) throw new TemporalConnectionConfigError(`TEMPORAL_API_KEY_FILE=${keyPath}: the file is empty`);
    apiKeySource = 'TEMPORAL_API_KEY_FILE';
  } else if (keyText) {
    apiKey = keyText;
    apiKeySource = 'TEMPORAL_API_KEY';
  }

  const useTls = tlsSwitch === true || tlsFiles.length > 0 || (apiKey !== undefined && tlsSwitch !== false);
  const keyPart = apiKeySource ? `, API key (from ${apiKeySource})` : '';
  if (!useTls) return { tls: false, ...(apiKey ? { apiKey } : {}), summary: `plaintext${keyPart}` };

  const tls: TemporalTlsOptions = {};
  const details: string[] = [];
  if (serverName) {
    tls.serverNameOverride = serverName;
    details.push(`server name ${serverName}`);
  }
  if (caFile) {
    tls.serverRootCACertificate = readFileNamedBy('TEMPORAL_TLS_CA', caFile);
    details.push(`CA file ${caFile}`);
  } else {
    details.push('system roots');
  }
  if (certFile && keyFile) {
    tls.clientCertPair = { crt: readFileNamedBy('TEMPORAL_TLS_CERT', certFile), key: readFileNamedBy('TEMPORAL_TLS_KEY', keyFile) };
    details.unshift(`client cert ${certFile}`);
  }
  return { tls, ...(apiKey ? { apiKey } : {}), summary: `${tls.clientCertPair ? 'mTLS' : 'TLS'} (${details.join(', ')})${keyPart}` };
}

// ---------------------------------------------------------------------------------------------
// Bearer tokens

export interface BearerToken {
  token: string;
  /** Where it came from, for start-up lines: the variable's name or the file's path (never the token). */
  source: string;
}

export const MIN_TOKEN_CHARS = 16;

/** A token as read from `source`, trimmed; too short is an error naming the source and how to make one. */
export function checkedToken(token: string, source: string): BearerToken {
  const t = token.trim();
  if (t.length < MIN_TOKEN_CHARS) throw new Error(`${source}: the token must be at least ${MIN_TOKEN_CHARS} characters (got ${t.length}); use e.g. \`openssl rand -hex 32\``);
  return { token: t, source };
}

/** The token in `$<name>`, else in the file `$<name>_FILE` names; undefined when neither is set. */
export function tokenFromEnv(name: string, env: NodeJS.ProcessEnv = process.env): BearerToken | undefined {
  if (env[name]) return checkedToken(env[name]!, name);
  const fileVar = `${name}_FILE`;
  if (!env[fileVar]) return undefined;
  const file = path.resolve(env[fileVar]!);
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (err) {
    throw new Error(`${fileVar} ${file}: ${(err as Error).message}`);
  }
  return checkedToken(text, file);
}

/** The control API's token from the environment (RELAX_API_TOKEN or RELAX_API_TOKEN_FILE); undefined when neither is set. */
export function apiTokenFromEnv(env: NodeJS.ProcessEnv = process.env): BearerToken | undefined {
  return tokenFromEnv('RELAX_API_TOKEN', env);
}

/** An external engine's version-load token (RELAX_ENGINE_TOKEN or RELAX_ENGINE_TOKEN_FILE); undefined when neither is set. */
export function engineTokenFromEnv(env: NodeJS.ProcessEnv = process.env): BearerToken | undefined {
  return tokenFromEnv('RELAX_ENGINE_TOKEN', env);
}

// ---------------------------------------------------------------------------------------------
// Tracing

export interface TracingSettings {
  /** Where spans are POSTed: the traces endpoint as given, else `<OTEL_EXPORTER_OTLP_ENDPOINT>/v1/traces`. */
  endpoint: string;
  /** OTEL_SERVICE_NAME, default `relax-<role>`. */
  serviceName: string;
}

/**
 * Tracing's settings from the environment, or undefined when it is off (no endpoint, or
 * OTEL_SDK_DISABLED=true). OTEL_EXPORTER_OTLP_TRACES_ENDPOINT wins over OTEL_EXPORTER_OTLP_ENDPOINT, as in every OTel SDK.
 */
export function tracingSettings(role: string, env: NodeJS.ProcessEnv = process.env): TracingSettings | undefined {
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') return undefined;
  const traces = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim();
  const base = env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim();
  if (!traces && !base) return undefined;
  const endpoint = traces || `${base!.replace(/\/+$/, '')}/v1/traces`;
  let url: URL | undefined;
  try {
    url = new URL(endpoint);
  } catch {
    url = undefined;
  }
  if (!url || !/^https?:$/.test(url.protocol)) {
    const name = traces ? 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT' : 'OTEL_EXPORTER_OTLP_ENDPOINT';
    throw new Error(`${name} is ${JSON.stringify(traces || base)}: give the collector's OTLP/HTTP URL (e.g. http://127.0.0.1:4318), or unset it to turn tracing off`);
  }
  return { endpoint, serviceName: env.OTEL_SERVICE_NAME?.trim() || `relax-${role}` };
}

/** The OTLP protocol asked for (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL); only http/json is served. */
export function otlpTracesProtocol(env: NodeJS.ProcessEnv = process.env): string | undefined {
  return env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL || env.OTEL_EXPORTER_OTLP_PROTOCOL || undefined;
}
