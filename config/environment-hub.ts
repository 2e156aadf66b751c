// The environment variables of the Hugging Face Hub cache and client, read as huggingface_hub reads
// them: the cache root (HF_HUB_CACHE, else the legacy HUGGINGFACE_HUB_CACHE, else HF_HOME/hub, else
// $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub), offline mode (HF_HUB_OFFLINE or
// TRANSFORMERS_OFFLINE), the endpoint (HF_ENDPOINT) and the token for gated models (HF_TOKEN). Read
// only here; engines/hub-cache.ts uses what hubEnvironment returns.
import os from 'node:os';
import path from 'node:path';

export interface HubEnvironment {
  /** The cache root: models--{org}--{name}/ folders live directly under it. */
  cacheDir: string;
  /** Which variable decided cacheDir (for error messages), or "default". */
  cacheSource: 'HF_HUB_CACHE' | 'HUGGINGFACE_HUB_CACHE' | 'HF_HOME' | 'XDG_CACHE_HOME' | 'default';
  /** HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is 1/ON/YES/TRUE: never contact the Hub. */
  offline: boolean;
  /** The Hub's URL, without a trailing slash (HF_ENDPOINT, default https://huggingface.co). */
  endpoint: string;
  /** HF_TOKEN (or the legacy HUGGING_FACE_HUB_TOKEN), sent to the Hub for gated or private models; never printed. */
  token?: string;
}

export const HUB_DEFAULT_ENDPOINT = 'https://huggingface.co';

/** huggingface_hub's `expanduser`: a leading ~ is the home directory. */
function expandHome(p: string): string {
  return p === '~' || p.startsWith('~/') ? path.join(os.homedir(), p.slice(1)) : p;
}

/** huggingface_hub's `_is_true`. */
const isTrue = (v: string | undefined): boolean => ['1', 'ON', 'YES', 'TRUE'].includes((v ?? '').trim().toUpperCase());

const set = (v: string | undefined): string | undefined => (v && v.trim() ? v.trim() : undefined);

function hubCacheDir(env: NodeJS.ProcessEnv): Pick<HubEnvironment, 'cacheDir' | 'cacheSource'> {
  const hubCache = set(env.HF_HUB_CACHE);
  if (hubCache) return { cacheDir: path.resolve(expandHome(hubCache)), cacheSource: 'HF_HUB_CACHE' };
  const legacy = set(env.HUGGINGFACE_HUB_CACHE);
  if (legacy) return { cacheDir: path.resolve(expandHome(legacy)), cacheSource: 'HUGGINGFACE_HUB_CACHE' };
  const hfHome = set(env.HF_HOME);
  if (hfHome) return { cacheDir: path.resolve(expandHome(hfHome), 'hub'), cacheSource: 'HF_HOME' };
  const xdg = set(env.XDG_CACHE_HOME);
  if (xdg) return { cacheDir: path.resolve(expandHome(xdg), 'huggingface', 'hub'), cacheSource: 'XDG_CACHE_HOME' };
  return { cacheDir: path.join(os.homedir(), '.cache', 'huggingface', 'hub'), cacheSource: 'default' };
}

/** The Hub cache and client settings of this process. */
export function hubEnvironment(env: NodeJS.ProcessEnv = process.env): HubEnvironment {
  const endpoint = (set(env.HF_ENDPOINT) ?? HUB_DEFAULT_ENDPOINT).replace(/\/+$/, '');
  if (!/^https?:\/\//.test(endpoint)) throw new Error(`HF_ENDPOINT: expected an http(s) URL such as ${HUB_DEFAULT_ENDPOINT}, got "${env.HF_ENDPOINT}"`);
  const token = set(env.HF_TOKEN) ?? set(env.HUGGING_FACE_HUB_TOKEN);
  return { ...hubCacheDir(env), offline: isTrue(env.HF_HUB_OFFLINE) || isTrue(env.TRANSFORMERS_OFFLINE), endpoint, ...(token ? { token } : {}) };
}
