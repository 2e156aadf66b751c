// Bearer tokens shared by Relax's HTTP listeners that take mutations (the control API: api/token.ts;
// an external engine's version-load call: `relax serve --engine`): read from an environment
// variable or a file it names, checked for length, compared in constant time, never printed.
import { timingSafeEqual } from 'node:crypto';

// Read from the environment (and the length check) in config/environment-services.ts.
export { checkedToken, MIN_TOKEN_CHARS, tokenFromEnv, type BearerToken } from '../config/environment-services';

/** True when the Authorization header carries exactly this bearer token. */
export function bearerMatches(header: string | undefined, token: string): boolean {
  const m = /^Bearer (\S+)$/.exec(header ?? '');
  if (!m) return false;
  const a = Buffer.from(m[1]);
  const b = Buffer.from(token);
  return a.length === b.length && timingSafeEqual(a, b);
}
