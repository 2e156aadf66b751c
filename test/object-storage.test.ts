// Checkpoints and media in a real S3-compatible object store (SeaweedFS, started here like the
// Temporal dev server is: workers/object-store-server.ts), with no shared filesystem. First the
// storage itself: a version's objects (a multipart upload for large weights), completeness by its
// config.json, sha256 checks of the store and of the local cache, immutability, retention deleting
// objects, the bounded LRU cache and the media store. Then a LoRA run on a tiny Llama through the
// workflow on real worker processes, each with its own RELAX_HOME: the train worker is killed
// mid-run and replaced, the run completes with every step applied once, retention deletes the
// pruned versions' objects, the newest version exports to Hugging Face + PEFT, and no worker holds
// a checkpoint file outside its bounded cache.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { HeadObjectCommand } from '@aws-sdk/client-s3';
import { objectStorageSettings, relaxEnvironment } from '../config/environment';
import type { RunConfigInput } from '../config/run-config';
import { roleTaskQueue, type Role } from '../config/task-queues';
import { EXAMPLE_DATA_DIR } from '../config/recipes';
import { CheckpointOverwriteError, CONFIG_FILE, deleteCheckpointFiles, listCheckpointVersions, loadCheckpoint, publishCheckpoint, readOptimizerState, verifyCheckpointFiles, WEIGHTS_FILE, writeOptimizerState } from '../engines/checkpoint';
import { writeHfModel } from '../engines/hf-checkpoint';
import { MediaStore } from '../engines/media/store';
import { initWeights, TINY_MODEL, type ModelConfig } from '../engines/model';
import { resolveModelSource } from '../engines/model-sources';
import { ObjectCache, objectCache } from '../engines/storage/object-cache';
import { objectStore } from '../engines/storage/objects';
import { listObjects, readAt, writeAt } from '../engines/storage/locations';
import { listCheckpoints } from '../store/checkpoint-registry';
import { exportPolicyVersion } from '../training/export';
import { verifyPolicyVersion } from '../training/policy-versions';
import { startObjectStoreServer, type ObjectStoreServer } from '../workers/object-store-server';
import type { TrainingProgress, TrainingResult } from '../workflows/training-run';
import { freshDatabase, sharedTemporalAddress, startDevStack, SupervisedWorkers, temporalClient, uniqueId, waitFor, type TestDatabase } from './helpers';

let server: ObjectStoreServer;
let scratch: string;
const savedEnv = { ...process.env };

before(async () => {
  scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-object-storage-'));
  server = await startObjectStoreServer({ dir: path.join(scratch, 'seaweedfs') });
  // This process uses the store as a worker would, with its own home and a 1 MiB cache.
  Object.assign(process.env, server.env, { RELAX_HOME: path.join(scratch, 'test-home'), RELAX_STORAGE_CACHE_MB: '1' });
});

after(async () => {
  process.env = savedEnv;
  await server?.stop();
  fs.rmSync(scratch, { recursive: true, force: true });
});

const root = (name: string) => `s3://${server.bucket}/unit/${name}-${uniqueId('r')}`;

test('RELAX_STORAGE: s3://bucket[/prefix] or file; anything else is an error naming the fix', () => {
  assert.equal(objectStorageSettings({}), undefined);
  assert.equal(objectStorageSettings({ RELAX_STORAGE: 'file' }), undefined);
  const s = objectStorageSettings({ RELAX_STORAGE: 's3://relax/a/b/', RELAX_S3_ENDPOINT: 'http://127.0.0.1:8333', RELAX_HOME: '/h', RELAX_STORAGE_CACHE_MB: '64' })!;
  assert.deepEqual([s.url, s.bucket, s.prefix, s.endpoint, s.cacheDir, s.cacheBytes], ['s3://relax/a/b', 'relax', 'a/b', 'http://127.0.0.1:8333', '/h/object-cache', 64 * 1024 * 1024]);
  assert.throws(() => objectStorageSettings({ RELAX_STORAGE: '/mnt/shared' }), /RELAX_STORAGE=\/mnt\/shared is not an object store URL: set it to s3:\/\/<bucket>/);
  assert.throws(() => objectStorageSettings({ RELAX_STORAGE: 's3://Bad_Bucket' }), /bucket name/);
  assert.throws(() => objectStorageSettings({ RELAX_STORAGE: 's3://relax/a/../b' }), /'\.\.' segment/);
  assert.throws(() => objectStorageSettings({ RELAX_STORAGE: 's3://relax', AWS_ACCESS_KEY_ID: 'x' }), /must be set together/);
  assert.throws(() => objectStorageSettings({ RELAX_STORAGE: 's3://relax', RELAX_STORAGE_CACHE_MB: '0' }), /RELAX_STORAGE_CACHE_MB=0/);
});

test('a version in the store: multipart weights, complete only with its config.json, verified by sha256, immutable, deleted by retention', async () => {
  // About 3.4 M parameters: 13 MiB of weights, above the 8 MiB multipart part size.
  const model: ModelConfig = { ...TINY_MODEL, vocabSize: 64, dModel: 256, nLayers: 4, dFF: 1024 };
  const r = root('versions');
  const weights = initWeights(model, 1);
  const info = await publishCheckpoint(r, 1, model, weights);
  assert.equal(info.dir, `${r}/v00000001`);
  const head = await objectStore().client.send(new HeadObjectCommand({ Bucket: server.bucket, Key: `${info.dir.slice(`s3://${server.bucket}/`.length)}/${WEIGHTS_FILE}` }));
  assert.match(head.ETag ?? '', /-2"?$/, `a multipart upload of 2 parts (ETag ${head.ETag})`);
  assert.ok(info.bytes > 8 * 1024 * 1024);

  const loaded = await loadCheckpoint(info.dir, { model, sha256: info.sha256, fresh: true });
  assert.deepEqual(Array.from(loaded.weights['tok_emb'] ?? Object.values(loaded.weights)[0]).slice(0, 5), Array.from(weights['tok_emb'] ?? Object.values(weights)[0]).slice(0, 5));
  assert.equal(Object.keys(loaded.weights).length, Object.keys(weights).length);
  // Larger than the 1 MiB cache: read through, nothing kept.
  assert.equal(fs.existsSync(objectCache().fileOf(`${info.dir}/${WEIGHTS_FILE}`)), false);

  // Publishing again: the same weights are a no-op, other weights are refused.
  assert.equal((await publishCheckpoint(r, 1, model, weights)).sha256, info.sha256);
  await assert.rejects(publishCheckpoint(r, 1, model, initWeights(model, 2)), CheckpointOverwriteError);

  // Weights uploaded but no config.json (a publisher that died between the two): not a version.
  const small = { ...TINY_MODEL, nLayers: 1 };
  await writeAt(`${r}/v00000002/${WEIGHTS_FILE}`, new Uint8Array(16));
  const v3info = await publishCheckpoint(r, 3, small, initWeights(small, 3));
  assert.deepEqual(await listCheckpointVersions(r), [1, 3]);
  await assert.rejects(loadCheckpoint(`${r}/v00000002`), /cannot read config\.json/);

  // A corrupted object is caught by the sha256 check; a corrupted cached copy is read again from the store.
  const v3 = `${r}/v00000003`;
  const good = await readAt(`${v3}/${WEIGHTS_FILE}`);
  const cachedFile = objectCache().fileOf(`${v3}/${WEIGHTS_FILE}`);
  assert.ok(fs.existsSync(cachedFile), 'the publisher kept a copy of the small version in its cache');
  fs.writeFileSync(cachedFile, Buffer.alloc(good.length, 7));
  assert.ok((await loadCheckpoint(v3, { model: small })).weights, 'a bad cached copy is replaced from the store');
  const bad = new Uint8Array(good);
  bad[bad.length - 1] ^= 0xff;
  await writeAt(`${v3}/${WEIGHTS_FILE}`, bad, { cache: false });
  assert.ok((await loadCheckpoint(v3, { sha256: v3info.sha256 })).weights, 'the good copy now in the cache is what a cached read sees');
  const check = await verifyCheckpointFiles(v3, 3, v3info.sha256);
  assert.equal(check.ok, false);
  assert.match((check as { problem: string }).problem, /sha256 [0-9a-f]{64} does not match/);

  // Optimizer state beside the versions; retention deletes a version's objects and its cached copies.
  await writeOptimizerState(r, 1, new Uint8Array([1, 2, 3]));
  assert.deepEqual(Array.from((await readOptimizerState(r, 1)) ?? []), [1, 2, 3]);
  assert.equal(await readOptimizerState(r, 9), undefined);
  await deleteCheckpointFiles(r, [{ policyVersion: 1, path: info.dir }, { policyVersion: 3, path: v3 }]);
  assert.deepEqual(await listObjects(r), [`${r}/v00000002/${WEIGHTS_FILE}`], 'only the incomplete upload is left');
  assert.equal(fs.existsSync(objectCache().fileOf(`${v3}/${CONFIG_FILE}`)), false);
});

test('the local cache keeps at most its bound, least recently used out first', async () => {
  const r = root('lru');
  const cache = new ObjectCache(objectStore(), path.join(scratch, 'lru-cache'), 3000);
  const urls = [0, 1, 2, 3].map((i) => `${r}/o${i}`);
  for (const url of urls.slice(0, 3)) await writeAt(url, new Uint8Array(1000).fill(1), { cache: false });
  for (const url of urls.slice(0, 3)) await cache.read(url);
  await new Promise((r) => setTimeout(r, 20));
  await cache.read(urls[0]); // o0 is now the most recently used
  await writeAt(urls[3], new Uint8Array(1000).fill(2), { cache: false });
  await cache.read(urls[3]);
  const held = (await cache.files()).map((f) => path.basename(f.file)).sort();
  assert.deepEqual(held, ['o0', 'o2', 'o3'], 'o1, the least recently used, went');
  assert.ok((await cache.files()).reduce((n, f) => n + f.bytes, 0) <= 3000);
  assert.deepEqual(Array.from((await cache.read(urls[1])).slice(0, 2)), [1, 1], 'an evicted object is read again from the store');
});

test('the media store in object storage: put once, get verified by sha256, a missing medium named', async () => {
  const media = new MediaStore(root('media'));
  const wav = pcmWav(Int16Array.from({ length: 800 }, (_, i) => Math.round(8000 * Math.sin(i / 5))));
  const ref = await media.put(new Uint8Array(wav), { kind: 'audio', format: 'wav' });
  assert.equal((await media.put(new Uint8Array(wav), { kind: 'audio', format: 'wav' })).id, ref.id);
  const other = new MediaStore(media.root); // another worker: same objects
  const got = await other.get(ref.id);
  assert.equal(got.ref.format, 'wav');
  assert.equal(Buffer.compare(Buffer.from(got.bytes), wav), 0);
  const url = `${media.root}/${ref.id.slice(7, 9)}/${ref.id.slice(7)}.wav`;
  assert.equal(await other.path(ref.id), url);
  fs.writeFileSync(objectCache().fileOf(url), Buffer.alloc(wav.length)); // a corrupted cached copy
  assert.equal(Buffer.compare(Buffer.from((await other.get(ref.id)).bytes), wav), 0, 'fetched again from the store');
  await assert.rejects(other.get(`sha256:${'0'.repeat(64)}`), /is not in the store at s3:\/\//);
});

const TINY_LLAMA: ModelConfig = { architecture: 'llama', vocabSize: 49152, dModel: 32, nLayers: 1, nHeads: 2, nKvHeads: 1, dFF: 64, contextLength: 512, ropeTheta: 100000, rmsNormEps: 1e-5, tieEmbeddings: true };
const STEPS = 6;

test('a LoRA run with no shared filesystem: the trainer killed mid-run, the run completes, retention deletes objects, the version exports', async (t) => {
  const db: TestDatabase = await freshDatabase();
  const smollm2 = await resolveModelSource('smollm2-135m-instruct', { home: relaxEnvironment(savedEnv).home });
  const modelDir = path.join(scratch, 'tiny-llama');
  await writeHfModel(modelDir, TINY_LLAMA, initWeights(TINY_LLAMA, 0), { tokenizerDir: smollm2 });
  // Every worker process gets a home of its own: nothing on disk is shared between them.
  const homes: string[] = [];
  const workers = new SupervisedWorkers(() => {
    const home = fs.mkdtempSync(path.join(scratch, 'worker-home-'));
    homes.push(home);
    return { TEMPORAL_ADDRESS: sharedTemporalAddress(), DATABASE_URL: db.url, RELAX_HOME: home, RELAX_STORAGE_CACHE_MB: '4', RELAX_ALLOWED_DATA_ROOTS: `${scratch}:${EXAMPLE_DATA_DIR}`, ...server.env };
  });
  const temporal = await temporalClient();
  try {
    await Promise.all((['control', 'rollout', 'train'] as Role[]).map((r) => workers.start(r)));
    const config: RunConfigInput = {
      model: { from: modelDir, context_length: 256 },
      data: { train: path.join(EXAMPLE_DATA_DIR, 'arith-train.jsonl'), eval_size: 4, reward: { kind: 'numeric' } },
      lora: { rank: 4, alpha: 8 },
      algorithm: { group_size: 2 },
      rollout: { prompts_per_step: 2, max_new_tokens: 4 },
      train: { steps: STEPS, lr: 1e-3, eval_every: STEPS, micro_batch: 4 },
      checkpoint: { every: 3, keep_last: 1 },
    };
    const id = uniqueId('s3-run');
    const handle = await temporal.client.workflow.start('trainingRun', { taskQueue: roleTaskQueue('control'), workflowId: id, args: [config] });
    const progress = () => handle.query<TrainingProgress>('progress').catch(() => undefined);
    const ended = handle.result().then(() => 'the run ended before step 2', (err: Error & { cause?: Error }) => `the run failed: ${err.cause?.message ?? err.message}`);
    await Promise.race([waitFor('step 2', async () => ((await progress())?.step ?? 0) >= 2 || undefined, 180_000), ended.then((why) => assert.fail(why))]);
    const [trainer] = await workers.one('train');
    trainer.child.kill('SIGKILL');
    const killedAt = (await progress())?.step ?? 0;
    await trainer.exited;
    const result = (await handle.result()) as TrainingResult;
    t.diagnostic(`train worker killed at step ${killedAt}; run ${id}: ${result.steps} steps, version ${result.policyVersion}`);
    assert.ok(killedAt < STEPS, 'the kill landed mid-run');
    assert.equal(result.steps, STEPS);

    const { rows: steps } = await db.pool.query<{ step: number; status: string }>('SELECT step, status FROM train_steps WHERE run_id = $1 ORDER BY step', [id]);
    assert.deepEqual(steps.map((s) => [s.step, s.status]), Array.from({ length: STEPS }, (_, i) => [i + 1, 'applied']));
    const checkpoints = await listCheckpoints(db.pool, id);
    assert.deepEqual(checkpoints.map((c) => c.policyVersion), Array.from({ length: STEPS + 1 }, (_, i) => i), 'every version registered once');
    const runRoot = `${server.env.RELAX_STORAGE}/checkpoints/${id}`;
    assert.ok(checkpoints.every((c) => c.path === `${runRoot}/v${String(c.policyVersion).padStart(8, '0')}`), 'every version lives in the object store');
    const objects = await listObjects(runRoot);
    for (const c of checkpoints) {
      const has = objects.includes(`${c.path}/${CONFIG_FILE}`);
      if (c.prunedAt) assert.equal(has, false, `pruned v${c.policyVersion} has no objects left`);
      else assert.ok((await verifyPolicyVersion(db.pool, id, c.policyVersion)).ok, `v${c.policyVersion} verifies from the store`);
    }
    assert.ok(checkpoints.some((c) => c.prunedAt), 'retention pruned something');

    // Export reads the version from the store (this process has its own, empty, cache directory).
    const out = path.join(scratch, 'export');
    const exported = await exportPolicyVersion(db.pool, `${id}@${STEPS}`, out);
    for (const f of ['config.json', 'model.safetensors', 'tokenizer.json', 'adapter/adapter_model.safetensors']) assert.ok(fs.existsSync(path.join(out, f)), `${f} exported`);
    assert.equal(exported.adapterDir, path.join(out, 'adapter'));

    // No checkpoint or media file on any worker's disk outside its bounded cache.
    for (const home of homes) {
      const files = walk(home);
      const stray = files.filter((f) => (/\.safetensors$|\/v\d{8}\b/.test(f) || /\/media\//.test(f)) && !f.startsWith(path.join(home, 'object-cache')));
      assert.deepEqual(stray, [], `no checkpoint files outside ${home}/object-cache`);
      const cached = files.filter((f) => f.startsWith(path.join(home, 'object-cache'))).reduce((n, f) => n + fs.statSync(f).size, 0);
      assert.ok(cached <= 4 * 1024 * 1024, `${home}: cache ${cached} bytes within its 4 MiB bound`);
    }
    t.diagnostic(`${homes.length} worker homes checked (the replacement trainer's included)`);
    assert.ok(homes.length >= 4, 'the killed trainer was replaced');
  } finally {
    await workers.stopAll();
    await temporal.close();
    await db.close();
  }
});

test('relax dev --storage s3 starts SeaweedFS and its workers publish a run to it', async () => {
  const env = Object.fromEntries(Object.keys(server.env).map((k) => [k, ''])); // not this suite's server: relax dev's own
  const stack = await startDevStack(['--storage', 's3', '--rollout-workers', '1'], { ...env, RELAX_STORAGE_CACHE_MB: '' });
  try {
    const runId = uniqueId('dev-s3');
    const started = await stack.call('POST', '/runs', { run_id: runId, task: 'add2', model: { context_length: 16 }, algorithm: { group_size: 2 }, rollout: { prompts_per_step: 4, max_new_tokens: 4 }, train: { steps: 2, eval_every: 2 } });
    assert.equal(started.status, 201, JSON.stringify(started.json));
    const done = await waitFor('the run to finish', async () => {
      const { json } = await stack.call('GET', `/runs/${runId}`);
      return json?.workflowStatus && json.workflowStatus !== 'RUNNING' ? json : undefined;
    }, 180_000, 1000);
    assert.equal(done.workflowStatus, 'COMPLETED', JSON.stringify(done));
    const checkpoints = await listCheckpoints(stack.db.pool, runId);
    assert.deepEqual(checkpoints.map((c) => c.path), [0, 1, 2].map((v) => `s3://relax/checkpoints/${runId}/v0000000${v}`));
    const keys = JSON.parse(fs.readFileSync(path.join(stack.home, 'seaweedfs', 'relax-s3-keys.json'), 'utf8'));
    assert.equal(fs.statSync(path.join(stack.home, 'seaweedfs', 'relax-s3-keys.json')).mode & 0o077, 0, 'the keys file is private');
    assert.ok(keys.accessKey && keys.secretKey);
    assert.equal(fs.existsSync(path.join(stack.home, 'checkpoints')), false, 'nothing under the data directory\'s checkpoints/');
  } finally {
    await stack.close();
  }
});

function walk(dir: string): string[] {
  const out: string[] = [];
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, e.name);
    try {
      if (e.isDirectory()) out.push(...walk(full));
      else if (e.isFile()) out.push(full);
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

/** A 16 kHz mono 16-bit PCM WAV file of `samples`. */
function pcmWav(samples: Int16Array): Buffer {
  const data = Buffer.from(samples.buffer, samples.byteOffset, samples.byteLength);
  const header = Buffer.alloc(44);
  header.write('RIFF', 0);
  header.writeUInt32LE(36 + data.length, 4);
  header.write('WAVEfmt ', 8);
  header.writeUInt32LE(16, 16);
  header.writeUInt16LE(1, 20);
  header.writeUInt16LE(1, 22);
  header.writeUInt32LE(16000, 24);
  header.writeUInt32LE(32000, 28);
  header.writeUInt16LE(2, 32);
  header.writeUInt16LE(16, 34);
  header.write('data', 36);
  header.writeUInt32LE(data.length, 40);
  return Buffer.concat([header, data]);
}
