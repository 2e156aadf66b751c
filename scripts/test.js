#!/usr/bin/env node
// The test command: one real Temporal dev server (in memory) shared by every test file, then node's
// test runner over the compiled tests. The database is the embedded PGlite unless DATABASE_URL
// names a PostgreSQL server (each test then creates its own database there). The trainer runs on
// the native TensorFlow backend where setup built it; a second, short pass runs the engine suites
// again on the wasm backend (RELAX_TFJS_BACKEND=wasm), the fallback that must keep working.
'use strict';
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const root = path.resolve(__dirname, '..');
const { startTemporalServer } = require(path.join(root, 'dist', 'workers', 'temporal-server.js'));
const { freePort } = require(path.join(root, 'dist', 'workers', 'ports.js'));

/** The suites that exercise the trainer's tensor code: run on wasm as well as on the default backend. */
const WASM_SUITES = ['trainer', 'model', 'engines', 'llama-model', 'rl-losses', 'encoders'];

// The PostgreSQL pass of .ci/run (`npm test -- --database-suites`) runs the suites that reach the
// database at DATABASE_URL (REACHES) and check what it holds: their source reads tables (SQL, the
// store modules, the checkpoint registry check: CHECKS). The others reach it only under a stack
// (monitoring, notifications, tracing, TLS, the supervisor's `relax dev` on its own embedded
// database, ...) through the store code the checking suites cover, and assert on something else;
// the embedded pass runs them. Left out as well, whatever their source: the presentation suites
// (the browser, the CLI's output, the client example), the learning suites (they assert that
// accuracy rises over many steps, through the same transfer-queue and registry SQL that
// training-run, fault-injection, chaos and rollout-scaling check step by step) and the suites about
// the engines under load (worker threads and heartbeats).
const PRESENTATION_SUITES = ['web-ui', 'dashboard', 'cli', 'client-example'];
const LEARNING_SUITES = ['grpo-learning', 'calculator-learning', 'multimodal-run', 'multimodal-audio-run'];
const LOAD_SUITES = ['long-train-step'];
const REACHES = /freshDatabase|startWorkerStack|startWorkerProcess|\.pool\b|openStore|new Pool|MultimodalStack|spawnRelax|startLocalStack|startEphemeralStack|DATABASE_URL/;
const CHECKS = /from '\.\.\/store\/|require\("\.\.\/store\/|\.pool\.query|\bSELECT |\bINSERT INTO |checkCheckpointRegistry/;
function databaseSuites() {
  const dir = path.join(root, 'dist', 'test');
  const source = (f) => {
    // The TypeScript source where it is beside the build (the compiled file rewrites imports).
    const ts = path.join(root, 'test', f.replace(/\.js$/, '.ts'));
    return fs.readFileSync(fs.existsSync(ts) ? ts : path.join(dir, f), 'utf8');
  };
  return fs
    .readdirSync(dir)
    .filter((f) => f.endsWith('.test.js') && ![...PRESENTATION_SUITES, ...LEARNING_SUITES, ...LOAD_SUITES].includes(f.slice(0, -'.test.js'.length)))
    .filter((f) => {
      const text = source(f);
      return REACHES.test(text) && CHECKS.test(text);
    })
    .map((f) => path.join('dist', 'test', f));
}

async function main() {
  const server = await startTemporalServer({ port: await freePort(), startTimeoutMs: 120_000 });
  console.log(`[test] Temporal dev server at ${server.address} (${server.binary}); database: ${process.env.DATABASE_URL ? 'PostgreSQL at DATABASE_URL' : 'embedded PGlite'}`);
  const args = process.argv.slice(2);
  const files = args.includes('--database-suites') ? databaseSuites() : args;
  // One SFT warm-start cache per pass: the suites that start from the add2 recipe's warm start
  // train it once (the first one does), not once each.
  const ownCache = !process.env.RELAX_WARM_START_CACHE;
  const warmStartCache = process.env.RELAX_WARM_START_CACHE || fs.mkdtempSync(path.join(os.tmpdir(), 'relax-test-warm-starts-'));
  const run = (testFiles, env = {}) => {
    // TAP for the closing lines CI reads, and each file's wall time (slowest first) at the end, to
    // keep the CI budget in view.
    const reporters = ['--test-reporter=tap', '--test-reporter-destination=stdout', `--test-reporter=${path.join(root, 'scripts', 'test-file-durations.mjs')}`, '--test-reporter-destination=stdout'];
    const args = ['--test', '--test-concurrency=1', '--test-timeout=900000', ...reporters, ...testFiles];
    const runner = spawn(process.execPath, args, { cwd: root, stdio: 'inherit', env: { ...process.env, TEMPORAL_ADDRESS: server.address, RELAX_WARM_START_CACHE: warmStartCache, ...env } });
    return new Promise((resolve) => runner.once('exit', (c, signal) => resolve(c ?? (signal ? 1 : 0))));
  };
  let code = await run(files.length ? files : [path.join('dist', 'test')]);
  if (!files.length && process.env.RELAX_TFJS_BACKEND !== 'wasm') {
    console.log('[test] the engine suites again on the wasm backend (RELAX_TFJS_BACKEND=wasm)');
    const wasmCode = await run(WASM_SUITES.map((f) => path.join('dist', 'test', `${f}.test.js`)), { RELAX_TFJS_BACKEND: 'wasm' });
    code = code || wasmCode;
  }
  await server.stop();
  if (ownCache) fs.rmSync(warmStartCache, { recursive: true, force: true });
  process.exit(code);
}

main().catch((err) => {
  console.error(`[test] ${err.message}`);
  process.exit(1);
});
