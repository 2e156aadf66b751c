// The workflow bundle a control worker serves (and the replay tests replay on), built once per
// version of the code and kept beside it, in dist/.workflow-bundles/: bundling takes ~3 s and ~5 s
// of CPU, and every control worker start (relax dev, each stack, each restart) used to pay it.
// The cache key is everything the bundle is made of: every compiled product module (dist/ less
// the tests and benchmarks), the versions of the Temporal packages that the bundler and the
// interceptors come from, the package lock, and whether the tracing interceptors are in. The
// cache sits inside the package's own build folder, so only whoever can change the code can
// change what a worker loads; where that folder is read-only, each start bundles, as before.
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { bundleWorkflowCode, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { tracingWorkflowModules } from '../telemetry/tracing';
import { componentLog } from '../telemetry/log';

/** The compiled tree (dist/) this module belongs to. */
const DIST_ROOT = path.resolve(__dirname, '..');
const CACHE_FOLDER = '.workflow-bundles';
/** Folders of dist/ that no workflow imports. */
const NOT_BUNDLED = new Set(['test', 'bench', CACHE_FOLDER]);
/** The bundles kept: the newest few (a rollback to the previous build still finds its own). */
const KEEP = 4;
const SDK_PACKAGES = ['@temporalio/workflow', '@temporalio/worker', '@temporalio/interceptors-opentelemetry'];

export interface BundleOptions {
  /** With the OpenTelemetry workflow interceptors (telemetry/tracing.ts). */
  tracing?: boolean;
}

/** The workflows' bundle, from the cache when this code was bundled before. */
export async function bundleWorkflows(opts: BundleOptions = {}): Promise<WorkflowBundleWithSourceMap> {
  return (await loadWorkflowBundle(opts)).bundle;
}

/** The bundle, whether it came from the cache, and its cache key. `root`: the compiled tree (tests). */
export async function loadWorkflowBundle(opts: BundleOptions = {}, root = DIST_ROOT): Promise<{ bundle: WorkflowBundleWithSourceMap; cached: boolean; key: string }> {
  const key = bundleKey(opts, root);
  const dir = path.join(root, CACHE_FOLDER);
  const cached = readCached(dir, key);
  if (cached) return { bundle: cached, cached: true, key };
  const bundle = await bundleWorkflowCode({
    workflowsPath: path.join(root, 'workflows', 'index.js'),
    logger: quietBundlerLogger,
    ...(opts.tracing ? { workflowInterceptorModules: tracingWorkflowModules() } : {}),
  });
  writeCached(dir, key, bundle);
  return { bundle, cached: false, key };
}

/** The cache key of the bundle of the compiled tree at `root`. */
export function bundleKey(opts: BundleOptions, root = DIST_ROOT): string {
  const hash = createHash('sha256');
  hash.update(JSON.stringify({ tracing: !!opts.tracing, sdk: SDK_PACKAGES.map((name) => `${name}@${packageVersion(name)}`) }));
  for (const file of compiledModules(root)) hash.update(`\0${path.relative(root, file)}\0`).update(fs.readFileSync(file));
  const lock = path.join(root, '..', 'package-lock.json');
  if (fs.existsSync(lock)) hash.update('\0package-lock\0').update(fs.readFileSync(lock));
  return hash.digest('hex').slice(0, 24);
}

/** Every .js file under root, in a fixed order, less the folders no workflow imports. */
function compiledModules(root: string): string[] {
  const out: string[] = [];
  const walk = (dir: string) => {
    for (const entry of fs.readdirSync(dir, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))) {
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) {
        if (!(dir === root && NOT_BUNDLED.has(entry.name))) walk(full);
      } else if (entry.name.endsWith('.js')) out.push(full);
    }
  };
  walk(root);
  return out;
}

/** The installed version of a package (its package.json, found from its entry point). */
function packageVersion(name: string): string {
  try {
    for (let dir = path.dirname(require.resolve(name)); dir !== path.dirname(dir); dir = path.dirname(dir)) {
      const file = path.join(dir, 'package.json');
      if (!fs.existsSync(file)) continue;
      const pkg = JSON.parse(fs.readFileSync(file, 'utf8')) as { name?: string; version?: string };
      if (pkg.name === name) return pkg.version ?? 'unknown';
    }
  } catch {
    // not installed: the key says so
  }
  return 'absent';
}

function readCached(dir: string, key: string): WorkflowBundleWithSourceMap | undefined {
  try {
    // The code is renamed into place last, so its presence means both files are whole.
    const code = fs.readFileSync(path.join(dir, `${key}.js`), 'utf8');
    const sourceMap = fs.readFileSync(path.join(dir, `${key}.js.map`), 'utf8');
    return { code, sourceMap };
  } catch {
    return undefined;
  }
}

/** Best effort: a read-only or full disk leaves the cache as it was, and the worker goes on. */
function writeCached(dir: string, key: string, bundle: WorkflowBundleWithSourceMap): void {
  try {
    fs.mkdirSync(dir, { recursive: true });
    const write = (name: string, text: string) => {
      const tmp = path.join(dir, `.${name}.${process.pid}.tmp`);
      fs.writeFileSync(tmp, text);
      fs.renameSync(tmp, path.join(dir, name));
    };
    write(`${key}.js.map`, bundle.sourceMap);
    write(`${key}.js`, bundle.code);
    prune(dir);
  } catch {
    // not writable: bundle again next time
  }
}

/** Keeps the KEEP newest bundles. */
function prune(dir: string): void {
  const bundles = fs
    .readdirSync(dir)
    .filter((f) => /^[0-9a-f]+\.js$/.test(f))
    .map((f) => ({ f, mtime: fs.statSync(path.join(dir, f)).mtimeMs }))
    .sort((a, b) => b.mtime - a.mtime);
  for (const { f } of bundles.slice(KEEP)) {
    fs.rmSync(path.join(dir, f), { force: true });
    fs.rmSync(path.join(dir, `${f}.map`), { force: true });
  }
  // What a process killed mid-write left.
  for (const f of fs.readdirSync(dir).filter((name) => name.endsWith('.tmp'))) {
    const file = path.join(dir, f);
    if (Date.now() - fs.statSync(file).mtimeMs > 600_000) fs.rmSync(file, { force: true });
  }
}

const bundlerLog = componentLog('bundler');
const quietBundlerLogger = {
  log: () => undefined,
  trace: () => undefined,
  debug: () => undefined,
  info: () => undefined,
  warn: (message: string) => bundlerLog.warn(message),
  error: (message: string) => bundlerLog.error(message),
};
