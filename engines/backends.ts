// Which tensor engines load in this process. The trainer prefers native TensorFlow (tfjs-node-gpu
// on CUDA hosts, tfjs-node when installed) and falls back to the wasm backend, which always works;
// the rollout engine is ONNX Runtime with the CUDA provider when present, else CPU.
import type { Device } from './device';

export interface TfjsBackendInfo {
  backend: string;
  package: string;
}

function tryRequire(name: string): boolean {
  try {
    require(name);
    return true;
  } catch {
    return false;
  }
}

/** Loads the best tfjs backend for `device` and makes it current. */
export async function loadTfjsBackend(device: Device): Promise<TfjsBackendInfo> {
  const tf = await import('@tensorflow/tfjs');
  const candidates: Array<[pkg: string, backend: string]> =
    device.kind === 'cuda'
      ? [['@tensorflow/tfjs-node-gpu', 'tensorflow'], ['@tensorflow/tfjs-node', 'tensorflow']]
      : [['@tensorflow/tfjs-node', 'tensorflow']];
  for (const [pkg, backend] of candidates) {
    if (tryRequire(pkg) && (await tf.setBackend(backend))) return { backend, package: pkg };
  }
  await import('@tensorflow/tfjs-backend-wasm');
  if (await tf.setBackend('wasm')) return { backend: 'wasm', package: '@tensorflow/tfjs-backend-wasm' };
  throw new Error('no tfjs backend loads: reinstall dependencies with `npm ci` (the wasm backend ships with it)');
}

export interface OnnxRuntimeInfo {
  version: string;
  /** Execution providers to request, best first. */
  executionProviders: string[];
  /** Backends onnxruntime-node reports as supported on this host. */
  supported: string[];
}

export async function onnxRuntimeInfo(device: Device): Promise<OnnxRuntimeInfo> {
  const ort = await import('onnxruntime-node');
  const supported = ort.listSupportedBackends().map((b) => b.name);
  const executionProviders = device.kind === 'cuda' && supported.includes('cuda') ? ['cuda', 'cpu'] : ['cpu'];
  return { version: ort.env.versions.node ?? ort.env.versions.common ?? 'unknown', executionProviders, supported };
}
