// One attempt at a time in a worker (activities/context.ts withHeartbeats), on the activity context
// alone: a newer attempt of an activity ends the older one still running here, and an older
// attempt delivered late (seen after a Temporal server restart: attempt 1's task arriving while
// attempt 2 runs) ends at once and leaves the newer one running.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CancelledFailure } from '@temporalio/activity';
import { MockActivityEnvironment } from '@temporalio/testing';
import { assertAttemptCurrent, withHeartbeats } from '../activities/context';

const info = (attempt: number, activityId: string) => ({ attempt, activityId, activityType: 'generate', heartbeatTimeoutMs: 10_000, workflowExecution: { workflowId: 'w', runId: 'r' } });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Work that takes `ms`, checking it is still the current attempt before it "writes". */
const work = (ms: number, out: string) => async () => {
  await sleep(ms);
  assertAttemptCurrent();
  return out;
};

test('a newer attempt ends the older one running here; an older one delivered late ends at once', async () => {
  // Attempt 1 runs; attempt 2 arrives: attempt 1 ends (superseded), attempt 2 completes.
  const first = new MockActivityEnvironment(info(1, 'a')).run(() => withHeartbeats(work(1_500, 'first')));
  await sleep(200);
  const second = new MockActivityEnvironment(info(2, 'a')).run(() => withHeartbeats(work(300, 'second')));
  await assert.rejects(first, (err: Error) => err instanceof CancelledFailure && /superseded by attempt 2/.test(err.message));
  assert.equal(await second, 'second');

  // Attempt 2 runs; attempt 1 arrives late: it ends at once, attempt 2 is untouched.
  const current = new MockActivityEnvironment(info(2, 'b')).run(() => withHeartbeats(work(1_000, 'current')));
  await sleep(200);
  const started = Date.now();
  await assert.rejects(new MockActivityEnvironment(info(1, 'b')).run(() => withHeartbeats(work(10, 'stale'))), (err: Error) => err instanceof CancelledFailure && /attempt 1 of generate is stale: attempt 2 of it runs in this worker/.test(err.message));
  assert.ok(Date.now() - started < 500, 'the stale attempt ended at once');
  assert.equal(await current, 'current');
});
