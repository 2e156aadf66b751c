// CTranslate2's model.bin (binary versions 4 to 6: what `ct2-transformers-converter` writes today),
// read into named float32 tensors. The layout, little-endian with no alignment anywhere:
//
//   u32 binary_version; str spec_name; u32 spec_revision; u32 num_variables
//   num_variables x { str name; u8 rank; u32 dims[rank]; u8 dtype; u32 num_bytes; data }   (sorted by name)
//   u32 num_aliases; num_aliases x { str alias; str target }
//
// where str is a u16 byte count that includes a trailing NUL, then the UTF-8 bytes and the NUL, and
// dtype is 0 float32, 1 int8, 2 int16, 3 int32, 4 float16, 5 bfloat16. (Read from CTranslate2's
// python/ctranslate2/specs/model_spec.py `_serialize` and src/models/model.cc `Model::load`.)
// Float tensors decode to float32 (float16 through engines/safetensors.ts's table, as Node 20 has
// no Float16Array); integer scalars (flags, head counts) keep their value as a number.
import { decodeValues } from './safetensors';

export interface Ct2Variable {
  shape: number[];
  /** float32 values of a float tensor, or the integers of an integer one. */
  data: Float32Array | Int32Array;
  dtype: Ct2Dtype;
}

export type Ct2Dtype = 'float32' | 'int8' | 'int16' | 'int32' | 'float16' | 'bfloat16';
const DTYPES: Ct2Dtype[] = ['float32', 'int8', 'int16', 'int32', 'float16', 'bfloat16'];
const ITEM_BYTES: Record<Ct2Dtype, number> = { float32: 4, int8: 1, int16: 2, int32: 4, float16: 2, bfloat16: 2 };

export interface Ct2Model {
  binaryVersion: number;
  spec: string;
  revision: number;
  variables: Map<string, Ct2Variable>;
  /** alias -> target (a variable written once, e.g. a tied output projection). */
  aliases: Map<string, string>;
}

/** The oldest and newest binary versions read here (version 4 introduced the dtype byte). */
export const CT2_VERSIONS = { min: 4, max: 6 } as const;

class Cursor {
  private pos = 0;
  private readonly view: DataView;
  constructor(
    private readonly bytes: Uint8Array,
    private readonly source: string,
  ) {
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }
  get offset(): number {
    return this.pos;
  }
  private need(n: number, what: string): void {
    if (this.pos + n > this.bytes.length) throw new Error(`${this.source}: truncated at byte ${this.pos} reading ${what} (${n} bytes needed, ${this.bytes.length - this.pos} left)`);
  }
  u8(what: string): number {
    this.need(1, what);
    return this.view.getUint8(this.pos++);
  }
  u16(what: string): number {
    this.need(2, what);
    const v = this.view.getUint16(this.pos, true);
    this.pos += 2;
    return v;
  }
  u32(what: string): number {
    this.need(4, what);
    const v = this.view.getUint32(this.pos, true);
    this.pos += 4;
    return v;
  }
  str(what: string): string {
    const n = this.u16(what);
    this.need(n, what);
    if (n === 0 || this.bytes[this.pos + n - 1] !== 0) throw new Error(`${this.source}: ${what} at byte ${this.pos} is not NUL-terminated`);
    const s = new TextDecoder('utf-8', { fatal: true }).decode(this.bytes.subarray(this.pos, this.pos + n - 1));
    this.pos += n;
    return s;
  }
  take(n: number, what: string): Uint8Array {
    this.need(n, what);
    const out = this.bytes.subarray(this.pos, this.pos + n);
    this.pos += n;
    return out;
  }
}

function decodeVariable(raw: Uint8Array, dtype: Ct2Dtype, count: number): Float32Array | Int32Array {
  if (dtype === 'float32') return decodeValues(raw, 'F32', count);
  if (dtype === 'float16') return decodeValues(raw, 'F16', count);
  if (dtype === 'bfloat16') return decodeValues(raw, 'BF16', count);
  const view = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
  const out = new Int32Array(count);
  for (let i = 0; i < count; i++) out[i] = dtype === 'int8' ? view.getInt8(i) : dtype === 'int16' ? view.getInt16(2 * i, true) : view.getInt32(4 * i, true);
  return out;
}

/**
 * Parses a whole model.bin. `keep(name)` picks the variables to decode (default all); the others
 * are skipped without being converted, so reading only a Whisper encoder costs its 41 MB, not 145.
 */
export function readCt2Model(bytes: Uint8Array, options: { source?: string; keep?: (name: string) => boolean } = {}): Ct2Model {
  const source = options.source ?? 'model.bin';
  const c = new Cursor(bytes, source);
  const binaryVersion = c.u32('the binary version');
  if (binaryVersion < CT2_VERSIONS.min || binaryVersion > CT2_VERSIONS.max) {
    throw new Error(`${source}: CTranslate2 binary version ${binaryVersion} is not supported (this reader takes ${CT2_VERSIONS.min} to ${CT2_VERSIONS.max}); convert the model again with a current ct2-transformers-converter`);
  }
  const spec = c.str('the spec name');
  const revision = c.u32('the spec revision');
  const count = c.u32('the variable count');
  const variables = new Map<string, Ct2Variable>();
  for (let i = 0; i < count; i++) {
    const name = c.str(`variable ${i}'s name`);
    const rank = c.u8(`${name}'s rank`);
    const shape: number[] = [];
    for (let d = 0; d < rank; d++) shape.push(c.u32(`${name}'s dimension ${d}`));
    const typeId = c.u8(`${name}'s dtype`);
    const dtype = DTYPES[typeId];
    if (!dtype) throw new Error(`${source}: variable ${name} has unknown dtype id ${typeId}`);
    const nbytes = c.u32(`${name}'s byte count`);
    const elements = shape.reduce((a, b) => a * b, 1);
    if (nbytes !== elements * ITEM_BYTES[dtype]) throw new Error(`${source}: variable ${name} of shape [${shape}] and dtype ${dtype} should hold ${elements * ITEM_BYTES[dtype]} bytes, the file says ${nbytes}`);
    const raw = c.take(nbytes, `${name}'s data`);
    if (options.keep && !options.keep(name)) continue;
    variables.set(name, { shape, dtype, data: decodeVariable(raw, dtype, elements) });
  }
  const aliases = new Map<string, string>();
  const aliasCount = c.u32('the alias count');
  for (let i = 0; i < aliasCount; i++) {
    const alias = c.str(`alias ${i}`);
    aliases.set(alias, c.str(`alias ${alias}'s target`));
  }
  if (c.offset !== bytes.length) throw new Error(`${source}: ${bytes.length - c.offset} unexpected bytes after the aliases (at byte ${c.offset})`);
  return { binaryVersion, spec, revision, variables, aliases };
}
