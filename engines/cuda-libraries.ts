// The CUDA 13 libraries of ONNX Runtime's CUDA provider, loaded before it: the provider (from the
// PyPI onnxruntime-gpu wheel, put in place by `npm run setup -- --cuda`, scripts/cuda-route.js) has
// no RUNPATH, so setup writes a manifest of the libraries in load order and the rollout process
// loads each one globally before onnxruntime-node creates a CUDA session; the provider's own
// lookups (by SONAME) then find them already loaded.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { PACKAGE_ROOT } from '../config/environment';

export interface OnnxCudaManifest {
  /** The onnxruntime version the provider was taken from (it must be onnxruntime-node's). */
  onnxruntime: string;
  /** onnxruntime-node's binary folder, where the provider libraries were put. */
  providerDir: string;
  /** Absolute paths of the libraries to load, in order. */
  preload: string[];
}

export interface PreloadResult {
  loaded: string[];
  failed: Array<{ file: string; error: string }>;
}

/** Loads one shared library with dlopen's `flags`; throws as process.dlopen does. */
export type DlopenFn = (file: string, flags: number) => void;

// glibc's RTLD_NODELETE (Node does not export it): process.dlopen closes a library that registers no
// addon ("Module did not self-register"), and without this flag that dlclose unloads it again.
const RTLD_NODELETE = 0x1000;
const PRELOAD_FLAGS = os.constants.dlopen.RTLD_NOW | os.constants.dlopen.RTLD_GLOBAL | RTLD_NODELETE;
// What process.dlopen says after it has loaded a plain library (not an addon): loaded, as intended.
const NOT_AN_ADDON = /did not self-register/;

export function onnxCudaManifestPath(packageRoot: string): string {
  return path.join(packageRoot, 'node_modules', '.relax-cuda', 'onnxruntime-cuda.json');
}

/** The manifest setup wrote under `root`, or undefined when there is none (no CUDA setup); throws when it is malformed. */
export function readOnnxCudaManifest(root: string = PACKAGE_ROOT): OnnxCudaManifest | undefined {
  const file = onnxCudaManifestPath(root);
  if (!fs.existsSync(file)) return undefined;
  const m = JSON.parse(fs.readFileSync(file, 'utf8')) as Partial<OnnxCudaManifest>;
  if (typeof m.onnxruntime !== 'string' || typeof m.providerDir !== 'string' || !Array.isArray(m.preload) || !m.preload.every((f) => typeof f === 'string')) {
    throw new Error(`${file}: expected { onnxruntime, providerDir, preload: [paths] }; run \`npm run setup -- --cuda\` again`);
  }
  return { onnxruntime: m.onnxruntime, providerDir: m.providerDir, preload: m.preload };
}

const defaultDlopen: DlopenFn = (file, flags) => process.dlopen({ exports: {} } as NodeJS.Module, file, flags);

/** The realpaths of the files mapped into this process, when /proc tells (Linux); undefined elsewhere. */
function mappedFiles(): Set<string> | undefined {
  try {
    return new Set(fs.readFileSync('/proc/self/maps', 'utf8').split('\n').map((l) => l.slice(l.indexOf('/'))).filter((f) => f.startsWith('/')));
  } catch {
    return undefined;
  }
}

/**
 * Loads `manifest.preload` in order, each globally and for good. Never throws: a library that is
 * missing, fails to load, or is not mapped afterwards is reported in `failed` with the reason.
 */
export function preloadCudaLibraries(manifest: OnnxCudaManifest, dlopen: DlopenFn = defaultDlopen): PreloadResult {
  const opened: string[] = [];
  const failed: PreloadResult['failed'] = [];
  for (const file of manifest.preload) {
    if (!fs.existsSync(file)) {
      failed.push({ file, error: 'not found (run `npm run setup -- --cuda` again)' });
      continue;
    }
    try {
      dlopen(file, PRELOAD_FLAGS);
      opened.push(file);
    } catch (err) {
      const message = (err as Error).message;
      if (NOT_AN_ADDON.test(message)) opened.push(file);
      else failed.push({ file, error: message.split('\n')[0] });
    }
  }
  const mapped = dlopen === defaultDlopen ? mappedFiles() : undefined;
  const loaded = opened.filter((file) => {
    if (!mapped || mapped.has(fs.realpathSync(file))) return true;
    failed.push({ file, error: 'opened, but not mapped afterwards (unloaded again)' });
    return false;
  });
  return { loaded, failed };
}
