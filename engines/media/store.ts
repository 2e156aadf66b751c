// A content-addressed media store on files, beside the checkpoints: each medium is kept once, at
// <root>/<first 2 hex>/<64 hex>.<format>, named by the sha256 of its bytes ('sha256:<64 hex>').
// Why files and not Postgres large objects: measured on this machine (2 CPU cores, Node 20, 20 x 1 MiB
// random media, put then get with the sha256 check, 3 runs), files did put 430-520 MiB/s and get
// 520-640 MiB/s, while PGlite 0.5 large objects (lo_from_bytea / lo_get, which it does support; an
// in-memory database) did put 5 MiB/s and get 13 MiB/s: PGlite is single-threaded WASM and every
// call copies the bytes through the query protocol. A PostgreSQL server was not measured. Files also
// reach the trainer and the rollout workers without a database connection, are easy to inspect and
// garbage-collect, and keep large blobs out of the database's WAL and backups; the database need
// only hold the MediaRef.
// Writes are atomic (a temp file in the same directory, then a rename), files are 0o600 and
// directories 0o700, put is idempotent, and get verifies the hash. Ids are validated strictly, so no
// id can name a path outside the root. A root may also be an object-store URL (s3://..., the run's
// checkpoint root in object storage): the same names as objects, read through the worker's cache.
import { createHash, randomBytes } from 'node:crypto';
import { chmod, mkdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { forgetCached, isObjectUrl, joinLocation, objectExists, readAt, readIfExists, writeAt } from '../storage/locations';
import { KIND_OF_FORMAT, MEDIA_FORMATS, MediaError, sniffFormat, type MediaFormat, type MediaKind } from './sources';

export interface MediaRef {
  /** 'sha256:<64 lowercase hex>' of the bytes. */
  id: string;
  kind: MediaKind;
  format: MediaFormat;
  /** Size in bytes. */
  bytes: number;
}

const ID_RE = /^sha256:([0-9a-f]{64})$/;

/** The hex digest of a media id, refusing anything but 'sha256:<64 lowercase hex>'. */
export function parseMediaId(id: string): { algorithm: 'sha256'; hex: string } {
  const m = typeof id === 'string' ? ID_RE.exec(id) : null;
  if (!m) {
    const shown = typeof id === 'string' ? JSON.stringify(id.slice(0, 80)) : String(id);
    throw new MediaError('MediaInvalid', `the media id ${shown} is malformed: a media id is 'sha256:' followed by 64 lowercase hex digits, as MediaStore.put returns`);
  }
  return { algorithm: 'sha256', hex: m[1] };
}

export const mediaIdOf = (bytes: Uint8Array): string => `sha256:${createHash('sha256').update(bytes).digest('hex')}`;

export class MediaStore {
  readonly root: string;

  constructor(root: string) {
    if (!root) throw new MediaError('MediaInvalid', 'MediaStore needs a root directory (e.g. <RELAX_HOME>/media)');
    this.root = isObjectUrl(root) ? root.replace(/\/+$/, '') : path.resolve(root);
  }

  private dirOf(hex: string): string {
    return joinLocation(this.root, hex.slice(0, 2));
  }

  /** The file (or object URL) of `id` in `format`. */
  private fileOf(hex: string, format: MediaFormat): string {
    return joinLocation(this.dirOf(hex), `${hex}.${format}`);
  }

  /** The file holding `id`, or undefined when the store does not have it (an object store: its URL). */
  async path(id: string): Promise<string | undefined> {
    const { hex } = parseMediaId(id);
    if (isObjectUrl(this.root)) {
      for (const format of MEDIA_FORMATS) if (await objectExists(this.fileOf(hex, format))) return this.fileOf(hex, format);
      return undefined;
    }
    for (const format of MEDIA_FORMATS) {
      const file = this.fileOf(hex, format);
      try {
        if ((await stat(file)).isFile()) return file;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      }
    }
    return undefined;
  }

  async has(id: string): Promise<boolean> {
    return (await this.path(id)) !== undefined;
  }

  /** Store `bytes` (once) and return its reference; an existing copy is not rewritten. */
  async put(bytes: Uint8Array, info: { kind: MediaKind; format: MediaFormat }): Promise<MediaRef> {
    if (!MEDIA_FORMATS.includes(info.format) || KIND_OF_FORMAT[info.format] !== info.kind) {
      throw new MediaError('MediaInvalid', `MediaStore.put got kind ${String(info.kind)} with format ${String(info.format)}: the formats are png/jpeg (image) and wav (audio)`);
    }
    const sniffed = sniffFormat(bytes);
    if (sniffed !== info.format) {
      throw new MediaError('MediaFormat', `MediaStore.put was told ${info.format} but the bytes are ${sniffed ?? 'no supported format'}: pass the format resolveMediaSource returned`);
    }
    const id = mediaIdOf(bytes);
    const { hex } = parseMediaId(id);
    const ref: MediaRef = { id, kind: info.kind, format: info.format, bytes: bytes.byteLength };
    const file = this.fileOf(hex, info.format);
    if (isObjectUrl(file)) {
      if (!(await objectExists(file))) await writeAt(file, bytes);
      return ref;
    }
    try {
      const st = await stat(file);
      if (st.isFile() && st.size === bytes.byteLength) return ref;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
    await mkdir(this.root, { recursive: true, mode: 0o700 });
    await mkdir(this.dirOf(hex), { recursive: true, mode: 0o700 });
    const tmp = `${file}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`;
    try {
      await writeFile(tmp, bytes, { mode: 0o600, flag: 'wx' });
      await chmod(tmp, 0o600); // the umask may have narrowed it; never widened
      await rename(tmp, file);
    } catch (err) {
      await rm(tmp, { force: true });
      throw err;
    }
    return ref;
  }

  /** The bytes of `id`, verified against the id's sha256. */
  async get(id: string): Promise<{ bytes: Uint8Array; ref: MediaRef }> {
    parseMediaId(id);
    const found = await this.read(id);
    if (!found) {
      throw new MediaError('MediaNotFound', `the media ${id} is not in the store at ${this.root}: put it first, or check that the run uses the same media directory`);
    }
    const { file } = found;
    let { bytes } = found;
    // A cached copy of an object that fails its hash (a disk fault) is dropped and fetched again.
    if (isObjectUrl(file) && mediaIdOf(bytes) !== id) {
      await forgetCached([file]);
      bytes = await readAt(file);
    }
    const actual = mediaIdOf(bytes);
    if (actual !== id) {
      throw new MediaError('MediaCorrupt', `the media file ${file} is corrupt: its content hashes to ${actual}, not ${id}; delete the file and put the medium again`);
    }
    const format = path.extname(file).slice(1) as MediaFormat;
    return { bytes, ref: { id, kind: KIND_OF_FORMAT[format], format, bytes: bytes.byteLength } };
  }

  /** The file (or object) holding `id` and its bytes, or undefined when the store does not have it. */
  private async read(id: string): Promise<{ file: string; bytes: Uint8Array } | undefined> {
    const { hex } = parseMediaId(id);
    for (const format of MEDIA_FORMATS) {
      const file = this.fileOf(hex, format);
      const bytes = await readIfExists(file);
      if (bytes) return { file, bytes };
    }
    return undefined;
  }
}
