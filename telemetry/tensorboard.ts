// TensorBoard event files (docs/monitoring.md#tensorboard): a writer of the tfevents format that
// TensorBoard, torch.utils.tensorboard and tf.summary read. A file is a sequence of TFRecords (uint64
// length, masked CRC32C of the length, the data, masked CRC32C of the data), each an Event proto of
// tensorflow/core/util/event.proto: the first names the format (file_version "brain.Event:2"), the
// rest carry summaries: scalars as `simple_value`, text as a string tensor for the "text" plugin.
// protobufjs encodes the protos (the subset below keeps TensorFlow's field numbers) and crc-32 the
// checksums. Every event is written (appended, unbuffered) as it comes, so a crash loses nothing
// written; a process that opens the directory again writes a new file: TensorBoard merges a directory.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import protobuf from 'protobufjs';
import crc32c from 'crc-32/crc32c';

// The subset of tensorflow/core/util/event.proto, framework/summary.proto, tensor.proto and
// tensor_shape.proto that scalar and text summaries use, with TensorFlow's field numbers.
const PROTO = `
syntax = "proto3";
package tensorflow;
message TensorShapeProto {
  message Dim { int64 size = 1; string name = 2; }
  repeated Dim dim = 2;
  bool unknown_rank = 3;
}
message TensorProto {
  int32 dtype = 1;
  TensorShapeProto tensor_shape = 2;
  repeated bytes string_val = 8;
}
message SummaryMetadata {
  message PluginData { string plugin_name = 1; bytes content = 2; }
  PluginData plugin_data = 1;
  string display_name = 2;
  string summary_description = 3;
  int32 data_class = 4;
}
message Summary {
  message Value {
    string node_name = 7;
    string tag = 1;
    SummaryMetadata metadata = 9;
    oneof value { float simple_value = 2; TensorProto tensor = 8; }
  }
  repeated Value value = 1;
}
message Event {
  double wall_time = 1;
  int64 step = 2;
  oneof what { string file_version = 3; Summary summary = 5; }
}
`;

const EVENT = protobuf.parse(PROTO, { keepCase: true }).root.lookupType('tensorflow.Event');
/** types.proto DataType DT_STRING; summary.proto DataClass DATA_CLASS_TENSOR. */
const DT_STRING = 7;
const DATA_CLASS_TENSOR = 2;
export const FILE_VERSION = 'brain.Event:2';

/** TFRecord's checksum: CRC32C rotated right by 15 bits plus a constant, as an unsigned 32-bit number. */
export function maskedCrc32c(data: Uint8Array): number {
  const crc = crc32c.buf(data) >>> 0;
  return (((crc >>> 15) | (crc << 17)) + 0xa282ead8) >>> 0;
}

/** One TFRecord: length (uint64 LE), its masked CRC, the data, the data's masked CRC. */
export function tfRecord(data: Uint8Array): Buffer {
  const out = Buffer.alloc(8 + 4 + data.length + 4);
  out.writeBigUInt64LE(BigInt(data.length), 0);
  out.writeUInt32LE(maskedCrc32c(out.subarray(0, 8)), 8);
  out.set(data, 12);
  out.writeUInt32LE(maskedCrc32c(data), 12 + data.length);
  return out;
}

/** One Event proto, encoded. `what` is file_version or summary, as event.proto names them. */
export function encodeEvent(event: { wall_time: number; step: number; file_version?: string; summary?: { value: object[] } }): Uint8Array {
  return EVENT.encode(EVENT.fromObject(event)).finish();
}

/** The summary values of `scalars` (non-finite ones left out, as the metrics table leaves them out). */
export function scalarValues(scalars: Record<string, number>): object[] {
  return Object.entries(scalars)
    .filter(([, v]) => Number.isFinite(v))
    .map(([tag, v]) => ({ tag, simple_value: v }));
}

/** A text summary value: a scalar string tensor the text plugin shows (as Markdown). */
export function textValue(tag: string, text: string): object {
  return {
    tag,
    metadata: { plugin_data: { plugin_name: 'text', content: new Uint8Array() }, data_class: DATA_CLASS_TENSOR },
    tensor: { dtype: DT_STRING, tensor_shape: {}, string_val: [Buffer.from(text, 'utf8')] },
  };
}

let filesOpened = 0;

/** `events.out.tfevents.<secs>.<host>.<pid>.<n>`: n counts this process's files, so two never share a name. */
export function eventFileName(nowMs = Date.now(), host = os.hostname(), pid = process.pid): string {
  return `events.out.tfevents.${Math.floor(nowMs / 1000)}.${host}.${pid}.${filesOpened++}`;
}

/** Appends events to one new event file of a log directory. */
export class TensorboardWriter {
  private fd: number | undefined;

  private constructor(
    readonly file: string,
    fd: number,
    private readonly now: () => number,
  ) {
    this.fd = fd;
  }

  /** A new event file in `dir` (created if missing), starting with the file_version event. */
  static open(dir: string, now: () => number = Date.now): TensorboardWriter {
    fs.mkdirSync(dir, { recursive: true });
    const file = path.join(dir, eventFileName(now()));
    const writer = new TensorboardWriter(file, fs.openSync(file, 'a'), now);
    writer.write({ wall_time: now() / 1000, step: 0, file_version: FILE_VERSION });
    return writer;
  }

  /** One scalar per metric at `step` (tags as named; non-finite values left out), in one event. */
  scalars(step: number, scalars: Record<string, number>): void {
    const value = scalarValues(scalars);
    if (value.length) this.write({ wall_time: this.now() / 1000, step, summary: { value } });
  }

  /** A text summary (Markdown) at `step`. */
  text(tag: string, step: number, text: string): void {
    this.write({ wall_time: this.now() / 1000, step, summary: { value: [textValue(tag, text)] } });
  }

  /** Closes the file; later writes are errors. */
  close(): void {
    if (this.fd === undefined) return;
    const fd = this.fd;
    this.fd = undefined;
    fs.closeSync(fd);
  }

  private write(event: Parameters<typeof encodeEvent>[0]): void {
    if (this.fd === undefined) throw new Error(`the TensorBoard event file ${this.file} is closed`);
    fs.writeSync(this.fd, tfRecord(encodeEvent(event)));
  }
}
