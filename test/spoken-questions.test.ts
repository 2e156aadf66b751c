// The spoken-question generator (scripts/spoken-questions.js): a few espeak-ng clips, generated twice
// with the same seed into temp directories, are byte-identical (manifest.json and every file), the
// manifest's hashes check, the rows parse, the test split's voices are not train's, every WAV
// decodes with engines/media/decode.ts at its stated duration (within --max-seconds) and becomes a
// log-mel within that window, and the files load as a dataset (envs/datasets.ts readDatasetRows,
// loadDatasetTask): one <audio> clip per prompt, the answer in digits. Needs espeak-ng (`npm run
// setup -- --test-tools` installs it); skipped, saying so, only when it is missing.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { processAudio } from '../engines/media/audio';
import { decodeAudio } from '../engines/media/decode';
import { CharTokenizer } from '../engines/tokenizers/char';
import type { SpokenRow } from '../bench/omni-data';
import { loadDatasetTask, readDatasetRows, type ChatMessage } from '../envs/datasets';

const root = path.resolve(__dirname, '..', '..');

interface Manifest {
  kind: string;
  seed: number;
  espeak_ng: { version: string; package: string | null };
  prompt: string;
  voices: { train: Array<{ name: string }>; test: Array<{ name: string }> };
  max_seconds: number;
  counts: Record<'train' | 'test', { clips: number; speed_raised: number; dropped_too_long: number; dropped_duplicate_audio: number }>;
  seconds: Record<'train' | 'test', { min: number; median: number; max: number }>;
  files: Record<string, string>;
}
interface Row extends SpokenRow {
  speed: number;
  seconds: number;
}
const generator = require(path.join(root, 'scripts', 'spoken-questions.js')) as {
  generateSpokenQuestions(options: { out: string; kind?: string; seed?: number; train?: number; test?: number; maxSeconds?: number }): Promise<{ manifest: Manifest; seconds: number }>;
  checkManifest(dir: string): string[];
};

const hasEspeak = !spawnSync('espeak-ng', ['--version']).error;
const chatml = (messages: ChatMessage[]): string => messages.map((m) => `<|im_start|>${m.role}\n${m.content}<|im_end|>\n`).join('') + '<|im_start|>assistant\n';
const rowsOf = (dir: string, split: string): Row[] =>
  fs.readFileSync(path.join(dir, `${split}.jsonl`), 'utf8').trim().split('\n').map((line) => JSON.parse(line) as Row);

let temp: string | undefined;
after(async () => {
  if (temp) await rm(temp, { recursive: true, force: true });
});

test('spoken questions: deterministic espeak-ng clips that decode and load as an audio dataset', async (t) => {
  if (!hasEspeak) return t.skip('espeak-ng not installed: npm run setup -- --test-tools');
  temp = await mkdtemp(path.join(tmpdir(), 'relax-spoken-questions-'));
  const options = { kind: 'arithmetic', seed: 11, train: 4, test: 2, maxSeconds: 3 };
  const a = await generator.generateSpokenQuestions({ out: path.join(temp, 'a'), ...options });
  const b = await generator.generateSpokenQuestions({ out: path.join(temp, 'b'), ...options });
  const dir = path.join(temp, 'a');

  // determinism: the same seed gives the same bytes, and the manifest's hashes are the files'
  assert.equal(fs.readFileSync(path.join(dir, 'manifest.json'), 'utf8'), fs.readFileSync(path.join(temp, 'b', 'manifest.json'), 'utf8'));
  assert.deepEqual(a.manifest, b.manifest);
  assert.equal(Object.keys(a.manifest.files).length, 6 + 2, 'six clips, train.jsonl and test.jsonl');
  assert.deepEqual(generator.checkManifest(path.join(temp, 'b')), []);
  fs.appendFileSync(path.join(temp, 'b', 'test.jsonl'), '\n');
  assert.deepEqual(generator.checkManifest(path.join(temp, 'b')), ['test.jsonl: sha256 differs from the manifest']);
  assert.match(a.manifest.espeak_ng.version, /^\d+\.\d+/);
  assert.deepEqual({ train: a.manifest.counts.train.clips, test: a.manifest.counts.test.clips }, { train: 4, test: 2 });

  // the rows, and the held-out split: no test voice is a train voice
  const train = rowsOf(dir, 'train');
  const heldOut = rowsOf(dir, 'test');
  const trainVoices = new Set(a.manifest.voices.train.map((v) => v.name));
  assert.ok(heldOut.every((r) => !trainVoices.has(r.voice) && a.manifest.voices.test.some((v) => v.name === r.voice)));
  assert.ok(train.every((r) => trainVoices.has(r.voice)));
  for (const r of [...train, ...heldOut]) {
    assert.equal(r.prompt, '<audio>\nAnswer with the number only.');
    assert.match(r.spoken_text, /^what is [a-z]+ (plus|minus) [a-z]+\?$/);
    const words = ['zero', 'one', 'two', 'three', 'four', 'five', 'six', 'seven', 'eight', 'nine'];
    const written = r.spoken_text.replace(/^what/, 'What').replace(/[a-z]+/g, (w) => (words.includes(w) ? String(words.indexOf(w)) : w));
    assert.equal(r.text_prompt, `${written}\nAnswer with the number only.`, 'the same question written, numbers in digits');
    assert.match(r.answer, /^\d{1,2}$/);
    assert.ok(r.speed >= 130 && r.speed <= 250, `speed ${r.speed}`);

    // the WAV decodes with the media layer at the duration the row states, within the bound
    const audio = decodeAudio(new Uint8Array(fs.readFileSync(path.join(dir, r.audio))), { maxSeconds: 3 });
    assert.equal(audio.sampleRate, 22050, "espeak-ng's rate: the audio processor resamples it");
    assert.ok(Math.abs(audio.samples.length / audio.sampleRate - r.seconds) < 1e-3, `${r.audio}: ${audio.samples.length / audio.sampleRate} s, row says ${r.seconds}`);
    assert.ok(r.seconds > 0.5 && r.seconds <= 3, `${r.audio}: ${r.seconds} s`);
    assert.ok(audio.samples.some((s) => Math.abs(s) > 0.1), `${r.audio} is not silent`);
    const mel = processAudio(audio, { maxSeconds: 3, nMels: 80 });
    assert.ok(mel.nFrames > 50 && mel.nFrames <= 300, `${r.audio}: ${mel.nFrames} log-mel frames`);
  }
  const all = [...train, ...heldOut].map((r) => r.seconds);
  assert.equal(Math.max(...all), Math.max(a.manifest.seconds.train.max, a.manifest.seconds.test.max));

  // the dataset loader reads the rows and their clips (paths relative to the .jsonl), extra fields ignored
  const read = await readDatasetRows(path.join(dir, 'train.jsonl'));
  assert.equal(read.length, 4);
  assert.equal(read[0].prompt, '<audio>\nAnswer with the number only.', 'the placeholder is already there: nothing is prepended');
  assert.equal(read[0].answer, train[0].answer);
  assert.deepEqual([...read[0].audio![0].bytes], [...fs.readFileSync(path.join(dir, train[0].audio))]);
  const task = await loadDatasetTask({ train: path.join(dir, 'train.jsonl'), eval: path.join(dir, 'test.jsonl') }, { tokenizer: new CharTokenizer('0123456789'), renderChat: chatml, stopStrings: ['<|im_end|>'] });
  assert.deepEqual(task.mediaKinds, ['audio']);
  const held = task.heldOut();
  assert.equal(held.length, 2);
  assert.equal(held[0].text, '<|im_start|>user\n<audio>\nAnswer with the number only.<|im_end|>\n<|im_start|>assistant\n');
  assert.deepEqual(held.map((p) => p.answer), heldOut.map((r) => r.answer));
  assert.ok(held.every((p) => p.media?.length === 1 && p.media[0].kind === 'audio' && p.media[0].format === 'wav'));
  assert.equal(task.reward(held[0], `${held[0].answer}<|im_end|>`), 1);
});
