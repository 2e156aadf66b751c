// A minimal ONNX ModelProto encoder: just the messages and fields our graph builder emits
// (field numbers from onnx/onnx.proto, IR version 8). Hand-written protobuf wire encoding keeps the
// rollout engine free of a protobuf code generator; ONNX Runtime parsing the result is the test.

export const OnnxDataType = { FLOAT: 1, INT32: 6, INT64: 7 } as const;
export type OnnxDataType = (typeof OnnxDataType)[keyof typeof OnnxDataType];

export interface OnnxTensor {
  dims: number[];
  dataType: OnnxDataType;
  /** Little-endian element bytes, as ONNX's raw_data. */
  rawData: Uint8Array;
}

export type OnnxAttributeValue =
  | { kind: 'int'; value: number }
  | { kind: 'float'; value: number }
  | { kind: 'ints'; value: number[] }
  | { kind: 'tensor'; value: OnnxTensor };

export interface OnnxNode {
  opType: string;
  inputs: string[];
  outputs: string[];
  name: string;
  attributes: Record<string, OnnxAttributeValue>;
}

/** A dimension is a fixed size or a symbolic name such as "batch". */
export type OnnxDim = number | string;

export interface OnnxValueInfo {
  name: string;
  dataType: OnnxDataType;
  shape: OnnxDim[];
}

/** A graph initializer: a constant tensor ONNX Runtime owns (and may prepack for its kernels). */
export interface OnnxInitializer extends OnnxTensor {
  name: string;
}

export interface OnnxGraph {
  name: string;
  nodes: OnnxNode[];
  inputs: OnnxValueInfo[];
  outputs: OnnxValueInfo[];
  /** Constant tensors by name; a name here is not also a graph input. */
  initializers?: OnnxInitializer[];
}

const IR_VERSION = 8;

class ProtoWriter {
  private chunks: Uint8Array[] = [];
  private length = 0;

  private push(bytes: Uint8Array): void {
    this.chunks.push(bytes);
    this.length += bytes.length;
  }

  private varint(value: bigint): void {
    // Negative int64 values are encoded as their 64-bit two's complement (10 bytes).
    let v = BigInt.asUintN(64, value);
    const out: number[] = [];
    do {
      let byte = Number(v & 0x7fn);
      v >>= 7n;
      if (v !== 0n) byte |= 0x80;
      out.push(byte);
    } while (v !== 0n);
    this.push(Uint8Array.from(out));
  }

  private tag(field: number, wireType: 0 | 2 | 5): void {
    this.varint(BigInt((field << 3) | wireType));
  }

  int(field: number, value: number | bigint): void {
    this.tag(field, 0);
    this.varint(BigInt(value));
  }

  float(field: number, value: number): void {
    this.tag(field, 5);
    const b = new Uint8Array(4);
    new DataView(b.buffer).setFloat32(0, value, true);
    this.push(b);
  }

  bytes(field: number, value: Uint8Array): void {
    this.tag(field, 2);
    this.varint(BigInt(value.length));
    this.push(value);
  }

  string(field: number, value: string): void {
    this.bytes(field, new TextEncoder().encode(value));
  }

  message(field: number, build: (w: ProtoWriter) => void): void {
    // The inner chunks are adopted, not concatenated: a graph with initializers nests hundreds of
    // MB of raw_data, copied once (finish) instead of once per nesting level.
    const inner = new ProtoWriter();
    build(inner);
    this.tag(field, 2);
    this.varint(BigInt(inner.length));
    for (const c of inner.chunks) this.push(c);
  }

  packedInts(field: number, values: number[]): void {
    const inner = new ProtoWriter();
    for (const v of values) inner.varint(BigInt(v));
    this.bytes(field, inner.finish());
  }

  finish(): Uint8Array {
    const out = new Uint8Array(this.length);
    let offset = 0;
    for (const c of this.chunks) {
      out.set(c, offset);
      offset += c.length;
    }
    return out;
  }
}

function writeTensor(w: ProtoWriter, t: OnnxTensor, name?: string): void {
  w.packedInts(1, t.dims); // dims
  w.int(2, t.dataType); // data_type
  if (name !== undefined) w.string(8, name); // name
  w.bytes(9, t.rawData); // raw_data
}

const ATTRIBUTE_TYPE = { float: 1, int: 2, tensor: 4, ints: 7 } as const;

function writeAttribute(w: ProtoWriter, name: string, a: OnnxAttributeValue): void {
  w.string(1, name);
  switch (a.kind) {
    case 'float':
      w.float(2, a.value);
      break;
    case 'int':
      w.int(3, a.value);
      break;
    case 'tensor':
      w.message(5, (t) => writeTensor(t, a.value));
      break;
    case 'ints':
      w.packedInts(8, a.value);
      break;
  }
  w.int(20, ATTRIBUTE_TYPE[a.kind]);
}

function writeValueInfo(w: ProtoWriter, v: OnnxValueInfo): void {
  w.string(1, v.name);
  w.message(2, (type) =>
    type.message(1, (tensorType) => {
      tensorType.int(1, v.dataType);
      tensorType.message(2, (shape) => {
        for (const d of v.shape) {
          shape.message(1, (dim) => (typeof d === 'number' ? dim.int(1, d) : dim.string(2, d)));
        }
      });
    }),
  );
}

/** Serializes `graph` as an ONNX model file (bytes ONNX Runtime's InferenceSession.create accepts). */
export function encodeOnnxModel(graph: OnnxGraph, opset: number, producer = 'relax'): Uint8Array {
  const w = new ProtoWriter();
  w.int(1, IR_VERSION);
  w.string(2, producer);
  w.message(7, (g) => {
    for (const n of graph.nodes) {
      g.message(1, (nw) => {
        for (const i of n.inputs) nw.string(1, i);
        for (const o of n.outputs) nw.string(2, o);
        nw.string(3, n.name);
        nw.string(4, n.opType);
        for (const [name, a] of Object.entries(n.attributes)) nw.message(5, (aw) => writeAttribute(aw, name, a));
      });
    }
    g.string(2, graph.name);
    for (const t of graph.initializers ?? []) g.message(5, (tw) => writeTensor(tw, t, t.name));
    for (const i of graph.inputs) g.message(11, (vw) => writeValueInfo(vw, i));
    for (const o of graph.outputs) g.message(12, (vw) => writeValueInfo(vw, o));
  });
  w.message(8, (op) => {
    op.string(1, '');
    op.int(2, opset);
  });
  return w.finish();
}
