// Checkpoints: safetensors round trips, content hashes, immutability of published versions, and
// errors that name the broken tensor.
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { CONFIG_FILE, listCheckpointVersions, loadCheckpoint, publishCheckpoint, sha256Hex, WEIGHTS_FILE } from '../engines/checkpoint';
import { initWeights, parameterSpec, TINY_MODEL, type ModelConfig } from '../engines/model';
import { decodeSafetensors, encodeSafetensors } from '../engines/safetensors';

const MODEL: ModelConfig = { ...TINY_MODEL, nLayers: 1 };
let root: string;

before(async () => {
  root = await mkdtemp(path.join(tmpdir(), 'relax-checkpoint-'));
});

after(async () => {
  await rm(root, { recursive: true, force: true });
});

function bitsEqual(a: Float32Array, b: Float32Array): boolean {
  const x = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const y = new Uint32Array(b.buffer, b.byteOffset, b.length);
  return x.length === y.length && x.every((v, i) => v === y[i]);
}

test('safetensors: the layout is 8-byte LE header length + JSON header + LE data, and it round-trips bit-exactly', () => {
  const special = Float32Array.of(0, -0, 1.5, -3.25e-38, 3.4028234663852886e38, Number.NaN, Infinity, 1e-45);
  const bytes = encodeSafetensors([['a', { shape: [2, 4], data: special }], ['b', { shape: [1], data: Float32Array.of(7) }]], { note: 'hi' });
  const n = Number(new DataView(bytes.buffer).getBigUint64(0, true));
  const header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + n)));
  assert.deepEqual(header.a, { dtype: 'F32', shape: [2, 4], data_offsets: [0, 32] });
  assert.deepEqual(header.b, { dtype: 'F32', shape: [1], data_offsets: [32, 36] });
  assert.deepEqual(header.__metadata__, { note: 'hi' });
  assert.equal((8 + n) % 8, 0, 'data starts 8-byte aligned');
  assert.equal(new DataView(bytes.buffer).getFloat32(8 + n + 8, true), 1.5, 'little-endian float at its offset');
  const back = decodeSafetensors(bytes);
  assert.ok(bitsEqual(back.tensors.get('a')!.data, special));
  assert.deepEqual(back.tensors.get('b')!.shape, [1]);
  assert.deepEqual(back.metadata, { note: 'hi' });
});

test('safetensors: malformed files get errors naming the problem', () => {
  const good = encodeSafetensors([['w', { shape: [3], data: Float32Array.of(1, 2, 3) }]]);
  assert.throws(() => decodeSafetensors(good.subarray(0, 5), 'x.safetensors'), /x.safetensors: 5 bytes is too short/);
  assert.throws(() => decodeSafetensors(good.subarray(0, good.length - 4), 'x.safetensors'), /tensor "w" data_offsets \[0, 12\] lie outside the 8-byte data section/);
  const header = (h: object) => {
    const json = new TextEncoder().encode(JSON.stringify(h));
    const out = new Uint8Array(8 + json.length + 12);
    new DataView(out.buffer).setBigUint64(0, BigInt(json.length), true);
    out.set(json, 8);
    return out;
  };
  assert.throws(() => decodeSafetensors(header({ w: { dtype: 'I64', shape: [1], data_offsets: [0, 8] } })), /tensor "w" has dtype I64; only F32, F16, BF16 are supported/);
  assert.throws(() => decodeSafetensors(header({ w: { dtype: 'F32', shape: [2], data_offsets: [0, 12] } })), /tensor "w" has shape \[2\] \(8 bytes of F32\) but data_offsets span 12 bytes/);
});

test('publish + load reproduces the weights bit-exactly and verifies the sha256', async () => {
  const weights = initWeights(MODEL, 1);
  const info = await publishCheckpoint(root, 1, MODEL, weights);
  assert.equal(info.sha256, sha256Hex(new Uint8Array(await readFile(path.join(info.dir, WEIGHTS_FILE)))));
  const config = JSON.parse(await readFile(path.join(info.dir, CONFIG_FILE), 'utf8'));
  assert.deepEqual(config.model, MODEL);
  assert.equal(config.policyVersion, 1);
  const loaded = await loadCheckpoint(info.dir, { model: MODEL, sha256: info.sha256 });
  for (const p of parameterSpec(MODEL)) assert.ok(bitsEqual(loaded.weights[p.name], weights[p.name]), p.name);
  await assert.rejects(loadCheckpoint(info.dir, { sha256: '0'.repeat(64) }), /does not match the expected 0000/);
  await assert.rejects(loadCheckpoint(info.dir, { model: { ...MODEL, dFF: 128 } }), /model.dFF is 256, expected 128/);
});

test('a published version is immutable: same bytes again is a no-op, different bytes is refused', async () => {
  const dir = path.join(root, 'immutable');
  const w = initWeights(MODEL, 2);
  const first = await publishCheckpoint(dir, 4, MODEL, w);
  const again = await publishCheckpoint(dir, 4, MODEL, w);
  assert.equal(again.sha256, first.sha256);
  await assert.rejects(publishCheckpoint(dir, 4, MODEL, initWeights(MODEL, 3)), /policy version 4 is already published .* refusing to overwrite/);
  await publishCheckpoint(dir, 12, MODEL, w);
  assert.deepEqual(await listCheckpointVersions(dir), [4, 12]);
  assert.deepEqual(await listCheckpointVersions(path.join(root, 'nothing-here')), []);
});

test('a corrupted weights file fails the hash check', async () => {
  const info = await publishCheckpoint(path.join(root, 'corrupt'), 0, MODEL, initWeights(MODEL, 4));
  const file = path.join(info.dir, WEIGHTS_FILE);
  const bytes = new Uint8Array(await readFile(file));
  bytes[bytes.length - 1] ^= 0x01;
  await writeFile(file, bytes);
  await assert.rejects(loadCheckpoint(info.dir), /sha256 [0-9a-f]{64} does not match [0-9a-f]{64} recorded in config.json/);
});

test('a tensor whose shape does not match the model config is named with both shapes', async () => {
  const info = await publishCheckpoint(path.join(root, 'shape'), 0, MODEL, initWeights(MODEL, 5));
  // Rewrite the file with one tensor transposed (same size, wrong shape) and a matching hash, so
  // only the shape check can catch it.
  const file = path.join(info.dir, WEIGHTS_FILE);
  const parsed = decodeSafetensors(new Uint8Array(await readFile(file)));
  const entries = [...parsed.tensors].map(([name, t]) => [name, name === 'blocks.0.mlp.fc.weight' ? { shape: [256, 64], data: t.data } : t] as const);
  const bytes = encodeSafetensors(entries, parsed.metadata);
  await writeFile(file, bytes);
  const configPath = path.join(info.dir, CONFIG_FILE);
  const config = JSON.parse(await readFile(configPath, 'utf8'));
  await writeFile(configPath, JSON.stringify({ ...config, sha256: sha256Hex(bytes), bytes: bytes.length }));
  await assert.rejects(loadCheckpoint(info.dir), /tensor "blocks.0.mlp.fc.weight" has shape \[256,64\], expected \[64,256\]/);
});

test('missing and unexpected tensors are named', async () => {
  const weights = initWeights(MODEL, 6);
  const { ['ln_f.bias']: _dropped, ...missing } = weights;
  await assert.rejects(publishCheckpoint(path.join(root, 'missing'), 0, MODEL, missing), /missing tensor "ln_f.bias" \(expected shape \[64\]\)/);
  await assert.rejects(publishCheckpoint(path.join(root, 'extra'), 0, MODEL, { ...weights, 'head.extra': new Float32Array(1) }), /unexpected tensor "head.extra"/);
});
