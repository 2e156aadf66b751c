// The checkpoint registry against real checkpoint files: a version is registered once (a retried
// registration is a no-op, a different one a conflict), and corruption on disk is detected.
import assert from 'node:assert/strict';
import { mkdtemp, open, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { publishCheckpoint, WEIGHTS_FILE, type CheckpointInfo } from '../engines/checkpoint';
import { initWeights, TINY_MODEL } from '../engines/model';
import {
  CheckpointConflictError,
  getCheckpoint,
  latestCheckpoint,
  listCheckpoints,
  registerCheckpoint,
} from '../store/checkpoint-registry';
import { verifyPolicyVersion } from '../training/policy-versions';
import { freshDatabase, uniqueId, type TestDatabase } from './helpers';

let db: TestDatabase;
let root: string;
before(async () => {
  db = await freshDatabase();
  root = await mkdtemp(path.join(tmpdir(), 'relax-registry-'));
});
after(async () => {
  await db.close();
  await rm(root, { recursive: true, force: true });
});

async function newRun(): Promise<string> {
  const runId = uniqueId('run');
  await db.pool.query(`INSERT INTO runs (run_id, workflow_id, kind, config) VALUES ($1, $1, 'test', '{}')`, [runId]);
  return runId;
}

async function publish(runId: string, version: number): Promise<CheckpointInfo> {
  return publishCheckpoint(path.join(root, runId), version, TINY_MODEL, initWeights(TINY_MODEL, version + 1));
}

const FAKE_SHA = (c: string) => c.repeat(64);

test('registering a version is idempotent with identical content and a conflict with anything else', async () => {
  const runId = await newRun();
  const v1 = { runId, policyVersion: 1, path: '/ckpt/v1', sha256: FAKE_SHA('a'), step: 0 };
  const first = await registerCheckpoint(db.pool, v1);
  assert.deepEqual([first.policyVersion, first.path, first.sha256, first.step], [1, '/ckpt/v1', FAKE_SHA('a'), 0]);
  assert.deepEqual(await registerCheckpoint(db.pool, v1), first, 'a retried registration returns the original');

  await assert.rejects(registerCheckpoint(db.pool, { ...v1, sha256: FAKE_SHA('b') }), (err: Error) => {
    assert.ok(err instanceof CheckpointConflictError);
    assert.match(err.message, new RegExp(`policy version 1 of run ${runId} is already registered with sha256 "a{64}" \\(registering "b{64}"\\)`));
    return true;
  });
  await assert.rejects(registerCheckpoint(db.pool, { ...v1, path: '/elsewhere/v1' }), /already registered with path "\/ckpt\/v1" \(registering "\/elsewhere\/v1"\)/);
  await assert.rejects(registerCheckpoint(db.pool, { ...v1, sha256: 'ABC' }), /sha256 must be 64 lowercase hex digits/);
  await assert.rejects(registerCheckpoint(db.pool, { ...v1, policyVersion: -1 }), /policyVersion must be a non-negative integer/);
  assert.deepEqual(await getCheckpoint(db.pool, runId, 1), first, 'the conflicting writes changed nothing');
});

test('latest, get and list see the registered versions in order', async () => {
  const runId = await newRun();
  assert.equal(await latestCheckpoint(db.pool, runId), undefined);
  for (const v of [2, 0, 1]) await registerCheckpoint(db.pool, { runId, policyVersion: v, path: `/c/v${v}`, sha256: FAKE_SHA(String(v)), step: v });
  assert.equal((await latestCheckpoint(db.pool, runId))?.policyVersion, 2);
  assert.deepEqual((await listCheckpoints(db.pool, runId)).map((c) => c.policyVersion), [0, 1, 2]);
  assert.equal((await getCheckpoint(db.pool, runId, 1))?.path, '/c/v1');
  assert.equal(await getCheckpoint(db.pool, runId, 7), undefined);
  assert.deepEqual(await listCheckpoints(db.pool, await newRun()), [], 'runs do not see each other');
});

test('verifyPolicyVersion re-hashes the files: a flipped byte, a missing directory or a wrong registry hash is reported', async () => {
  const runId = await newRun();
  const infos = await Promise.all([0, 1, 2, 3].map((v) => publish(runId, v)));
  for (const info of infos) await registerCheckpoint(db.pool, { runId, policyVersion: info.policyVersion, path: info.dir, sha256: info.sha256, step: info.policyVersion });
  assert.deepEqual(await verifyPolicyVersion(db.pool, runId, 0), { checkpoint: await getCheckpoint(db.pool, runId, 0), ok: true });

  const file = await open(path.join(infos[1].dir, WEIGHTS_FILE), 'r+');
  try {
    const { size } = await file.stat();
    const byte = Buffer.alloc(1);
    await file.read(byte, 0, 1, size - 3);
    byte[0] ^= 0x01;
    await file.write(byte, 0, 1, size - 3);
  } finally {
    await file.close();
  }
  const corrupt = await verifyPolicyVersion(db.pool, runId, 1);
  assert.equal(corrupt.ok, false);
  assert.match(!corrupt.ok ? corrupt.problem : '', /model\.safetensors: sha256 [0-9a-f]{64} does not match/);

  await rm(infos[2].dir, { recursive: true });
  const missing = await verifyPolicyVersion(db.pool, runId, 2);
  assert.match(!missing.ok ? missing.problem : '', /cannot read config\.json/);

  // A registry entry whose hash is not the file's (e.g. a directory replaced wholesale with other weights).
  await registerCheckpoint(db.pool, { runId, policyVersion: 9, path: infos[3].dir, sha256: infos[0].sha256, step: 9 });
  const replaced = await verifyPolicyVersion(db.pool, runId, 9);
  assert.match(!replaced.ok ? replaced.problem : '', new RegExp(`does not match the expected ${infos[0].sha256}`));

  assert.equal((await verifyPolicyVersion(db.pool, runId, 3)).ok, true, 'intact neighbours still verify');
  await assert.rejects(verifyPolicyVersion(db.pool, runId, 42), /policy version 42 of run .* is not registered/);
});

