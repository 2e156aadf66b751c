// The sample buffer's contract, run against both implementations (the Postgres transfer queue and
// the in-memory buffer of the in-process loop): only scored samples are claimed, in key order, within
// the staleness bound and the asked-for iteration; a step's set is decided once and returned again to
// a retry; a claimed key is never rewritten; numbers come back as a float32 column gives them back.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { NewSample } from '../store/transfer-queue';
import { InMemorySampleBuffer, transferQueueBuffer, type SampleBuffer } from '../training/sample-buffer';
import { freshDatabase, uniqueId, type TestDatabase } from './helpers';

let db: TestDatabase;
before(async () => {
  db = await freshDatabase();
});
after(async () => {
  await db.close();
});

function sample(iteration: number, groupIndex: number, sampleIndex: number, extra: Partial<NewSample> = {}): NewSample {
  return { iteration, groupIndex, sampleIndex, promptTokens: [1, 2], responseTokens: [3], lossMask: [1], rolloutLogprobs: [-0.1], reward: 0.1, policyVersion: 0, status: 'scored', ...extra };
}
const keys = (xs: ReadonlyArray<{ iteration: number; groupIndex: number; sampleIndex: number }> | undefined) => xs?.map((s) => `${s.iteration}/${s.groupIndex}/${s.sampleIndex}`);
const request = { size: 10, requireRefLogprobs: false, fromVersion: 2 };

const implementations: Array<[string, () => Promise<SampleBuffer>]> = [
  ['the transfer queue', async () => transferQueueBuffer(db.pool, (await registeredRun()).runId)],
  ['the in-memory buffer', async () => new InMemorySampleBuffer()],
];

async function registeredRun(): Promise<{ runId: string }> {
  const runId = uniqueId('buffer');
  await db.pool.query(`INSERT INTO runs (run_id, workflow_id, kind, config) VALUES ($1, $1, 'test', '{}')`, [runId]);
  return { runId };
}

for (const [name, create] of implementations) {
  test(`${name}: scored samples only, in key order, of the asked-for iteration, within the staleness bound`, async () => {
    const buffer = await create();
    await buffer.put([
      sample(1, 1, 0),
      sample(1, 0, 1),
      sample(1, 0, 0),
      sample(1, 2, 0, { status: 'failed', reward: null, error: 'reward: boom' }),
      sample(1, 3, 0, { status: 'generated', reward: null }),
      sample(1, 4, 0, { policyVersion: 0 }),
      sample(2, 0, 0),
    ]);
    assert.equal(await buffer.claim(1, { ...request, iteration: 5 }), undefined, 'nothing of iteration 5: nothing claimed');
    const claimed = await buffer.claim(1, { ...request, iteration: 1, maxStaleness: 2 });
    assert.deepEqual(keys(claimed), ['1/0/0', '1/0/1', '1/1/0', '1/4/0']);
    assert.equal(claimed?.[0].reward, 0.1);
    assert.deepEqual(claimed?.[0].rolloutLogprobs, [-0.1]);

    // Precision: a real column keeps float32 precision (the shortest decimal of the float32).
    await buffer.put([sample(4, 0, 0, { reward: 1 / 3, responseTokens: [3, 4], lossMask: [1, 1], rolloutLogprobs: [Math.PI, -1e-7] })]);
    const [precise] = (await buffer.claim(3, { ...request, iteration: 4 })) ?? [];
    assert.equal(precise.reward, 0.33333334);
    assert.deepEqual(precise.rolloutLogprobs, [3.1415927, -1e-7]);

    // Staleness: at version 3 with bound 0, version-0 samples are refused.
    await buffer.put([sample(3, 0, 0, { policyVersion: 0 }), sample(3, 1, 0, { policyVersion: 3 })]);
    assert.deepEqual(keys(await buffer.claim(2, { ...request, iteration: 3, fromVersion: 3, maxStaleness: 0 })), ['3/1/0']);
  });

  test(`${name}: a step's set is decided once; a claimed key is never rewritten; size bounds the set`, async () => {
    const buffer = await create();
    await buffer.put([sample(0, 0, 0), sample(0, 0, 1), sample(0, 1, 0)]);
    const first = await buffer.claim(1, { ...request, size: 2 });
    assert.deepEqual(keys(first), ['0/0/0', '0/0/1']);
    await buffer.put([sample(0, 0, 0, { reward: 7 })]);
    const retried = await buffer.claim(1, { ...request, size: 3, iteration: 9 });
    assert.deepEqual(keys(retried), keys(first), 'a retry gets the recorded set, whatever it asks now');
    assert.equal(retried?.[0].reward, 0.1, 'the rewrite of a claimed key was ignored');
    assert.deepEqual(keys(await buffer.claim(2, request)), ['0/1/0'], 'the next step gets what is left');
    assert.equal(await buffer.claim(3, request), undefined);
  });
}
