// A minimal ONNX ModelProto encoder: the messages and fields our graph builder emits, declared as
// the subset of onnx/onnx.proto they need (same field numbers, IR version 8) and encoded by
// protobufjs; ONNX Runtime parsing the result is the test.
import { parse, type Type } from 'protobufjs';

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

/**
 * The subset of onnx/onnx.proto (https://github.com/onnx/onnx/blob/main/onnx/onnx.proto) these
 * graphs use, with its field numbers. proto3 here only so repeated int64s are packed (onnx.proto is
 * proto2; ONNX Runtime reads both); enums are their int32 wire values.
 */
const ONNX_SUBSET_PROTO = `
syntax = "proto3";
package onnx;
message TensorProto { repeated int64 dims = 1; int32 data_type = 2; string name = 8; bytes raw_data = 9; }
message AttributeProto { string name = 1; float f = 2; int64 i = 3; TensorProto t = 5; repeated int64 ints = 8; int32 type = 20; }
message NodeProto { repeated string input = 1; repeated string output = 2; string name = 3; string op_type = 4; repeated AttributeProto attribute = 5; }
message TensorShapeProto {
  message Dimension { oneof value { int64 dim_value = 1; string dim_param = 2; } }
  repeated Dimension dim = 1;
}
message TypeProto {
  message Tensor { int32 elem_type = 1; TensorShapeProto shape = 2; }
  oneof value { Tensor tensor_type = 1; }
}
message ValueInfoProto { string name = 1; TypeProto type = 2; }
message GraphProto { repeated NodeProto node = 1; string name = 2; repeated TensorProto initializer = 5; repeated ValueInfoProto input = 11; repeated ValueInfoProto output = 12; }
message OperatorSetIdProto { string domain = 1; int64 version = 2; }
message ModelProto { int64 ir_version = 1; string producer_name = 2; GraphProto graph = 7; repeated OperatorSetIdProto opset_import = 8; }
`;

let modelType: Type | undefined;
/** onnx.ModelProto, parsed once on first use. */
const modelProto = (): Type => (modelType ??= parse(ONNX_SUBSET_PROTO, { keepCase: true }).root.lookupType('onnx.ModelProto'));

const ATTRIBUTE_TYPE = { float: 1, int: 2, tensor: 4, ints: 7 } as const;

const tensorMessage = (t: OnnxTensor, name?: string) => ({ dims: t.dims, data_type: t.dataType, ...(name !== undefined ? { name } : {}), raw_data: t.rawData });

function attributeMessage(name: string, a: OnnxAttributeValue): Record<string, unknown> {
  const value = a.kind === 'float' ? { f: a.value } : a.kind === 'int' ? { i: a.value } : a.kind === 'tensor' ? { t: tensorMessage(a.value) } : { ints: a.value };
  return { name, ...value, type: ATTRIBUTE_TYPE[a.kind] };
}

const valueInfoMessage = (v: OnnxValueInfo) => ({
  name: v.name,
  type: { tensor_type: { elem_type: v.dataType, shape: { dim: v.shape.map((d) => (typeof d === 'number' ? { dim_value: d } : { dim_param: d })) } } },
});

/** Serializes `graph` as an ONNX model file (bytes ONNX Runtime's InferenceSession.create accepts). */
export function encodeOnnxModel(graph: OnnxGraph, opset: number, producer = 'relax'): Uint8Array {
  const model = {
    ir_version: IR_VERSION,
    producer_name: producer,
    graph: {
      node: graph.nodes.map((n) => ({ input: n.inputs, output: n.outputs, name: n.name, op_type: n.opType, attribute: Object.entries(n.attributes).map(([name, a]) => attributeMessage(name, a)) })),
      name: graph.name,
      initializer: (graph.initializers ?? []).map((t) => tensorMessage(t, t.name)),
      input: graph.inputs.map(valueInfoMessage),
      output: graph.outputs.map(valueInfoMessage),
    },
    opset_import: [{ domain: '', version: opset }],
  };
  // raw_data is copied once, into the finished buffer (protobufjs' writer keeps references until finish).
  return modelProto().encode(model).finish();
}
