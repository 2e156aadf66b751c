// The image and audio processors (engines/media/image.ts, audio.ts, mel.ts) on hand-computed cases
// and against the numpy/librosa reference in test/fixtures/logmel-reference.json, which
// scripts/reference/mel_reference.py writes from the same test signal built here.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { checkAudio, processAudio, resample } from '../engines/media/audio';
import { fitWithin, normalize, patchify, processImage, resizeBilinear, type RgbImage } from '../engines/media/image';
import { logMel, melFilterbank, powerSpectra, powerSpectrum, stftPower } from '../engines/media/mel';

const root = path.resolve(__dirname, '..', '..');
interface Reference {
  filterbank: { nMels: number; nBins: number; rows: { start: number; values: number[] }[] };
  logMel: { nFrames: number; nMels: number; values: number[] };
}
const reference = JSON.parse(fs.readFileSync(path.join(root, 'test', 'fixtures', 'logmel-reference.json'), 'utf8')) as Reference;

/** The reference script's signal: two sines and a 200 -> 6000 Hz chirp, 16 kHz, 0.5 s. */
function testSignal(sampleRate = 16000, seconds = 0.5): Float64Array {
  return Float64Array.from({ length: Math.round(sampleRate * seconds) }, (_, n) => {
    const t = n / sampleRate;
    const chirp = Math.sin(2 * Math.PI * (200 * t + ((6000 - 200) / (2 * seconds)) * t * t));
    return 0.5 * Math.sin(2 * Math.PI * 440 * t) + 0.25 * Math.sin(2 * Math.PI * 3000 * t) + 0.2 * chirp;
  });
}

function image(width: number, height: number, pixel: (x: number, y: number, c: number) => number): RgbImage {
  const data = new Uint8Array(width * height * 3);
  for (let y = 0; y < height; y++) for (let x = 0; x < width; x++) for (let c = 0; c < 3; c++) data[(y * width + x) * 3 + c] = pixel(x, y, c);
  return { width, height, data };
}

const channel = (img: RgbImage, c: number): number[][] =>
  Array.from({ length: img.height }, (_, y) => Array.from({ length: img.width }, (_, x) => img.data[(y * img.width + x) * 3 + c]));

const sine = (rate: number, hz: number, amplitude: number, seconds: number): Float32Array =>
  Float32Array.from({ length: Math.round(rate * seconds) }, (_, n) => amplitude * Math.sin((2 * Math.PI * hz * n) / rate));

const maxAbsDiff = (a: ArrayLike<number>, b: ArrayLike<number>): number => {
  assert.equal(a.length, b.length);
  let max = 0;
  for (let i = 0; i < a.length; i++) max = Math.max(max, Math.abs(a[i] - b[i]));
  return max;
};

test('bilinear resize with half-pixel centers: 2x2 -> 4x4, 4x4 -> 2x2, 3x1 -> 2x1 by hand', () => {
  // channel 0 = 128 y + 64 x; upscaled samples y, x at 0, 0.25, 0.75, 1 (clamped -0.25 and 1.25)
  const small = image(2, 2, (x, y, c) => [128 * y + 64 * x, 255 - (128 * y + 64 * x), 7][c]);
  const big = resizeBilinear(small, 4, 4);
  assert.deepEqual(channel(big, 0), [[0, 16, 48, 64], [32, 48, 80, 96], [96, 112, 144, 160], [128, 144, 176, 192]]);
  assert.deepEqual(channel(big, 1), channel(big, 0).map((row) => row.map((v) => 255 - v)));
  assert.deepEqual(channel(big, 2), [[7, 7, 7, 7], [7, 7, 7, 7], [7, 7, 7, 7], [7, 7, 7, 7]]);
  // halving samples at 0.5 and 2.5: each output pixel is its 2x2 block's mean
  const g = [[10, 20, 0, 0], [30, 40, 100, 200], [1, 3, 5, 7], [2, 2, 9, 11]];
  const shrunk = resizeBilinear(image(4, 4, (x, y, c) => (c === 1 ? g[y][x] : 40 * y + 4 * x)), 2, 2);
  assert.deepEqual(channel(shrunk, 1), [[25, 75], [2, 8]]);
  assert.deepEqual(channel(shrunk, 0), [[22, 30], [102, 110]]);
  // 3 -> 2 samples at 0.25 and 1.75
  assert.deepEqual(channel(resizeBilinear(image(3, 1, (x) => 100 * x), 2, 1), 0), [[25, 175]]);
  assert.throws(() => resizeBilinear({ width: 2, height: 2, data: new Uint8Array(11) }, 4, 4), /needs 12/);
});

test('fitWithin keeps the aspect ratio within maxSide on multiples of the patch', () => {
  assert.deepEqual(fitWithin({ width: 640, height: 480 }, 224, 14), { width: 224, height: 168 });
  assert.deepEqual(fitWithin({ width: 100, height: 1000 }, 224, 14), { width: 14, height: 224 });
  assert.deepEqual(fitWithin({ width: 5, height: 5 }, 28, 14), { width: 28, height: 28 });
  assert.throws(() => fitWithin({ width: 5, height: 5 }, 10, 14), /maxSide 10 is below one patch of 14/);
});

test('normalize is (x/255 - mean)/std per channel, channel-last', () => {
  const img = { width: 2, height: 1, data: Uint8Array.from([255, 0, 51, 0, 255, 102]) };
  const out = normalize(img, [0.5, 0, 0.2], [0.25, 1, 0.5]);
  const expected = [2, 0, 0, -2, 1, 0.4];
  assert.ok(maxAbsDiff(out, expected) < 1e-6, `${Array.from(out)}`);
  assert.throws(() => normalize(img, [0, 0, 0], [1, 0, 1]), /std must be three finite numbers \[r, g, b\] above 0/);
});

test('patchify lays out 2x2 patches of a 4x4 image in raster order, pixels row-major, channels last', () => {
  const pixels = Float32Array.from({ length: 48 }, (_, i) => i); // pixel p = y*4 + x holds 3p, 3p+1, 3p+2
  const { patches, rows, cols } = patchify(pixels, 4, 4, 2);
  assert.equal(rows, 2);
  assert.equal(cols, 2);
  const pixelOrder = [0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15];
  assert.deepEqual(Array.from(patches), pixelOrder.flatMap((p) => [3 * p, 3 * p + 1, 3 * p + 2]));
  // patch 1 (row 0, col 1), its pixel (1, 0) = image pixel (x 2, y 1), channel 2
  assert.equal(patches[1 * 12 + (1 * 2 + 0) * 3 + 2], (1 * 4 + 2) * 3 + 2);
  assert.throws(() => patchify(new Float32Array(5 * 4 * 3), 5, 4, 2), /not a whole number of 2-pixel patches/);
});

test('processImage meets the patch budget, on patch multiples, keeping the aspect ratio', () => {
  const mean: [number, number, number] = [0.48145466, 0.4578275, 0.40821073];
  const std: [number, number, number] = [0.26862954, 0.26130258, 0.27577711];
  // 640x480 at patch 14, 64 patches: scale 7*14/480 gives 7 rows x floor(9.33) = 9 cols = 63
  const photo = image(640, 480, (x, y, c) => (x * 3 + y * 5 + c * 71) % 256);
  const p = processImage(photo, { patchSize: 14, maxPatches: 64, mean, std });
  assert.deepEqual({ rows: p.rows, cols: p.cols, count: p.count, width: p.width, height: p.height }, { rows: 7, cols: 9, count: 63, width: 126, height: 98 });
  assert.equal(p.patches.length, 63 * 14 * 14 * 3);
  assert.deepEqual(processImage(photo, { patchSize: 14, maxPatches: 64, mean, std }).patches, p.patches); // deterministic
  for (const [w, h, budget, patch] of [[640, 480, 256, 16], [480, 640, 100, 14], [1920, 1080, 1024, 14], [33, 77, 50, 8], [3000, 40, 64, 16], [7, 7, 9, 14]]) {
    const r = processImage(image(w, h, () => 128), { patchSize: patch, maxPatches: budget, mean, std });
    assert.ok(r.count <= budget && r.count >= 1, `${w}x${h}: ${r.count} patches over ${budget}`);
    assert.equal(r.width % patch, 0);
    assert.equal(r.height % patch, 0);
    assert.equal(r.count, (r.width / patch) * (r.height / patch));
    // each side within one patch of the same exact scale: cols/rows stays near w/h
    const scaleW = r.cols / w;
    assert.ok(r.rows >= Math.floor(h * scaleW) - 1 && r.rows <= Math.max(1, Math.ceil(h * scaleW) + 1), `${w}x${h} -> ${r.cols}x${r.rows} patches`);
  }
  const wide = processImage(image(1000, 10, () => 0), { patchSize: 16, maxPatches: 4, mean, std });
  assert.deepEqual([wide.rows, wide.cols], [1, 4]);
  // an image already on its grid is not resized: patches = patchify(normalize(img))
  const exact = image(28, 28, (x, y, c) => (x * 9 + y * 7 + c) % 256);
  const q = processImage(exact, { patchSize: 14, maxPatches: 4, mean, std });
  assert.deepEqual(q.patches, patchify(normalize(exact, mean, std), 28, 28, 14).patches);
  assert.throws(() => processImage(photo, { patchSize: 14, maxPatches: 0, mean, std }), /maxPatches must be a positive integer, got 0/);
  assert.throws(() => processImage(photo, { patchSize: 0, maxPatches: 4, mean, std }), /patchSize must be a positive integer/);
  assert.throws(() => processImage(photo, { patchSize: 14, maxPatches: 4, mean: [0, 0] as unknown as [number, number, number], std }), /mean must be three/);
});

test('resample: equal rates copy exactly; 44.1k -> 16k keeps a 1 kHz sine and removes a 10 kHz one', () => {
  const x = sine(22050, 440, 0.7, 0.1);
  const same = resample(x, 22050, 22050);
  assert.notEqual(same, x);
  assert.deepEqual(same, x);
  const down = resample(sine(44100, 1000, 0.5, 1), 44100, 16000);
  assert.equal(down.length, 16000);
  // middle 14000 samples (away from the zero-padded edges): 1000 Hz is bin 875
  const mid = down.subarray(1000, 15000);
  const power = new Float64Array(7001);
  powerSpectrum(mid, power);
  let peak = 0;
  for (let k = 1; k < power.length; k++) if (power[k] > power[peak]) peak = k;
  assert.equal(peak, 875);
  const amplitude = (2 * Math.sqrt(power[875])) / mid.length;
  assert.ok(Math.abs(amplitude / 0.5 - 1) < 0.01, `amplitude ${amplitude}`);
  const up = resample(sine(8000, 1000, 0.5, 1), 8000, 16000).subarray(1000, 15000);
  let upMax = 0;
  for (const v of up) upMax = Math.max(upMax, Math.abs(v));
  assert.ok(Math.abs(upMax / 0.5 - 1) < 0.01, `8k -> 16k peak ${upMax}`);
  // 10 kHz is above 16 kHz's Nyquist: band-limited resampling must not alias it down to 6 kHz
  const aliased = resample(sine(44100, 10000, 0.5, 0.5), 44100, 16000).subarray(500, 7500);
  let rms = 0;
  for (const v of aliased) rms += v * v;
  rms = Math.sqrt(rms / aliased.length);
  assert.ok(rms < 0.5e-3, `10 kHz leaked through at rms ${rms}`);
  assert.throws(() => resample(x, 22050.5, 16000), /fromRate must be a positive integer/);
  assert.throws(() => checkAudio({ sampleRate: 16000, samples: [0] as unknown as Float32Array }), /Float32Array/);
});

test('the 400-point DFT (Bluestein over fft.js) matches a direct DFT, one frame or two frames in one transform', () => {
  let seed = 12345;
  const noise = () => Float64Array.from({ length: 400 }, () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31) * 2 - 1);
  const frame = noise();
  // A second frame of very different scale: the pair's split must not leak one into the other.
  const quiet = noise().map((v, n) => 1e-3 * v + 0.5 * Math.sin((2 * Math.PI * 25 * n) / 400));
  const direct = (x: Float64Array, k: number) => {
    let re = 0;
    let im = 0;
    for (let n = 0; n < 400; n++) {
      const a = (-2 * Math.PI * ((n * k) % 400)) / 400;
      re += x[n] * Math.cos(a);
      im += x[n] * Math.sin(a);
    }
    return re * re + im * im;
  };
  const fast = new Float64Array(201);
  powerSpectrum(frame, fast);
  const pairA = new Float64Array(201);
  const pairB = new Float64Array(201);
  powerSpectra(frame, quiet, pairA, pairB);
  let worst = 0;
  for (let k = 0; k <= 200; k++) {
    for (const [got, x] of [[fast[k], frame], [pairA[k], frame], [pairB[k], quiet]] as const) {
      const want = direct(x, k);
      worst = Math.max(worst, Math.abs(got - want) / Math.max(1, want));
    }
  }
  assert.ok(worst < 1e-9, `relative error ${worst}`);
  assert.throws(() => powerSpectra(frame, new Float64Array(399), pairA, pairB), /frames of 400 and 399 samples/);
  // An odd frame count: the last frame goes alone, and every frame matches its own transform.
  const clip = Float64Array.from({ length: 160 * 7 + 50 }, (_, n) => Math.sin(n / 3) * (n % 7 === 0 ? 1 : 0.3));
  const { power, nFrames, nBins } = stftPower(clip);
  assert.equal(nFrames, 7);
  const alone = new Float64Array(nBins);
  const padded = Float64Array.from({ length: clip.length + 400 }, (_, i) => {
    const j = i - 200;
    return j < 0 ? clip[-j] : j >= clip.length ? clip[2 * clip.length - 2 - j] : clip[j];
  });
  const window = Float64Array.from({ length: 400 }, (_, i) => 0.5 - 0.5 * Math.cos((2 * Math.PI * i) / 400));
  for (const t of [0, 5, 6]) {
    powerSpectrum(padded.subarray(t * 160, t * 160 + 400).map((v, i) => v * window[i]), alone);
    for (let k = 0; k < nBins; k++) assert.ok(Math.abs(power[t * nBins + k] - alone[k]) <= 1e-9 * Math.max(1, alone[k]), `frame ${t} bin ${k}`);
  }
});

test('the slaney mel filterbank matches librosa.filters.mel(sr=16000, n_fft=400, n_mels=80)', () => {
  const bank = melFilterbank({ sampleRate: 16000, nFft: 400, nMels: 80 });
  assert.equal(bank.nMels, reference.filterbank.nMels);
  assert.equal(bank.nBins, reference.filterbank.nBins);
  const expected = new Float64Array(80 * 201);
  reference.filterbank.rows.forEach((row, m) => row.values.forEach((v, i) => (expected[m * 201 + row.start + i] = v)));
  const diff = maxAbsDiff(bank.weights, expected);
  console.log(`filterbank max |ts - reference| = ${diff.toExponential(3)}`);
  assert.ok(diff <= 1e-6, `filterbank differs by ${diff}`);
});

test("log-mel matches Whisper's log_mel_spectrogram on the reference signal; too long a clip is refused", () => {
  const signal = testSignal();
  const { frames, nFrames } = logMel(signal, { nMels: 80, maxSeconds: 30 });
  assert.equal(nFrames, reference.logMel.nFrames);
  assert.equal(nFrames, 50);
  const diff = maxAbsDiff(frames, reference.logMel.values);
  console.log(`log-mel max |ts - reference| = ${diff.toExponential(3)}`);
  assert.ok(diff <= 1e-4, `log-mel differs by ${diff}`);
  // processAudio at 16 kHz is logMel itself
  const direct = processAudio({ sampleRate: 16000, samples: Float32Array.from(signal) }, { maxSeconds: 30, nMels: 80 });
  assert.deepEqual(direct, logMel(Float32Array.from(signal), { nMels: 80, maxSeconds: 30 }));
  // 48 kHz of the same signal comes out close to it (the resampler passes everything below 7.5 kHz)
  const at48k = processAudio({ sampleRate: 48000, samples: Float32Array.from(testSignal(48000)) }, { maxSeconds: 30, nMels: 80 });
  assert.equal(at48k.nFrames, 50);
  const inner = (f: Float32Array): Float32Array => f.subarray(5 * 80, 45 * 80);
  const resampledDiff = maxAbsDiff(inner(at48k.frames), inner(direct.frames));
  assert.ok(resampledDiff < 0.02, `48 kHz input differs by ${resampledDiff} after resampling`);
  assert.throws(() => logMel(new Float32Array(16000), { nMels: 80, maxSeconds: 0.5 }), /audio clip is 1\.000 s long, over the 0\.5 s limit/);
  assert.throws(() => processAudio({ sampleRate: 44100, samples: new Float32Array(88200) }, { maxSeconds: 1, nMels: 80 }), /audio clip is 2\.000 s long, over the 1 s limit/);
  assert.throws(() => logMel(new Float32Array(100), { nMels: 80, maxSeconds: 30 }), /too short/);
});
