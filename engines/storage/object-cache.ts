// A worker's bounded local cache of immutable objects (policy versions, media): a file per object
// at <cacheDir>/<bucket>/<key>, written atomically (a temporary file renamed into place), touched on
// every hit, and swept least recently used first whenever the bytes this process added may have
// pushed the directory past its bound (RELAX_STORAGE_CACHE_MB). Several processes of one host may
// share the directory: each sweep lists what is on disk, so none needs to know what the others hold.
// Only objects that never change once written may be cached (a version, a content-addressed medium).
import { randomBytes } from 'node:crypto';
import { mkdir, readdir, readFile, rename, rm, stat, utimes, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { objectStore, type ObjectStore } from './objects';
import { parseObjectUrl } from './url';

export { objectStore } from './objects';

interface CachedFile {
  file: string;
  bytes: number;
  usedMs: number;
}

/** Reads objects through a local directory of bounded size. */
export class ObjectCache {
  /** Bytes on disk at the last sweep plus what this process wrote since. */
  private estimate = Number.POSITIVE_INFINITY;

  constructor(readonly store: ObjectStore, readonly dir: string, readonly maxBytes: number) {}

  /** The cache file of `url` (which need not exist). */
  fileOf(url: string): string {
    const { bucket, key } = parseObjectUrl(url);
    return path.join(this.dir, bucket, ...key.split('/'));
  }

  /** The bytes of `url`: from the cache (touched), else from the store (then kept). */
  async read(url: string): Promise<Uint8Array> {
    const file = this.fileOf(url);
    const hit = await readFile(file).catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT') return undefined;
      throw err;
    });
    if (hit) {
      const now = new Date();
      await utimes(file, now, now).catch(() => undefined); // swept meanwhile: the bytes are read already
      return new Uint8Array(hit.buffer, hit.byteOffset, hit.byteLength);
    }
    const bytes = await this.store.get(url);
    await this.keep(url, bytes);
    return bytes;
  }

  /** Whether the cache holds `url`. */
  async has(url: string): Promise<boolean> {
    return stat(this.fileOf(url)).then((st) => st.isFile(), () => false);
  }

  /** The local file holding `url` (downloaded when missing), for a reader that needs a path. */
  async materialize(url: string): Promise<string> {
    await this.read(url);
    return this.fileOf(url);
  }

  /** Keeps `bytes` as the cached copy of `url` (a writer that just uploaded them, or a download). */
  async keep(url: string, bytes: Uint8Array): Promise<void> {
    if (bytes.byteLength > this.maxBytes) return; // larger than the whole cache: read through each time
    const file = this.fileOf(url);
    await mkdir(path.dirname(file), { recursive: true, mode: 0o700 });
    const tmp = `${file}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`;
    try {
      await writeFile(tmp, bytes, { mode: 0o600 });
      await rename(tmp, file);
    } catch (err) {
      await rm(tmp, { force: true });
      throw err;
    }
    this.estimate += bytes.byteLength;
    if (this.estimate > this.maxBytes) await this.sweep(file);
  }

  /** Drops the cached copies of `urls` (a pruned version, a corrupt copy). */
  async forget(urls: readonly string[]): Promise<void> {
    for (const url of urls) await rm(this.fileOf(url), { force: true });
  }

  /** Deletes least recently used files until the directory is within its bound; `keepFile` stays. */
  async sweep(keepFile?: string): Promise<{ bytes: number; removed: number }> {
    const files = await this.files();
    files.sort((a, b) => a.usedMs - b.usedMs);
    let total = files.reduce((sum, f) => sum + f.bytes, 0);
    let removed = 0;
    for (const f of files) {
      if (total <= this.maxBytes) break;
      if (f.file === keepFile) continue;
      await rm(f.file, { force: true });
      total -= f.bytes;
      removed += 1;
    }
    this.estimate = total;
    return { bytes: total, removed };
  }

  /** Every cached file with its size and last use (temporary files of unfinished writes excluded). */
  async files(): Promise<CachedFile[]> {
    const out: CachedFile[] = [];
    const visit = async (dir: string): Promise<void> => {
      const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
      for (const e of entries) {
        const full = path.join(dir, e.name);
        if (e.isDirectory()) await visit(full);
        else if (e.isFile() && !e.name.endsWith('.tmp')) {
          const st = await stat(full).catch(() => undefined); // another process swept it meanwhile
          if (st) out.push({ file: full, bytes: st.size, usedMs: st.mtimeMs });
        }
      }
    };
    await visit(this.dir);
    return out;
  }
}

let shared: ObjectCache | undefined;

/** This process's cache of the configured object store (RELAX_STORAGE_CACHE_MB under <home>/object-cache). */
export function objectCache(): ObjectCache {
  const store = objectStore();
  if (shared?.store !== store) shared = new ObjectCache(store, store.settings.cacheDir, store.settings.cacheBytes);
  return shared;
}
