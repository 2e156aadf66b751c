// The safetensors file format (https://github.com/huggingface/safetensors): an 8-byte little-endian
// header length N, N bytes of JSON header {name: {dtype, shape, data_offsets: [begin, end]},
// "__metadata__": {string: string}}, then the raw little-endian tensor bytes (offsets relative to the
// end of the header). We decode F32, F16 and BF16 (always to float32: every policy tensor is
// float32) and encode F32 (the default), F16 or BF16. Whole files in memory (encode/decode) for
// checkpoints, or straight from/to disk one tensor at a time (readSafetensorsFile /
// writeSafetensorsFile) for Hugging Face model files of hundreds of megabytes.
import { open, rename, rm, type FileHandle } from 'node:fs/promises';

export interface NamedTensor {
  shape: number[];
  data: Float32Array;
}

export type SafetensorsDtype = 'F32' | 'F16' | 'BF16';
const DTYPE_BYTES: Record<SafetensorsDtype, number> = { F32: 4, F16: 2, BF16: 2 };
const DECODABLE = Object.keys(DTYPE_BYTES) as SafetensorsDtype[];

export interface SafetensorsFile {
  tensors: Map<string, NamedTensor>;
  metadata: Record<string, string>;
  /** The stored dtype of each tensor (its data is float32 either way). */
  dtypes: Map<string, SafetensorsDtype>;
}

/** One tensor's header entry; `dataOffsets` are relative to the end of the header. */
export interface SafetensorsEntry {
  dtype: string;
  shape: number[];
  dataOffsets: [number, number];
}

export interface SafetensorsHeader {
  entries: Map<string, SafetensorsEntry>;
  metadata: Record<string, string>;
  /** Byte position of the data section in the file: 8 + header length. */
  dataStart: number;
}

const HEADER_ALIGNMENT = 8;
/** Refuse absurd headers before allocating: real ones are kilobytes. */
const MAX_HEADER_BYTES = 100 * 1024 * 1024;

const HOST_IS_LITTLE_ENDIAN = new Uint8Array(Float32Array.of(1).buffer)[3] === 0x3f;

let halfTable: Float32Array | undefined;
/** float16 bits -> float32 value, for all 65536 bit patterns (built once, 256 KiB). */
export function float16Table(): Float32Array {
  if (halfTable) return halfTable;
  const table = new Float32Array(65536);
  for (let h = 0; h < 65536; h++) {
    const sign = h & 0x8000 ? -1 : 1;
    const exp = (h >> 10) & 0x1f;
    const frac = h & 0x3ff;
    if (exp === 0) table[h] = sign * frac * 2 ** -24;
    else if (exp === 31) table[h] = frac ? Number.NaN : sign * Infinity;
    else table[h] = sign * (1 + frac / 1024) * 2 ** (exp - 15);
  }
  halfTable = table;
  return table;
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** float32 -> float16 bits, rounding to nearest even (overflow to infinity, NaN kept). */
export function float32ToFloat16Bits(value: number): number {
  f32[0] = value;
  const x = u32[0];
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  const mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  const e = exp - 127 + 15;
  if (e >= 31) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    const m = mant | 0x800000;
    const shift = 14 - e;
    const half = 1 << (shift - 1);
    let r = m >>> shift;
    const rest = m & ((1 << shift) - 1);
    if (rest > half || (rest === half && (r & 1))) r++;
    return sign | r;
  }
  let r = (e << 10) | (mant >>> 13);
  const rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && (r & 1))) r++;
  return sign | r;
}

/** float32 -> bfloat16 bits, rounding to nearest even (NaN kept a quiet NaN). */
export function float32ToBfloat16Bits(value: number): number {
  f32[0] = value;
  const x = u32[0];
  if ((x & 0x7f800000) === 0x7f800000 && x & 0x7fffff) return ((x >>> 16) | 0x40) & 0xffff;
  return ((x + 0x7fff + ((x >>> 16) & 1)) >>> 16) & 0xffff;
}

function encodeValues(data: Float32Array, dtype: SafetensorsDtype): Uint8Array {
  if (dtype === 'F32') {
    if (HOST_IS_LITTLE_ENDIAN) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    const bytes = new Uint8Array(data.length * 4);
    const view = new DataView(bytes.buffer);
    for (let i = 0; i < data.length; i++) view.setFloat32(i * 4, data[i], true);
    return bytes;
  }
  const bytes = new Uint8Array(data.length * 2);
  const convert = dtype === 'F16' ? float32ToFloat16Bits : float32ToBfloat16Bits;
  for (let i = 0; i < data.length; i++) {
    const bits = convert(data[i]);
    bytes[2 * i] = bits & 0xff;
    bytes[2 * i + 1] = bits >>> 8;
  }
  return bytes;
}

/** Little-endian bytes of `count` values stored as `dtype` -> float32 values (a fresh array). */
export function decodeValues(raw: Uint8Array, dtype: SafetensorsDtype, count: number): Float32Array {
  const out = new Float32Array(count);
  if (dtype === 'F32') {
    if (HOST_IS_LITTLE_ENDIAN) new Uint8Array(out.buffer).set(raw.subarray(0, count * 4));
    else {
      const dv = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
      for (let i = 0; i < count; i++) out[i] = dv.getFloat32(i * 4, true);
    }
    return out;
  }
  if (dtype === 'F16') {
    const table = float16Table();
    for (let i = 0; i < count; i++) out[i] = table[raw[2 * i] | (raw[2 * i + 1] << 8)];
    return out;
  }
  const bits = new Uint32Array(out.buffer);
  // bfloat16 is the top half of a float32: shift the bits up (host order on both views).
  for (let i = 0; i < count; i++) bits[i] = ((raw[2 * i] | (raw[2 * i + 1] << 8)) << 16) >>> 0;
  return out;
}

function checkedDtype(dtype: string, name: string, source: string): SafetensorsDtype {
  if ((DECODABLE as string[]).includes(dtype)) return dtype as SafetensorsDtype;
  throw new Error(`${source}: tensor "${name}" has dtype ${dtype}; only ${DECODABLE.join(', ')} are supported (convert the checkpoint to float32, float16 or bfloat16)`);
}

interface PlannedTensor {
  name: string;
  shape: number[];
}

/** The header bytes (length prefix + padded JSON) for tensors laid out in order as `dtype`. */
function headerBytes(tensors: PlannedTensor[], metadata: Record<string, string>, dtype: SafetensorsDtype): { head: Uint8Array; dataBytes: number } {
  const header: Record<string, unknown> = {};
  if (Object.keys(metadata).length > 0) header.__metadata__ = metadata;
  let offset = 0;
  for (const t of tensors) {
    const bytes = t.shape.reduce((a, b) => a * b, 1) * DTYPE_BYTES[dtype];
    header[t.name] = { dtype, shape: t.shape, data_offsets: [offset, offset + bytes] };
    offset += bytes;
  }
  let json = new TextEncoder().encode(JSON.stringify(header));
  // Pad with spaces (valid JSON whitespace) so the data starts 8-byte aligned, as the reference writer does.
  const pad = (HEADER_ALIGNMENT - ((8 + json.length) % HEADER_ALIGNMENT)) % HEADER_ALIGNMENT;
  if (pad) json = new Uint8Array([...json, ...new Array<number>(pad).fill(0x20)]);
  const head = new Uint8Array(8 + json.length);
  new DataView(head.buffer).setBigUint64(0, BigInt(json.length), true);
  head.set(json, 8);
  return { head, dataBytes: offset };
}

function checkCount(name: string, t: NamedTensor): void {
  const expected = t.shape.reduce((a, b) => a * b, 1);
  if (t.data.length !== expected) throw new Error(`tensor "${name}": shape [${t.shape}] needs ${expected} values, got ${t.data.length}`);
}

/** Serializes tensors in the given order (stored as `options.dtype`, default F32); the bytes are a pure function of the input. */
export function encodeSafetensors(
  tensors: Iterable<readonly [string, NamedTensor]>,
  metadata: Record<string, string> = {},
  options: { dtype?: SafetensorsDtype } = {},
): Uint8Array {
  const dtype = options.dtype ?? 'F32';
  const list = [...tensors];
  for (const [name, t] of list) checkCount(name, t);
  const { head, dataBytes } = headerBytes(list.map(([name, t]) => ({ name, shape: t.shape })), metadata, dtype);
  const out = new Uint8Array(head.length + dataBytes);
  out.set(head, 0);
  let pos = head.length;
  for (const [, t] of list) {
    const b = encodeValues(t.data, dtype);
    out.set(b, pos);
    pos += b.length;
  }
  return out;
}

/**
 * Writes a safetensors file one tensor at a time (memory: one tensor), to `<path>.tmp-*` then renamed
 * into place. `data(name)` produces each tensor's float32 values, in `tensors` order.
 */
export async function writeSafetensorsFile(
  path: string,
  tensors: PlannedTensor[],
  data: (name: string, index: number) => Float32Array | Promise<Float32Array>,
  options: { metadata?: Record<string, string>; dtype?: SafetensorsDtype } = {},
): Promise<{ bytes: number }> {
  const dtype = options.dtype ?? 'F32';
  const { head, dataBytes } = headerBytes(tensors, options.metadata ?? {}, dtype);
  const tmp = `${path}.tmp-${process.pid}-${Date.now()}`;
  const fh = await open(tmp, 'w');
  try {
    await fh.write(head, 0, head.length, 0);
    let pos = head.length;
    for (let i = 0; i < tensors.length; i++) {
      const t = tensors[i];
      const values = await data(t.name, i);
      checkCount(t.name, { shape: t.shape, data: values });
      const bytes = encodeValues(values, dtype);
      await fh.write(bytes, 0, bytes.length, pos);
      pos += bytes.length;
    }
    await fh.close();
  } catch (err) {
    await fh.close().catch(() => undefined);
    await rm(tmp, { force: true });
    throw err;
  }
  await rename(tmp, path);
  return { bytes: head.length + dataBytes };
}

function parseHeaderEntry(v: unknown): SafetensorsEntry | undefined {
  if (typeof v !== 'object' || v === null) return undefined;
  const e = v as Record<string, unknown>;
  const ok =
    typeof e.dtype === 'string' &&
    Array.isArray(e.shape) &&
    e.shape.every((d) => Number.isInteger(d) && d >= 0) &&
    Array.isArray(e.data_offsets) &&
    e.data_offsets.length === 2 &&
    e.data_offsets.every((d) => Number.isInteger(d) && d >= 0);
  return ok ? { dtype: e.dtype as string, shape: e.shape as number[], dataOffsets: e.data_offsets as [number, number] } : undefined;
}

/** Parses the header JSON that follows the 8-byte length; `dataLength` is the size of the data section. */
function parseHeader(json: Uint8Array, dataLength: number, source: string): SafetensorsHeader {
  let header: unknown;
  try {
    header = JSON.parse(new TextDecoder().decode(json));
  } catch (err) {
    throw new Error(`${source}: header is not valid JSON (${(err as Error).message})`);
  }
  if (typeof header !== 'object' || header === null || Array.isArray(header)) throw new Error(`${source}: header is not a JSON object`);
  const entries = new Map<string, SafetensorsEntry>();
  let metadata: Record<string, string> = {};
  for (const [name, value] of Object.entries(header as Record<string, unknown>)) {
    if (name === '__metadata__') {
      metadata = value as Record<string, string>;
      continue;
    }
    const entry = parseHeaderEntry(value);
    if (!entry) throw new Error(`${source}: tensor "${name}" has a malformed header entry ${JSON.stringify(value)}`);
    const [begin, end] = entry.dataOffsets;
    if (end < begin || end > dataLength) {
      throw new Error(`${source}: tensor "${name}" data_offsets [${begin}, ${end}] lie outside the ${dataLength}-byte data section`);
    }
    const dtype = checkedDtype(entry.dtype, name, source);
    const count = entry.shape.reduce((a, b) => a * b, 1);
    if (end - begin !== count * DTYPE_BYTES[dtype]) {
      throw new Error(`${source}: tensor "${name}" has shape [${entry.shape}] (${count * DTYPE_BYTES[dtype]} bytes of ${dtype}) but data_offsets span ${end - begin} bytes`);
    }
    entries.set(name, entry);
  }
  return { entries, metadata, dataStart: 8 + json.length };
}

function headerLengthOf(first8: Uint8Array, fileBytes: number, source: string): number {
  if (fileBytes < 8) throw new Error(`${source}: ${fileBytes} bytes is too short for a safetensors file (needs an 8-byte header length)`);
  const headerLength = Number(new DataView(first8.buffer, first8.byteOffset, 8).getBigUint64(0, true));
  if (headerLength > MAX_HEADER_BYTES || 8 + headerLength > fileBytes) {
    throw new Error(`${source}: header length ${headerLength} does not fit in a ${fileBytes}-byte file (truncated or not safetensors)`);
  }
  return headerLength;
}

/** Parses a safetensors file held in memory; `source` names the file in errors. */
export function decodeSafetensors(bytes: Uint8Array, source = 'safetensors data'): SafetensorsFile {
  const headerLength = headerLengthOf(bytes.subarray(0, 8), bytes.length, source);
  const header = parseHeader(bytes.subarray(8, 8 + headerLength), bytes.length - 8 - headerLength, source);
  const tensors = new Map<string, NamedTensor>();
  const dtypes = new Map<string, SafetensorsDtype>();
  for (const [name, entry] of header.entries) {
    const dtype = entry.dtype as SafetensorsDtype;
    const count = entry.shape.reduce((a, b) => a * b, 1);
    const raw = bytes.subarray(header.dataStart + entry.dataOffsets[0], header.dataStart + entry.dataOffsets[1]);
    tensors.set(name, { shape: entry.shape, data: decodeValues(raw, dtype, count) });
    dtypes.set(name, dtype);
  }
  return { tensors, metadata: header.metadata, dtypes };
}

/** Reads exactly `length` bytes at `position` (a single read may return fewer). */
async function readFully(fh: FileHandle, target: Uint8Array, position: number, source: string): Promise<void> {
  let done = 0;
  while (done < target.length) {
    const { bytesRead } = await fh.read(target, done, target.length - done, position + done);
    if (bytesRead === 0) throw new Error(`${source}: file ended at byte ${position + done}, expected ${target.length - done} more bytes (truncated file)`);
    done += bytesRead;
  }
}

/** Reads only the header of the safetensors file at `path` (kilobytes, whatever the file size). */
export async function readSafetensorsHeader(path: string): Promise<SafetensorsHeader> {
  const fh = await open(path, 'r').catch((err: Error) => {
    throw new Error(`cannot open safetensors file ${path}: ${err.message}`);
  });
  try {
    const size = (await fh.stat()).size;
    const first8 = new Uint8Array(8);
    if (size >= 8) await readFully(fh, first8, 0, path);
    const headerLength = headerLengthOf(first8, size, path);
    const json = new Uint8Array(headerLength);
    await readFully(fh, json, 8, path);
    return parseHeader(json, size - 8 - headerLength, path);
  } finally {
    await fh.close();
  }
}

/**
 * Reads tensors of the safetensors file at `path` straight from disk (the file is never held whole
 * in memory); `names` picks some, default all. A named tensor the file lacks is an error. `map`
 * transforms each tensor as it is read (e.g. a transpose), so the untransformed copy can be freed.
 */
export async function readSafetensorsFile(
  path: string,
  options: { names?: Iterable<string>; map?: (name: string, tensor: NamedTensor) => NamedTensor } = {},
): Promise<SafetensorsFile> {
  const header = await readSafetensorsHeader(path);
  const names = options.names ? [...options.names] : [...header.entries.keys()];
  const tensors = new Map<string, NamedTensor>();
  const dtypes = new Map<string, SafetensorsDtype>();
  const fh = await open(path, 'r');
  try {
    for (const name of names) {
      const entry = header.entries.get(name);
      if (!entry) throw new Error(`${path}: has no tensor "${name}"`);
      const dtype = entry.dtype as SafetensorsDtype;
      const count = entry.shape.reduce((a, b) => a * b, 1);
      const [begin, end] = entry.dataOffsets;
      let data: Float32Array;
      if (dtype === 'F32' && HOST_IS_LITTLE_ENDIAN) {
        data = new Float32Array(count);
        await readFully(fh, new Uint8Array(data.buffer), header.dataStart + begin, path);
      } else {
        const raw = new Uint8Array(end - begin);
        await readFully(fh, raw, header.dataStart + begin, path);
        data = decodeValues(raw, dtype, count);
      }
      const tensor = { shape: entry.shape, data };
      tensors.set(name, options.map ? options.map(name, tensor) : tensor);
      dtypes.set(name, dtype);
    }
  } finally {
    await fh.close();
  }
  return { tensors, metadata: header.metadata, dtypes };
}
