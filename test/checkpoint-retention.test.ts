// Checkpoint retention: the pure keep/prune rule on hand-worked cases, prunePolicyVersions against a
// real database and real checkpoint files (rows kept and marked, files deleted, crash-safe and
// idempotent), and checkpoint.init_from resolved from the registry. Needs no Temporal server.
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, mock, test } from 'node:test';
import { checkpointDir, listCheckpointVersions, optimizerStatePath, publishCheckpoint } from '../engines/checkpoint';
import { parseRunConfig } from '../config/run-config';
import { componentLog } from '../telemetry/log';
import { initWeights, TINY_MODEL } from '../engines/model';
import {
  CheckpointPrunedError,
  getCheckpoint,
  getRetainedCheckpoint,
  latestCheckpoint,
  listCheckpoints,
  registerCheckpoint,
  resolveInitFrom,
  retainedVersions,
} from '../store/checkpoint-registry';
import { prunePolicyVersions, verifyPolicyVersion } from '../training/policy-versions';
import { formatVersions, versionsToKeep, versionsToPrune, type RetentionInput } from '../store/checkpoint-retention';
import { freshDatabase, uniqueId, type TestDatabase } from './helpers';

const range = (from: number, to: number): number[] => Array.from({ length: to - from + 1 }, (_, i) => from + i);

// ---- The rule (pure) ----

test('retention keeps version 0, the protect window and the newest keep_last multiples of every (hand-worked)', () => {
  // every 10, keep_last 5, protect 1, latest 30: periodic 0, 10, 20, 30 (fewer than 5: all kept).
  assert.deepEqual(versionsToKeep({ versions: range(0, 30), latest: 30, every: 10, keepLast: 5, protect: 1 }), [0, 10, 20, 30]);
  assert.deepEqual(versionsToPrune({ versions: range(0, 30), latest: 30, every: 10, keepLast: 5, protect: 1 }), [...range(1, 9), ...range(11, 19), ...range(21, 29)]);

  // every 10, keep_last 3, protect 4, latest 100: periodic newest 3 = 80, 90, 100; window 97..100; plus 0.
  assert.deepEqual(versionsToKeep({ versions: range(0, 100), latest: 100, every: 10, keepLast: 3, protect: 4 }), [0, 80, 90, 97, 98, 99, 100]);

  // latest 3 of every 10: only 0 and the latest survive (1 and 2 are neither periodic nor protected).
  assert.deepEqual(versionsToPrune({ versions: range(0, 3), latest: 3, every: 10, keepLast: 5, protect: 1 }), [1, 2]);

  // latest 7, protect 3 (max_staleness 2): 5, 6, 7 are protected; periodic (every 5) 0, 5; keep_last 1 -> 5.
  assert.deepEqual(versionsToKeep({ versions: range(0, 7), latest: 7, every: 5, keepLast: 1, protect: 3 }), [0, 5, 6, 7]);

  // keep_last counts registered multiples: 10 is missing, so the newest two are 25 and 30 (not 20, 30 of a dense count).
  assert.deepEqual(versionsToKeep({ versions: [0, 5, 15, 20, 25, 30], latest: 30, every: 5, keepLast: 2, protect: 1 }), [0, 25, 30]);

  // A stale call (latest 8 while 9..12 are registered) keeps everything above its latest.
  assert.deepEqual(versionsToPrune({ versions: range(0, 12), latest: 8, every: 5, keepLast: 1, protect: 2 }), [1, 2, 3, 4, 6]);

  // every 1: every version is periodic, so the newest max(keep_last, protect) survive, plus 0.
  assert.deepEqual(versionsToKeep({ versions: range(0, 20), latest: 20, every: 1, keepLast: 3, protect: 2 }), [0, 18, 19, 20]);

  // keep_last 0: only 0 and the protect window.
  assert.deepEqual(versionsToKeep({ versions: range(0, 20), latest: 20, every: 10, keepLast: 0, protect: 2 }), [0, 19, 20]);

  // Unsorted input with duplicates gives the same answer.
  assert.deepEqual(versionsToPrune({ versions: [3, 0, 2, 1, 2, 3], latest: 3, every: 2, keepLast: 1, protect: 1 }), [1]);
  assert.deepEqual(versionsToKeep({ versions: [], latest: 0, every: 10, keepLast: 5, protect: 1 }), []);
});

test('retention rejects settings that could delete the latest version or make no sense', () => {
  const ok: RetentionInput = { versions: range(0, 5), latest: 5, every: 2, keepLast: 1, protect: 1 };
  assert.throws(() => versionsToKeep({ ...ok, protect: 0 }), /protect must be an integer >= 1 \(the latest version is always kept\), got 0/);
  assert.throws(() => versionsToKeep({ ...ok, every: 0 }), /every must be an integer >= 1, got 0/);
  assert.throws(() => versionsToKeep({ ...ok, keepLast: -1 }), /keepLast must be an integer >= 0, got -1/);
  assert.throws(() => versionsToKeep({ ...ok, latest: 1.5 }), /latest must be an integer >= 0, got 1.5/);
  assert.throws(() => versionsToPrune({ ...ok, versions: [0, -3] }), /every registered version must be an integer >= 0, got -3/);
});

test('retention is monotone: a call with an older latest never prunes what a newer call keeps', () => {
  // Deterministic sweep over small settings: the property the crash/retry reasoning relies on.
  for (const every of [1, 2, 3, 5])
    for (const keepLast of [0, 1, 2, 4])
      for (const protect of [1, 2, 3])
        for (let b = 0; b <= 25; b++) {
          const input = { versions: range(0, 25), every, keepLast, protect };
          const keptAtB = versionsToKeep({ ...input, latest: b });
          assert.ok(keptAtB.includes(0) && keptAtB.includes(b), `0 and the latest are kept (every ${every}, latest ${b})`);
          assert.ok(keptAtB.filter((v) => v <= b).length <= 1 + protect + keepLast, 'at most 1 + protect + keep_last versions up to latest');
          for (let a = 0; a < b; a++) {
            const prunedAtA = versionsToPrune({ ...input, latest: a });
            const wrongly = prunedAtA.filter((v) => keptAtB.includes(v));
            assert.deepEqual(wrongly, [], `latest ${a} prunes versions latest ${b} keeps (every ${every}, keep_last ${keepLast}, protect ${protect})`);
          }
        }
});

test('formatVersions collapses runs of three or more', () => {
  assert.equal(formatVersions([30, 0, 10, 20, 27, 28, 29]), '0, 10, 20, 27..30');
  assert.equal(formatVersions([4, 5, 9]), '4, 5, 9');
  assert.equal(formatVersions(range(0, 9999)), '0..9999');
  assert.equal(formatVersions([]), '');
});

// ---- Against the database and the files ----

let db: TestDatabase;
let root: string;
before(async () => {
  db = await freshDatabase();
  root = await mkdtemp(path.join(tmpdir(), 'relax-retention-'));
});
after(async () => {
  await db?.close();
  if (root) await rm(root, { recursive: true, force: true });
});

/** A registered run; its config is stored as startRun stores it, defaults filled. */
async function newRun(checkpoint: Record<string, unknown> = {}): Promise<{ runId: string; checkpointRoot: string }> {
  const runId = uniqueId('run');
  await db.pool.query(`INSERT INTO runs (run_id, workflow_id, kind, config) VALUES ($1, $1, 'test', $2)`, [runId, JSON.stringify(parseRunConfig({ checkpoint }))]);
  return { runId, checkpointRoot: path.join(root, runId) };
}

/** Publishes, writes optimizer state for, and registers versions `from..to`, as the train step does. */
async function publishVersions(runId: string, checkpointRoot: string, from: number, to: number): Promise<void> {
  for (const v of range(from, to)) {
    const file = optimizerStatePath(checkpointRoot, v);
    await mkdir(path.dirname(file), { recursive: true });
    await writeFile(file, `optimizer state of v${v}`);
    const info = await publishCheckpoint(checkpointRoot, v, TINY_MODEL, initWeights(TINY_MODEL, v + 1));
    await registerCheckpoint(db.pool, { runId, policyVersion: v, path: info.dir, sha256: info.sha256, step: Math.max(0, v - 1) });
  }
}

async function optimizerVersionsOnDisk(checkpointRoot: string): Promise<number[]> {
  const names = await readdir(path.join(checkpointRoot, 'optimizer')).catch(() => [] as string[]);
  return names.map((n) => /^v(\d{8})\.safetensors$/.exec(n)).filter((m) => m !== null).map((m) => Number((m as RegExpExecArray)[1])).sort((a, b) => a - b);
}

async function prunedVersions(runId: string): Promise<number[]> {
  return (await listCheckpoints(db.pool, runId)).filter((c) => c.prunedAt).map((c) => c.policyVersion);
}

test('optimizerStatePath is the path the trainer has always written', () => {
  assert.equal(optimizerStatePath('/ckpt/run', 7), path.join('/ckpt/run', 'optimizer', 'v00000007.safetensors'));
  assert.equal(optimizerStatePath('/ckpt/run', 123456789), path.join('/ckpt/run', 'optimizer', 'v123456789.safetensors'));
  assert.throws(() => optimizerStatePath('/ckpt/run', -1), /policyVersion must be a non-negative integer/);
});

test('prunePolicyVersions deletes the files of pruned versions, keeps their rows marked, and a retry changes nothing', async () => {
  const { runId, checkpointRoot } = await newRun({ every: 5, keep_last: 2 });
  await publishVersions(runId, checkpointRoot, 0, 12);
  const policy = { runId, checkpointRoot, every: 5, keepLast: 2, protect: 2 };

  // Keep 0, periodic 5 and 10 (the newest two multiples of 5), protected 11 and 12.
  assert.deepEqual(await prunePolicyVersions(db.pool, { ...policy, latest: 12 }), [1, 2, 3, 4, 6, 7, 8, 9]);
  assert.deepEqual(await listCheckpointVersions(checkpointRoot), [0, 5, 10, 11, 12]);
  assert.deepEqual(await optimizerVersionsOnDisk(checkpointRoot), [0, 5, 10, 11, 12]);
  assert.deepEqual((await listCheckpoints(db.pool, runId)).map((c) => c.policyVersion), range(0, 12), 'every row stays');
  assert.deepEqual(await prunedVersions(runId), [1, 2, 3, 4, 6, 7, 8, 9]);
  assert.deepEqual(await retainedVersions(db.pool, runId), [0, 5, 10, 11, 12]);
  assert.ok((await getCheckpoint(db.pool, runId, 7))?.prunedAt instanceof Date, 'getCheckpoint returns a pruned row with prunedAt');
  assert.equal((await getCheckpoint(db.pool, runId, 10))?.prunedAt, undefined);
  assert.equal((await latestCheckpoint(db.pool, runId))?.policyVersion, 12);

  // A retried call (the activity retried after it had finished) prunes nothing more and succeeds.
  assert.deepEqual(await prunePolicyVersions(db.pool, { ...policy, latest: 12 }), []);
  assert.deepEqual(await listCheckpointVersions(checkpointRoot), [0, 5, 10, 11, 12]);

  // Three more steps: 5 leaves the newest two multiples (10, 15), 11..13 leave the protect window.
  await publishVersions(runId, checkpointRoot, 13, 15);
  assert.deepEqual(await prunePolicyVersions(db.pool, { ...policy, latest: 15 }), [5, 11, 12, 13]);
  assert.deepEqual(await listCheckpointVersions(checkpointRoot), [0, 10, 14, 15]);
  assert.deepEqual(await optimizerVersionsOnDisk(checkpointRoot), [0, 10, 14, 15]);
  for (const v of [0, 10, 14, 15]) assert.equal((await verifyPolicyVersion(db.pool, runId, v)).ok, true, `retained version ${v} verifies`);
});

test('a reader asking for a pruned version gets an error naming the retention settings and the retained versions', async () => {
  const { runId, checkpointRoot } = await newRun({ every: 10, keep_last: 5 });
  await publishVersions(runId, checkpointRoot, 0, 30);
  await prunePolicyVersions(db.pool, { runId, checkpointRoot, latest: 30, every: 10, keepLast: 5, protect: 3 });
  const expected = `policy version 7 of run ${runId} was pruned by checkpoint retention (checkpoint.every=10, keep_last=5); start from a retained version: 0, 10, 20, 28..30`;

  await assert.rejects(getRetainedCheckpoint(db.pool, runId, 7), (err: Error) => {
    assert.ok(err instanceof CheckpointPrunedError);
    assert.equal(err.message, expected);
    assert.deepEqual([err.runId, err.policyVersion, err.retained], [runId, 7, [0, 10, 20, 28, 29, 30]]);
    return true;
  });
  assert.equal((await getRetainedCheckpoint(db.pool, runId, 20))?.policyVersion, 20);
  assert.equal(await getRetainedCheckpoint(db.pool, runId, 99), undefined, 'unregistered stays undefined, as with getCheckpoint');

  const verified = await verifyPolicyVersion(db.pool, runId, 7);
  assert.equal(verified.ok, false);
  assert.equal(!verified.ok && verified.problem, expected);

  // Retention settings the config does not record are the schema's defaults (every 10, keep_last 5).
  const other = await newRun();
  await publishVersions(other.runId, other.checkpointRoot, 0, 2);
  await prunePolicyVersions(db.pool, { ...other, latest: 2, every: 10, keepLast: 5, protect: 1 });
  await assert.rejects(getRetainedCheckpoint(db.pool, other.runId, 1), /pruned by checkpoint retention \(checkpoint\.every=10, keep_last=5\); start from a retained version: 0, 2$/);
});

test('a crash between marking and deleting leaves nothing trusted and missing: the next call deletes the files', async () => {
  const { runId, checkpointRoot } = await newRun({ every: 4, keep_last: 1 });
  await publishVersions(runId, checkpointRoot, 0, 6);
  const request = { runId, checkpointRoot, latest: 6, every: 4, keepLast: 1, protect: 1 };
  // Phase one of a call that then crashed: the rows are marked, every file is still there.
  await db.pool.query('UPDATE checkpoints SET pruned_at = now() WHERE run_id = $1 AND policy_version = ANY($2::integer[])', [runId, [1, 2, 3, 5]]);
  // ... and part of phase two had happened: one directory and one optimizer file are gone already.
  await rm(checkpointDir(checkpointRoot, 2), { recursive: true });
  await rm(optimizerStatePath(checkpointRoot, 3));

  assert.deepEqual(await prunePolicyVersions(db.pool, request), [], 'the rows were marked by the crashed call');
  assert.deepEqual(await listCheckpointVersions(checkpointRoot), [0, 4, 6]);
  assert.deepEqual(await optimizerVersionsOnDisk(checkpointRoot), [0, 4, 6]);
  assert.deepEqual(await prunedVersions(runId), [1, 2, 3, 5]);
});

test('concurrent calls both succeed and together prune each version once', async () => {
  const { runId, checkpointRoot } = await newRun();
  await publishVersions(runId, checkpointRoot, 0, 9);
  const request = { runId, checkpointRoot, latest: 9, every: 3, keepLast: 2, protect: 2 };
  const [a, b] = await Promise.all([prunePolicyVersions(db.pool, request), prunePolicyVersions(db.pool, request)]);
  assert.deepEqual([...a, ...b].sort((x, y) => x - y), [1, 2, 3, 4, 5, 7]);
  assert.deepEqual(await listCheckpointVersions(checkpointRoot), [0, 6, 8, 9]);
  assert.deepEqual(await optimizerVersionsOnDisk(checkpointRoot), [0, 6, 8, 9]);
});

test('prunePolicyVersions never touches versions above latest, refuses an unregistered latest, and leaves foreign paths alone', async () => {
  const { runId, checkpointRoot } = await newRun();
  await publishVersions(runId, checkpointRoot, 0, 8);
  // A delayed call relative to version 4 while 5..8 exist (a retried activity of an older step).
  assert.deepEqual(await prunePolicyVersions(db.pool, { runId, checkpointRoot, latest: 4, every: 100, keepLast: 1, protect: 1 }), [1, 2, 3]);
  assert.deepEqual(await listCheckpointVersions(checkpointRoot), [0, 4, 5, 6, 7, 8]);

  await assert.rejects(
    prunePolicyVersions(db.pool, { runId, checkpointRoot, latest: 9, every: 100, keepLast: 1, protect: 1 }),
    new RegExp(`cannot prune run ${runId} relative to policy version 9: it is not registered \\(registered: 0\\.\\.8\\); register the version just published, then prune`),
  );
  await assert.rejects(prunePolicyVersions(db.pool, { runId, checkpointRoot, latest: 8, every: 100, keepLast: 1, protect: 0 }), /protect must be an integer >= 1/);

  // A version registered at a directory that is not a vNNNNNNNN/ checkpoint dir (e.g. someone's warm
  // start) is marked pruned but its files are not ours to delete.
  const foreign = path.join(root, `${runId}-warm-start`);
  await mkdir(foreign);
  await registerCheckpoint(db.pool, { runId, policyVersion: 9, path: foreign, sha256: 'f'.repeat(64), step: 9 });
  await publishVersions(runId, checkpointRoot, 10, 10);
  // The warning goes to the checkpoints component's logger (telemetry/log.ts): capture its lines.
  const warnings: string[] = [];
  const logger = componentLog('checkpoints');
  const capture = mock.method(logger, 'warn', (line: string) => void warnings.push(line));
  try {
    assert.deepEqual(await prunePolicyVersions(db.pool, { runId, checkpointRoot, latest: 10, every: 100, keepLast: 1, protect: 1 }), [4, 5, 6, 7, 8, 9]);
    assert.deepEqual(await readdir(foreign), [], 'the foreign directory still exists');
    assert.match(warnings.join('\n'), /version 9 is pruned but its path .*-warm-start is not a v00000009\/ checkpoint directory; left in place/);
    assert.equal(warnings.length, 1);
    await prunePolicyVersions(db.pool, { runId, checkpointRoot, latest: 10, every: 100, keepLast: 1, protect: 1 });
  } finally {
    capture.mock.restore();
  }
  assert.equal(warnings.length, 1, 'the warning is given once, when the version is marked');
  assert.deepEqual(await listCheckpointVersions(checkpointRoot), [0, 10]);
});

// ---- checkpoint.init_from ----

test('resolveInitFrom: a directory path is returned unchanged; <run_id>@<version|latest> reads the registry', async () => {
  const { runId, checkpointRoot } = await newRun({ every: 5, keep_last: 1 });
  await publishVersions(runId, checkpointRoot, 0, 12);

  const dir = checkpointDir(checkpointRoot, 3);
  assert.deepEqual(await resolveInitFrom(db.pool, dir), { path: dir });
  assert.deepEqual(await resolveInitFrom(db.pool, 'relative/missing/dir'), { path: 'relative/missing/dir' }, 'not a reference: loadCheckpoint reports it');

  const v3 = await getCheckpoint(db.pool, runId, 3);
  assert.deepEqual(await resolveInitFrom(db.pool, `${runId}@3`), { path: v3?.path, sha256: v3?.sha256, runId, policyVersion: 3 });
  const v12 = await getCheckpoint(db.pool, runId, 12);
  assert.deepEqual(await resolveInitFrom(db.pool, `${runId}@latest`), { path: v12?.path, sha256: v12?.sha256, runId, policyVersion: 12 });

  // An existing path wins over the reference syntax.
  const cwd = process.cwd();
  process.chdir(root);
  try {
    await mkdir(`${runId}@3`);
    assert.deepEqual(await resolveInitFrom(db.pool, `${runId}@3`), { path: `${runId}@3` });
  } finally {
    process.chdir(cwd);
  }
});

test('resolveInitFrom says what is wrong: unknown run, no versions, unregistered version, pruned version', async () => {
  const { runId, checkpointRoot } = await newRun({ every: 5, keep_last: 1 });
  await publishVersions(runId, checkpointRoot, 0, 12);
  const reference = (spec: string) => `"${spec}" \\(not an existing path, so read as a registry reference <run_id>@<version\\|latest>\\)`;

  await assert.rejects(
    resolveInitFrom(db.pool, 'no-such-run@3'),
    new RegExp(`^Error: ${reference('no-such-run@3')}: no run "no-such-run" is registered in this database; runs with checkpoints, most recent first: ${runId}(, [^ ]+)* \\(or give a checkpoint directory path\\)$`),
  );
  const empty = await newRun();
  await assert.rejects(resolveInitFrom(db.pool, `${empty.runId}@latest`), new RegExp(`run "${empty.runId}" has no registered policy versions yet`));
  await assert.rejects(
    resolveInitFrom(db.pool, `${runId}@57`),
    new RegExp(`^Error: ${reference(`${runId}@57`)}: run "${runId}" has policy versions 0\\.\\.12 registered, not version 57; use ${runId}@latest or a version in 0\\.\\.12$`),
  );
  await assert.rejects(resolveInitFrom(db.pool, `${runId}@99999999999`), /has policy versions 0\.\.12 registered, not version 99999999999/);

  await prunePolicyVersions(db.pool, { runId, checkpointRoot, latest: 12, every: 5, keepLast: 1, protect: 2 });
  await assert.rejects(resolveInitFrom(db.pool, `${runId}@7`), (err: Error) => {
    assert.ok(err instanceof CheckpointPrunedError);
    assert.match(
      err.message,
      new RegExp(`^${reference(`${runId}@7`)}: policy version 7 of run ${runId} was pruned by checkpoint retention \\(checkpoint\\.every=5, keep_last=1\\); start from a retained version: 0, 10\\.\\.12$`),
    );
    return true;
  });
  assert.equal((await resolveInitFrom(db.pool, `${runId}@10`)).policyVersion, 10, 'a retained version still resolves');
});
