// The transfer queue on a real database, through the paths production uses (rollout inserts samples
// 'scored' or 'failed', the reference stage adds log-probs, a train step selects a batch and records
// its advantages): batched and chunked writes, validation naming the bad sample, idempotent re-writes
// that never touch a consumed sample, and exactly-once train steps (a retry reuses the recorded set,
// concurrent steps never share a sample, staleness filters the selection, an update is applied once),
// and pruning that keeps what a retry needs.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { Pool } from 'pg';
import fc from 'fast-check';
import { createPool } from '../store/db';
import {
  getTrainStep,
  insertSamples,
  markStepApplied,
  pruneConsumed,
  queueStats,
  readSamples,
  recordGeneratedStep,
  recordStepAdvantages,
  selectTrainBatch,
  setReferenceLogprobs,
  TrainStepConflictError,
  type NewSample,
  type Queryable,
  type SampleKey,
} from '../store/transfer-queue';
import { freshDatabase, uniqueId, type TestDatabase } from './helpers';

let db: TestDatabase;
before(async () => {
  db = await freshDatabase();
});
after(async () => {
  await db.close();
});

async function newRun(): Promise<string> {
  const runId = uniqueId('run');
  await db.pool.query(`INSERT INTO runs (run_id, workflow_id, kind, config) VALUES ($1, $1, 'test', '{}')`, [runId]);
  return runId;
}

/** Counts the statements sent through it. */
function countingDb(pool: Pool): { db: Queryable; statements: string[] } {
  const statements: string[] = [];
  const counted = {
    query: (text: string, values?: unknown[]) => {
      statements.push(text);
      return pool.query(text, values);
    },
  };
  return { db: counted as unknown as Queryable, statements };
}

function sample(iteration: number, groupIndex: number, sampleIndex: number, extra: Partial<NewSample> = {}): NewSample {
  const n = 3 + ((groupIndex + sampleIndex) % 4);
  return {
    iteration,
    groupIndex,
    sampleIndex,
    promptTokens: [1, 2, iteration, groupIndex],
    responseTokens: Array.from({ length: n }, (_, t) => 10 + t + sampleIndex),
    lossMask: Array.from({ length: n }, (_, t) => (t === 1 ? 0 : 1)),
    rolloutLogprobs: Array.from({ length: n }, (_, t) => -0.1 * (t + 1)),
    policyVersion: iteration,
    ...extra,
  };
}

function grid(iterations: number[], groups: number, groupSize: number, extra: (k: SampleKey) => Partial<NewSample> = () => ({})): NewSample[] {
  return iterations.flatMap((it) =>
    Array.from({ length: groups * groupSize }, (_, i) => {
      const key = { iteration: it, groupIndex: Math.floor(i / groupSize), sampleIndex: i % groupSize };
      return sample(key.iteration, key.groupIndex, key.sampleIndex, extra(key));
    }),
  );
}

/** Writes samples as rollout does, scored: ready for training. */
async function readySamples(runId: string, samples: NewSample[]): Promise<void> {
  const scored = samples.map((s) => ({ ...s, reward: s.sampleIndex, status: 'scored' as const }));
  assert.deepEqual(await insertSamples(db.pool, runId, scored), { written: samples.length, skippedConsumed: 0 });
}

const keyOf = (k: SampleKey) => `${k.iteration}/${k.groupIndex}/${k.sampleIndex}`;

test('insertSamples writes 5000 samples in one statement (or in chunks of a bounded size) and reads them back typed', async () => {
  const runId = await newRun();
  const samples = grid([0, 1], 625, 4);
  samples[0] = sample(0, 0, 0, {
    rolloutLogprobs: [-Infinity, -0.25, -1e-8],
    responseTokens: [5, 6, 7],
    lossMask: [1, 1, 0],
    reward: 0.75,
    rewards: { 'format "ok"': 1, 'correct\\ness': 0.5 },
    advantage: 1.5,
    advantages: [0.25, -0.5, 0],
    tokenVersions: [0, 0, 1],
  });
  const { db: counted, statements } = countingDb(db.pool);
  assert.deepEqual(await insertSamples(counted, runId, samples), { written: 5000, skippedConsumed: 0 });
  assert.equal(statements.length, 1, 'one INSERT for 5000 small samples');

  const chunked = countingDb(db.pool);
  const otherRun = await newRun();
  // About 34 elements per sample (keys and scalars count as 16): ~170k in all, so 5 statements of <= 40k.
  assert.equal((await insertSamples(chunked.db, otherRun, samples, { maxElementsPerStatement: 40_000 })).written, 5000);
  assert.ok(chunked.statements.length >= 4 && chunked.statements.length <= 6, `bounded chunks: ${chunked.statements.length} statements`);
  assert.equal((await readSamples(db.pool, otherRun)).length, 5000);

  const all = await readSamples(db.pool, runId);
  assert.equal(all.length, 5000);
  assert.deepEqual(all.slice(0, 3).map(keyOf), ['0/0/0', '0/0/1', '0/0/2'], 'ordered by key');
  const first = all[0];
  assert.deepEqual(first.responseTokens, [5, 6, 7]);
  assert.deepEqual(first.lossMask, [1, 1, 0]);
  // real columns hold float32: the value read back is the float32 nearest to the one written.
  assert.deepEqual(first.rolloutLogprobs?.map(Math.fround), [-Infinity, -0.25, Math.fround(-1e-8)]);
  assert.equal(first.reward, 0.75);
  assert.equal(typeof first.reward, 'number');
  assert.deepEqual(first.rewards, { 'format "ok"': 1, 'correct\\ness': 0.5 });
  assert.equal(first.advantage, 1.5);
  assert.deepEqual(first.advantages, [0.25, -0.5, 0]);
  assert.deepEqual(first.tokenVersions, [0, 0, 1]);
  assert.equal(first.status, 'generated');
  assert.equal(first.consumedByStep, null);
  assert.ok(first.createdAt instanceof Date);
  const last = all[all.length - 1];
  assert.deepEqual([last.iteration, last.groupIndex, last.sampleIndex, last.policyVersion], [1, 624, 3, 1]);
  assert.deepEqual(last.promptTokens, [1, 2, 1, 624]);

  assert.equal((await readSamples(db.pool, runId, { iteration: 1 })).length, 2500);
  assert.deepEqual((await readSamples(db.pool, runId, { keys: [{ iteration: 1, groupIndex: 7, sampleIndex: 2 }, { iteration: 0, groupIndex: 3, sampleIndex: 0 }] })).map(keyOf), ['0/3/0', '1/7/2']);
  assert.equal((await readSamples(db.pool, runId, { status: ['scored', 'consumed'] })).length, 0);
  assert.equal((await readSamples(db.pool, runId, { iteration: [0, 1], limit: 7 })).length, 7);
});

test('bad samples are refused with the sample and field named, before anything is written', async () => {
  const runId = await newRun();
  await assert.rejects(insertSamples(db.pool, runId, [sample(0, 0, 0), sample(0, 0, 1, { lossMask: [1] })]), /samples\[1\] \(iteration 0, group 0, index 1\)\.lossMask has 1 entries but the response has 4 tokens/);
  await assert.rejects(insertSamples(db.pool, runId, [sample(0, 0, 0), sample(0, 0, 0)]), /samples\[1\] \(iteration 0, group 0, index 0\) appears twice/);
  await assert.rejects(insertSamples(db.pool, runId, [sample(0, 0, 0, { status: 'failed' })]), /\.error is required when status is 'failed'/);
  await assert.rejects(insertSamples(db.pool, runId, [sample(0, 0, 0, { reward: Number.NaN })]), /\.reward must be a finite number/);
  await assert.rejects(insertSamples(db.pool, runId, [sample(0, 0, 0), sample(0, 0, 1, { advantages: [1] })]), /samples\[1\] \(iteration 0, group 0, index 1\)\.advantages has 1 entries but the response has 4 tokens/);
  assert.equal((await readSamples(db.pool, runId)).length, 0);
});

test('re-inserting the same keys overwrites them (a retried rollout) without duplicating', async () => {
  const runId = await newRun();
  const scoredOrFailed = (k: SampleKey): Partial<NewSample> =>
    k.groupIndex === 1 && k.sampleIndex === 3 ? { status: 'failed', error: 'environment threw' } : { status: 'scored', reward: 1, rewards: { exact: 1 } };
  await insertSamples(db.pool, runId, grid([0], 2, 4, scoredOrFailed));
  assert.deepEqual((await queueStats(db.pool, runId)).byStatus, { generated: 0, scored: 7, consumed: 0, failed: 1 });
  const retry = grid([0], 2, 4, () => ({ responseTokens: [99, 98], lossMask: [1, 1], rolloutLogprobs: [-1, -2] }));
  assert.deepEqual(await insertSamples(db.pool, runId, retry), { written: 8, skippedConsumed: 0 });
  const rows = await readSamples(db.pool, runId);
  assert.equal(rows.length, 8);
  assert.ok(rows.every((r) => r.responseTokens.join() === '99,98' && r.reward === null && r.rewards === null && r.status === 'generated' && r.error === null));
});

test('scored and failed samples, reference log-probs and step advantages are one statement per batch; failed samples are never trained on', async () => {
  const runId = await newRun();
  const failedKey = { iteration: 0, groupIndex: 7, sampleIndex: 3 };
  const samples = grid([0], 8, 4, (k) =>
    keyOf(k) === keyOf(failedKey)
      ? { status: 'failed', error: 'reward function threw: TypeError: x is undefined' }
      : { status: 'scored', reward: k.sampleIndex, rewards: { exact: k.sampleIndex } },
  );
  const { db: counted, statements } = countingDb(db.pool);
  assert.deepEqual(await insertSamples(counted, runId, samples), { written: 32, skippedConsumed: 0 });
  await assert.rejects(
    setReferenceLogprobs(db.pool, runId, [{ iteration: 0, groupIndex: 1, sampleIndex: 0, refLogprobs: [-1] }]),
    /refLogprobs of sample \(iteration 0, group 1, index 0\) has 1 entries but the response has 4 tokens/,
  );
  const ref = samples.map((s) => ({ ...s, refLogprobs: Array.from(s.responseTokens, () => -0.5) }));
  assert.equal(await setReferenceLogprobs(counted, runId, ref), 31, 'the failed sample is not in flight');
  const stats = await queueStats(db.pool, runId);
  assert.deepEqual(stats.byStatus, { generated: 0, scored: 31, consumed: 0, failed: 1 });
  assert.equal(stats.oldestUnconsumedIteration, 0);
  assert.equal(stats.newestSamplePolicyVersion, 0);
  assert.equal(stats.lastAppliedStep, null);

  const batch = await selectTrainBatch(db.pool, runId, 0, { size: 40, requireRefLogprobs: true });
  assert.ok(batch);
  assert.equal(batch.samples.length, 31, 'the failed sample is not selected');
  assert.ok(!batch.samples.some((s) => keyOf(s) === keyOf(failedKey)));
  const advantages = [...batch.samples, failedKey].map((s) => ({ ...s, advantage: s.sampleIndex - 1.5 }));
  assert.equal(await recordStepAdvantages(counted, runId, 0, advantages), 31, 'only the rows step 0 consumed');
  assert.equal(await recordStepAdvantages(db.pool, runId, 1, advantages), 0, 'nor the rows of another step');
  assert.equal(statements.length, 3);
  assert.equal(await selectTrainBatch(db.pool, runId, 1, { size: 40 }), null, 'nothing left: the failed sample never becomes ready');

  const rows = await readSamples(db.pool, runId);
  const s = rows.find((r) => keyOf(r) === '0/2/3')!;
  assert.equal(s.reward, 3);
  assert.deepEqual(s.rewards, { exact: 3 });
  assert.deepEqual(s.refLogprobs, Array(s.responseTokens.length).fill(-0.5));
  assert.equal(s.advantage, 1.5);
  assert.deepEqual([s.status, s.consumedByStep], ['consumed', 0]);
  const failed = rows.find((r) => keyOf(r) === keyOf(failedKey))!;
  assert.deepEqual([failed.status, failed.consumedByStep, failed.refLogprobs, failed.advantage], ['failed', null, null, null]);
  assert.match(failed.error ?? '', /reward function threw/);
  const after = await queueStats(db.pool, runId);
  assert.deepEqual(after.byStatus, { generated: 0, scored: 0, consumed: 31, failed: 1 });
  assert.equal(after.oldestUnconsumedIteration, null, 'a failed sample is not waiting to be trained on');
  assert.deepEqual([after.lastSelectedStep, after.lastAppliedStep], [0, null]);
});

test('selectTrainBatch: oldest iteration first, and a retried step gets exactly its recorded set back', async () => {
  const runId = await newRun();
  await readySamples(runId, grid([2, 0, 1], 2, 3));
  await insertSamples(db.pool, runId, grid([3], 2, 3));

  const first = await selectTrainBatch(db.pool, runId, 0, { size: 6 });
  assert.ok(first);
  assert.equal(first.reused, false);
  assert.deepEqual(first.samples.map(keyOf), ['0/0/0', '0/0/1', '0/0/2', '0/1/0', '0/1/1', '0/1/2']);
  assert.ok(first.samples.every((s) => s.status === 'consumed' && s.consumedByStep === 0));
  assert.deepEqual([first.step.status, first.step.sampleCount, first.step.policyVersion], ['selected', 6, null]);

  const retried = await selectTrainBatch(db.pool, runId, 0, { size: 2 });
  assert.ok(retried);
  assert.equal(retried.reused, true);
  assert.deepEqual(retried.samples.map(keyOf), first.samples.map(keyOf), 'a retry reuses the set, whatever size it asks for now');

  const second = await selectTrainBatch(db.pool, runId, 1, { size: 4 });
  assert.deepEqual(second?.samples.map(keyOf), ['1/0/0', '1/0/1', '1/0/2', '1/1/0']);

  // 2 ready samples of iteration 1 and 6 of iteration 2 are left; iteration 3 is not scored yet.
  assert.equal(await selectTrainBatch(db.pool, runId, 2, { size: 12, minSize: 9 }), null);
  assert.equal(await getTrainStep(db.pool, runId, 2), undefined, 'a step that found too few samples records nothing');
  assert.equal((await readSamples(db.pool, runId, { status: 'scored' })).length, 8, 'and consumes nothing');
  const third = await selectTrainBatch(db.pool, runId, 2, { size: 12, minSize: 8 });
  assert.equal(third?.samples.length, 8);
  assert.equal(await selectTrainBatch(db.pool, runId, 3, { size: 4 }), null, 'nothing ready: not even the unscored iteration 3');

  const { rows } = await db.pool.query<{ step: number; n: number }>(
    'SELECT step, count(*)::int AS n FROM train_step_samples WHERE run_id = $1 GROUP BY step ORDER BY step',
    [runId],
  );
  assert.deepEqual(rows, [{ step: 0, n: 6 }, { step: 1, n: 4 }, { step: 2, n: 8 }]);
  assert.equal((await queueStats(db.pool, runId)).lastSelectedStep, 2);
});

test('recordGeneratedStep (placement "colocated"): the samples, consumed with their advantages, and the set in one transaction; a second attempt gets the recorded set', async () => {
  const runId = await newRun();
  const samples = grid([4], 2, 3).map((s) => (s.sampleIndex === 2 && s.groupIndex === 1 ? { ...s, status: 'failed' as const, error: 'reward threw' } : { ...s, reward: s.sampleIndex, status: 'scored' as const }));
  const trained = samples.filter((s) => s.status === 'scored').map((s, i) => ({ iteration: s.iteration, groupIndex: s.groupIndex, sampleIndex: s.sampleIndex, advantage: i - 2 }));
  const first = await recordGeneratedStep(db.pool, runId, 5, samples, trained, { engine: 'train/test' });
  assert.equal(first.reused, false);
  assert.deepEqual(first.keys.map(keyOf), ['4/0/0', '4/0/1', '4/0/2', '4/1/0', '4/1/1']);
  const rows = await readSamples(db.pool, runId);
  assert.deepEqual(
    rows.map((r) => [keyOf(r), r.status, r.consumedByStep, r.advantage]),
    [['4/0/0', 'consumed', 5, -2], ['4/0/1', 'consumed', 5, -1], ['4/0/2', 'consumed', 5, 0], ['4/1/0', 'consumed', 5, 1], ['4/1/1', 'consumed', 5, 2], ['4/1/2', 'failed', null, null]],
  );
  const step = await getTrainStep(db.pool, runId, 5);
  assert.deepEqual([step?.status, step?.sampleCount], ['selected', 5]);
  // A retry of the step (here through the train step's own path) gets exactly that set back.
  const retried = await selectTrainBatch(db.pool, runId, 5, { size: 100 });
  assert.equal(retried?.reused, true);
  assert.deepEqual(retried?.keys.map(keyOf), first.keys.map(keyOf));
  const again = await recordGeneratedStep(db.pool, runId, 5, samples.map((s) => ({ ...s, reward: 9 })), trained.slice(0, 2));
  assert.deepEqual([again.reused, again.keys.map(keyOf)], [true, first.keys.map(keyOf)], 'a second attempt writes nothing and reads the recorded set');
  assert.ok((await readSamples(db.pool, runId)).every((r) => r.reward !== 9), 'nothing overwritten');
  // Samples another step consumed are refused, and the transaction leaves nothing behind.
  await assert.rejects(recordGeneratedStep(db.pool, runId, 6, samples, trained), TrainStepConflictError);
  assert.equal(await getTrainStep(db.pool, runId, 6), undefined);
  // Only scored samples can be trained on.
  await assert.rejects(recordGeneratedStep(db.pool, runId, 7, samples, [{ iteration: 4, groupIndex: 1, sampleIndex: 2, advantage: 1 }]), /only scored samples are/);
});

test('concurrent selects: different steps never share a sample, the same step gets the same set', async () => {
  const runId = await newRun();
  await readySamples(runId, grid([0, 1], 5, 4));
  const pool = createPool({ url: db.url, maxConnections: 6 });
  try {
    const steps = [10, 11, 12, 13, 13, 14];
    const batches = await Promise.all(steps.map((step) => selectTrainBatch(pool, runId, step, { size: 5 })));
    const keys = batches.map((b) => (b ? b.samples.map(keyOf) : []));
    assert.deepEqual(keys[3], keys[4], 'both callers of step 13 see one set');
    assert.deepEqual(batches.filter((b) => b?.step.step === 13).map((b) => b!.reused).sort(), [false, true]);
    const distinct = [keys[0], keys[1], keys[2], keys[3], keys[5]];
    const union = new Set(distinct.flat());
    assert.equal(union.size, 25, `disjoint batches of 5: ${JSON.stringify(distinct)}`);
    const stored = await readSamples(db.pool, runId, { status: 'consumed' });
    assert.equal(stored.length, 25);
    for (const [i, step] of [10, 11, 12, 13, 14].entries()) {
      assert.deepEqual(stored.filter((s) => s.consumedByStep === step).map(keyOf), distinct[i]);
    }
  } finally {
    await pool.end();
  }
});

test('a select skips samples another transaction holds instead of waiting for them', { skip: !process.env.DATABASE_URL && 'PGlite runs one transaction at a time: row locks are never contended there' }, async () => {
  const runId = await newRun();
  await readySamples(runId, grid([0, 1], 1, 4));
  const holder = await db.pool.connect();
  try {
    await holder.query('BEGIN');
    await holder.query('SELECT 1 FROM samples WHERE run_id = $1 AND iteration = 0 FOR UPDATE', [runId]);
    const batch = await selectTrainBatch(db.pool, runId, 0, { size: 8 });
    assert.deepEqual(batch?.samples.map(keyOf), ['1/0/0', '1/0/1', '1/0/2', '1/0/3']);
  } finally {
    await holder.query('ROLLBACK');
    holder.release();
  }
});

test('staleness bound: only samples from recent enough policy versions are selected', async () => {
  const runId = await newRun();
  await readySamples(runId, grid([0, 1, 2, 3, 4], 1, 2));
  await assert.rejects(selectTrainBatch(db.pool, runId, 0, { size: 4, maxStaleness: 1 }), /maxStaleness and currentPolicyVersion go together/);
  const batch = await selectTrainBatch(db.pool, runId, 0, { size: 10, maxStaleness: 1, currentPolicyVersion: 4 });
  assert.deepEqual(batch?.samples.map((s) => s.policyVersion), [3, 3, 4, 4]);
  assert.equal(await selectTrainBatch(db.pool, runId, 1, { size: 10, maxStaleness: 0, currentPolicyVersion: 6 }), null);
  const stats = await queueStats(db.pool, runId);
  assert.equal(stats.byStatus.scored, 6, 'stale samples are left in the queue, unconsumed');
  assert.equal(stats.oldestUnconsumedIteration, 0);
  assert.equal(stats.newestSamplePolicyVersion, 4);
});

test('markStepApplied: idempotent per step; a second, different update or a reused version is refused', async () => {
  const runId = await newRun();
  await readySamples(runId, grid([0], 2, 2));
  await selectTrainBatch(db.pool, runId, 0, { size: 2 });
  await selectTrainBatch(db.pool, runId, 1, { size: 2 });

  const applied = await markStepApplied(db.pool, runId, 0, { policyVersion: 1, metrics: { loss: 0.5, 'grad/norm': 2 } });
  assert.deepEqual([applied.status, applied.policyVersion, applied.metrics], ['applied', 1, { loss: 0.5, 'grad/norm': 2 }]);
  const again = await markStepApplied(db.pool, runId, 0, { policyVersion: 1, metrics: { loss: 9 } });
  assert.deepEqual(again, applied, 'a repeat returns the step as first recorded');
  await assert.rejects(markStepApplied(db.pool, runId, 0, { policyVersion: 2 }), (err: Error) => {
    assert.ok(err instanceof TrainStepConflictError);
    assert.match(err.message, /train step 0 of run .* was already applied and produced policy version 1; refusing to record it again as version 2/);
    return true;
  });
  await assert.rejects(markStepApplied(db.pool, runId, 1, { policyVersion: 1 }), /policy version 1 of run .* was already produced by train step 0/);
  await assert.rejects(markStepApplied(db.pool, runId, 7, { policyVersion: 8 }), /train step 7 of run .* was never selected/);
  assert.equal((await getTrainStep(db.pool, runId, 1))?.status, 'selected');

  const retried = await selectTrainBatch(db.pool, runId, 0, { size: 2 });
  assert.deepEqual([retried?.reused, retried?.step.status, retried?.step.policyVersion], [true, 'applied', 1], 'a retried step learns its update is already applied');
  assert.equal((await queueStats(db.pool, runId)).lastAppliedPolicyVersion, 1);
});

test('consumed samples are never overwritten nor re-queued, even after pruning; pruning keeps unapplied steps', async () => {
  const runId = await newRun();
  const samples = grid([0], 4, 2);
  await readySamples(runId, samples);
  for (let step = 0; step < 4; step++) await selectTrainBatch(db.pool, runId, step, { size: 2 });
  for (let step = 0; step < 3; step++) await markStepApplied(db.pool, runId, step, { policyVersion: step + 1 });

  const before = await readSamples(db.pool, runId);
  const rewritten = samples.map((s) => ({ ...s, responseTokens: [7], lossMask: [1], rolloutLogprobs: [-3] }));
  assert.deepEqual(await insertSamples(db.pool, runId, rewritten), { written: 0, skippedConsumed: 8 });
  const lateFailure = samples.map((s) => ({ ...s, status: 'failed' as const, error: 'late' }));
  assert.deepEqual(await insertSamples(db.pool, runId, lateFailure), { written: 0, skippedConsumed: 8 });
  assert.equal(await setReferenceLogprobs(db.pool, runId, samples.map((s) => ({ ...s, refLogprobs: Array.from(s.responseTokens, () => -1) }))), 0);
  assert.equal(await recordStepAdvantages(db.pool, runId, 9, samples.map((s) => ({ ...s, advantage: 5 }))), 0, 'not consumed by step 9');
  assert.deepEqual(await readSamples(db.pool, runId), before, 'consumed rows untouched by a late rollout retry, a late failure or a late stage');

  // Newest step is 3; keep 2 -> steps 0 and 1 go.
  assert.equal(await pruneConsumed(db.pool, runId, { keepLastSteps: 2 }), 4);
  assert.deepEqual([...new Set((await readSamples(db.pool, runId)).map((s) => s.consumedByStep))], [2, 3]);
  // Keep 0 -> step 2 goes, but step 3 is not applied yet: its retry needs its samples.
  assert.equal(await pruneConsumed(db.pool, runId, { keepLastSteps: 0 }), 2);
  assert.deepEqual((await readSamples(db.pool, runId)).map((s) => s.consumedByStep), [3, 3]);
  assert.equal((await selectTrainBatch(db.pool, runId, 3, { size: 2 }))?.reused, true);
  await assert.rejects(selectTrainBatch(db.pool, runId, 0, { size: 2 }), /train step 0 of run .* recorded 2 samples but only 0 are still stored/);

  assert.deepEqual(await insertSamples(db.pool, runId, rewritten), { written: 0, skippedConsumed: 8 }, 'a pruned key is still consumed');
  assert.equal((await readSamples(db.pool, runId)).length, 2);
  const { rows } = await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM train_steps WHERE run_id = $1', [runId]);
  assert.equal(rows[0].n, 4, 'train steps are kept');
  assert.deepEqual((await queueStats(db.pool, runId)).byStatus, { generated: 0, scored: 0, consumed: 2, failed: 0 });
});

test('real columns hold exactly the float32 of each value written (written to 9 significant digits), for any double in its range', async () => {
  const runId = await newRun();
  const values = fc.sample(fc.oneof(fc.double({ min: -3.4e38, max: 3.4e38, noNaN: true }), fc.double({ min: -50, max: 0, noNaN: true }), fc.constantFrom(-0, 1e-45, -3.4e38, 5e-324, -Infinity, 0.1, 2 ** 30 + 0.5)), { numRuns: 2_000, seed: Number(process.env.RELAX_FUZZ_SEED) || 14 });
  const samples = Array.from({ length: values.length / 4 }, (_, i) => {
    const logprobs = values.slice(4 * i, 4 * i + 4);
    return sample(0, i, 0, { responseTokens: [1, 2, 3, 4], lossMask: [1, 1, 1, 1], rolloutLogprobs: logprobs, advantages: logprobs.map((x) => -x) });
  });
  await insertSamples(db.pool, runId, samples);
  const read = await readSamples(db.pool, runId);
  assert.equal(read.length, samples.length);
  read.forEach((r, i) => {
    assert.deepEqual(r.rolloutLogprobs?.map(Math.fround), Array.from(samples[i].rolloutLogprobs ?? [], Math.fround), `sample ${i}`);
    assert.deepEqual(r.advantages?.map(Math.fround), Array.from(samples[i].advantages ?? [], Math.fround), `sample ${i}`);
  });
});
