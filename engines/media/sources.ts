// Where prompt media come from: a file path (relative to a base directory), raw bytes, base64, or a
// data URL such as OpenAI-style clients send (`image_url.url` = `data:image/png;base64,...`,
// `input_audio.data` = base64 + `format`). Media are never fetched from the network: http(s) URLs are
// refused. The format is sniffed from the magic bytes (PNG, JPEG, RIFF/WAVE), never trusted from a
// file name or a data URL's MIME type, and a source over `maxBytes` is refused before it is read
// whole where possible (a stat for paths, the encoded length for base64). Every failure is a
// MediaError with a stable `code`, so callers can map it to a non-retryable failure.
import { open, stat } from 'node:fs/promises';
import path from 'node:path';

export type MediaKind = 'image' | 'audio';
export type MediaFormat = 'png' | 'jpeg' | 'wav';

export const MEDIA_FORMATS: readonly MediaFormat[] = ['png', 'jpeg', 'wav'];
export const KIND_OF_FORMAT: Record<MediaFormat, MediaKind> = { png: 'image', jpeg: 'image', wav: 'audio' };

export type MediaErrorCode =
  | 'MediaNotFound'
  | 'MediaTooLarge'
  | 'MediaFormat'
  | 'MediaNetworkRefused'
  | 'MediaDecode'
  | 'MediaCorrupt'
  | 'MediaInvalid';

/** A media failure with a stable `code` (non-retryable: the same input fails the same way). */
export class MediaError extends Error {
  readonly code: MediaErrorCode;
  constructor(code: MediaErrorCode, message: string) {
    super(message);
    this.name = 'MediaError';
    this.code = code;
  }
}

/** One media source: a path, bytes, base64, or a data URL string (a bare string is never a path). */
export type MediaSource = { path: string } | { bytes: Uint8Array } | { base64: string } | string;

export interface ResolveOptions {
  /** Directory that relative paths are resolved against (default: the process's working directory). */
  baseDir?: string;
  /** The largest source accepted, in bytes. */
  maxBytes: number;
  /** When set, a source of the other kind is refused. */
  expect?: MediaKind;
}

export interface ResolvedMedia {
  bytes: Uint8Array;
  kind: MediaKind;
  format: MediaFormat;
}

const describeSize = (n: number): string =>
  n >= 1024 * 1024 ? `${(n / (1024 * 1024)).toFixed(2)} MiB (${n} bytes)` : `${n} bytes`;

function tooLarge(what: string, size: number, maxBytes: number): MediaError {
  return new MediaError('MediaTooLarge',
    `${what} is ${describeSize(size)}, over the limit of ${describeSize(maxBytes)}: ` +
    'pass a smaller file (downscale the image or shorten the clip) or raise the media size limit');
}

/** The format of `bytes` from its magic bytes, or undefined when it is none we support. */
export function sniffFormat(bytes: Uint8Array): MediaFormat | undefined {
  const at = (i: number, s: number[]): boolean => s.every((b, j) => bytes[i + j] === b);
  if (at(0, [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])) return 'png';
  if (at(0, [0xff, 0xd8, 0xff])) return 'jpeg';
  if (at(0, [0x52, 0x49, 0x46, 0x46]) && at(8, [0x57, 0x41, 0x56, 0x45])) return 'wav'; // RIFF....WAVE
  return undefined;
}

function hexHead(bytes: Uint8Array, n = 12): string {
  return Array.from(bytes.subarray(0, n), (b) => b.toString(16).padStart(2, '0')).join(' ');
}

/** Classify `bytes`, refusing an unknown format (naming the first bytes) or the wrong kind. */
export function classifyMedia(bytes: Uint8Array, what: string, expect?: MediaKind): ResolvedMedia {
  const format = sniffFormat(bytes);
  if (!format) {
    const head = bytes.length ? `starts with bytes ${hexHead(bytes)}` : 'is empty';
    throw new MediaError('MediaFormat',
      `${what} ${head}, which is no supported media format: supported are PNG and JPEG images and WAV audio ` +
      '(convert the file to one of them; the format is read from the content, not the name)');
  }
  const kind = KIND_OF_FORMAT[format];
  if (expect && kind !== expect) {
    throw new MediaError('MediaFormat', `${what} is ${format.toUpperCase()} ${kind}, but ${expect} was expected here: pass ${expect === 'image' ? 'a PNG or JPEG image' : 'a WAV clip'}`);
  }
  return { bytes, kind, format };
}

const BASE64_RE = /^[A-Za-z0-9+/_-]*={0,2}$/;

function decodeBase64(text: string, what: string, maxBytes: number): Uint8Array {
  const clean = text.replace(/\s+/g, '');
  // The decoded size is known from the encoded length: refuse before decoding a huge string.
  const decodedSize = Math.floor((clean.length * 3) / 4) - (clean.endsWith('==') ? 2 : clean.endsWith('=') ? 1 : 0);
  if (decodedSize > maxBytes) throw tooLarge(what, decodedSize, maxBytes);
  if (!BASE64_RE.test(clean)) {
    throw new MediaError('MediaInvalid', `${what} is not valid base64 (characters outside A-Z a-z 0-9 + / = near "${clean.slice(0, 16)}"): pass the file's bytes base64-encoded`);
  }
  const buf = Buffer.from(clean, clean.includes('-') || clean.includes('_') ? 'base64url' : 'base64');
  return new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
}

const DATA_URL_RE = /^data:([^,;]*)((?:;[^,;]*)*),(.*)$/s;

function decodeDataUrl(url: string, maxBytes: number): Uint8Array {
  const m = DATA_URL_RE.exec(url);
  if (!m) throw new MediaError('MediaInvalid', `the data URL "${url.slice(0, 40)}..." is malformed: expected data:<mime>;base64,<data>`);
  const what = `the data URL (${m[1] || 'no MIME type'})`;
  if (!m[2].split(';').includes('base64')) {
    throw new MediaError('MediaInvalid', `${what} is not base64-encoded: use data:<mime>;base64,<base64 of the file>`);
  }
  return decodeBase64(m[3], what, maxBytes);
}

async function readPath(file: string, baseDir: string | undefined, maxBytes: number): Promise<Uint8Array> {
  const full = path.resolve(baseDir ?? process.cwd(), file);
  const what = `the media file ${full}`;
  let size: number;
  try {
    const st = await stat(full);
    if (!st.isFile()) throw new MediaError('MediaNotFound', `${what} is not a regular file: pass the path of an image or WAV file`);
    size = st.size;
  } catch (err) {
    if (err instanceof MediaError) throw err;
    const code = (err as NodeJS.ErrnoException).code;
    throw new MediaError('MediaNotFound', `${what} cannot be read (${code ?? String(err)}): check the path${baseDir ? ` (relative paths are resolved against ${baseDir})` : ''}`);
  }
  if (size > maxBytes) throw tooLarge(what, size, maxBytes);
  const handle = await open(full, 'r');
  try {
    // Read at most maxBytes + 1 so a file that grew since the stat is still refused.
    const buf = Buffer.alloc(Math.min(size, maxBytes) + 1);
    let n = 0;
    for (;;) {
      const { bytesRead } = await handle.read(buf, n, buf.length - n, n);
      if (bytesRead === 0) break;
      n += bytesRead;
      if (n === buf.length) break;
    }
    if (n > maxBytes) throw tooLarge(what, n, maxBytes);
    return new Uint8Array(buf.buffer, buf.byteOffset, n);
  } finally {
    await handle.close();
  }
}

/** Read a media source into bytes and sniff its format; see the file comment for the rules. */
export async function resolveMediaSource(source: MediaSource, options: ResolveOptions): Promise<ResolvedMedia> {
  const { baseDir, maxBytes, expect } = options;
  if (!(maxBytes > 0)) throw new MediaError('MediaInvalid', `maxBytes must be a positive number of bytes, got ${String(maxBytes)}`);
  let bytes: Uint8Array;
  let what: string;
  if (typeof source === 'string') {
    const trimmed = source.trim();
    if (/^https?:\/\//i.test(trimmed)) {
      throw new MediaError('MediaNetworkRefused',
        `the media source "${trimmed.slice(0, 80)}" is a network URL, and media are never fetched from the network: pass a file path, bytes or a data URL`);
    }
    if (/^data:/i.test(trimmed)) {
      bytes = decodeDataUrl(trimmed, maxBytes);
      what = 'the data URL';
    } else {
      // A bare string is never read as a path: a string from an API client must not reach the disk.
      throw new MediaError('MediaInvalid', `the media source string "${trimmed.slice(0, 40)}" is not a data URL: pass { path } for a file, { base64 } for encoded bytes, or a data:<mime>;base64,... URL`);
    }
  } else if (source && typeof source === 'object' && 'path' in source && typeof source.path === 'string') {
    bytes = await readPath(source.path, baseDir, maxBytes);
    what = `the media file ${path.resolve(baseDir ?? process.cwd(), source.path)}`;
  } else if (source && typeof source === 'object' && 'bytes' in source && source.bytes instanceof Uint8Array) {
    if (source.bytes.byteLength > maxBytes) throw tooLarge('the media bytes', source.bytes.byteLength, maxBytes);
    bytes = source.bytes;
    what = 'the media bytes';
  } else if (source && typeof source === 'object' && 'base64' in source && typeof source.base64 === 'string') {
    bytes = decodeBase64(source.base64, 'the base64 media', maxBytes);
    what = 'the base64 media';
  } else {
    throw new MediaError('MediaInvalid', 'a media source must be { path }, { bytes: Uint8Array }, { base64 } or a data URL string');
  }
  return classifyMedia(bytes, what, expect);
}
