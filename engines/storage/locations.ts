// Bytes at a location that is either a file path or an object URL (s3://...), for the checkpoint
// and media code: one read and one write that pick the filesystem or the object store
// (./objects.ts) by the location's form. Object reads of immutable things go through the worker's
// bounded cache (./object-cache.ts); writes to the store keep a copy there, so the writer never
// downloads what it just uploaded.
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { isObjectUrl } from './url';

export { baseName, isObjectUrl, joinLocation } from './url';

/** The object store and its cache, loaded on first use (the AWS SDK stays out of file-only processes). */
const backend = () => import('./object-cache.js');

export interface ReadOptions {
  /** Bypass the local cache (verification reads what the store holds). Default: cached. */
  fresh?: boolean;
}

/** The bytes at `location`; a missing file or object throws with code 'ENOENT'. */
export async function readAt(location: string, options: ReadOptions = {}): Promise<Uint8Array> {
  if (isObjectUrl(location)) {
    const { objectCache, objectStore } = await backend();
    return options.fresh ? objectStore().get(location) : objectCache().read(location);
  }
  const buf = await readFile(location);
  return new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
}

/** The bytes at `location`, or undefined when there is no such file or object. */
export async function readIfExists(location: string, options: ReadOptions = {}): Promise<Uint8Array | undefined> {
  return readAt(location, options).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return undefined;
    throw err;
  });
}

export interface WriteOptions {
  /** Keep a copy in the local cache (object URLs; default true). */
  cache?: boolean;
  /** File mode of a new file (default: 0o666 less the umask, as writeFile does). */
  mode?: number;
}

/**
 * Writes `bytes` to `location` whole: a file through a temporary file renamed into place (its
 * directory is created), an object in one put (multipart when large; an object appears whole or
 * not at all).
 */
export async function writeAt(location: string, bytes: Uint8Array, options: WriteOptions = {}): Promise<void> {
  if (isObjectUrl(location)) {
    const { objectCache, objectStore } = await backend();
    await objectStore().put(location, bytes);
    if (options.cache !== false) await objectCache().keep(location, bytes);
    return;
  }
  await mkdir(path.dirname(location), { recursive: true });
  const tmp = `${location}.tmp-${process.pid}-${randomUUID().slice(0, 8)}`;
  try {
    await writeFile(tmp, bytes, options.mode !== undefined ? { mode: options.mode } : {});
    await rename(tmp, location);
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  }
}

/** Deletes the objects at `urls` from the store and from this worker's cache (missing ones are fine). */
export async function deleteObjects(urls: readonly string[]): Promise<void> {
  if (urls.length === 0) return;
  const { objectCache, objectStore } = await backend();
  await objectStore().delete(urls);
  await objectCache().forget(urls);
}

/** The object URLs under `prefixUrl`. */
export async function listObjects(prefixUrl: string): Promise<string[]> {
  return (await backend()).objectStore().list(prefixUrl);
}

/** Whether an object is at `url`: in this worker's cache, else in the store (a HEAD request). */
export async function objectExists(url: string): Promise<boolean> {
  const { objectCache, objectStore } = await backend();
  return (await objectCache().has(url)) || objectStore().exists(url);
}

/** A local file holding what is at `location`: the path itself, or an object's copy in this worker's cache. */
export async function localFile(location: string): Promise<string> {
  return isObjectUrl(location) ? (await backend()).objectCache().materialize(location) : location;
}

/** Drops this worker's cached copies of `urls` (a copy that failed its hash check). */
export async function forgetCached(urls: readonly string[]): Promise<void> {
  await (await backend()).objectCache().forget(urls);
}

/** Whether anything is at `location`: a file or directory, or any object under the URL. */
export async function anythingAt(location: string): Promise<boolean> {
  if (!isObjectUrl(location)) return existsSync(location);
  return (await listObjects(location)).length > 0;
}
