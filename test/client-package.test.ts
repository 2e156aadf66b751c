// The published client as a user gets it: scripts/pack-client.js packs @relax-rl/client, a new
// project installs the tarball (under 50 MB, no EBADENGINE warning), the docs/client.md program
// compiles with a strict tsc (strict, skipLibCheck false) and, run against a real stack (worker
// processes, the shared Temporal server, PGlite), trains a 2-step add2 run and prints its accuracy.
// The install is offline with an empty npm cache: the tarball bundles its dependencies, so this
// proves a consumer needs neither the registry nor a warm cache.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { promisify } from 'node:util';
import { startWorkerStack, type WorkerStack } from './helpers';

const run = promisify(execFile);
const ROOT = path.resolve(__dirname, '../..');
const TSC = path.join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
const MAX_INSTALLED_BYTES = 50 * 1024 * 1024;
/** A consumer's strict configuration: nothing in the package's types may be skipped. */
const STRICT_TSCONFIG = {
  compilerOptions: { target: 'ES2022', module: 'node16', moduleResolution: 'node16', lib: ['ES2022'], types: ['node'], strict: true, skipLibCheck: false, outDir: 'out' },
  files: ['program.ts'],
};

let project = '';
let install = { output: '', bytes: 0 };
let stack: WorkerStack | undefined;

/** The ```ts block after the `<!-- client-program -->` marker of docs/client.md. */
function docsProgram(): string {
  const doc = fs.readFileSync(path.join(ROOT, 'docs', 'client.md'), 'utf8');
  const found = /<!-- client-program -->\s*```ts\n([\s\S]*?)\n```/.exec(doc);
  assert.ok(found, 'docs/client.md has a ```ts block right after <!-- client-program -->');
  return `${found[1]}\n`;
}

/** Bytes of every file under `dir` (apparent sizes, links not followed). */
function treeBytes(dir: string): number {
  let total = 0;
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) total += treeBytes(full);
    else total += fs.lstatSync(full).size;
  }
  return total;
}

/** Packs the client, installs the tarball in a new project (scripts enabled), writes the docs program and the strict tsconfig. */
async function installPackage(): Promise<void> {
  project = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-client-package-'));
  const packed = await run(process.execPath, [path.join(ROOT, 'scripts', 'pack-client.js'), path.join(project, 'pack')], { cwd: ROOT });
  const tarball = packed.stdout.trim().split('\n').at(-1)!;
  assert.match(tarball, /relax-rl-client-0\.1\.0\.tgz$/, packed.stderr);
  const app = path.join(project, 'app');
  fs.mkdirSync(app);
  await run('npm', ['init', '-y'], { cwd: app });
  const started = Date.now();
  // The consumer's own @types/node (every TypeScript program on Node has it), packed from the
  // repository's copy so that it too installs with nothing fetched.
  const own = path.join(project, 'own');
  fs.mkdirSync(own);
  await run('npm', ['pack', '--silent', path.join(ROOT, 'node_modules', '@types', 'node'), path.join(ROOT, 'node_modules', 'undici-types')], { cwd: own });
  const ownTarballs = fs.readdirSync(own).map((f) => path.join(own, f));
  const emptyCache = path.join(project, 'npm-cache');
  const npm = await run('npm', ['install', '--offline', '--cache', emptyCache, '--no-audit', '--no-fund', tarball, ...ownTarballs], { cwd: app, maxBuffer: 16 << 20 });
  install = { output: npm.stdout + npm.stderr, bytes: treeBytes(path.join(app, 'node_modules')) };
  console.log(`npm install of ${path.basename(tarball)}: ${((Date.now() - started) / 1000).toFixed(1)} s, node_modules ${(install.bytes / 1024 / 1024).toFixed(1)} MB`);
  fs.writeFileSync(path.join(app, 'program.ts'), docsProgram());
  fs.writeFileSync(path.join(app, 'tsconfig.json'), JSON.stringify(STRICT_TSCONFIG, null, 2));
}

before(async () => {
  // The install waits on npm while the workers start: side by side. A stack that started beside a failed install is closed.
  const [installed, started] = await Promise.allSettled([installPackage(), startWorkerStack(['control', 'rollout', 'train'], {}, 'relax-client-package-')]);
  if (started.status === 'fulfilled') stack = started.value;
  if (installed.status === 'rejected') throw installed.reason;
  if (started.status === 'rejected') throw started.reason;
});

after(async () => {
  await stack?.close();
  if (project) fs.rmSync(project, { recursive: true, force: true });
});

test('the installed package is light (under 50 MB) and npm raised no EBADENGINE', () => {
  assert.ok(install.bytes > 0, 'node_modules was measured');
  assert.ok(install.bytes < MAX_INSTALLED_BYTES, `node_modules is ${(install.bytes / 1024 / 1024).toFixed(1)} MB, over 50 MB: a heavy dependency reached @relax-rl/client`);
  assert.doesNotMatch(install.output, /EBADENGINE/, install.output);
  const app = path.join(project, 'app', 'node_modules');
  for (const heavy of ['@temporalio/worker', '@tensorflow/tfjs', 'onnxruntime-node', '@electric-sql/pglite']) {
    for (const modules of [app, path.join(app, '@relax-rl', 'client', 'node_modules')]) {
      assert.ok(!fs.existsSync(path.join(modules, heavy)), `${heavy} is installed with the client (${modules})`);
    }
  }
});

test('the packed declarations name no worker, workflow-sandbox or OpenTelemetry types', () => {
  const dist = path.join(project, 'app', 'node_modules', '@relax-rl', 'client', 'dist');
  const declarations = fs.readdirSync(dist, { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.d.ts'));
  assert.ok(declarations.includes(path.join('client', 'index.d.ts')), 'the package ships dist/client/index.d.ts');
  for (const file of declarations) {
    assert.doesNotMatch(fs.readFileSync(path.join(dist, file), 'utf8'), /['"](@temporalio\/(worker|workflow|interceptors-opentelemetry)|@opentelemetry\/[\w-]+)['"/]/, `${file} names a heavy package's types`);
  }
});

test('the pack refuses a closure that needs an npm package the client package does not declare', () => {
  const { checkPackages } = require(path.join(ROOT, 'scripts', 'pack-client.js')) as { checkPackages(manifest: object, js: object, dts: object): void };
  const none = { files: new Set(), packages: new Map() };
  const loads = { files: new Set(), packages: new Map([['@temporalio/worker', 'dist/x.js']]) };
  const types = { files: new Set(), packages: new Map([['pg', 'dist/y.d.ts']]) };
  assert.throws(() => checkPackages({ dependencies: { pg: '8' } }, loads, types), /'@temporalio\/worker' \(loaded by dist\/x\.js\) is not in dependencies or peerDependencies/);
  assert.throws(() => checkPackages({ peerDependencies: { pg: '8' } }, none, types), /'pg' \(types, named by dist\/y\.d\.ts\) is not in dependencies/);
  assert.doesNotThrow(() => checkPackages({ dependencies: { pg: '8' }, peerDependencies: { '@temporalio/worker': '1' } }, loads, types));
});

test('the docs/client.md program compiles with a strict tsc (skipLibCheck false) against the installed types', async () => {
  const app = path.join(project, 'app');
  const result = await run(process.execPath, [TSC, '-p', 'tsconfig.json'], { cwd: app }).catch((err: { stdout?: string; stderr?: string }) => {
    assert.fail(`strict tsc failed:\n${err.stdout ?? ''}${err.stderr ?? ''}`);
  });
  assert.equal(result.stdout.trim(), '');
  assert.ok(fs.existsSync(path.join(app, 'out', 'program.js')));
});

test('the compiled program trains a 2-step add2 run on a real stack and prints its final accuracy', async () => {
  assert.ok(stack);
  const app = path.join(project, 'app');
  const env = { ...process.env, TEMPORAL_ADDRESS: process.env.TEMPORAL_ADDRESS, DATABASE_URL: stack.db.url, RELAX_HOME: stack.home };
  const started = Date.now();
  const { stdout } = await run(process.execPath, [path.join(app, 'out', 'program.js')], { cwd: app, env }).catch((err: { stdout?: string; stderr?: string; message: string }) => {
    assert.fail(`the program failed: ${err.message}\n${err.stdout ?? ''}${err.stderr ?? ''}`);
  });
  console.log(`the program ran in ${((Date.now() - started) / 1000).toFixed(1)} s:\n${stdout.trim()}`);
  assert.match(stdout, /^started \S+$/m);
  assert.match(stdout, /^final accuracy: [\d.]+ after 2 steps$/m);
});
