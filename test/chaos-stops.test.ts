// The parts of the stop chaos (bench/chaos-stops.ts) that run without a stack: a failpoint stops the
// process that takes it and names it, relax dev's liveness check finds a stopped child and not a
// live one, the stop schedule covers every kind, and the stall measure counts a window's edges.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fork, type ChildProcess } from 'node:child_process';
import { test } from 'node:test';
import { takenPrefix } from '../config/failpoints';
import { longestStall, stopSchedule } from '../bench/chaos-stops';
import { processState } from '../bench/chaos-checks';
import { seededRandom } from '../config/seeds';
import { LIVENESS_PONG, watchLiveness } from '../workers/supervisor';

const until = async <T>(what: string, probe: () => T | undefined, ms: number): Promise<T> => {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
};

/** A node child with an IPC channel running `code` (CommonJS, `require` of the compiled tree works). */
function child(code: string, env: NodeJS.ProcessEnv = {}): ChildProcess {
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'relax-stops-')), 'child.js');
  fs.writeFileSync(file, code);
  return fork(file, [], { env: { ...process.env, ...env }, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
}

test('an armed failpoint stops the first process that reaches it and names it; unarmed it does nothing', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-failpoints-'));
  const failpoints = path.join(__dirname, '..', 'config', 'failpoints.js');
  const code = `const { failpoint } = require(${JSON.stringify(failpoints)});
failpoint('rollout.sync'); // not armed: returns
process.send('unarmed passed');
process.on('message', () => { failpoint('train.publish'); process.send('resumed'); });`;
  const p = child(code, { RELAX_FAILPOINTS_DIR: dir });
  const said: string[] = [];
  p.on('message', (m) => said.push(String(m)));
  try {
    await until('the child to pass the unarmed failpoint', () => (said.includes('unarmed passed') ? true : undefined), 10_000);
    fs.writeFileSync(path.join(dir, 'train.publish'), '');
    p.send('go');
    await until('the child to stop itself', () => (processState(p.pid!) === 'T' ? true : undefined), 10_000);
    assert.deepEqual(fs.readdirSync(dir), [`${takenPrefix('train.publish')}${p.pid}`], 'the armed file was taken, naming the pid');
    assert.ok(!said.includes('resumed'));
    process.kill(p.pid!, 'SIGCONT');
    await until('the child to go on after SIGCONT', () => (said.includes('resumed') ? true : undefined), 10_000);
  } finally {
    p.kill('SIGKILL');
  }
});

test("relax dev's liveness check leaves a worker that answers alone and reports one that is stopped", async () => {
  const p = child(`process.on('message', (m) => { if (m && m.relax === 'ping') process.send(${JSON.stringify(LIVENESS_PONG)}); });`);
  let frozenAfter: number | undefined;
  const watch = watchLiveness(p, 3_000, (silentMs) => (frozenAfter = silentMs));
  try {
    await new Promise((r) => setTimeout(r, 7_000));
    assert.equal(frozenAfter, undefined, 'a child that answers its pings is never reported');
    const stoppedAt = Date.now();
    process.kill(p.pid!, 'SIGSTOP');
    await until('the stopped child to be reported', () => frozenAfter, 10_000);
    const took = Date.now() - stoppedAt;
    assert.ok(frozenAfter! > 3_000 && took < 3_000 + 2 * 2_000 + 1_000, `reported ${took} ms after the stop, silent ${frozenAfter} ms`);
  } finally {
    watch.stop();
    p.kill('SIGKILL');
  }
});

test('the stop schedule freezes every kind of worker, resumes three stops in four, and puts the engine in the middle', () => {
  const events = stopSchedule(20, seededRandom(7), true);
  assert.equal(events.length, 20);
  const kinds = new Set(events.map((e) => e.kind));
  for (const k of ['control', 'rollout', 'train', 'reference', 'train.publish', 'rollout.sync', 'engine']) assert.ok(kinds.has(k as never), k);
  assert.deepEqual(events[10], { kind: 'engine', resume: false });
  // Stops 3, 7, 11, 15, 19 never resumed, and the engine's (stop 10).
  assert.deepEqual(events.flatMap((e, i) => (e.resume ? [] : [i])), [3, 7, 10, 11, 15, 19]);
  assert.equal(events.filter((e) => e.kind === 'engine').length, 1);
  assert.ok(stopSchedule(6, seededRandom(7), false).every((e) => e.kind !== 'engine'));
});

test('longestStall is the longest gap between applied steps in the window, its edges included', () => {
  const t0 = 1_000_000;
  const at = (s: number) => new Date(t0 + s * 1000);
  assert.deepEqual(longestStall([[at(1), at(3), at(10)], [at(2), at(4), at(6), at(8)]], t0, t0 + 12_000), { seconds: 7, from: t0 + 3_000, to: t0 + 10_000, run: 0 });
  assert.equal(longestStall([[at(1), at(2)]], t0, t0 + 30_000).seconds, 28, 'no step after 2 s: stalled to the end');
  assert.equal(longestStall([[at(-5), at(40)]], t0, t0 + 10_000).seconds, 10, 'steps outside the window do not count');
});
