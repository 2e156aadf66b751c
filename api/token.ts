// The control API's bearer token, required for every mutation: RELAX_API_TOKEN, else the file named
// by RELAX_API_TOKEN_FILE, else <home>/api-token (created with a random token, mode 0600, the first
// time). Compared in constant time; never logged (`relax api` prints where it is, not what).
import { randomBytes, timingSafeEqual } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

export interface ApiToken {
  token: string;
  /** Where it came from, for the start-up line: the variable's name or the file's path. */
  source: string;
}

const MIN_TOKEN_CHARS = 16;

function checked(token: string, source: string): ApiToken {
  const t = token.trim();
  if (t.length < MIN_TOKEN_CHARS) throw new Error(`${source}: the API token must be at least ${MIN_TOKEN_CHARS} characters (got ${t.length}); use e.g. \`openssl rand -hex 32\``);
  return { token: t, source };
}

export function resolveApiToken(home: string, env: NodeJS.ProcessEnv = process.env): ApiToken {
  if (env.RELAX_API_TOKEN) return checked(env.RELAX_API_TOKEN, 'RELAX_API_TOKEN');
  if (env.RELAX_API_TOKEN_FILE) {
    const file = path.resolve(env.RELAX_API_TOKEN_FILE);
    let text: string;
    try {
      text = fs.readFileSync(file, 'utf8');
    } catch (err) {
      throw new Error(`RELAX_API_TOKEN_FILE ${file}: ${(err as Error).message}`);
    }
    return checked(text, file);
  }
  const file = path.join(home, 'api-token');
  if (!fs.existsSync(file)) {
    fs.mkdirSync(home, { recursive: true });
    fs.writeFileSync(file, `${randomBytes(32).toString('hex')}\n`, { mode: 0o600, flag: 'wx' });
  }
  const mode = fs.statSync(file).mode & 0o077;
  if (mode) throw new Error(`${file} is readable by others (mode ${(fs.statSync(file).mode & 0o777).toString(8)}): chmod 600 it`);
  return checked(fs.readFileSync(file, 'utf8'), file);
}

/** True when the Authorization header carries exactly this bearer token. */
export function bearerMatches(header: string | undefined, token: string): boolean {
  const m = /^Bearer (\S+)$/.exec(header ?? '');
  if (!m) return false;
  const a = Buffer.from(m[1]);
  const b = Buffer.from(token);
  return a.length === b.length && timingSafeEqual(a, b);
}
