// Prompt media: sources (paths, bytes, base64, data URLs; no network), format sniffing and size
// limits, PNG/JPEG/WAV decoding to the right values, and the content-addressed media store
// (round trip, idempotence, corruption detection, id validation, file modes).
import assert from 'node:assert/strict';
import { mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import * as jpeg from 'jpeg-js';
import { WaveFile } from 'wavefile';
import { decodeAudio, decodeImage, encodePng, encodeWav } from '../engines/media/decode';
import { MediaError, resolveMediaSource } from '../engines/media/sources';
import { MediaStore, parseMediaId } from '../engines/media/store';

let root: string;
before(async () => {
  root = await mkdtemp(path.join(tmpdir(), 'relax-media-'));
});
after(async () => {
  await rm(root, { recursive: true, force: true });
});

const MiB = 1024 * 1024;
const isMediaError = (code: string, pattern?: RegExp) => (err: unknown): boolean => {
  assert.ok(err instanceof MediaError, `expected a MediaError, got ${String(err)}`);
  assert.equal(err.code, code, err.message);
  if (pattern) assert.match(err.message, pattern);
  return true;
};

/** A 3x2 RGB image with distinct pixels. */
function smallImage(): { width: number; height: number; data: Uint8Array } {
  const data = Uint8Array.of(255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30, 200, 100, 50, 128, 128, 128);
  return { width: 3, height: 2, data };
}

test('sources: a path relative to baseDir, bytes, base64 and data URLs all resolve, the format sniffed from content', async () => {
  const png = encodePng(smallImage());
  const wav = encodeWav({ sampleRate: 16000, samples: Float32Array.of(0, 0.5, -0.5) });
  await writeFile(path.join(root, 'misnamed.wav'), png); // the name lies: content wins
  const fromPath = await resolveMediaSource({ path: 'misnamed.wav' }, { baseDir: root, maxBytes: MiB });
  assert.deepEqual([fromPath.kind, fromPath.format], ['image', 'png']);
  assert.deepEqual(fromPath.bytes, png);
  const fromBytes = await resolveMediaSource({ bytes: wav }, { maxBytes: MiB });
  assert.deepEqual([fromBytes.kind, fromBytes.format], ['audio', 'wav']);
  const b64 = Buffer.from(png).toString('base64');
  const fromB64 = await resolveMediaSource({ base64: b64 }, { maxBytes: MiB, expect: 'image' });
  assert.deepEqual(fromB64.bytes, png);
  const pngUrl = await resolveMediaSource(`data:image/png;base64,${b64}`, { maxBytes: MiB });
  assert.deepEqual([pngUrl.format, pngUrl.bytes], ['png', png]);
  const wavUrl = await resolveMediaSource(`data:audio/wav;base64,${Buffer.from(wav).toString('base64')}`, { maxBytes: MiB, expect: 'audio' });
  assert.deepEqual([wavUrl.kind, wavUrl.format, wavUrl.bytes], ['audio', 'wav', wav]);
  const jpg = new Uint8Array(jpeg.encode({ width: 2, height: 2, data: new Uint8Array(16).fill(200) }, 90).data);
  assert.equal((await resolveMediaSource({ bytes: jpg }, { maxBytes: MiB })).format, 'jpeg');
});

test('sources: network URLs, bare strings, unknown formats, missing files and the wrong kind are refused clearly', async () => {
  for (const url of ['https://example.com/cat.png', 'http://10.0.0.1/a.wav']) {
    await assert.rejects(resolveMediaSource(url, { maxBytes: MiB }), isMediaError('MediaNetworkRefused', /never fetched from the network: pass a file path, bytes or a data URL/));
  }
  await assert.rejects(resolveMediaSource('/etc/passwd', { maxBytes: MiB }), isMediaError('MediaInvalid', /not a data URL/));
  const gif = new TextEncoder().encode('GIF89a\x01\x00\x01\x00');
  await assert.rejects(resolveMediaSource({ bytes: gif }, { maxBytes: MiB }),
    isMediaError('MediaFormat', /47 49 46 38 39 61.*PNG and JPEG images and WAV audio/));
  await assert.rejects(resolveMediaSource({ path: 'nope.png' }, { baseDir: root, maxBytes: MiB }), isMediaError('MediaNotFound', /nope\.png.*ENOENT/));
  const wav = encodeWav({ sampleRate: 8000, samples: new Float32Array(4) });
  await assert.rejects(resolveMediaSource({ bytes: wav }, { maxBytes: MiB, expect: 'image' }), isMediaError('MediaFormat', /WAV audio, but image was expected/));
  await assert.rejects(resolveMediaSource('data:image/png,notbase64', { maxBytes: MiB }), isMediaError('MediaInvalid', /not base64-encoded/));
});

test('sources: a 10 MB image over an 8 MiB limit is refused with both sizes, for bytes, base64 and paths (by stat)', async () => {
  const big = new Uint8Array(10 * 1000 * 1000);
  big.set(encodePng(smallImage()));
  const limit = 8 * MiB;
  const sizes = /10000000 bytes.*over the limit of 8\.00 MiB \(8388608 bytes\)/;
  await assert.rejects(resolveMediaSource({ bytes: big }, { maxBytes: limit }), isMediaError('MediaTooLarge', sizes));
  await assert.rejects(resolveMediaSource({ base64: Buffer.from(big).toString('base64') }, { maxBytes: limit }), isMediaError('MediaTooLarge', sizes));
  await assert.rejects(resolveMediaSource(`data:image/png;base64,${Buffer.from(big).toString('base64')}`, { maxBytes: limit }), isMediaError('MediaTooLarge', sizes));
  await writeFile(path.join(root, 'big.png'), big);
  await assert.rejects(resolveMediaSource({ path: path.join(root, 'big.png') }, { maxBytes: limit }), isMediaError('MediaTooLarge', sizes));
});

test('decode: PNG decodes to exact RGB; alpha is composited onto white', async () => {
  const img = smallImage();
  const back = decodeImage(encodePng(img), 'png');
  assert.deepEqual([back.width, back.height], [3, 2]);
  assert.deepEqual(Array.from(back.data), Array.from(img.data));
  const { PNG } = await import('pngjs');
  const rgba = new PNG({ width: 2, height: 1 });
  rgba.data.set([0, 0, 0, 0, 100, 0, 0, 255]); // fully transparent black, opaque dark red
  const out = decodeImage(new Uint8Array(PNG.sync.write(rgba)), 'png');
  assert.deepEqual(Array.from(out.data), [255, 255, 255, 100, 0, 0]);
});

test('decode: JPEG decodes to approximately the encoded colours', () => {
  const width = 16, height = 16;
  const rgba = new Uint8Array(width * height * 4);
  for (let p = 0; p < width * height; p++) {
    const left = p % width < 8;
    rgba.set(left ? [220, 40, 40, 255] : [30, 60, 200, 255], p * 4);
  }
  const bytes = new Uint8Array(jpeg.encode({ width, height, data: rgba }, 95).data);
  const img = decodeImage(bytes, 'jpeg');
  assert.deepEqual([img.width, img.height, img.data.length], [16, 16, 16 * 16 * 3]);
  const px = (x: number, y: number) => Array.from(img.data.subarray((y * width + x) * 3, (y * width + x) * 3 + 3));
  const near = (got: number[], want: number[]) => got.forEach((v, i) => assert.ok(Math.abs(v - want[i]) <= 12, `${got} vs ${want}`));
  near(px(2, 5), [220, 40, 40]);
  near(px(13, 10), [30, 60, 200]);
});

test('decode: an image declaring more than maxPixels is refused before decoding (decompression bomb)', () => {
  const png = encodePng({ width: 64, height: 64, data: new Uint8Array(64 * 64 * 3) });
  assert.throws(() => decodeImage(png, 'png', { maxPixels: 1000 }), isMediaError('MediaTooLarge', /64x64 = 4096 pixels, over the limit of 1000 pixels/));
  // A header that claims 60000x60000 with no pixel data behind it: refused from the header alone.
  const bomb = new Uint8Array(png);
  new DataView(bomb.buffer).setUint32(16, 60000);
  new DataView(bomb.buffer).setUint32(20, 60000);
  assert.throws(() => decodeImage(bomb, 'png'), isMediaError('MediaTooLarge', /60000x60000/));
  const jpg = new Uint8Array(jpeg.encode({ width: 40, height: 30, data: new Uint8Array(40 * 30 * 4) }, 80).data);
  assert.throws(() => decodeImage(jpg, 'jpeg', { maxPixels: 1000 }), isMediaError('MediaTooLarge', /40x30 = 1200 pixels/));
  assert.throws(() => decodeImage(png.subarray(0, 40), 'png'), isMediaError('MediaDecode'));
  assert.throws(() => decodeImage(png, 'jpeg'), isMediaError('MediaFormat'));
});

test('decode: 16-bit stereo WAV averages to the right mono samples and sample rate; other depths decode', () => {
  const wav = new WaveFile();
  wav.fromScratch(2, 22050, '16', [[0, 16384, -32768, 32767], [0, -16384, -32768, 0]]);
  const { sampleRate, samples } = decodeAudio(wav.toBuffer());
  assert.equal(sampleRate, 22050);
  const want = [0, 0, -1, 0.5];
  assert.equal(samples.length, 4);
  samples.forEach((s, i) => assert.ok(Math.abs(s - want[i]) < 1e-4, `sample ${i}: ${s} vs ${want[i]}`));
  for (const [depth, values] of [['8', [0, 255, 128]], ['24', [0, 8388607, -8388608]], ['32', [0, 2147483647, -2147483648]], ['32f', [0, 1, -1]]] as const) {
    const w = new WaveFile();
    w.fromScratch(1, 8000, depth, [...values]);
    const got = Array.from(decodeAudio(w.toBuffer()).samples);
    const expect = depth === '8' ? [-1, 1, 0] : [0, 1, -1];
    got.forEach((s, i) => assert.ok(Math.abs(s - expect[i]) < 1e-2, `${depth}-bit sample ${i}: ${s} vs ${expect[i]}`));
  }
  const round = decodeAudio(encodeWav({ sampleRate: 16000, samples: Float32Array.of(0.25, -0.75) }));
  assert.ok(Math.abs(round.samples[0] - 0.25) < 1e-4 && Math.abs(round.samples[1] + 0.75) < 1e-4);
  // encodeWav writes its header by hand: wavefile's full parser reads it as mono 16-bit PCM with the same samples.
  const written = encodeWav({ sampleRate: 22050, samples: Float32Array.of(0, 0.5, -1, 1, -0.25) });
  const parsed = new WaveFile(written);
  assert.deepEqual([parsed.container, (parsed as unknown as { bitDepth: string }).bitDepth], ['RIFF', '16']);
  assert.deepEqual(parsed.fmt, { ...(parsed.fmt as object), audioFormat: 1, numChannels: 1, sampleRate: 22050, byteRate: 44100, blockAlign: 2, bitsPerSample: 16 });
  assert.deepEqual(Array.from(parsed.getSamples(false, Int16Array) as unknown as Int16Array), [0, 16384, -32768, 32767, -8192]);
  // The 16-bit fast path and wavefile's own unpacking (a 24-bit file of the same values, 32767 as 32767 * 256) agree; a cut-short data chunk yields the samples present.
  const as24 = new WaveFile();
  as24.fromScratch(1, 22050, '24', [0, 4194304, -8388608, 8388352, -2097152]);
  assert.deepEqual(Array.from(decodeAudio(written).samples), Array.from(decodeAudio(as24.toBuffer()).samples).map((v) => Math.round(v * 32768) / 32768));
  assert.equal(decodeAudio(written.subarray(0, written.length - 3)).samples.length, 3);
});

test('decode: a 60 s clip is refused with maxSeconds 30, naming both durations', () => {
  const clip = encodeWav({ sampleRate: 8000, samples: new Float32Array(60 * 8000) });
  assert.throws(() => decodeAudio(clip, { maxSeconds: 30 }), isMediaError('MediaTooLarge', /60\.00 s long, over the limit of 30 s/));
  assert.equal(decodeAudio(clip, { maxSeconds: 60 }).samples.length, 60 * 8000);
  const alaw = new WaveFile();
  alaw.fromScratch(1, 8000, '16', [0, 1000]);
  alaw.toALaw();
  assert.throws(() => decodeAudio(alaw.toBuffer()), isMediaError('MediaFormat', /PCM 8\/16\/24\/32-bit and 32-bit float/));
});

test('store: put/get round trip, idempotent put, 0o600 files in 0o700 directories', async () => {
  const store = new MediaStore(path.join(root, 'media'));
  const png = encodePng(smallImage());
  const ref = await store.put(png, { kind: 'image', format: 'png' });
  assert.match(ref.id, /^sha256:[0-9a-f]{64}$/);
  assert.deepEqual({ ...ref, id: undefined }, { id: undefined, kind: 'image', format: 'png', bytes: png.length });
  const hex = parseMediaId(ref.id).hex;
  const file = path.join(root, 'media', hex.slice(0, 2), `${hex}.png`);
  assert.equal(await store.path(ref.id), file);
  assert.equal(await store.has(ref.id), true);
  const got = await store.get(ref.id);
  assert.deepEqual(got.bytes, png);
  assert.deepEqual(got.ref, ref);
  assert.equal((await stat(file)).mode & 0o777, 0o600);
  assert.equal((await stat(path.dirname(file))).mode & 0o777, 0o700);
  const mtime = (await stat(file)).mtimeMs;
  await new Promise((r) => setTimeout(r, 20));
  assert.deepEqual(await store.put(new Uint8Array(png), { kind: 'image', format: 'png' }), ref);
  assert.equal((await stat(file)).mtimeMs, mtime, 'an existing medium is not rewritten');
  assert.deepEqual(await readdir(path.dirname(file)), [`${hex}.png`], 'one file, no temp files left');
  const wav = encodeWav({ sampleRate: 8000, samples: Float32Array.of(0.1) });
  const wref = await store.put(wav, { kind: 'audio', format: 'wav' });
  assert.deepEqual((await store.get(wref.id)).ref, wref);
  await assert.rejects(store.put(wav, { kind: 'audio', format: 'png' }), isMediaError('MediaInvalid', /kind audio with format png/));
  await assert.rejects(store.put(png, { kind: 'image', format: 'jpeg' }), isMediaError('MediaFormat', /told jpeg but the bytes are png/));
  const missing = `sha256:${'0'.repeat(64)}`;
  assert.equal(await store.has(missing), false);
  await assert.rejects(store.get(missing), isMediaError('MediaNotFound', /not in the store/));
});

test('store: a corrupted file is detected on get, naming the file', async () => {
  const store = new MediaStore(path.join(root, 'media-corrupt'));
  const ref = await store.put(encodePng(smallImage()), { kind: 'image', format: 'png' });
  const file = (await store.path(ref.id))!;
  const bytes = await readFile(file);
  bytes[bytes.length - 5] ^= 0xff;
  await writeFile(file, bytes);
  await assert.rejects(store.get(ref.id), isMediaError('MediaCorrupt', new RegExp(`${file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} is corrupt`)));
});

test('store: malformed and path-traversal ids are refused before touching the disk', async () => {
  const store = new MediaStore(path.join(root, 'media-ids'));
  const bad = ['', 'abc', `sha256:${'A'.repeat(64)}`, `sha256:${'0'.repeat(63)}`, `sha1:${'0'.repeat(40)}`,
    'sha256:../../../../etc/passwd', `sha256:${'0'.repeat(64)}/../x`, `sha256:${'0'.repeat(64)}\n`, `../${'0'.repeat(64)}`];
  for (const id of bad) {
    assert.throws(() => parseMediaId(id), isMediaError('MediaInvalid', /malformed.*'sha256:' followed by 64 lowercase hex/));
    await assert.rejects(store.get(id), isMediaError('MediaInvalid'));
    await assert.rejects(store.has(id), isMediaError('MediaInvalid'));
  }
  assert.deepEqual(parseMediaId(`sha256:${'ab'.repeat(32)}`), { algorithm: 'sha256', hex: 'ab'.repeat(32) });
});
