// How a Relax process secures its Temporal connection: TLS, mTLS and API keys, read from the temporal
// CLI's environment variables (the relax command's `--tls*` and `--api-key-file` flags set them;
// config/environment-services.ts reads them and builds the options, re-exported here).
// Every connection to Temporal (the client, every worker, `relax doctor`) takes its options here.
// The client also reads the temporal CLI's config profile (`temporal config`: TEMPORAL_PROFILE in
// TEMPORAL_CONFIG_FILE or the CLI's default file) with Temporal's own loader, @temporalio/envconfig.
// Nothing here ever returns or prints the API key except as the `apiKey` option itself.
import fs from 'node:fs';
import { loadClientConfigProfile, toClientOptions, type ClientConfigProfile } from '@temporalio/envconfig';
import {
  TEMPORAL_CONNECTION_ENV,
  TemporalConnectionConfigError,
  temporalConnectionOptions,
  type TemporalConnectionOptions,
  type TemporalTlsOptions,
} from '../config/environment-services';
import { environmentSetsTemporalSecurity, temporalProfileSelection } from '../config/environment-temporal';

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

/** A profile of the temporal CLI's config file, as far as Relax uses it. */
export interface TemporalProfile {
  /** "default" or TEMPORAL_PROFILE. */
  name: string;
  /** Where it was read, for messages: "TEMPORAL_CONFIG_FILE=<path>" or the CLI's default file. */
  source: string;
  address?: string;
  namespace?: string;
  /** Its TLS / API key settings; undefined when it has none (plaintext unless the environment says otherwise). */
  security?: TemporalConnectionOptions;
}

function loadProfile(env: NodeJS.ProcessEnv, source: string): ClientConfigProfile {
  const { profile, configFile } = temporalProfileSelection(env);
  if (configFile && !fs.existsSync(configFile)) {
    throw new TemporalConnectionConfigError(`TEMPORAL_CONFIG_FILE=${configFile}: no such file: fix the path (\`temporal config list\` shows what the CLI reads), or unset TEMPORAL_CONFIG_FILE`);
  }
  try {
    return loadClientConfigProfile({
      ...(profile ? { profile } : {}),
      ...(configFile ? { configSource: { path: configFile } } : {}),
      disableEnv: true, // Relax applies its TEMPORAL_* variables itself, over the profile
      overrideEnvVars: env as Record<string, string>,
    });
  } catch (err) {
    const which = profile ? `TEMPORAL_PROFILE=${profile} in ${source}` : source;
    throw new TemporalConnectionConfigError(`${which}: ${(err as Error).message}: fix the file or the profile name (\`temporal config list\`), or unset TEMPORAL_PROFILE`);
  }
}

function profileSecurity(p: ClientConfigProfile, label: string): TemporalConnectionOptions | undefined {
  let tls: boolean | { serverNameOverride?: string; serverRootCACertificate?: Uint8Array; clientCertPair?: { crt: Uint8Array; key: Uint8Array } } | undefined;
  try {
    tls = toClientOptions(p).connectionOptions.tls as typeof tls;
  } catch (err) {
    throw new TemporalConnectionConfigError(`${label}: cannot read its TLS files (${(err as Error).message}): fix the paths in the profile's tls table`);
  }
  if (tls === undefined) return undefined;
  const keyPart = p.apiKey ? `, API key (from ${label})` : '';
  const apiKey = p.apiKey ? { apiKey: p.apiKey } : {};
  if (tls === false) return { tls: false, ...apiKey, summary: `plaintext (${label})${keyPart}` };
  const out: TemporalTlsOptions = {};
  if (tls !== true) {
    if (tls.serverNameOverride) out.serverNameOverride = tls.serverNameOverride;
    if (tls.serverRootCACertificate) out.serverRootCACertificate = Buffer.from(tls.serverRootCACertificate);
    if (tls.clientCertPair) out.clientCertPair = { crt: Buffer.from(tls.clientCertPair.crt), key: Buffer.from(tls.clientCertPair.key) };
  }
  return { tls: out, ...apiKey, summary: `${out.clientCertPair ? 'mTLS' : 'TLS'} (${label})${keyPart}` };
}

/**
 * The temporal CLI's config profile (`temporal config set --prop address ...`): TEMPORAL_PROFILE
 * (default "default") in TEMPORAL_CONFIG_FILE (default the CLI's own file). Undefined when there is
 * no file or the profile sets nothing. Throws TemporalConnectionConfigError for a missing
 * TEMPORAL_CONFIG_FILE, a TEMPORAL_PROFILE the file lacks, bad TOML or unreadable TLS files.
 */
export function temporalProfile(env: NodeJS.ProcessEnv = process.env): TemporalProfile | undefined {
  const selection = temporalProfileSelection(env);
  const source = selection.configFile ? `TEMPORAL_CONFIG_FILE=${selection.configFile}` : "the temporal CLI's config file";
  const p = loadProfile(env, source);
  if (!p.address && !p.namespace && p.apiKey === undefined && p.tls === undefined) return undefined;
  const name = selection.profile ?? 'default';
  const security = profileSecurity(p, `profile ${name} of ${source}`);
  return { name, source, ...(p.address ? { address: p.address } : {}), ...(p.namespace ? { namespace: p.namespace } : {}), ...(security ? { security } : {}) };
}

/** The client's connection options: the TEMPORAL_TLS* / TEMPORAL_API_KEY* variables when any is set, else the config profile's (`profileSecurity`), else plaintext. */
export function clientConnectionOptions(env: NodeJS.ProcessEnv = process.env, profileSecurity?: TemporalConnectionOptions): TemporalConnectionOptions {
  if (!environmentSetsTemporalSecurity(env) && profileSecurity) return profileSecurity;
  return temporalConnectionOptions(env);
}
