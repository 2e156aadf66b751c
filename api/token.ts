// The control API's bearer token, required for every mutation: RELAX_API_TOKEN, else the file named
// by RELAX_API_TOKEN_FILE, else <home>/api-token (created with a random token, mode 0600, the first
// time). Compared in constant time; never logged (`relax api` prints where it is, not what).
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { bearerMatches, checkedToken, type BearerToken } from '../security/bearer-token';
import { apiTokenFromEnv } from '../config/environment';

export { bearerMatches };
export type ApiToken = BearerToken;

export function resolveApiToken(home: string, env: NodeJS.ProcessEnv = process.env): ApiToken {
  const fromEnv = apiTokenFromEnv(env);
  if (fromEnv) return fromEnv;
  const file = path.join(home, 'api-token');
  if (!fs.existsSync(file)) {
    fs.mkdirSync(home, { recursive: true });
    fs.writeFileSync(file, `${randomBytes(32).toString('hex')}\n`, { mode: 0o600, flag: 'wx' });
  }
  const mode = fs.statSync(file).mode & 0o077;
  if (mode) throw new Error(`${file} is readable by others (mode ${(fs.statSync(file).mode & 0o777).toString(8)}): chmod 600 it`);
  return checkedToken(fs.readFileSync(file, 'utf8'), file);
}
