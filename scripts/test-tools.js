// The system programs some test suites drive, installed from Debian packages by `npm run setup --
// --test-tools` (what `npm test` runs): promtool (package prometheus) for test/monitoring.test.ts
// and Chromium (package chromium, driven by playwright-core) for the browser suites. Present ones
// cost one stat each; missing ones are installed with apt-get when running as root, and otherwise
// the exact command is printed (the suites that need them fail naming the same command).
'use strict';
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

/** The tools, each with its Debian package, how to tell it is there, and the install command. */
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
];

/** The command that installs one package, as a user would type it. */
function installCommand(pkg) {
  return `apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${pkg}`;
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
 * Installs the missing tools (root with apt-get: one `apt-get update`, then one install per
 * package) or prints how to. Never throws: a tool that is still missing fails only its suites.
 * Returns what is still missing.
 */
function ensureTestTools(log = console) {
  const missing = TEST_TOOLS.filter((t) => !t.present());
  if (missing.length === 0) {
    log.log(`[setup] test tools present: ${TEST_TOOLS.map((t) => t.what.split(' (')[0]).join(', ')}`);
    return [];
  }
  if (!canInstall()) {
    for (const t of missing) log.warn(`[setup] ${t.what} is missing; install it with (as root):\n  ${installCommand(t.pkg)}`);
    return missing;
  }
  try {
    apt(['update', '-qq']);
  } catch (err) {
    log.warn(`[setup] apt-get update failed (${err.message.split('\n')[0]}); trying the installs anyway`);
  }
  for (const t of missing) {
    try {
      apt(['install', '-y', '-qq', '--no-install-recommends', t.pkg]);
    } catch (err) {
      log.warn(`[setup] ${t.what} not installed (${err.message.split('\n')[0]}); its suites will fail. fix: ${installCommand(t.pkg)}`);
    }
  }
  return missing.filter((t) => !t.present());
}

module.exports = { TEST_TOOLS, ensureTestTools, installCommand };
