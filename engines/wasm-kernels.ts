// Kernels the tfjs wasm backend lacks but training needs. UnsortedSegmentSum is the gradient of
// tf.gather (embedding lookups); without it no embedding can train on wasm.
import * as tf from '@tensorflow/tfjs';

interface WasmBackendLike {
  readSync(dataId: unknown): ArrayLike<number>;
  makeOutput(shape: number[], dtype: tf.DataType, memoryOffset?: number, values?: Float32Array): tf.TensorInfo;
}

function unsortedSegmentSum(args: { inputs: tf.NamedTensorInfoMap; attrs?: tf.NamedAttrMap; backend: unknown }): tf.TensorInfo {
  const { x, segmentIds } = args.inputs as { x: tf.TensorInfo; segmentIds: tf.TensorInfo };
  const numSegments = Number(args.attrs?.numSegments);
  const backend = args.backend as WasmBackendLike;
  if (x.dtype !== 'float32') throw new Error(`UnsortedSegmentSum (wasm, relax): only float32 is supported, got ${x.dtype}`);
  if (segmentIds.shape.length !== 1 || segmentIds.shape[0] !== x.shape[0]) {
    throw new Error(`UnsortedSegmentSum (wasm, relax): segmentIds must be 1-D over x's first axis; got x [${x.shape}], segmentIds [${segmentIds.shape}]`);
  }
  const values = backend.readSync(x.dataId);
  const ids = backend.readSync(segmentIds.dataId);
  const inner = x.shape.slice(1).reduce((a, b) => a * b, 1);
  const out = new Float32Array(numSegments * inner);
  for (let r = 0; r < ids.length; r++) {
    const s = ids[r];
    if (s < 0 || s >= numSegments) continue; // TensorFlow drops out-of-range segment ids
    const src = r * inner;
    const dst = s * inner;
    for (let j = 0; j < inner; j++) out[dst + j] += values[src + j];
  }
  return backend.makeOutput([numSegments, ...x.shape.slice(1)], 'float32', undefined, out);
}

/** Registers the missing kernels on the wasm backend (idempotent). Call after the backend loads. */
export function registerWasmTrainingKernels(): void {
  if (tf.getKernel('UnsortedSegmentSum', 'wasm')) return;
  tf.registerKernel({ kernelName: 'UnsortedSegmentSum', backendName: 'wasm', kernelFunc: unsortedSegmentSum as unknown as tf.KernelFunc });
}
