// The client example of docs/client.md (examples/client/train-and-watch.ts, compiled by tsc) run as
// a user runs it, against a real stack (worker processes, the shared Temporal server, PGlite), with
// a 2-step add2 config; and the package's `relax/client` export resolving to the built client with
// its type declarations.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import type { RunConfigInput } from '../config/run-config';
import { startWorkerStack, type WorkerStack } from './helpers';

const ROOT = path.resolve(__dirname, '../..');
const EXAMPLE = path.join(ROOT, 'dist', 'examples', 'client', 'train-and-watch.js');
const TINY: RunConfigInput = {
  task: 'add2',
  model: { context_length: 16 },
  algorithm: { group_size: 2 },
  rollout: { prompts_per_step: 2, max_new_tokens: 4 },
  train: { steps: 2, eval_every: 2 },
};

let stack: WorkerStack | undefined;

before(async () => {
  stack = await startWorkerStack(['control', 'rollout', 'train'], {}, 'relax-client-example-');
});

after(async () => {
  await stack?.close();
});

test('relax/client (and relax/config) resolve by package name to the built modules with .d.ts files', () => {
  const client = require.resolve('relax/client');
  assert.equal(client, path.join(ROOT, 'dist', 'client', 'index.js'));
  assert.ok(fs.existsSync(path.join(ROOT, 'dist', 'client', 'index.d.ts')), 'dist/client/index.d.ts is built');
  const exported = require('relax/client') as Record<string, unknown>;
  for (const name of ['RelaxClient', 'RunFailedError', 'failureChain', 'resolveAddresses', 'listQuery']) assert.ok(name in exported, `relax/client exports ${name}`);
  assert.equal(typeof (require('relax/config') as { parseRunConfig?: unknown }).parseRunConfig, 'function');
  const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { private?: boolean; types?: string };
  assert.notEqual(pkg.private, true, 'a published package is not private');
  assert.ok(pkg.types && fs.existsSync(path.join(ROOT, pkg.types)), 'package.json types exists');
});

test('the docs/client.md example trains a 2-step add2 run: progress to the last step, result, metrics, checkpoints, list', async () => {
  assert.ok(stack);
  const env = { ...process.env, TEMPORAL_ADDRESS: process.env.TEMPORAL_ADDRESS, DATABASE_URL: stack.db.url, RELAX_HOME: stack.home };
  const child = spawn(process.execPath, [EXAMPLE, JSON.stringify(TINY)], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (out += d));
  const code = await new Promise<number | null>((resolve) => child.once('close', resolve));
  assert.equal(code, 0, out);
  const lines = out.trim().split('\n');
  assert.match(lines[0], /^started run-\w+$/);
  const progress = lines.filter((l) => l.startsWith('progress: '));
  assert.ok(progress.length >= 1, out);
  assert.match(progress.at(-1) ?? '', /^progress: completed step 2\/2 v2 held-out [\d.]+%$/, 'the last progress is the finished run');
  const progressed = progress.map((l) => l.replace(/ held-out .*/, ''));
  assert.equal(new Set(progressed.map((l, i) => `${l} ${progress[i]}`)).size, progress.length, 'one value per change, no repeats');
  assert.match(out, /^metrics: .*\btrained_samples \(2 points\)/m);
  assert.match(out, /^metrics: .*\beval_accuracy \(1 point\)/m, 'one evaluation at step 2');
  assert.match(out, /^eval_accuracy: \[\[2,[\d.]+\]\]$/m);
  assert.match(out, /^result: 2 steps, policy v2, held-out accuracy [\d.]+$/m);
  assert.match(out, /^checkpoints: v0.*v2/m);
  assert.match(out, /^listed: yes$/m);
});
