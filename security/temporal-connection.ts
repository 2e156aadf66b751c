// How a Relax process secures its Temporal connection: TLS, mTLS and API keys, read from the temporal
// CLI's environment variables (the relax command's `--tls*` and `--api-key-file` flags set them;
// config/environment-services.ts reads them and builds the options, re-exported here).
// Every connection to Temporal (the client, every worker, `relax doctor`) takes its options here.
// Nothing here ever returns or prints the API key except as the `apiKey` option itself.
import { TEMPORAL_CONNECTION_ENV, type TemporalConnectionOptions, type TemporalTlsOptions } from '../config/environment-services';

export {
  TEMPORAL_CONNECTION_ENV,
  temporalConnectionOptions,
  TemporalConnectionConfigError,
  type TemporalConnectionOptions,
  type TemporalTlsOptions,
} from '../config/environment-services';

/** The local dev server `relax dev` starts listens in plaintext on loopback. */
export const PLAINTEXT_TEMPORAL: TemporalConnectionOptions = { tls: false, summary: 'plaintext' };

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
