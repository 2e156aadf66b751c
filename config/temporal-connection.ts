// How a Relax process secures its Temporal connection: TLS, mTLS and API keys, read from the temporal
// CLI's environment variables (the relax command's `--tls*` and `--api-key-file` flags set them).
// Every connection to Temporal (the client, every worker, `relax doctor`) takes its options here.
// Nothing here ever returns or prints the API key except as the `apiKey` option itself.
import fs from 'node:fs';

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

/** The local dev server `relax dev` starts listens in plaintext on loopback. */
export const PLAINTEXT_TEMPORAL: TemporalConnectionOptions = { tls: false, summary: 'plaintext' };

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

/** The options as `Connection.connect` / `NativeConnection.connect` take them (no summary). */
export function sdkConnectionOptions(o: TemporalConnectionOptions): { tls: TemporalTlsOptions | false; apiKey?: string } {
  return { tls: o.tls, ...(o.apiKey ? { apiKey: o.apiKey } : {}) };
}

/** `env` without the variables above: for processes that talk to a plaintext local dev server. */
export function withoutTemporalConnectionEnv(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const out = { ...env };
  for (const name of TEMPORAL_CONNECTION_ENV) delete out[name];
  return out;
}
