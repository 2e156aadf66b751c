// The workflow bundle cache (workers/workflow-bundle.ts): a control worker loads the bundle built
// for exactly this code, byte for byte what bundling gives, and any change to a product module, the
// SDK or the tracing switch is a new key, so a stale bundle is never served.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { bundleWorkflowCode } from '@temporalio/worker';
import { buildIdOf } from '../workers/deployment';
import { bundleKey, loadWorkflowBundle } from '../workers/workflow-bundle';

test('the key follows every product module, and only those; tracing is a key of its own', () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-bundle-key-'));
  try {
    const write = (file: string, text: string) => {
      fs.mkdirSync(path.dirname(path.join(root, file)), { recursive: true });
      fs.writeFileSync(path.join(root, file), text);
    };
    write('workflows/index.js', 'exports.a = 1;');
    write('config/run-config.js', 'exports.b = 2;');
    write('test/some.test.js', 'x');
    const first = bundleKey({}, root);
    assert.equal(bundleKey({}, root), first, 'the same tree, the same key');
    assert.notEqual(bundleKey({ tracing: true }, root), first, 'the traced bundle has a key of its own');

    write('test/some.test.js', 'y');
    write('bench/grpo.js', 'z');
    write('workflows/index.js.map', '{}');
    assert.equal(bundleKey({}, root), first, 'tests, benchmarks and source maps are not in the bundle');

    write('config/run-config.js', 'exports.b = 3;');
    const changed = bundleKey({}, root);
    assert.notEqual(changed, first, 'a changed module is a new key');
    write('training/new-module.js', '');
    assert.notEqual(bundleKey({}, root), changed, 'a new module is a new key');
  } finally {
    fs.rmSync(root, { recursive: true, force: true });
  }
});

test('a second load comes from the cache and is byte for byte what bundling gives: the same build id', async () => {
  const first = await loadWorkflowBundle();
  const again = await loadWorkflowBundle();
  assert.equal(again.cached, true, 'the second load reads the cache');
  assert.equal(again.key, first.key);
  assert.equal(again.bundle.code, first.bundle.code);
  assert.equal(again.bundle.sourceMap, first.bundle.sourceMap);
  const fresh = await bundleWorkflowCode({ workflowsPath: require.resolve('../workflows'), logger: { log() {}, trace() {}, debug() {}, info() {}, warn() {}, error() {} } });
  assert.equal(buildIdOf(again.bundle), buildIdOf(fresh), 'the cached bundle is the build bundling makes now');
});
