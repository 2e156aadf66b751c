// The native and CUDA setup routes (scripts/native-backend.js, scripts/cuda-route.js), the CUDA
// library preload (engines/cuda-libraries.ts) and the GPU check's summary (scripts/gpu-check*), all
// checked on the CPU: fake extracted wheels, fake `pip` executables and fake package folders in temp
// dirs. Nothing here downloads or needs a GPU.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { formatChecks } from '../cli/doctor';
import { PACKAGE_ROOT } from '../config/environment';
import { onnxCudaManifestPath, preloadCudaLibraries, readOnnxCudaManifest } from '../engines/cuda-libraries';

const nb = require(path.join(PACKAGE_ROOT, 'scripts', 'native-backend.js'));
const route = require(path.join(PACKAGE_ROOT, 'scripts', 'cuda-route.js'));
const summary = require(path.join(PACKAGE_ROOT, 'scripts', 'gpu-check-summary.js'));

const temps: string[] = [];
after(() => {
  for (const dir of temps) fs.rmSync(dir, { recursive: true, force: true });
});
function tempDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-cuda-test-'));
  temps.push(dir);
  return dir;
}
function write(file: string, text = ''): string {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, text);
  return file;
}
/** A fake `pip`: a shell script that logs its arguments to `log` (one call per line) and then runs `body`. */
function fakePip(dir: string, body: string): { pip: string; log: string } {
  const log = path.join(dir, 'pip.log');
  const pip = write(path.join(dir, 'pip'), `#!/bin/sh\necho "$*" >> '${log}'\n${body}\n`);
  fs.chmodSync(pip, 0o755);
  return { pip, log };
}
const pipCalls = (log: string): string[] => (fs.existsSync(log) ? fs.readFileSync(log, 'utf8').trim().split('\n') : []);
// Shell that finds the value after `flag` in "$@" and stores it in $out.
const argAfter = (flag: string): string => `out=''; prev=''; for a in "$@"; do [ "$prev" = '${flag}' ] && out="$a"; prev="$a"; done`;
/** A fake npm package with tfjs-node's binary layout, optionally built from `wheel` (stamp + binding). */
function fakeTfjsPackage(pkgDir: string, wheel?: { sha256: string }): void {
  write(path.join(pkgDir, 'package.json'), JSON.stringify({ binary: { module_name: 'tfjs_binding', module_path: './lib/napi-v{napi_build_version}', napi_versions: [3, 4, 8] } }));
  if (!wheel) return;
  write(path.join(pkgDir, 'deps', 'relax-native.json'), JSON.stringify({ sha256: wheel.sha256 }));
  write(path.join(pkgDir, 'lib', 'napi-v8', 'tfjs_binding.node'), 'binding');
}

test('stageLibtensorflow puts an extracted wheel into deps/ in the layout binding.gyp expects', () => {
  const layout = nb.stagedLibraryLayout();
  assert.deepEqual(layout.files, ['libtensorflow_cc.so.2', 'libtensorflow_framework.so.2']);
  assert.equal(layout.links[`libtensorflow.so.${nb.TFJS_LIBTENSORFLOW_VERSION}`], 'libtensorflow_cc.so.2');
  const dir = tempDir();
  const extracted = path.join(dir, 'x');
  for (const f of layout.files) write(path.join(extracted, 'tensorflow', f), `contents of ${f}`);
  write(path.join(extracted, 'tensorflow', 'include', 'tensorflow', 'c', 'c_api.h'), '// c api');
  const pkgDir = path.join(dir, 'pkg');
  write(path.join(pkgDir, 'deps', 'stale-file'), 'from an earlier build');
  const deps = nb.stageLibtensorflow(extracted, pkgDir);
  assert.equal(deps, path.join(pkgDir, 'deps'));
  assert.ok(!fs.existsSync(path.join(deps, 'stale-file')), 'deps/ is made afresh');
  for (const f of layout.files) {
    assert.equal(fs.readFileSync(path.join(deps, 'lib', f), 'utf8'), `contents of ${f}`);
    assert.ok(!fs.existsSync(path.join(extracted, 'tensorflow', f)), `${f} was moved, not copied`);
  }
  for (const [link, target] of Object.entries(layout.links as Record<string, string>)) {
    assert.equal(fs.readlinkSync(path.join(deps, 'lib', link)), target, link);
    assert.equal(fs.readFileSync(path.join(deps, 'lib', link), 'utf8'), `contents of ${target}`);
  }
  assert.equal(fs.readFileSync(path.join(deps, 'include', 'tensorflow', 'c', 'c_api.h'), 'utf8'), '// c api');
  assert.ok(!fs.existsSync(path.join(extracted, 'tensorflow', 'include')));
});

test('bindingPath reads package.json; isInstalled wants the stamp of the same wheel and the binding', () => {
  const pkgDir = path.join(tempDir(), 'node_modules', '@tensorflow', 'tfjs-node');
  assert.equal(nb.packageDir(path.resolve(pkgDir, '../../..'), '@tensorflow/tfjs-node'), pkgDir);
  fakeTfjsPackage(pkgDir);
  assert.equal(nb.bindingPath(pkgDir), path.join(pkgDir, 'lib', 'napi-v8', 'tfjs_binding.node'));
  const wheel = nb.TENSORFLOW_WHEELS.cpu;
  assert.equal(nb.isInstalled(pkgDir, wheel), false, 'no stamp');
  write(path.join(pkgDir, 'deps', 'relax-native.json'), JSON.stringify({ sha256: wheel.sha256 }));
  assert.equal(nb.isInstalled(pkgDir, wheel), false, 'stamp but no binding');
  write(nb.bindingPath(pkgDir), 'binding');
  assert.equal(nb.isInstalled(pkgDir, wheel), true);
  assert.equal(nb.isInstalled(pkgDir, nb.TENSORFLOW_WHEELS.cuda), false, 'stamp of another wheel');
  write(path.join(pkgDir, 'deps', 'relax-native.json'), '{not json');
  assert.equal(nb.isInstalled(pkgDir, wheel), false, 'malformed stamp');
});

test('a build that failed is not retried on every setup: installNativeBackend names the reason and how to retry', () => {
  const root = tempDir();
  const pkgDir = path.join(root, 'node_modules', '@tensorflow', 'tfjs-node');
  fakeTfjsPackage(pkgDir);
  const wheel = nb.TENSORFLOW_WHEELS.cpu;
  assert.equal(nb.previousFailure(pkgDir, wheel), undefined);
  write(path.join(pkgDir, 'deps', 'relax-native-failed.json'), JSON.stringify({ sha256: wheel.sha256, error: 'g++: not found' }));
  assert.equal(nb.previousFailure(pkgDir, wheel), 'g++: not found');
  assert.equal(nb.previousFailure(pkgDir, nb.TENSORFLOW_WHEELS.cuda), undefined, 'a failure of another wheel does not count');
  // pip is never called: the refusal comes before any download.
  assert.throws(() => nb.installNativeBackend({ root, flavor: 'cpu', pip: '/nonexistent/pip', python: '/nonexistent/python' }), /an earlier setup could not build it \(g\+\+: not found\); delete .*deps to try again/);
});

test('nodeHeadersDir finds include/node/node_api.h next to the node binary, else undefined', () => {
  const prefix = tempDir();
  const execPath = path.join(prefix, 'bin', 'node');
  assert.equal(nb.nodeHeadersDir(execPath), undefined);
  write(path.join(prefix, 'include', 'node', 'node_api.h'));
  assert.equal(nb.nodeHeadersDir(execPath), prefix);
  const own = nb.nodeHeadersDir();
  if (own !== undefined) assert.ok(fs.existsSync(path.join(own, 'include', 'node', 'node_api.h')));
});

test('downloadWheel and downloadPinnedWheel refuse a file whose sha256 is not the pinned one', () => {
  const dir = tempDir();
  const file = 'fake-1.0-py3-none-any.whl';
  const { pip, log } = fakePip(dir, `${argAfter('-d')}\nprintf 'not the wheel' > "$out/${file}"`);
  const wheel = { pypi: 'fake', version: '1.0', file, sha256: '0'.repeat(64), python: '3.11', platform: 'manylinux_2_28_x86_64' };
  const out = path.join(dir, 'out');
  fs.mkdirSync(out);
  assert.throws(() => nb.downloadWheel(pip, wheel, out), new RegExp(`${file}: sha256 [0-9a-f]{64}, expected 0{64}`));
  assert.match(pipCalls(log)[0], /--platform manylinux_2_27_x86_64 .*fake==1\.0$/);
  assert.throws(() => route.downloadPinnedWheel(pip, wheel, out), /sha256 [0-9a-f]{64}, expected 0{64}/);
  assert.match(pipCalls(log)[1], /--python-version 3\.11 --platform manylinux_2_28_x86_64 .*fake==1\.0$/, 'the wheel\'s own platform tag');
  const good = { ...wheel, sha256: nb.sha256File(path.join(out, file)) };
  assert.equal(route.downloadPinnedWheel(pip, good, out), path.join(out, file));
  const silent = fakePip(path.join(dir, 'silent'), 'true').pip;
  assert.throws(() => nb.downloadWheel(silent, wheel, path.join(dir, 'silent')), /pip did not produce fake-1\.0-py3-none-any\.whl/);
});

test('the CUDA plan: cu12/cu13 under node_modules/.relax-cuda, the deps/nvidia link, the provider folder', () => {
  const root = '/r';
  const plan = route.cudaPlan(root);
  assert.equal(plan.cu12, '/r/node_modules/.relax-cuda/cu12');
  assert.equal(plan.cu13, '/r/node_modules/.relax-cuda/cu13');
  assert.equal(plan.manifest, onnxCudaManifestPath(root), 'setup writes where the rollout process reads');
  assert.equal(plan.tfNvidiaLink, '/r/node_modules/@tensorflow/tfjs-node-gpu/deps/nvidia');
  assert.equal(plan.tfNvidiaLinkText, '../../../.relax-cuda/cu12/nvidia');
  assert.equal(path.resolve(path.dirname(plan.tfNvidiaLink), plan.tfNvidiaLinkText), plan.tfNvidiaTarget);
  assert.equal(plan.providerDir, '/r/node_modules/onnxruntime-node/bin/napi-v6/linux/x64');
  assert.equal(route.CUDA12_REQUIREMENTS.length, 12);
  assert.ok(route.CUDA13_REQUIREMENTS.includes('nvidia-cublas~=13.0'));
});

test('installTensorflowCudaLibraries: pip --target into cu12, deps/nvidia linked so $ORIGIN/../nvidia/<name>/lib resolves; cheap the second time', () => {
  const root = tempDir();
  const plan = route.cudaPlan(root);
  const pipDir = path.join(root, 'fake-pip');
  const { pip, log } = fakePip(pipDir, `${argAfter('--target')}\nmkdir -p "$out/nvidia/cublas/lib" && echo lib > "$out/nvidia/cublas/lib/libcublas.so.12"`);
  assert.throws(() => route.installTensorflowCudaLibraries({ root, pip }), /@tensorflow\/tfjs-node-gpu is not built from tensorflow 2\.21\.0/);
  fakeTfjsPackage(plan.tfjsGpu, nb.TENSORFLOW_WHEELS.cuda);
  write(path.join(plan.tfjsGpu, 'deps', 'lib', 'libtensorflow_cc.so.2'));
  assert.match(route.installTensorflowCudaLibraries({ root, pip }), /CUDA 12 libraries installed in .*cu12 \(12 wheels\)/);
  const call = pipCalls(log)[0];
  assert.match(call, new RegExp(`^install .*--only-binary=:all: --target ${plan.cu12} `));
  for (const req of route.CUDA12_REQUIREMENTS) assert.ok(call.includes(req), req);
  assert.equal(fs.readlinkSync(plan.tfNvidiaLink), plan.tfNvidiaLinkText);
  const origin = path.join(plan.tfjsGpu, 'deps', 'lib');
  assert.equal(fs.readFileSync(path.join(origin, '..', 'nvidia', 'cublas', 'lib', 'libcublas.so.12'), 'utf8'), 'lib\n');
  assert.match(route.installTensorflowCudaLibraries({ root, pip }), /already installed/);
  assert.equal(pipCalls(log).length, 1, 'no second pip run');
  fs.rmSync(plan.tfNvidiaLink);
  fs.symlinkSync('/somewhere/else', plan.tfNvidiaLink);
  route.installTensorflowCudaLibraries({ root, pip });
  assert.equal(fs.readlinkSync(plan.tfNvidiaLink), plan.tfNvidiaLinkText, 'a wrong link is replaced');
});

test('preloadOrder: cudart, nvJitLink, cublasLt, cublas, curand, cufft, nvrtc, then cudnn and its sub-libraries; extras dropped', () => {
  const lib = (dir: string, f: string): string => `/c/nvidia/${dir}/lib/${f}`;
  const files = [
    lib('cudnn', 'libcudnn_ops.so.9'), lib('cu13', 'libnvrtc-builtins.so.13.5'), lib('cu13', 'libcublas.so.13'),
    lib('cudnn', 'libcudnn_adv.so.9'), lib('cu13', 'libnvblas.so.13'), lib('cu13', 'libcufftw.so.12'), lib('cudnn', 'libcudnn.so.9'),
    lib('cu13', 'libcurand.so.10'), lib('cudnn', 'libcudnn_graph.so.9'), lib('cu13', 'libcufft.so.12'), lib('cu13', 'libnvrtc.so.13'),
    lib('cu13', 'libcublasLt.so.13'), lib('cudnn', 'libcudnn_cnn.so.9'), lib('cu13', 'libnvJitLink.so.13'), lib('cu13', 'libcudart.so.13'),
    lib('cu13', 'libcudart.so.13'), lib('cu13', 'README.txt'),
  ];
  assert.deepEqual(route.preloadOrder(files).map((f: string) => path.basename(f)), [
    'libcudart.so.13', 'libnvJitLink.so.13', 'libcublasLt.so.13', 'libcublas.so.13', 'libcurand.so.10', 'libcufft.so.12', 'libnvrtc.so.13',
    'libcudnn.so.9', 'libcudnn_graph.so.9', 'libcudnn_ops.so.9', 'libcudnn_adv.so.9', 'libcudnn_cnn.so.9',
  ]);
  assert.deepEqual(route.missingEssentials(route.preloadOrder(files)), []);
  assert.equal(route.missingEssentials([lib('cu13', 'libcudart.so.13')]).length, 6);
});

test('the ONNX Runtime CUDA provider is refused for another onnxruntime-node version, before any download', () => {
  assert.equal(route.checkOnnxRuntimeVersion(PACKAGE_ROOT), route.ONNX_GPU_WHEEL.version, 'the installed onnxruntime-node matches the pin');
  const pkg = JSON.parse(fs.readFileSync(path.join(PACKAGE_ROOT, 'package.json'), 'utf8'));
  assert.equal(pkg.dependencies['onnxruntime-node'], route.ONNX_GPU_WHEEL.version);
  const root = tempDir();
  write(path.join(root, 'node_modules', 'onnxruntime-node', 'package.json'), JSON.stringify({ version: '1.29.0' }));
  const args = { root, pip: '/nonexistent/pip', python: '/nonexistent/python' };
  assert.throws(() => route.installOnnxCudaProvider(args), /onnxruntime-node 1\.29\.0 is installed, but the CUDA provider is pinned from onnxruntime-gpu 1\.30\.0/);
  assert.throws(() => route.installOnnxCudaProvider({ ...args, root: tempDir() }), /onnxruntime-node is not in node_modules/);
});

test('the preload manifest: written by cuda-route, read back by readOnnxCudaManifest; current only while everything exists', () => {
  const root = tempDir();
  const plan = route.cudaPlan(root);
  assert.equal(readOnnxCudaManifest(root), undefined, 'no CUDA setup, no manifest');
  const libs = ['cudnn/lib/libcudnn.so.9', 'cu13/lib/libcudart.so.13', 'cu13/lib/libcublasLt.so.13', 'cu13/lib/libcufftw.so.12']
    .map((f) => write(path.join(plan.cu13, 'nvidia', f)));
  write(path.join(plan.cu13, 'nvidia', 'cu13', 'lib', 'notes.txt'));
  const found = route.nvidiaLibraries(plan.cu13);
  assert.deepEqual([...found].sort(), [...libs].sort());
  const preload = route.preloadOrder(found);
  assert.deepEqual(preload, [libs[1], libs[2], libs[0]]);
  write(plan.manifest, JSON.stringify(route.onnxManifest(plan, preload)));
  assert.deepEqual(readOnnxCudaManifest(root), { onnxruntime: '1.30.0', providerDir: plan.providerDir, preload });
  assert.equal(route.onnxProviderIsCurrent(plan), false, 'no provider libraries, no cu13 stamp');
  for (const m of route.ONNX_PROVIDER_MEMBERS) write(path.join(plan.providerDir, path.basename(m)));
  write(path.join(plan.cu13, 'relax-cuda.json'), JSON.stringify({ requirements: route.CUDA13_REQUIREMENTS }));
  assert.equal(route.onnxProviderIsCurrent(plan), true);
  fs.rmSync(libs[0]);
  assert.equal(route.onnxProviderIsCurrent(plan), false, 'a preload library is gone');
  write(plan.manifest, JSON.stringify({ onnxruntime: '1.30.0', preload: 'x' }));
  assert.throws(() => readOnnxCudaManifest(root), /expected \{ onnxruntime, providerDir, preload: \[paths\] \}/);
});

// A system library to load for real, copied so that it is not one this process already has.
function systemLibraryCopy(): string | undefined {
  const candidates = ['/lib/x86_64-linux-gnu/libz.so.1', '/usr/lib/x86_64-linux-gnu/libz.so.1', '/lib64/libz.so.1', '/usr/lib64/libz.so.1', '/lib/aarch64-linux-gnu/libz.so.1'];
  const found = candidates.find((f) => fs.existsSync(f));
  if (!found || process.platform !== 'linux') return undefined;
  const copy = path.join(tempDir(), 'librelaxpreloadtest.so.1');
  fs.copyFileSync(found, copy);
  return copy;
}

test('preloadCudaLibraries reports missing and unloadable files as failed, never throws, and keeps what it loads', (t) => {
  const dir = tempDir();
  const missing = path.join(dir, 'libmissing.so.1');
  const notElf = write(path.join(dir, 'libnotelf.so.1'), 'plain text, not a shared library');
  const real = systemLibraryCopy();
  const result = preloadCudaLibraries({ onnxruntime: '1.30.0', providerDir: dir, preload: [missing, notElf, ...(real ? [real] : [])] });
  assert.deepEqual(result.failed.map((f) => f.file), [missing, notElf]);
  assert.match(result.failed[0].error, /not found/);
  assert.ok(result.failed[1].error.length > 0);
  if (!real) {
    t.diagnostic('no libz to load for real here; the loaded path is checked with a fake dlopen only');
  } else {
    assert.deepEqual(result.loaded, [real], 'loaded ("did not self-register") and still mapped (RTLD_NODELETE)');
    assert.ok(fs.readFileSync('/proc/self/maps', 'utf8').includes(real));
  }
  const flags: number[] = [];
  const fake = preloadCudaLibraries({ onnxruntime: '1.30.0', providerDir: dir, preload: [notElf, notElf] }, (file, f) => {
    flags.push(f);
    if (flags.length === 1) throw new Error(`Module did not self-register: '${file}'.`);
    throw new Error(`${file}: undefined symbol: cudaGetDevice`);
  });
  assert.deepEqual(fake.loaded, [notElf]);
  assert.deepEqual(fake.failed, [{ file: notElf, error: `${notElf}: undefined symbol: cudaGetDevice` }]);
  assert.equal(flags[0], os.constants.dlopen.RTLD_NOW | os.constants.dlopen.RTLD_GLOBAL | 0x1000);
});

test('the gpu-check summary: GPU, driver, doctor rows and the last JSON line of each bench', () => {
  const doctor = formatChecks([
    { name: 'temporal server', ok: false, detail: 'connect ECONNREFUSED', fix: 'start the stack' },
    { name: 'tfjs backend', ok: true, detail: 'native: @tensorflow/tfjs-node-gpu 4.22.0, TensorFlow 2.21.0' },
    { name: 'onnx runtime', ok: true, detail: 'onnxruntime-node 1.30.0, providers cuda, cpu' },
  ]);
  const s = summary.buildSummary({
    nvidiaSmi: 'NVIDIA H200, 570.124.06\nNVIDIA H200, 570.124.06\n',
    setup: { stdout: '[setup] npm ci\n[setup] ONNX Runtime CUDA provider not installed: boom\n[setup] tsc -p x\n', rc: 0 },
    doctor: { stdout: doctor, rc: 1 },
    onnxProbe: { stdout: '{"session":"ok","y":[0,2],"preloaded":17,"preload_failed":[]}\n', rc: 0 },
    tiny: { stdout: 'progress line\n{"rollout_tokens_per_s":123}\n', stderr: '', rc: 0 },
    smollm2: { stdout: 'starting\n', stderr: 'a\nb\nError: no model\n', rc: 1 },
  });
  assert.deepEqual(s, {
    gpu: 'NVIDIA H200', driver: '570.124.06', gpu_count: 2, driver_cuda13: false,
    tfjs_backend: 'native: @tensorflow/tfjs-node-gpu 4.22.0, TensorFlow 2.21.0',
    onnx_providers: ['cuda', 'cpu'],
    onnx_cuda_session: { session: 'ok', y: [0, 2], preloaded: 17, preload_failed: [] },
    tiny: { rollout_tokens_per_s: 123 },
    smollm2: { error: 'no JSON object on the last stdout line', rc: 1, stderr_tail: 'a\nb\nError: no model' },
    setup: { rc: 0, cuda: ['ONNX Runtime CUDA provider not installed: boom'] },
    doctor_rc: 1,
  });
  const failing = summary.buildSummary({ nvidiaSmi: '', doctor: { stdout: formatChecks([{ name: 'onnx runtime', ok: false, detail: 'cannot load' }]), rc: 1 } });
  assert.deepEqual(failing.onnx_providers, { ok: false, detail: 'cannot load' });
  assert.equal(failing.gpu, null);
  assert.equal(failing.tfjs_backend, null);
  assert.equal(failing.tiny.error, 'no JSON object on the last stdout line');
  const dir = tempDir();
  write(path.join(dir, 'nvidia-smi.out'), 'NVIDIA H100 80GB HBM3, 550.54.15\n');
  write(path.join(dir, 'tiny.out'), '{"ok":true}\n');
  write(path.join(dir, 'tiny.rc'), '0\n');
  const cli = spawnSync(process.execPath, [path.join(PACKAGE_ROOT, 'scripts', 'gpu-check-summary.js'), dir], { encoding: 'utf8' });
  assert.equal(cli.status, 0, cli.stderr);
  const line = JSON.parse(cli.stdout.trim());
  assert.equal(line.gpu, 'NVIDIA H100 80GB HBM3');
  assert.equal(summary.buildSummary({ nvidiaSmi: 'NVIDIA H200, 580.65.06' }).driver_cuda13, true);
  assert.deepEqual(line.tiny, { ok: true });
  assert.equal(line.smollm2.rc, null);
});

test('gpu-check.sh parses (bash -n) and, where nvidia-smi fails, prints one JSON error line and exits 1', () => {
  const script = path.join(PACKAGE_ROOT, 'scripts', 'gpu-check.sh');
  const syntax = spawnSync('bash', ['-n', script], { encoding: 'utf8' });
  assert.equal(syntax.status, 0, syntax.stderr);
  const bin = tempDir();
  write(path.join(bin, 'nvidia-smi'), '#!/bin/sh\nexit 9\n');
  fs.chmodSync(path.join(bin, 'nvidia-smi'), 0o755);
  const run = spawnSync('bash', [script], { encoding: 'utf8', env: { ...process.env, PATH: `${bin}:${process.env.PATH}` } });
  assert.equal(run.status, 1, run.stderr);
  assert.deepEqual(JSON.parse(run.stdout.trim()), { error: 'nvidia-smi fails: no usable NVIDIA driver' });
});
