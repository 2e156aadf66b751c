// Stage spans -> per-role busy/idle time and the Chrome trace (pure functions, hand-worked).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { chromeTrace, utilization, type Span } from '../store/spans';

const t0 = Date.UTC(2026, 10, 30, 9, 0, 0);
const span = (role: string, worker: string, from: number, to: number, extra: Partial<Span> = {}): Span => ({
  runId: 'r',
  role,
  stage: role === 'train' ? 'train' : 'generate',
  worker,
  startedAt: new Date(t0 + from),
  endedAt: new Date(t0 + to),
  ...extra,
});

test('utilization: overlapping spans of one role count once; idle is the rest of the window', () => {
  const spans = [span('rollout', 'a', 0, 100), span('rollout', 'b', 50, 150), span('rollout', 'a', 300, 400), span('train', 't', 100, 400)];
  const u = utilization(spans);
  assert.deepEqual(u.rollout, { busyMs: 250, windowMs: 400, idleFraction: 1 - 250 / 400, spans: 3 });
  assert.deepEqual(u.train, { busyMs: 300, windowMs: 400, idleFraction: 0.25, spans: 1 });
  // a window clips the spans
  assert.equal(utilization(spans, { from: t0 + 100, to: t0 + 300 }).train.busyMs, 200);
  assert.deepEqual(utilization([]), {});
});

test('chromeTrace: a process per role, a thread per worker, one complete event per span in microseconds', () => {
  const trace = chromeTrace([span('rollout', 'w1', 10, 30, { iteration: 2, policyVersion: 1 }), span('train', 'w2', 30, 80, { step: 3, policyVersion: 3 })]);
  const events = trace.traceEvents as Array<Record<string, unknown>>;
  const complete = events.filter((e) => e.ph === 'X');
  assert.deepEqual(
    complete.map((e) => [e.name, e.ts, e.dur]),
    [
      ['generate iteration 2', 0, 20_000],
      ['train step 3', 20_000, 50_000],
    ],
  );
  const names = events.filter((e) => e.ph === 'M').map((e) => (e.args as { name: string }).name);
  assert.deepEqual(names.sort(), ['rollout', 'train', 'w1', 'w2']);
  assert.notEqual(complete[0].pid, complete[1].pid);
  assert.equal(trace.displayTimeUnit, 'ms');
  JSON.parse(JSON.stringify(trace));
});
