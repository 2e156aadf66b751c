// Packs the TypeScript client as its own npm package, `@relax-rl/client` (packages/client/), so a
// program that only starts and watches runs installs Temporal's client and a few small packages, not
// the whole engine (TensorFlow, ONNX Runtime, PGlite, the Temporal worker).
//
// Layout: the client's source stays where it is (client/, and the config/, store/, security/,
// telemetry/ and types-only workflows/ modules it uses), compiled by the repository's one `tsc` into
// dist/; packages/client/ holds only the package's package.json and README. This script copies the
// compiled closure of the package's entry files (main, types, every `exports` target:
// dist/client/index.js, dist/config/run-config.js) into packages/client/dist/ with the same relative
// paths (dist/client/index.js -> packages/client/dist/client/index.js), so every relative require
// and import keeps working unchanged. The closure follows require() (and require.resolve()) in .js
// files and import / export-from / import("...") / reference types in .d.ts files.
//
// The guard that keeps the client light: every npm package the closure names must be declared in
// packages/client/package.json, those the .d.ts files name in `dependencies` (a consumer's strict
// tsc resolves them), those only the .js files name in `dependencies` or `peerDependencies` (loaded
// lazily, e.g. OpenTelemetry when tracing is on). Anything else fails the pack, naming the package
// and the file that needs it.
//
// The package bundles its dependencies (bundleDependencies), copied from the repository's own
// node_modules: exactly the versions the repository builds and tests with, the subtree the client's
// dependencies reach (node's resolution walked over package-lock.json's paths). A consumer's install
// then fetches nothing: `npm install <tarball>` works on a machine with no registry and no npm cache
// (without the bundle, npm asks the registry for every dependency's package document, and ranges
// such as @types/pg's `@types/node: "*"` resolve to the registry's newest). The cost, chosen
// deliberately: a larger tarball, and no deduplication against a consumer's own copies of the same
// packages.
//
// Usage: npm run build && node scripts/pack-client.js <folder for the tarball>   (prints the tarball's path)
'use strict';
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const { builtinModules } = require('node:module');

const ROOT = path.resolve(__dirname, '..');
const DIST = path.join(ROOT, 'dist');
const PACKAGE = path.join(ROOT, 'packages', 'client');
const BUILTINS = new Set(builtinModules);

/** The specifiers a compiled .js file loads: require('x') and require.resolve('x') with a literal. */
function jsSpecifiers(source) {
  return [...source.matchAll(/\brequire(?:\.resolve)?\(\s*(['"])([^'"]+)\1\s*\)/g)].map((m) => m[2]);
}

/** The specifiers a .d.ts file names: import/export ... from 'x', import 'x', import('x'), /// <reference types="x" />. */
function dtsSpecifiers(source) {
  const patterns = [
    /\b(?:import|export)\s[^'";]*?\sfrom\s*(['"])([^'"]+)\1/g,
    /\bimport\s*(['"])([^'"]+)\1/g,
    /\bimport\(\s*(['"])([^'"]+)\1\s*\)/g,
    /\brequire\(\s*(['"])([^'"]+)\1\s*\)/g,
    /\/\/\/\s*<reference\s+types\s*=\s*(['"])([^'"]+)\1/g,
  ];
  return patterns.flatMap((re) => [...source.matchAll(re)].map((m) => m[2]));
}

/** The npm package a bare specifier names ('@scope/name/sub' -> '@scope/name'), or undefined for node built-ins. */
function packageOf(specifier) {
  if (specifier.startsWith('node:') || BUILTINS.has(specifier.split('/')[0])) return undefined;
  const parts = specifier.split('/');
  return specifier.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0];
}

/** The dist file a relative specifier names from `from`, trying the extensions of its kind. */
function resolveRelative(from, specifier, kind) {
  const base = path.resolve(path.dirname(from), specifier);
  const candidates = kind === 'js' ? [base, `${base}.js`, path.join(base, 'index.js')] : [base.replace(/\.js$/, '.d.ts'), `${base}.d.ts`, path.join(base, 'index.d.ts')];
  const found = candidates.find((c) => fs.existsSync(c) && fs.statSync(c).isFile());
  if (!found) throw new Error(`${path.relative(ROOT, from)} loads '${specifier}', which is not in dist/: run \`npm run build\` first`);
  return found;
}

/** Walks one kind of closure from the entry files: the files it reaches and, per npm package, the first file naming it. */
function closure(entryFiles, kind) {
  const files = new Set(entryFiles);
  const packages = new Map();
  const queue = [...entryFiles];
  while (queue.length > 0) {
    const file = queue.shift();
    const source = fs.readFileSync(file, 'utf8');
    for (const specifier of kind === 'js' ? jsSpecifiers(source) : dtsSpecifiers(source)) {
      if (specifier.startsWith('.')) {
        const next = resolveRelative(file, specifier, kind);
        if (!files.has(next)) files.add(next), queue.push(next);
        continue;
      }
      const pkg = packageOf(specifier);
      if (pkg && !packages.has(pkg)) packages.set(pkg, path.relative(ROOT, file));
    }
  }
  return { files, packages };
}

/** The guard: each npm package the closure needs, declared where its kind requires, else one error listing them all. */
function checkPackages(manifest, js, dts) {
  const deps = new Set(Object.keys(manifest.dependencies ?? {}));
  const peers = new Set(Object.keys(manifest.peerDependencies ?? {}));
  const problems = [];
  for (const [pkg, file] of dts.packages) {
    if (!deps.has(pkg)) problems.push(`'${pkg}' (types, named by ${file}) is not in dependencies`);
  }
  for (const [pkg, file] of js.packages) {
    if (!deps.has(pkg) && !peers.has(pkg)) problems.push(`'${pkg}' (loaded by ${file}) is not in dependencies or peerDependencies`);
  }
  if (problems.length > 0) {
    throw new Error(
      `the client's compiled closure needs npm packages packages/client/package.json does not declare:\n  ${problems.join('\n  ')}\n` +
        'Keep the client light: load the module that needs it lazily or from a module outside the client, or (a deliberate choice) declare it there with the same version as the root package.json.',
    );
  }
}

/** Copies the closure into packages/client/dist/ (fresh), keeping dist/'s relative paths. */
function copyClosure(files) {
  const out = path.join(PACKAGE, 'dist');
  fs.rmSync(out, { recursive: true, force: true });
  for (const file of [...files].sort()) {
    const target = path.join(out, path.relative(DIST, file));
    fs.mkdirSync(path.dirname(target), { recursive: true });
    fs.copyFileSync(file, target);
  }
  return out;
}

/** Node's lookup of `name` from the lock path `from` ('' is the package root): the nearest node_modules/<name> up the tree. */
function lockLocation(packages, from, name) {
  let at = from;
  for (;;) {
    const candidate = at ? `${at}/node_modules/${name}` : `node_modules/${name}`;
    if (packages[candidate]) return candidate;
    if (!at) return undefined;
    const cut = at.lastIndexOf('/node_modules/');
    at = cut < 0 ? '' : at.slice(0, cut);
  }
}

/**
 * The lock paths ('node_modules/...') of everything the client's dependencies reach in the root
 * package-lock.json, at the same paths (a subset of a valid tree that keeps every entry a kept one
 * resolves to is valid). Each declared dependency must be the root's version; a required dependency
 * missing from the lock fails. Optional peers are left out, as npm leaves them.
 */
function bundleTree(manifest, rootLock) {
  const packages = rootLock.packages ?? {};
  const kept = new Set();
  const queue = [];
  for (const [name, version] of Object.entries(manifest.dependencies ?? {})) {
    const at = `node_modules/${name}`;
    if (!packages[at]) throw new Error(`the client depends on ${name}, which package-lock.json does not hold: add it to the root package.json (same version) and run npm install`);
    if (packages[at].version !== version) throw new Error(`the client depends on ${name}@${version}, but the root lock has ${packages[at].version}: declare the root's version`);
    queue.push(at);
  }
  while (queue.length > 0) {
    const at = queue.shift();
    if (kept.has(at)) continue;
    kept.add(at);
    const entry = packages[at];
    const optionalPeers = new Set(Object.entries(entry.peerDependenciesMeta ?? {}).filter(([, m]) => m.optional).map(([n]) => n));
    const wanted = [
      ...Object.keys(entry.dependencies ?? {}).map((n) => [n, true]),
      ...Object.keys(entry.optionalDependencies ?? {}).map((n) => [n, false]),
      ...Object.keys(entry.peerDependencies ?? {}).filter((n) => !optionalPeers.has(n)).map((n) => [n, true]),
    ];
    for (const [name, required] of wanted) {
      const found = lockLocation(packages, at, name);
      if (found) queue.push(found);
      else if (required) throw new Error(`${at} needs ${name}, which package-lock.json does not hold under it: run npm install`);
    }
  }
  return [...kept].sort();
}

/** Copies each kept package from the root's node_modules into packages/client/node_modules (fresh), without the nested node_modules it was not kept for. */
function copyBundle(paths) {
  const out = path.join(PACKAGE, 'node_modules');
  fs.rmSync(out, { recursive: true, force: true });
  for (const at of paths) {
    const from = path.join(ROOT, at);
    if (!fs.existsSync(path.join(from, 'package.json'))) throw new Error(`${at} is in package-lock.json but not installed: run npm ci`);
    fs.cpSync(from, path.join(PACKAGE, at), { recursive: true, filter: (src) => path.relative(from, src).split(path.sep)[0] !== 'node_modules' });
  }
  return out;
}

/** The package's entry files (main, types, every exports target), as dist/ paths of each kind. */
function entries(manifest) {
  const targets = new Set([manifest.main, manifest.types]);
  const collect = (v) => (typeof v === 'string' ? targets.add(v) : v && Object.values(v).forEach(collect));
  collect(manifest.exports);
  const files = [...targets].filter((t) => t && t.replace(/^\.\//, '').startsWith('dist/'));
  const inDist = (t) => path.join(DIST, t.replace(/^(\.\/)?dist\//, ''));
  for (const t of files) {
    if (!fs.existsSync(inDist(t))) throw new Error(`packages/client/package.json names ${t}, but dist/${t.replace(/^(\.\/)?dist\//, '')} is not built: run \`npm run build\`, or fix the path`);
  }
  return { js: files.filter((t) => t.endsWith('.js')).map(inDist), dts: files.filter((t) => t.endsWith('.d.ts')).map(inDist) };
}

function main(argv) {
  const dest = argv[0];
  if (!dest) throw new Error('usage: node scripts/pack-client.js <folder for the tarball> (after npm run build)');
  const manifest = JSON.parse(fs.readFileSync(path.join(PACKAGE, 'package.json'), 'utf8'));
  const entry = entries(manifest);
  const js = closure(entry.js, 'js');
  const dts = closure(entry.dts, 'dts');
  checkPackages(manifest, js, dts);
  const out = copyClosure(new Set([...js.files, ...dts.files]));
  const bundled = bundleTree(manifest, JSON.parse(fs.readFileSync(path.join(ROOT, 'package-lock.json'), 'utf8')));
  copyBundle(bundled);
  fs.mkdirSync(dest, { recursive: true });
  const packed = JSON.parse(execFileSync('npm', ['pack', '--json', '--pack-destination', path.resolve(dest)], { cwd: PACKAGE, encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] }));
  const packages = [...new Set([...js.packages.keys(), ...dts.packages.keys()])].sort();
  console.error(`pack-client: ${js.files.size} .js and ${dts.files.size} .d.ts files in ${path.relative(ROOT, out)}; npm packages named: ${packages.join(', ')}; ${bundled.length} packages bundled`);
  console.log(path.resolve(dest, packed[0].filename));
}

if (require.main === module) {
  try {
    main(process.argv.slice(2));
  } catch (err) {
    console.error(`pack-client: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(1);
  }
}

module.exports = { closure, checkPackages, packageOf, bundleTree };
