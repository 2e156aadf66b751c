// Native TensorFlow for the trainer, from registry packages only. `@tensorflow/tfjs-node` (and
// `-gpu`) would download libtensorflow from a web host at install time; instead setup installs the
// npm packages without scripts, takes the TensorFlow C library out of a pinned PyPI wheel
// (`tensorflow-cpu` for the CPU backend, `tensorflow` for CUDA), stages it where the binding's
// build looks for it (deps/lib, deps/include, with the file names its install script expects) and
// builds the N-API binding from source with node-gyp against this Node's own headers.
// Every failure is reported and leaves the wasm backend, which always works, in charge.
'use strict';
const { execFileSync } = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

/** The wheels, pinned by version and sha256 (PyPI's simple index lists the same digests). */
const TENSORFLOW_WHEELS = {
  cpu: {
    npmPackage: '@tensorflow/tfjs-node',
    pypi: 'tensorflow-cpu',
    version: '2.21.0',
    file: 'tensorflow_cpu-2.21.0-cp311-cp311-manylinux_2_27_x86_64.whl',
    sha256: '2b847d217b02ee7731ed91431daf3250daa0196c3c94614d23be27232e6e5b6c',
  },
  cuda: {
    npmPackage: '@tensorflow/tfjs-node-gpu',
    pypi: 'tensorflow',
    version: '2.21.0',
    file: 'tensorflow-2.21.0-cp311-cp311-manylinux_2_27_x86_64.whl',
    sha256: '9056fbc9ba04235810b71ae6cbd958a196e8804fb53bbcffbf3e23b56155f124',
  },
};
/** The wheel tag to ask pip for, whatever Python runs pip: the C libraries inside do not depend on it. */
const WHEEL_PYTHON = '3.11';
const WHEEL_PLATFORM = 'manylinux_2_27_x86_64';
/** The libtensorflow version tfjs-node 4.22's install script and binding.gyp name their files after. */
const TFJS_LIBTENSORFLOW_VERSION = '2.9.1';
/** Stamp written next to a built binding: which wheel it was built from. */
const STAMP = 'relax-native.json';
/** Stamp of a failed build (the libraries are removed): later setups do not retry it on every run. */
const FAILED_STAMP = 'relax-native-failed.json';

/** Whether this platform can take the route at all (the wheels are Linux x86-64). */
function nativeRouteSupported(platform = process.platform, arch = process.arch) {
  return platform === 'linux' && arch === 'x64';
}

/** The members of a TensorFlow wheel the binding needs: the two libraries and the C API headers. */
function wheelMembers() {
  return {
    libraries: ['tensorflow/libtensorflow_cc.so.2', 'tensorflow/libtensorflow_framework.so.2'],
    includePrefix: 'tensorflow/include/',
    includeDirs: ['tensorflow/include/tensorflow/c/', 'tensorflow/include/tensorflow/core/platform/', 'tensorflow/include/tsl/platform/', 'tensorflow/include/xla/tsl/'],
  };
}

/**
 * The files to create under the npm package's deps/lib: the wheel's two libraries under their own
 * names (the names the built binding will ask the loader for: their SONAMEs) and links with the
 * names binding.gyp links against (-ltensorflow, -ltensorflow_framework) and install.js checks for.
 */
function stagedLibraryLayout() {
  const v = TFJS_LIBTENSORFLOW_VERSION;
  return {
    files: ['libtensorflow_cc.so.2', 'libtensorflow_framework.so.2'],
    links: {
      'libtensorflow.so': 'libtensorflow_cc.so.2',
      [`libtensorflow.so.${v}`]: 'libtensorflow_cc.so.2',
      'libtensorflow_framework.so': 'libtensorflow_framework.so.2',
      [`libtensorflow_framework.so.${v}`]: 'libtensorflow_framework.so.2',
    },
  };
}

/** The node-gyp headers directory of the running Node (so the build downloads nothing), or undefined. */
function nodeHeadersDir(execPath = process.execPath) {
  const prefix = path.resolve(path.dirname(execPath), '..');
  return fs.existsSync(path.join(prefix, 'include', 'node', 'node_api.h')) ? prefix : undefined;
}

function packageDir(root, npmPackage) {
  return path.join(root, 'node_modules', ...npmPackage.split('/'));
}

/** Where the built binding lands (package.json's binary.module_path for N-API 8, what tfjs-node loads). */
function bindingPath(pkgDir) {
  const pkg = JSON.parse(fs.readFileSync(path.join(pkgDir, 'package.json'), 'utf8'));
  const modulePath = pkg.binary.module_path.replace('{napi_build_version}', String(pkg.binary.napi_versions.at(-1)));
  return path.resolve(pkgDir, modulePath, `${pkg.binary.module_name}.node`);
}

/** Whether `pkgDir` holds a binding built from exactly `wheel`. */
function isInstalled(pkgDir, wheel) {
  try {
    const stamp = JSON.parse(fs.readFileSync(path.join(pkgDir, 'deps', STAMP), 'utf8'));
    return stamp.sha256 === wheel.sha256 && fs.existsSync(bindingPath(pkgDir));
  } catch {
    return false;
  }
}

function sha256File(file) {
  const hash = crypto.createHash('sha256');
  const fd = fs.openSync(file, 'r');
  try {
    const buf = Buffer.allocUnsafe(1 << 22);
    let n;
    while ((n = fs.readSync(fd, buf, 0, buf.length, null)) > 0) hash.update(buf.subarray(0, n));
  } finally {
    fs.closeSync(fd);
  }
  return hash.digest('hex');
}

function run(cmd, args, opts = {}) {
  console.log(`[setup] ${cmd} ${args.join(' ')}`);
  execFileSync(cmd, args, { stdio: 'inherit', ...opts });
}

/** Downloads `wheel` with `pip` into `dir` and checks its digest. Returns the file's path. */
function downloadWheel(pip, wheel, dir) {
  run(pip, [
    'download', '--quiet', '--disable-pip-version-check', '--no-deps', '--only-binary=:all:',
    '--python-version', WHEEL_PYTHON, '--platform', WHEEL_PLATFORM, '-d', dir, `${wheel.pypi}==${wheel.version}`,
  ]);
  const file = path.join(dir, wheel.file);
  if (!fs.existsSync(file)) throw new Error(`pip did not produce ${wheel.file}`);
  const digest = sha256File(file);
  if (digest !== wheel.sha256) throw new Error(`${wheel.file}: sha256 ${digest}, expected ${wheel.sha256}`);
  return file;
}

/** Extracts the members the binding needs from the wheel (a zip) with Python's zipfile. */
function extractWheel(python, wheelFile, dest) {
  const m = wheelMembers();
  const script = [
    'import sys, zipfile',
    'wheel, dest, libs, dirs = sys.argv[1], sys.argv[2], sys.argv[3].split(","), tuple(sys.argv[4].split(","))',
    'z = zipfile.ZipFile(wheel)',
    'names = [n for n in z.namelist() if n in libs or (n.startswith(dirs) and not n.endswith("/"))]',
    'missing = [l for l in libs if l not in names]',
    'assert not missing, "wheel lacks " + ", ".join(missing)',
    'z.extractall(dest, names)',
  ].join('\n');
  console.log(`[setup] extracting libtensorflow and its C API headers from ${path.basename(wheelFile)}`);
  execFileSync(python, ['-c', script, wheelFile, dest, m.libraries.join(','), m.includeDirs.join(',')], { stdio: 'inherit' });
}

/** Puts extracted wheel files into `pkgDir/deps` in the layout the binding's build expects. */
function stageLibtensorflow(extracted, pkgDir) {
  const deps = path.join(pkgDir, 'deps');
  fs.rmSync(deps, { recursive: true, force: true });
  fs.mkdirSync(path.join(deps, 'lib'), { recursive: true });
  const layout = stagedLibraryLayout();
  for (const f of layout.files) fs.renameSync(path.join(extracted, 'tensorflow', f), path.join(deps, 'lib', f));
  for (const [link, target] of Object.entries(layout.links)) fs.symlinkSync(target, path.join(deps, 'lib', link));
  fs.renameSync(path.join(extracted, 'tensorflow', 'include'), path.join(deps, 'include'));
  return deps;
}

/** Builds the binding from source (node-pre-gyp -> node-gyp), offline. */
function buildBinding(pkgDir, env = process.env) {
  const preGyp = require.resolve('@mapbox/node-pre-gyp/bin/node-pre-gyp', { paths: [pkgDir] });
  const headers = nodeHeadersDir();
  const args = [preGyp, 'install', '--build-from-source', ...(headers ? [`--nodedir=${headers}`] : [])];
  run(process.execPath, args, { cwd: pkgDir, env: { ...env, JOBS: String(Math.max(1, os.cpus().length)) } });
  if (!fs.existsSync(bindingPath(pkgDir))) throw new Error(`the build produced no ${bindingPath(pkgDir)}`);
}

/**
 * Installs native TensorFlow for `flavor` ('cpu' or 'cuda') into the npm package already in
 * node_modules. Returns a one-line outcome; throws with the reason when a step fails.
 */
function installNativeBackend({ root, flavor, pip, python }) {
  const wheel = TENSORFLOW_WHEELS[flavor];
  const pkgDir = packageDir(root, wheel.npmPackage);
  if (!fs.existsSync(path.join(pkgDir, 'package.json'))) throw new Error(`${wheel.npmPackage} is not in node_modules (run npm ci)`);
  if (isInstalled(pkgDir, wheel)) return `${wheel.npmPackage}: already built from ${wheel.pypi} ${wheel.version}`;
  const failed = previousFailure(pkgDir, wheel);
  if (failed) throw new Error(`an earlier setup could not build it (${failed}); delete ${path.join(pkgDir, 'deps')} to try again`);
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-native-'));
  const deps = path.join(pkgDir, 'deps');
  try {
    const file = downloadWheel(pip, wheel, work);
    const extracted = path.join(work, 'x');
    extractWheel(python, file, extracted);
    fs.rmSync(file);
    stageLibtensorflow(extracted, pkgDir);
    try {
      buildBinding(pkgDir);
    } catch (err) {
      // ~850 MB of libraries without a binding are of no use: keep only the reason.
      fs.rmSync(deps, { recursive: true, force: true });
      fs.mkdirSync(deps, { recursive: true });
      fs.writeFileSync(path.join(deps, FAILED_STAMP), JSON.stringify({ sha256: wheel.sha256, error: err.message.split('\n')[0] }) + '\n');
      throw err;
    }
    fs.writeFileSync(path.join(deps, STAMP), JSON.stringify({ pypi: wheel.pypi, version: wheel.version, sha256: wheel.sha256 }) + '\n');
    return `${wheel.npmPackage}: built against ${wheel.pypi} ${wheel.version} (${bindingPath(pkgDir)})`;
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
}

/** The reason an earlier build from `wheel` failed, if one did. */
function previousFailure(pkgDir, wheel) {
  try {
    const stamp = JSON.parse(fs.readFileSync(path.join(pkgDir, 'deps', FAILED_STAMP), 'utf8'));
    return stamp.sha256 === wheel.sha256 ? stamp.error || 'unknown error' : undefined;
  } catch {
    return undefined;
  }
}

module.exports = {
  TENSORFLOW_WHEELS,
  TFJS_LIBTENSORFLOW_VERSION,
  WHEEL_PLATFORM,
  WHEEL_PYTHON,
  nativeRouteSupported,
  wheelMembers,
  stagedLibraryLayout,
  nodeHeadersDir,
  packageDir,
  bindingPath,
  isInstalled,
  previousFailure,
  sha256File,
  downloadWheel,
  extractWheel,
  stageLibtensorflow,
  buildBinding,
  installNativeBackend,
};
