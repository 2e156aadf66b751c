// The safetensors file format (https://github.com/huggingface/safetensors): an 8-byte little-endian
// header length N, N bytes of JSON header {name: {dtype, shape, data_offsets: [begin, end]},
// "__metadata__": {string: string}}, then the raw little-endian tensor bytes (offsets relative to the
// end of the header). We read and write F32 only: every policy tensor is float32.

export interface NamedTensor {
  shape: number[];
  data: Float32Array;
}

export interface SafetensorsFile {
  tensors: Map<string, NamedTensor>;
  metadata: Record<string, string>;
}

const HEADER_ALIGNMENT = 8;
/** Refuse absurd headers before allocating: real ones are kilobytes. */
const MAX_HEADER_BYTES = 100 * 1024 * 1024;

const HOST_IS_LITTLE_ENDIAN = new Uint8Array(Float32Array.of(1).buffer)[3] === 0x3f;

function littleEndianFloats(data: Float32Array): Uint8Array {
  if (HOST_IS_LITTLE_ENDIAN) return new Uint8Array(data.buffer.slice(data.byteOffset, data.byteOffset + data.byteLength));
  const bytes = new Uint8Array(data.length * 4);
  const view = new DataView(bytes.buffer);
  for (let i = 0; i < data.length; i++) view.setFloat32(i * 4, data[i], true);
  return bytes;
}

/** Serializes tensors in the given order; the bytes are a pure function of the input. */
export function encodeSafetensors(tensors: Iterable<readonly [string, NamedTensor]>, metadata: Record<string, string> = {}): Uint8Array {
  const header: Record<string, unknown> = {};
  if (Object.keys(metadata).length > 0) header.__metadata__ = metadata;
  const blobs: Uint8Array[] = [];
  let offset = 0;
  for (const [name, t] of tensors) {
    const expected = t.shape.reduce((a, b) => a * b, 1);
    if (t.data.length !== expected) throw new Error(`tensor "${name}": shape [${t.shape}] needs ${expected} values, got ${t.data.length}`);
    const bytes = littleEndianFloats(t.data);
    header[name] = { dtype: 'F32', shape: t.shape, data_offsets: [offset, offset + bytes.length] };
    blobs.push(bytes);
    offset += bytes.length;
  }
  let json = JSON.stringify(header);
  // Pad with spaces (valid JSON whitespace) so the data starts 8-byte aligned, as the reference writer does.
  const jsonBytes = () => new TextEncoder().encode(json);
  while ((8 + jsonBytes().length) % HEADER_ALIGNMENT !== 0) json += ' ';
  const head = jsonBytes();
  const out = new Uint8Array(8 + head.length + offset);
  new DataView(out.buffer).setBigUint64(0, BigInt(head.length), true);
  out.set(head, 8);
  let pos = 8 + head.length;
  for (const b of blobs) {
    out.set(b, pos);
    pos += b.length;
  }
  return out;
}

interface HeaderEntry {
  dtype: string;
  shape: number[];
  data_offsets: [number, number];
}

function isHeaderEntry(v: unknown): v is HeaderEntry {
  if (typeof v !== 'object' || v === null) return false;
  const e = v as Record<string, unknown>;
  return (
    typeof e.dtype === 'string' &&
    Array.isArray(e.shape) &&
    e.shape.every((d) => Number.isInteger(d) && d >= 0) &&
    Array.isArray(e.data_offsets) &&
    e.data_offsets.length === 2 &&
    e.data_offsets.every((d) => Number.isInteger(d) && d >= 0)
  );
}

/** Parses a safetensors file; `source` names the file in errors. */
export function decodeSafetensors(bytes: Uint8Array, source = 'safetensors data'): SafetensorsFile {
  if (bytes.length < 8) throw new Error(`${source}: ${bytes.length} bytes is too short for a safetensors file (needs an 8-byte header length)`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const headerLength = Number(view.getBigUint64(0, true));
  if (headerLength > MAX_HEADER_BYTES || 8 + headerLength > bytes.length) {
    throw new Error(`${source}: header length ${headerLength} does not fit in a ${bytes.length}-byte file (truncated or not safetensors)`);
  }
  let header: unknown;
  try {
    header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + headerLength)));
  } catch (err) {
    throw new Error(`${source}: header is not valid JSON (${(err as Error).message})`);
  }
  if (typeof header !== 'object' || header === null || Array.isArray(header)) throw new Error(`${source}: header is not a JSON object`);
  const dataStart = 8 + headerLength;
  const dataLength = bytes.length - dataStart;
  const tensors = new Map<string, NamedTensor>();
  let metadata: Record<string, string> = {};
  for (const [name, entry] of Object.entries(header as Record<string, unknown>)) {
    if (name === '__metadata__') {
      metadata = entry as Record<string, string>;
      continue;
    }
    if (!isHeaderEntry(entry)) throw new Error(`${source}: tensor "${name}" has a malformed header entry ${JSON.stringify(entry)}`);
    if (entry.dtype !== 'F32') throw new Error(`${source}: tensor "${name}" has dtype ${entry.dtype}; only F32 is supported`);
    const [begin, end] = entry.data_offsets;
    const count = entry.shape.reduce((a, b) => a * b, 1);
    if (end < begin || end > dataLength) {
      throw new Error(`${source}: tensor "${name}" data_offsets [${begin}, ${end}] lie outside the ${dataLength}-byte data section`);
    }
    if (end - begin !== count * 4) {
      throw new Error(`${source}: tensor "${name}" has shape [${entry.shape}] (${count * 4} bytes) but data_offsets span ${end - begin} bytes`);
    }
    const raw = bytes.subarray(dataStart + begin, dataStart + end);
    let data: Float32Array;
    if (HOST_IS_LITTLE_ENDIAN) {
      data = new Float32Array(raw.slice().buffer);
    } else {
      data = new Float32Array(count);
      const dv = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
      for (let i = 0; i < count; i++) data[i] = dv.getFloat32(i * 4, true);
    }
    tensors.set(name, { shape: entry.shape, data });
  }
  return { tensors, metadata };
}
