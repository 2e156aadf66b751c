#!/usr/bin/env node
// The test command: one real Temporal dev server (in memory) shared by every test file, then node's
// test runner over the compiled tests. The database is the embedded PGlite unless DATABASE_URL
// names a PostgreSQL server (each test then creates its own database there).
'use strict';
const { spawn } = require('node:child_process');
const path = require('node:path');

const root = path.resolve(__dirname, '..');
const { startTemporalServer } = require(path.join(root, 'dist', 'workers', 'temporal-server.js'));
const { freePort } = require(path.join(root, 'dist', 'workers', 'ports.js'));

async function main() {
  const server = await startTemporalServer({ port: await freePort(), startTimeoutMs: 120_000 });
  console.log(`[test] Temporal dev server at ${server.address} (${server.binary}); database: ${process.env.DATABASE_URL ? 'PostgreSQL at DATABASE_URL' : 'embedded PGlite'}`);
  const files = process.argv.slice(2);
  const args = ['--test', '--test-concurrency=1', '--test-timeout=600000', ...(files.length ? files : [path.join('dist', 'test')])];
  const runner = spawn(process.execPath, args, { cwd: root, stdio: 'inherit', env: { ...process.env, TEMPORAL_ADDRESS: server.address } });
  const code = await new Promise((resolve) => runner.once('exit', (c, signal) => resolve(c ?? (signal ? 1 : 0))));
  await server.stop();
  process.exit(code);
}

main().catch((err) => {
  console.error(`[test] ${err.message}`);
  process.exit(1);
});
