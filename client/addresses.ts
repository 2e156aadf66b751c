// Where the client finds a stack, first match wins: the environment (TEMPORAL_ADDRESS,
// TEMPORAL_NAMESPACE, DATABASE_URL, RELAX_HOME), then the temporal CLI's config profile
// (TEMPORAL_PROFILE in TEMPORAL_CONFIG_FILE or the CLI's default file: address, namespace, TLS, API
// key), then the stack.json a running `relax dev` writes, then localhost:7233 and "default".
import fs from 'node:fs';
import path from 'node:path';
import { explicitTemporalAddress, relaxEnvironment } from '../config/environment';
import { explicitTemporalNamespace } from '../config/environment-temporal';
import { temporalProfile, type TemporalConnectionOptions } from '../security/temporal-connection';

/** What `relax dev` writes to <home>/stack.json while it runs, so other commands find the stack. */
export interface StackFile {
  temporalAddress: string;
  uiUrl?: string;
  databaseUrl: string;
  pid: number;
}

export function stackFilePath(home: string): string {
  return path.join(home, 'stack.json');
}

export function readStackFile(home: string): StackFile | undefined {
  try {
    return JSON.parse(fs.readFileSync(stackFilePath(home), 'utf8')) as StackFile;
  } catch {
    return undefined;
  }
}

/** Where the client connects, and which layer said so. */
export interface ResolvedAddresses {
  temporalAddress: string;
  namespace: string;
  databaseUrl?: string;
  /** "TEMPORAL_ADDRESS", "profile <name> of <file>", "relax dev (<home>/stack.json)" or "default". */
  addressSource: string;
  /**
   * The config profile's TLS / API key, when it has some and the address is not a running `relax
   * dev`'s (that server is plaintext); the TEMPORAL_TLS* / TEMPORAL_API_KEY* variables still win
   * (security/temporal-connection.ts clientConnectionOptions).
   */
  profileSecurity?: TemporalConnectionOptions;
}

/**
 * Addresses from the environment, then the temporal CLI's config profile, then a running `relax
 * dev` in the data directory, then the defaults. Throws (naming the variable) for a
 * TEMPORAL_CONFIG_FILE that does not exist or a TEMPORAL_PROFILE the file lacks.
 */
export function resolveAddresses(env: NodeJS.ProcessEnv = process.env): ResolvedAddresses {
  const e = relaxEnvironment(env);
  const stack = readStackFile(e.home);
  const profile = temporalProfile(env);
  const profileLabel = profile ? `profile ${profile.name} of ${profile.source}` : '';
  const [temporalAddress, addressSource] = firstOf(
    [explicitTemporalAddress(env), 'TEMPORAL_ADDRESS'],
    [profile?.address, profileLabel],
    [stack?.temporalAddress, `relax dev (${stackFilePath(e.home)})`],
    [e.temporalAddress, 'default'],
  );
  const fromStack = addressSource.startsWith('relax dev');
  return {
    temporalAddress,
    namespace: explicitTemporalNamespace(env) ?? profile?.namespace ?? e.namespace,
    databaseUrl: e.databaseUrl ?? stack?.databaseUrl,
    addressSource,
    ...(profile?.security && !fromStack ? { profileSecurity: profile.security } : {}),
  };
}

/** The first candidate with a value, with its label. */
function firstOf(...candidates: Array<[string | undefined, string]>): [string, string] {
  const hit = candidates.find(([value]) => value);
  return [hit![0]!, hit![1]];
}
