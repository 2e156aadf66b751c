// Two processes that need the same SFT warm start at once train it once (training/warm-start.ts
// underLock): the second finds the first's lock, waits, and reads the cache; a lock left by a
// process that has gone is taken over. Real processes, a real (tiny) SFT.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';

// One child: the add2 warm start of a tiny model, `steps` SFT steps (argv[2]) with one evaluation at
// the end (band [0, 1], a target above it: it trains every step); 240 are several seconds of work.
const CHILD = `
const { parseRunConfig } = require(${JSON.stringify(path.join(__dirname, '..', 'config', 'run-config.js'))});
const { loadOrTrainWarmStart } = require(${JSON.stringify(path.join(__dirname, '..', 'training', 'warm-start.js'))});
const { loadTfjsBackend } = require(${JSON.stringify(path.join(__dirname, '..', 'engines', 'backends.js'))});
(async () => {
  await loadTfjsBackend({ kind: 'cpu' });
  const config = parseRunConfig({ task: 'add2', model: { d_model: 16, n_layers: 1, n_heads: 2, d_ff: 32, context_length: 16 } });
  const lines = [];
  const warm = await loadOrTrainWarmStart(config, { lr: 1e-3, batchSize: 16, maxSteps: Number(process.argv[2]), evalEvery: Number(process.argv[2]), band: [0, 1], target: 2 }, process.argv[1], (l) => lines.push(l));
  console.log(JSON.stringify({ cached: warm.cached, sftSteps: warm.sftSteps, dir: warm.dir, waited: lines.some((l) => l.includes('another process is training it')) }));
})().catch((err) => { console.error(err); process.exit(1); });
`;

function child(cache: string, steps = 240): { done: Promise<{ cached: boolean; sftSteps: number; dir: string; waited: boolean }> } {
  const p = spawn(process.execPath, ['-e', CHILD, cache, String(steps)], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  p.stdout.on('data', (d: Buffer) => (out += d.toString()));
  p.stderr.on('data', (d: Buffer) => (err += d.toString()));
  return {
    done: new Promise((resolve, reject) =>
      p.once('exit', (code) => (code === 0 ? resolve(JSON.parse(out.trim().split('\n').pop() ?? '{}')) : reject(new Error(`child exited ${code}: ${err.slice(-2000)}`)))),
    ),
  };
}

const lockOf = (cache: string) => fs.readdirSync(cache).find((f) => f.endsWith('.lock'));

test('two processes that need the same warm start at once: one trains it, the other waits for its lock and reads the cache', async () => {
  const cache = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-warm-lock-'));
  try {
    const first = child(cache);
    // The second starts once the first holds the lock (it is training).
    for (let i = 0; !lockOf(cache); i++) {
      assert.ok(i < 600, 'the first process took the lock');
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    const second = child(cache);
    const [a, b] = await Promise.all([first.done, second.done]);
    assert.deepEqual([a.cached, b.cached], [false, true], 'the first trained it, the second read it');
    assert.equal(b.waited, true, 'the second waited on the lock instead of training too');
    assert.equal(a.dir, b.dir);
    assert.equal(a.sftSteps, 240);
    assert.equal(lockOf(cache), undefined, 'the lock is gone');
  } finally {
    fs.rmSync(cache, { recursive: true, force: true });
  }
});

test('a lock left by a process that has gone is taken over', async () => {
  const cache = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-warm-lock-'));
  try {
    // A finished process's pid, for the lock it would have left.
    const gone = spawnSync(process.execPath, ['-e', 'console.log(process.pid)'], { encoding: 'utf8' });
    const pid = Number(gone.stdout.trim());
    const first = await child(cache, 20).done;
    // The warm start's folder (its checkpoint is version 0 inside it), removed: the next run trains.
    const root = path.dirname(first.dir);
    assert.equal(path.dirname(root), cache);
    fs.rmSync(root, { recursive: true, force: true });
    fs.writeFileSync(`${root}.lock`, JSON.stringify({ host: os.hostname(), pid }));
    const again = await child(cache, 20).done;
    assert.equal(again.cached, false, 'trained again, under a lock taken over from the dead process');
    assert.equal(again.waited, false);
    assert.equal(lockOf(cache), undefined);
  } finally {
    fs.rmSync(cache, { recursive: true, force: true });
  }
});
