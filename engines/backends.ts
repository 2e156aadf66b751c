// Which tensor engines load in this process. The trainer prefers native TensorFlow (tfjs-node-gpu
// on CUDA hosts, tfjs-node when installed) and falls back to the wasm backend, which always works;
// the rollout engine is ONNX Runtime with the CUDA provider when present, else CPU.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { preloadCudaLibraries, readOnnxCudaManifest } from './cuda-libraries';
import type { Device } from './device';
import { parameterCount, type ModelConfig } from './model';
import { engineThreadsSetting, ortThreadsSetting, tfjsBackendChoice, type TfjsBackendChoice } from '../config/environment';

export { tfjsBackendChoice, USER_TF_INTRAOP_THREADS, type TfjsBackendChoice } from '../config/environment';

export interface TfjsBackendInfo {
  /** The tfjs backend name: 'tensorflow' (native, CPU or CUDA) or 'wasm'. */
  backend: string;
  package: string;
  /** Why a preferred backend was not used, when it was not (for `relax doctor`). */
  fallbackReason?: string;
}

/** The native packages to try for `device`, best first. */
function nativeCandidates(device: Device): string[] {
  return device.kind === 'cuda' ? ['@tensorflow/tfjs-node-gpu', '@tensorflow/tfjs-node'] : ['@tensorflow/tfjs-node'];
}

/**
 * Whether `pkg`'s binding has been built (scripts/native-backend.js does it in `npm run setup`),
 * checked without loading TensorFlow: the npm package alone, installed without scripts, has none.
 */
export function nativeBindingBuilt(pkg: string): boolean {
  try {
    const dir = path.dirname(require.resolve(`${pkg}/package.json`));
    const meta = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8')) as { binary: { module_path: string; module_name: string; napi_versions: number[] } };
    const modulePath = meta.binary.module_path.replace('{napi_build_version}', String(meta.binary.napi_versions.at(-1)));
    return fs.existsSync(path.resolve(dir, modulePath, `${meta.binary.module_name}.node`));
  } catch {
    return false;
  }
}

/** Whether the train workers of this install will get a native backend (no 4 GiB wasm heap cap). */
export function nativeTfjsAvailable(env: NodeJS.ProcessEnv = process.env): boolean {
  return tfjsBackendChoice(env) !== 'wasm' && ['@tensorflow/tfjs-node', '@tensorflow/tfjs-node-gpu'].some(nativeBindingBuilt);
}

/** Models below this many parameters run their engines on one thread (see engineThreads). */
export const SMALL_MODEL_PARAMETERS = 5_000_000;

/**
 * Intra-op threads for one engine (the trainer's TensorFlow, a rollout engine's ONNX Runtime) of a
 * `model`: RELAX_ENGINE_THREADS when set; else one for a small model, whose ops are too small to
 * repay the thread pool's hand-offs (one thread trained the 104k-parameter engines-bench model 1.4x
 * faster than two on 2 cores); else every core this process may use: on a real model the matmuls
 * scale (SmolLM2-135M's [808 x 576] x [576 x 1536] runs at ~80 GFLOP/s on one core, ~150 on two).
 * `relax dev` gives every engine all cores: in sync mode its stages take turns, so two busy engines
 * never share a core; in async mode rollout and training overlap and share them.
 */
export function engineThreads(model?: ModelConfig, env: NodeJS.ProcessEnv = process.env, cores = os.availableParallelism()): number {
  const set = engineThreadsSetting(env);
  if (set !== undefined) return set;
  if (model && parameterCount(model) < SMALL_MODEL_PARAMETERS) return 1;
  return Math.max(1, cores);
}

/**
 * Intra-op threads for a rollout engine's ONNX Runtime sessions: RELAX_ORT_THREADS when set (for
 * ONNX Runtime alone), else engineThreads (RELAX_ENGINE_THREADS; one for a small model; else every
 * core this process may use). SmolLM2-135M (LoRA r8, 32 new tokens) on an idle 2-core machine
 * generated 19.9 / 63.3 / 101 tokens/s at batch 1 / 8 / 32 on 2 threads, 17.8 / 43.8 / 75.2 on 1.
 * ONNX Runtime's threads spin while they wait, so beside a busy trainer on the same cores (async
 * mode) 2 threads can fall below 1: RELAX_ORT_THREADS=1 there.
 */
export function ortThreads(model?: ModelConfig, env: NodeJS.ProcessEnv = process.env, cores = os.availableParallelism()): number {
  return ortThreadsSetting(env) ?? engineThreads(model, env, cores);
}

/**
 * TensorFlow's settings read from the OS environment when it loads (main thread only: a worker
 * thread's process.env never reaches getenv), where the user has not set them: its INFO and WARNING
 * logs off (two absl/oneDNN lines at load still print on 2.21), and its oneDNN kernels on. TensorFlow
 * turns oneDNN on by itself only on CPUs with AVX-512 VNNI/BF16 or AMX; on an AVX2-only host (AMD
 * EPYC, 2 cores) its Eigen matmuls ran a SmolLM2 LoRA train step at 105 tokens/s and oneDNN at 140
 * (full fine-tuning 80 -> 104; docs/results.md). TF_ENABLE_ONEDNN_OPTS=0 turns it off.
 */
export function setTensorflowEnvironment(): void {
  process.env.TF_CPP_MIN_LOG_LEVEL ??= '2';
  process.env.TF_ENABLE_ONEDNN_OPTS ??= '1';
}

/** Loads the native TensorFlow backend for `device` and makes it current; the reason when none loads. */
export async function loadNativeBackend(device: Device, packages: readonly string[] = nativeCandidates(device)): Promise<TfjsBackendInfo | { error: string }> {
  const tf = await import('@tensorflow/tfjs');
  setTensorflowEnvironment();
  // Read once, when TensorFlow loads (engineThreads; TF_NUM_INTRAOP_THREADS overrides). The
  // trainer thread (training/trainer-thread.ts) sets it for its model before it loads TensorFlow.
  process.env.TF_NUM_INTRAOP_THREADS ??= String(engineThreads());
  const reasons: string[] = [];
  for (const pkg of packages) {
    if (!nativeBindingBuilt(pkg)) {
      reasons.push(`${pkg}: binding not built (npm run setup builds it)`);
      continue;
    }
    try {
      require(pkg);
      if (await tf.setBackend('tensorflow')) return { backend: 'tensorflow', package: pkg };
      reasons.push(`${pkg}: the tensorflow backend did not initialise`);
    } catch (err) {
      reasons.push(`${pkg}: ${(err as Error).message.split('\n')[0]}`);
    }
  }
  return { error: reasons.join('; ') };
}

/** Loads the wasm backend (always available) and makes it current. */
export async function loadWasmBackend(): Promise<TfjsBackendInfo> {
  const tf = await import('@tensorflow/tfjs');
  await import('@tensorflow/tfjs-backend-wasm');
  if (await tf.setBackend('wasm')) return { backend: 'wasm', package: '@tensorflow/tfjs-backend-wasm' };
  throw new Error('no tfjs backend loads: reinstall dependencies with `npm run setup` (the wasm backend ships with it)');
}

/**
 * Loads the best tfjs backend for `device` and makes it current: native TensorFlow where it is
 * built and loads, else wasm. RELAX_TFJS_BACKEND=wasm forces wasm; =native makes a missing native
 * backend an error instead of a fallback.
 */
export async function loadTfjsBackend(device: Device, choice: TfjsBackendChoice = tfjsBackendChoice(), nativePackages?: readonly string[]): Promise<TfjsBackendInfo> {
  if (choice === 'wasm') return loadWasmBackend();
  const native = await loadNativeBackend(device, nativePackages);
  if ('backend' in native) return native;
  if (choice === 'native') throw new Error(`RELAX_TFJS_BACKEND=native but no native backend loads: ${native.error}`);
  return { ...(await loadWasmBackend()), fallbackReason: native.error };
}

export interface OnnxRuntimeInfo {
  version: string;
  /** Execution providers to request, best first. */
  executionProviders: string[];
  /** Backends onnxruntime-node reports as supported on this host. */
  supported: string[];
  /** Why CUDA was asked for (a cuda device) but is not used. */
  cudaProblem?: string;
}

/**
 * ONNX Runtime's providers for `device`. On a CUDA device the provider libraries that
 * `npm run setup -- --cuda` installed (scripts/cuda-route.js) are preloaded first, and CUDA is
 * requested only when they all load: onnxruntime-node's `listSupportedBackends` names cuda even when
 * no provider is installed, and a session asking for a provider that cannot load fails outright.
 */
export async function onnxRuntimeInfo(device: Device): Promise<OnnxRuntimeInfo> {
  const ort = await import('onnxruntime-node');
  const supported = ort.listSupportedBackends().map((b) => b.name);
  let cudaReady = false;
  let cudaProblem: string | undefined;
  if (device.kind === 'cuda' && supported.includes('cuda')) {
    const manifest = readOnnxCudaManifest();
    if (!manifest) cudaProblem = 'the CUDA provider is not installed (npm run setup -- --cuda)';
    else {
      const preload = preloadCudaLibraries(manifest);
      cudaReady = preload.failed.length === 0;
      if (!cudaReady) cudaProblem = `CUDA libraries did not load: ${preload.failed.map((f) => `${path.basename(f.file)} (${f.error})`).join('; ')}`;
    }
  }
  const executionProviders = cudaReady ? ['cuda', 'cpu'] : ['cpu'];
  return { version: ort.env.versions.node ?? ort.env.versions.common ?? 'unknown', executionProviders, supported, ...(cudaProblem ? { cudaProblem } : {}) };
}
