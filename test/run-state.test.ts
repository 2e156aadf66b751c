// The per-run state registry (training/run-state.ts) and the sweep that releases finished runs
// (workers/run-reaper.ts), on their own: slots, release with disposal, and which runs a sweep
// releases for which reason. test/run-memory.test.ts runs them in real workers.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { RunRegistry, whenLoaded } from '../training/run-state';
import { sweepRuns, type WorkflowState } from '../workers/run-reaper';
import type { Queryable } from '../store/transfer-queue';

function clock(): { now: () => number; advance: (ms: number) => void } {
  let t = 1_000;
  return { now: () => t, advance: (ms) => (t += ms) };
}

test('a run is released as a whole: every slot disposed once, a failed disposal does not stop the others', async () => {
  const registry = new RunRegistry();
  const disposed: string[] = [];
  const trainers = registry.slot<string>('train.trainer', (v, runId) => void disposed.push(`${runId}:${v}`));
  const engines = registry.slot<Promise<string>>('rollout.policy', whenLoaded((v: string) => void disposed.push(`engine ${v}`)));
  const broken = registry.slot<number>('broken', () => {
    throw new Error('boom');
  });
  trainers.set('a', 't1');
  engines.set('a', Promise.resolve('e1'));
  broken.set('a', 1);
  trainers.set('b', 't2');
  const warnings: string[] = [];
  assert.deepEqual(await registry.release('a', (m) => warnings.push(m)), ['train.trainer', 'rollout.policy', 'broken']);
  assert.deepEqual(disposed, ['a:t1', 'engine e1']);
  assert.match(warnings[0], /run a: disposing its broken failed: boom/);
  assert.equal(trainers.get('a'), undefined);
  assert.equal(trainers.get('b'), 't2', 'other runs keep their state');
  assert.deepEqual(await registry.release('a'), [], 'a second release finds nothing');
  assert.deepEqual(registry.held().map((h) => h.runId), ['b']);
});

test('delete forgets without disposing, only the value given; a failed load is not disposed', async () => {
  const registry = new RunRegistry();
  let disposed = 0;
  const slot = registry.slot<Promise<string>>('loading', whenLoaded(() => void disposed++));
  const failed = Promise.reject(new Error('no such model'));
  failed.catch(() => undefined);
  slot.set('a', failed);
  slot.delete('a', Promise.resolve('another'));
  assert.equal(slot.get('a'), failed, 'delete with another value keeps this one');
  await registry.release('a');
  assert.equal(disposed, 0);
  slot.set('b', Promise.resolve('x'));
  slot.delete('b');
  assert.deepEqual(registry.held(), [], 'a run with no slot left is not held');
  assert.throws(() => registry.slot('loading'), /defined twice/);
});

function fakeDb(workflows: Record<string, string>, fail = false): Queryable {
  return {
    query: (async (_sql: string, params: unknown[]) => {
      if (fail) throw new Error('connection refused');
      const ids = params[0] as string[];
      return { rows: ids.filter((id) => id in workflows).map((id) => ({ run_id: id, workflow_id: workflows[id] })) };
    }) as unknown as Queryable['query'],
  };
}

test('a sweep releases runs whose workflow closed or whose row is gone, and idle ones; open and unreachable ones stay', async () => {
  const c = clock();
  const registry = new RunRegistry(c.now);
  const slot = registry.slot<string>('run.context');
  for (const id of ['open', 'closed', 'gone', 'unknown', 'idle']) slot.set(id, id);
  c.advance(10_000);
  slot.get('open'); // used just now
  slot.get('unknown');
  slot.get('closed');
  slot.get('gone');
  const states: Record<string, WorkflowState> = { 'wf-open': 'open', 'wf-closed': 'closed', 'wf-unknown': 'unknown', 'wf-idle': 'open' };
  const db = fakeDb({ open: 'wf-open', closed: 'wf-closed', unknown: 'wf-unknown', idle: 'wf-idle' });
  const released = await sweepRuns({ db, registry, idleMs: 5_000, workflowState: async (id) => states[id] });
  assert.deepEqual(
    released.map((r) => [r.runId, r.reason]),
    [
      ['closed', 'its workflow wf-closed has closed'],
      ['gone', 'its run is not registered in the database'],
      ['idle', 'unused for 10 s'],
    ],
  );
  assert.deepEqual(registry.held().map((h) => h.runId).sort(), ['open', 'unknown']);
});

test('with the database unreachable, a sweep releases only idle runs', async () => {
  const c = clock();
  const registry = new RunRegistry(c.now);
  const slot = registry.slot<string>('run.context');
  slot.set('old', 'x');
  c.advance(10_000);
  slot.set('fresh', 'y');
  let asked = 0;
  const released = await sweepRuns({ db: fakeDb({}, true), registry, idleMs: 5_000, workflowState: async () => (asked++, 'closed') });
  assert.deepEqual(released.map((r) => r.runId), ['old']);
  assert.equal(asked, 0, 'no workflow id, nothing to ask Temporal');
});
