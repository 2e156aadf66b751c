// Where the client finds a stack: the environment (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE,
// DATABASE_URL, RELAX_HOME), falling back to the stack.json a running `relax dev` writes.
import fs from 'node:fs';
import path from 'node:path';
import { explicitTemporalAddress, relaxEnvironment } from '../config/environment';

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

/** Addresses from the environment, falling back to a running `relax dev` in the data directory. */
export function resolveAddresses(env: NodeJS.ProcessEnv = process.env): { temporalAddress: string; namespace: string; databaseUrl?: string } {
  const e = relaxEnvironment(env);
  const stack = readStackFile(e.home);
  return {
    temporalAddress: explicitTemporalAddress(env) || stack?.temporalAddress || e.temporalAddress,
    namespace: e.namespace,
    databaseUrl: e.databaseUrl ?? stack?.databaseUrl,
  };
}
