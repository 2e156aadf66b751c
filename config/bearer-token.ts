// Bearer tokens shared by Relax's HTTP listeners that take mutations (the control API: api/token.ts;
// an external engine's version-load call: `relax serve --engine`): read from an environment
// variable or a file it names, checked for length, compared in constant time, never printed.
import { timingSafeEqual } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

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

/** True when the Authorization header carries exactly this bearer token. */
export function bearerMatches(header: string | undefined, token: string): boolean {
  const m = /^Bearer (\S+)$/.exec(header ?? '');
  if (!m) return false;
  const a = Buffer.from(m[1]);
  const b = Buffer.from(token);
  return a.length === b.length && timingSafeEqual(a, b);
}
