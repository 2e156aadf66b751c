// Where a Relax process keeps checkpoints and media (docs/deployment.md "Object storage"):
// RELAX_STORAGE unset (or `file`), files under RELAX_HOME (or a run's checkpoint.dir), the default
// for `relax dev`; `s3://<bucket>[/<prefix>]`, an S3-compatible object store every host reaches
// over the network, so no host needs a shared filesystem. RELAX_S3_ENDPOINT names a server other
// than AWS (SeaweedFS, Ceph RGW, MinIO; path-style addressing), RELAX_S3_REGION its region, and the
// credentials are the standard AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (unset: the AWS SDK's own
// chain: profile, instance role). Each worker keeps what it reads in a bounded local cache
// (RELAX_STORAGE_CACHE_MB, default 2048, under <home>/object-cache), least recently used out first.
import path from 'node:path';

export interface ObjectStorageSettings {
  /** The base URL: s3://<bucket>[/<prefix>], no trailing slash. */
  url: string;
  bucket: string;
  /** The key prefix every object gets ('' or 'a/b'). */
  prefix: string;
  endpoint?: string;
  region: string;
  credentials?: { accessKeyId: string; secretAccessKey: string };
  /** The local cache: its directory and the most bytes it keeps. */
  cacheDir: string;
  cacheBytes: number;
}

const BUCKET_RE = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;

/** The object store's settings, or undefined when checkpoints and media are files (the default). */
export function objectStorageSettings(env: NodeJS.ProcessEnv = process.env): ObjectStorageSettings | undefined {
  const raw = env.RELAX_STORAGE?.trim();
  if (!raw || raw === 'file') return undefined;
  const m = /^s3:\/\/([^/]+)(?:\/(.*))?$/.exec(raw);
  if (!m || !BUCKET_RE.test(m[1])) {
    throw new Error(`RELAX_STORAGE=${raw} is not an object store URL: set it to s3://<bucket>[/<prefix>] (a bucket name is 3-63 lowercase letters, digits, '.' or '-'), or unset it (or 'file') to keep checkpoints as files under RELAX_HOME`);
  }
  const prefix = (m[2] ?? '').replace(/\/+$/, '');
  if (prefix.split('/').some((part) => part === '..' || part === '.' || (prefix !== '' && part === ''))) {
    throw new Error(`RELAX_STORAGE=${raw}: the prefix after the bucket has an empty, '.' or '..' segment; write it as s3://${m[1]}/a/b`);
  }
  const endpoint = env.RELAX_S3_ENDPOINT?.trim() || undefined;
  if (endpoint && !/^https?:\/\/[^/]+\/?$/.test(endpoint)) {
    throw new Error(`RELAX_S3_ENDPOINT=${endpoint} is not an http(s)://host[:port] URL (e.g. http://127.0.0.1:8333 for SeaweedFS); unset it for AWS S3`);
  }
  const accessKeyId = env.AWS_ACCESS_KEY_ID;
  const secretAccessKey = env.AWS_SECRET_ACCESS_KEY;
  if (Boolean(accessKeyId) !== Boolean(secretAccessKey)) {
    throw new Error('AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set together (or both unset, for the AWS SDK\'s own credential chain)');
  }
  const cacheMb = env.RELAX_STORAGE_CACHE_MB ? Number(env.RELAX_STORAGE_CACHE_MB) : 2048;
  if (!Number.isFinite(cacheMb) || cacheMb < 1) {
    throw new Error(`RELAX_STORAGE_CACHE_MB=${env.RELAX_STORAGE_CACHE_MB} is not a number of MiB >= 1: the local cache of objects needs room for at least one policy version (e.g. 2048)`);
  }
  return {
    url: `s3://${m[1]}${prefix ? `/${prefix}` : ''}`,
    bucket: m[1],
    prefix,
    ...(endpoint ? { endpoint: endpoint.replace(/\/$/, '') } : {}),
    region: env.RELAX_S3_REGION || env.AWS_REGION || 'us-east-1',
    ...(accessKeyId && secretAccessKey ? { credentials: { accessKeyId, secretAccessKey } } : {}),
    cacheDir: path.join(path.resolve(env.RELAX_HOME || '.relax'), 'object-cache'),
    cacheBytes: Math.floor(cacheMb * 1024 * 1024),
  };
}

/**
 * Turns off the AWS SDK's once-per-process warning that its releases after January 2027 need Node
 * 22: the version package.json pins runs on Node 20, and the warning would fill every worker's log.
 */
export function silenceSdkNodeVersionWarning(env: NodeJS.ProcessEnv = process.env): void {
  env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
}
