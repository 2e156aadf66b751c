// The CUDA route of `npm run setup -- --cuda`, from registry packages only (after native-backend.js
// has built @tensorflow/tfjs-node-gpu against the PyPI `tensorflow` wheel):
//   - the trainer's CUDA 12 libraries: the wheels of tensorflow's `and-cuda` extra, pip-installed
//     into node_modules/.relax-cuda/cu12 and linked at tfjs-node-gpu's deps/nvidia, where the
//     RUNPATH of the staged libtensorflow ($ORIGIN/../nvidia/<name>/lib) finds them;
//   - ONNX Runtime's CUDA provider: the two provider libraries of the pinned PyPI onnxruntime-gpu
//     wheel, put into onnxruntime-node's binary folder (ONNX Runtime loads providers from there), and
//     the CUDA 13 libraries they need in node_modules/.relax-cuda/cu13. The provider has no RUNPATH,
//     so a manifest lists those libraries in load order and the rollout process loads them first
//     (engines/cuda-libraries.ts).
// setup.js calls installTensorflowCudaLibraries and installOnnxCudaProvider, each on its own.
'use strict';
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const nb = require('./native-backend');

/** tensorflow 2.21.0's `and-cuda` extra: the CUDA 12 libraries its libtensorflow was built for. */
const CUDA12_REQUIREMENTS = [
  'nvidia-cublas-cu12<13,>=12.5.3.2',
  'nvidia-cuda-cupti-cu12<13,>=12.5.82',
  'nvidia-cuda-nvcc-cu12<13,>=12.5.82',
  'nvidia-cuda-nvrtc-cu12<13,>=12.5.82',
  'nvidia-cuda-runtime-cu12<13,>=12.5.82',
  'nvidia-cudnn-cu12<10,>=9.3.0.75',
  'nvidia-cufft-cu12<12,>=11.2.3.61',
  'nvidia-curand-cu12<11,>=10.3.6.82',
  'nvidia-cusolver-cu12<12,>=11.6.3.83',
  'nvidia-cusparse-cu12<13,>=12.5.1.3',
  'nvidia-nccl-cu12<3,>=2.27.7',
  'nvidia-nvjitlink-cu12<13,>=12.5.82',
];

/** The wheel the ONNX Runtime CUDA provider comes from; its version must be onnxruntime-node's. */
const ONNX_GPU_WHEEL = {
  pypi: 'onnxruntime-gpu',
  version: '1.30.0',
  file: 'onnxruntime_gpu-1.30.0-cp311-cp311-manylinux_2_28_x86_64.whl',
  sha256: '4fbf0c5d7b5fb99266c2e8a802e3e64af68bdc383e0f3c7349b985f1087eedaa',
  python: '3.11',
  platform: 'manylinux_2_28_x86_64',
};
/** The provider libraries, as wheel members; they go into onnxruntime-node's folder under their own names. */
const ONNX_PROVIDER_MEMBERS = ['onnxruntime/capi/libonnxruntime_providers_shared.so', 'onnxruntime/capi/libonnxruntime_providers_cuda.so'];

/**
 * onnxruntime-gpu 1.30.0's `cuda` and `cudnn` extras, plus cuBLAS (the provider links libcublas.so.13
 * and libcublasLt.so.13, which those extras only bring in through cudnn's unpinned dependency).
 */
const CUDA13_REQUIREMENTS = [
  'nvidia-cuda-runtime~=13.0',
  'nvidia-cublas~=13.0',
  'nvidia-curand~=10.0',
  'nvidia-cufft~=12.0',
  'nvidia-cuda-nvrtc~=13.0',
  'nvidia-cudnn-cu13~=9.0',
];

/**
 * The libraries to load before the provider, in this order (library file names; within one entry,
 * sorted by name). Everything else in the wheels (libcufftw, libnvblas, nvrtc's builtins, which
 * nvrtc opens itself) is left out. `essential` ones must be present.
 */
const PRELOAD_ORDER = [
  { pattern: /^libcudart\.so\.\d+$/, essential: true },
  { pattern: /^libnvJitLink\.so\.\d+$/, essential: false },
  { pattern: /^libcublasLt\.so\.\d+$/, essential: true },
  { pattern: /^libcublas\.so\.\d+$/, essential: true },
  { pattern: /^libcurand\.so\.\d+$/, essential: true },
  { pattern: /^libcufft\.so\.\d+$/, essential: true },
  { pattern: /^libnvrtc\.so\.\d+$/, essential: true },
  { pattern: /^libcudnn\.so\.\d+$/, essential: true },
  { pattern: /^libcudnn_graph\.so\.\d+$/, essential: false },
  { pattern: /^libcudnn_ops\.so\.\d+$/, essential: false },
  { pattern: /^libcudnn_[a-z_]+\.so\.\d+$/, essential: false },
];

const STAMP = 'relax-cuda.json';

/** Every path the route reads or writes under `root` (pure). */
function cudaPlan(root) {
  const base = path.join(root, 'node_modules', '.relax-cuda');
  const tfjsGpu = nb.packageDir(root, nb.TENSORFLOW_WHEELS.cuda.npmPackage);
  const onnx = nb.packageDir(root, 'onnxruntime-node');
  const cu12 = path.join(base, 'cu12');
  return {
    base,
    cu12,
    cu13: path.join(base, 'cu13'),
    manifest: path.join(base, 'onnxruntime-cuda.json'),
    tfjsGpu,
    /** The link the staged libtensorflow's RUNPATH looks through, its target, and the (relative) link text. */
    tfNvidiaLink: path.join(tfjsGpu, 'deps', 'nvidia'),
    tfNvidiaTarget: path.join(cu12, 'nvidia'),
    tfNvidiaLinkText: path.relative(path.join(tfjsGpu, 'deps'), path.join(cu12, 'nvidia')),
    onnxPackage: onnx,
    providerDir: path.join(onnx, 'bin', 'napi-v6', 'linux', 'x64'),
  };
}

/** `files` (paths of shared libraries) reduced to those to preload, in load order (pure). */
function preloadOrder(files) {
  const rank = (file) => PRELOAD_ORDER.findIndex((e) => e.pattern.test(path.basename(file)));
  return [...new Set(files)]
    .filter((f) => rank(f) >= 0)
    .sort((a, b) => rank(a) - rank(b) || path.basename(a).localeCompare(path.basename(b)));
}

/** The essential libraries `ordered` lacks, by their pattern's text (pure). */
function missingEssentials(ordered) {
  return PRELOAD_ORDER.filter((e) => e.essential && !ordered.some((f) => e.pattern.test(path.basename(f)))).map((e) => e.pattern.source);
}

/** Throws unless onnxruntime-node under `root` is the version the provider wheel was built with. */
function checkOnnxRuntimeVersion(root, wheel = ONNX_GPU_WHEEL) {
  const pkgJson = path.join(cudaPlan(root).onnxPackage, 'package.json');
  if (!fs.existsSync(pkgJson)) throw new Error('onnxruntime-node is not in node_modules (run npm ci)');
  const version = JSON.parse(fs.readFileSync(pkgJson, 'utf8')).version;
  if (version !== wheel.version) {
    throw new Error(`onnxruntime-node ${version} is installed, but the CUDA provider is pinned from ${wheel.pypi} ${wheel.version}: a provider only loads into its own ONNX Runtime version; update ONNX_GPU_WHEEL in scripts/cuda-route.js with onnxruntime-node`);
  }
  return version;
}

function run(cmd, args) {
  console.log(`[setup] ${cmd} ${args.join(' ')}`);
  execFileSync(cmd, args, { stdio: 'inherit' });
}

/**
 * Downloads a pinned wheel with `pip` into `dir` and checks its digest, for the wheel's own
 * python/platform tags (native-backend's downloadWheel asks for manylinux_2_27, which this wheel is not).
 */
function downloadPinnedWheel(pip, wheel, dir) {
  run(pip, [
    'download', '--quiet', '--disable-pip-version-check', '--no-deps', '--only-binary=:all:',
    '--python-version', wheel.python, '--platform', wheel.platform, '-d', dir, `${wheel.pypi}==${wheel.version}`,
  ]);
  const file = path.join(dir, wheel.file);
  if (!fs.existsSync(file)) throw new Error(`pip did not produce ${wheel.file}`);
  const digest = nb.sha256File(file);
  if (digest !== wheel.sha256) throw new Error(`${wheel.file}: sha256 ${digest}, expected ${wheel.sha256}`);
  return file;
}

/** Whether `dir` holds a pip --target install of exactly `requirements`. */
function targetIsCurrent(dir, requirements) {
  try {
    return JSON.stringify(JSON.parse(fs.readFileSync(path.join(dir, STAMP), 'utf8')).requirements) === JSON.stringify(requirements);
  } catch {
    return false;
  }
}

/** pip-installs `requirements` into `dir` (afresh) unless it already holds them; true when it installed. */
function pipInstallTarget(pip, requirements, dir) {
  if (targetIsCurrent(dir, requirements)) return false;
  fs.rmSync(dir, { recursive: true, force: true });
  run(pip, ['install', '--quiet', '--disable-pip-version-check', '--no-compile', '--only-binary=:all:', '--target', dir, ...requirements]);
  fs.writeFileSync(path.join(dir, STAMP), JSON.stringify({ requirements }) + '\n');
  return true;
}

/** Points `link` at `text` (a relative target), replacing whatever is there. */
function ensureSymlink(link, text) {
  try {
    if (fs.readlinkSync(link) === text) return;
  } catch {
    // absent, or not a link
  }
  fs.rmSync(link, { recursive: true, force: true });
  fs.symlinkSync(text, link);
}

/** Installs the trainer's CUDA 12 libraries and links them where tfjs-node-gpu's libtensorflow looks. */
function installTensorflowCudaLibraries({ root, pip }) {
  const plan = cudaPlan(root);
  const wheel = nb.TENSORFLOW_WHEELS.cuda;
  if (!nb.isInstalled(plan.tfjsGpu, wheel)) throw new Error(`${wheel.npmPackage} is not built from ${wheel.pypi} ${wheel.version} (see its native build above)`);
  const installed = pipInstallTarget(pip, CUDA12_REQUIREMENTS, plan.cu12);
  if (!fs.existsSync(plan.tfNvidiaTarget)) throw new Error(`pip left no ${plan.tfNvidiaTarget}`);
  ensureSymlink(plan.tfNvidiaLink, plan.tfNvidiaLinkText);
  return `${wheel.npmPackage}: CUDA 12 libraries ${installed ? 'installed' : 'already installed'} in ${plan.cu12} (${CUDA12_REQUIREMENTS.length} wheels), linked at ${plan.tfNvidiaLink}`;
}

/** The shared libraries under a pip --target dir's nvidia/<name>/lib folders (absolute paths). */
function nvidiaLibraries(targetDir) {
  const nvidia = path.join(targetDir, 'nvidia');
  if (!fs.existsSync(nvidia)) return [];
  return fs.readdirSync(nvidia).flatMap((name) => {
    const lib = path.join(nvidia, name, 'lib');
    return fs.existsSync(lib) ? fs.readdirSync(lib).filter((f) => /\.so(\.\d+)*$/.test(f)).map((f) => path.join(lib, f)) : [];
  });
}

/** The manifest the rollout process reads (engines/cuda-libraries.ts); written by installOnnxCudaProvider. */
function onnxManifest(plan, preload, wheel = ONNX_GPU_WHEEL) {
  return { onnxruntime: wheel.version, wheel: wheel.file, sha256: wheel.sha256, providerDir: plan.providerDir, preload };
}

function providerFiles(plan) {
  return ONNX_PROVIDER_MEMBERS.map((m) => path.join(plan.providerDir, path.posix.basename(m)));
}

/** Whether the manifest under `plan` is this wheel's and everything it names exists. */
function onnxProviderIsCurrent(plan, wheel = ONNX_GPU_WHEEL) {
  try {
    const m = JSON.parse(fs.readFileSync(plan.manifest, 'utf8'));
    return m.sha256 === wheel.sha256 && m.providerDir === plan.providerDir && targetIsCurrent(plan.cu13, CUDA13_REQUIREMENTS) &&
      [...providerFiles(plan), ...m.preload].every((f) => fs.existsSync(f));
  } catch {
    return false;
  }
}

/** Extracts the provider libraries from the wheel into `dir` under their own names (via a temp name). */
function extractProviders(python, wheelFile, dir) {
  const script = [
    'import os, shutil, sys, zipfile',
    'z = zipfile.ZipFile(sys.argv[1])',
    'for name in sys.argv[3:]:',
    '    out = os.path.join(sys.argv[2], os.path.basename(name))',
    '    with z.open(name) as src, open(out + ".part", "wb") as dst: shutil.copyfileobj(src, dst)',
    '    os.chmod(out + ".part", 0o755)',
    '    os.replace(out + ".part", out)',
  ].join('\n');
  console.log(`[setup] extracting the CUDA provider libraries from ${path.basename(wheelFile)} into ${dir}`);
  execFileSync(python, ['-c', script, wheelFile, dir, ...ONNX_PROVIDER_MEMBERS], { stdio: 'inherit' });
}

/** Installs ONNX Runtime's CUDA provider and its CUDA 13 libraries; writes the preload manifest. */
function installOnnxCudaProvider({ root, pip, python }) {
  const plan = cudaPlan(root);
  checkOnnxRuntimeVersion(root);
  if (!fs.existsSync(path.join(plan.providerDir, 'libonnxruntime.so.1'))) throw new Error(`onnxruntime-node has no ${path.join(plan.providerDir, 'libonnxruntime.so.1')}`);
  if (onnxProviderIsCurrent(plan)) return `onnxruntime-node: CUDA provider already installed (manifest ${plan.manifest})`;
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-cuda-'));
  try {
    extractProviders(python, downloadPinnedWheel(pip, ONNX_GPU_WHEEL, work), plan.providerDir);
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
  pipInstallTarget(pip, CUDA13_REQUIREMENTS, plan.cu13);
  const preload = preloadOrder(nvidiaLibraries(plan.cu13));
  const missing = missingEssentials(preload);
  if (missing.length) throw new Error(`the CUDA 13 wheels in ${plan.cu13} lack ${missing.join(', ')}`);
  fs.writeFileSync(plan.manifest, JSON.stringify(onnxManifest(plan, preload), null, 2) + '\n');
  return `onnxruntime-node: CUDA provider from ${ONNX_GPU_WHEEL.pypi} ${ONNX_GPU_WHEEL.version} in ${plan.providerDir}; ${preload.length} CUDA 13 libraries to preload (manifest ${plan.manifest})`;
}

module.exports = {
  CUDA12_REQUIREMENTS,
  CUDA13_REQUIREMENTS,
  ONNX_GPU_WHEEL,
  ONNX_PROVIDER_MEMBERS,
  PRELOAD_ORDER,
  cudaPlan,
  preloadOrder,
  missingEssentials,
  checkOnnxRuntimeVersion,
  downloadPinnedWheel,
  targetIsCurrent,
  pipInstallTarget,
  ensureSymlink,
  nvidiaLibraries,
  onnxManifest,
  onnxProviderIsCurrent,
  installTensorflowCudaLibraries,
  installOnnxCudaProvider,
};
