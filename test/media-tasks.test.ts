// The procedural omni-modal task data (envs/media-tasks.ts), checked from the raw media rather than
// from the generators' own parameters: shapes counted by flood fill, the asked cell's colour read at
// its centre, beeps counted from a smoothed energy envelope, tone pitch estimated by zero crossings.
// Also determinism, train / held-out disjointness, answer coverage, clip length and PNG/WAV round trips.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { decodeAudio, decodeImage, type MonoAudio, type RgbImage } from '../engines/media/decode';
import {
  COLOURS, COLOUR_NAMES, GRID_POSITIONS, MAX_CLIP_SECONDS, MEDIA_GENERATORS, MEDIA_TASKS, colourAt, countBeeps,
  countShapes, encodeItemMedia, gridCell, heldOutItems, higherTone, splitOfKey, trainItems,
  type MediaItem, type MediaTaskName,
} from '../envs/media-tasks';

const TASKS = Object.keys(MEDIA_GENERATORS) as MediaTaskName[];
const ANSWERS: Record<MediaTaskName, string[]> = {
  countShapes: ['1', '2', '3', '4', '5'],
  colourAt: COLOUR_NAMES,
  countBeeps: ['1', '2', '3', '4'],
  higherTone: ['first', 'second'],
};

/** Connected (4-neighbour) components of non-white pixels, each with its pixel count and colours. */
function components(img: RgbImage): { pixels: number; colours: Set<string> }[] {
  const { width, height, data } = img;
  const seen = new Uint8Array(width * height);
  const isInk = (p: number) => data[p * 3] !== 255 || data[p * 3 + 1] !== 255 || data[p * 3 + 2] !== 255;
  const found: { pixels: number; colours: Set<string> }[] = [];
  for (let start = 0; start < width * height; start++) {
    if (seen[start] || !isInk(start)) continue;
    const stack = [start];
    seen[start] = 1;
    const comp = { pixels: 0, colours: new Set<string>() };
    while (stack.length) {
      const p = stack.pop()!;
      comp.pixels++;
      comp.colours.add(`${data[p * 3]},${data[p * 3 + 1]},${data[p * 3 + 2]}`);
      const x = p % width;
      const y = Math.floor(p / width);
      for (const [nx, ny] of [[x - 1, y], [x + 1, y], [x, y - 1], [x, y + 1]]) {
        if (nx < 0 || ny < 0 || nx >= width || ny >= height) continue;
        const q = ny * width + nx;
        if (!seen[q] && isInk(q)) { seen[q] = 1; stack.push(q); }
      }
    }
    found.push(comp);
  }
  return found;
}

/** [start, end) sample ranges where a 10 ms moving average of |x| exceeds `threshold`. */
function bursts(audio: MonoAudio, threshold = 0.08): [number, number][] {
  const w = Math.round(audio.sampleRate * 0.01);
  const x = audio.samples;
  const out: [number, number][] = [];
  let sum = 0;
  let start = -1;
  for (let i = 0; i < x.length; i++) {
    sum += Math.abs(x[i]) - (i >= w ? Math.abs(x[i - w]) : 0);
    const above = i >= w - 1 && sum / w > threshold;
    if (above && start < 0) start = i;
    if (!above && start >= 0) { out.push([start, i]); start = -1; }
  }
  if (start >= 0) out.push([start, x.length]);
  return out;
}

/** Frequency from sign changes (with hysteresis) over the middle 80% of [start, end). */
function zeroCrossingHz(audio: MonoAudio, [start, end]: [number, number]): number {
  const a = start + Math.round((end - start) * 0.1);
  const b = end - Math.round((end - start) * 0.1);
  let sign = 0;
  let crossings = 0;
  for (let i = a; i < b; i++) {
    const s = audio.samples[i] > 0.03 ? 1 : audio.samples[i] < -0.03 ? -1 : 0;
    if (s !== 0 && sign !== 0 && s !== sign) crossings++;
    if (s !== 0) sign = s;
  }
  return (crossings / 2) * (audio.sampleRate / (b - a));
}

const mediaOf = (item: MediaItem): Uint8Array | Float32Array => item.image?.data ?? item.audio!.samples;

test('generation is deterministic: the same seed and index give identical pixels and samples', () => {
  for (const task of TASKS) {
    const generate = MEDIA_GENERATORS[task];
    for (const index of [0, 1, 17]) {
      const a = generate(42, index);
      const b = generate(42, index);
      assert.deepEqual(a, b, `${task} item ${index}`);
      assert.ok(mediaOf(a).length > 0);
    }
    assert.deepEqual(trainItems(task, 7, 20), trainItems(task, 7, 20), task);
    assert.deepEqual(heldOutItems(task, 30), heldOutItems(task, 30), task);
    // Different seeds give different items (not one item repeated).
    const keys = new Set(trainItems(task, 3, 50).map((i) => i.key));
    assert.ok(keys.size > 25, `${task}: ${keys.size} distinct keys in 50 items`);
    assert.notDeepEqual(mediaOf(generate(1, 0)), mediaOf(generate(2, 0)), task);
  }
});

test('prompts carry exactly one placeholder of the right kind', () => {
  for (const task of TASKS) {
    for (const item of trainItems(task, 1, 10)) {
      const placeholder = item.image ? '<image>' : '<audio>';
      assert.equal(item.prompt.split(placeholder).length, 2, item.prompt);
      assert.ok(!item.prompt.includes(item.image ? '<audio>' : '<image>'));
      assert.equal(!!item.image !== !!item.audio, true, 'exactly one medium');
    }
  }
});

test('countShapes: the image holds exactly `answer` separate single-colour shapes', () => {
  const items = [
    ...trainItems('countShapes', 11, 300),
    ...heldOutItems('countShapes', 100),
    ...Array.from({ length: 100 }, (_, i) => countShapes(5, i, 'train', { width: 96, height: 48 })),
  ];
  {
    for (const item of items) {
      const img = item.image!;
      assert.equal(img.data.length, img.width * img.height * 3);
      const comps = components(img);
      assert.equal(String(comps.length), item.answer, `${item.id}: ${comps.length} components, answer ${item.answer}`);
      for (const c of comps) {
        assert.equal(c.colours.size, 1, `${item.id}: a shape with ${c.colours.size} colours`);
        assert.ok(c.pixels >= 30, `${item.id}: a shape of only ${c.pixels} pixels`);
      }
    }
  }
  assert.equal(countShapes(1, 0, 'train', { width: 80, height: 40 }).image!.width, 80);
  assert.throws(() => countShapes(1, 0, 'train', { width: 8 }), /width is 8/);
});

test('colourAt: the pixel at the asked cell\'s centre is the answer colour', () => {
  const items = [...trainItems('colourAt', 3, 500), ...heldOutItems('colourAt', 200), colourAt(9, 0, 'train', { width: 50, height: 70 })];
  for (const item of items) {
    const position = GRID_POSITIONS.find((p) => item.prompt === `<image>What colour is the ${p} square?`);
    assert.ok(position, item.prompt);
    const { width, height, data } = item.image!;
    const c = gridCell(width, height, position);
    const o = (Math.floor((c.y0 + c.y1) / 2) * width + Math.floor((c.x0 + c.x1) / 2)) * 3;
    assert.deepEqual([data[o], data[o + 1], data[o + 2]], [...COLOURS[item.answer]], `${item.id} at ${position}`);
  }
});

test('countBeeps: the energy envelope has `answer` bursts, in a clip of at most 2 s', () => {
  for (const item of [...trainItems('countBeeps', 5, 300), ...heldOutItems('countBeeps', 100)]) {
    const audio = item.audio!;
    assert.equal(audio.sampleRate, 16000);
    assert.ok(audio.samples.length <= MAX_CLIP_SECONDS * audio.sampleRate, `${item.id}: ${audio.samples.length} samples`);
    const found = bursts(audio);
    assert.equal(String(found.length), item.answer, `${item.id}: ${found.length} bursts`);
    for (const b of found) {
      const ms = ((b[1] - b[0]) / audio.sampleRate) * 1000;
      assert.ok(ms > 60 && ms < 140, `${item.id}: a beep of ${ms} ms`);
      const hz = zeroCrossingHz(audio, b);
      assert.ok(hz > 760 && hz < 1240, `${item.id}: a beep at ${hz} Hz`);
    }
  }
});

test('higherTone: zero-crossing pitch of the two tones agrees with the answer', () => {
  for (const item of [...trainItems('higherTone', 8, 300), ...heldOutItems('higherTone', 100)]) {
    const audio = item.audio!;
    assert.ok(audio.samples.length <= MAX_CLIP_SECONDS * audio.sampleRate, `${item.id}: ${audio.samples.length} samples`);
    const found = bursts(audio);
    assert.equal(found.length, 2, `${item.id}: ${found.length} tones`);
    const [f1, f2] = found.map((b) => zeroCrossingHz(audio, b));
    for (const f of [f1, f2]) assert.ok(f > 280 && f < 920, `${item.id}: a tone at ${f} Hz`);
    assert.ok(Math.max(f1, f2) / Math.min(f1, f2) > 1.2, `${item.id}: ${f1} and ${f2} Hz are under a third apart`);
    assert.equal(item.answer, f1 > f2 ? 'first' : 'second', `${item.id}: ${f1} vs ${f2} Hz`);
  }
});

test('train and held-out items are disjoint by key, and every key lies in its own split', () => {
  for (const task of TASKS) {
    const held = heldOutItems(task);
    assert.equal(held.length, 200);
    const heldKeys = new Set(held.map((i) => i.key));
    assert.equal(heldKeys.size, held.length, `${task}: held-out keys repeat`);
    for (const item of held) assert.equal(splitOfKey(task, item.key), 'heldOut');
    const train = [...trainItems(task, 1, 1500), ...trainItems(task, 2, 1500)];
    const trainKeys = new Set<string>();
    for (const item of train) {
      assert.equal(item.split, 'train');
      assert.equal(splitOfKey(task, item.key), 'train', `${task} ${item.id}`);
      assert.ok(!heldKeys.has(item.key), `${task}: held-out key ${item.key} drawn for training (${item.id})`);
      trainKeys.add(item.key);
    }
    // The check has teeth: the train items span many keys, and the held-out set is a fixed prefix.
    assert.ok(trainKeys.size > 1000, `${task}: only ${trainKeys.size} distinct train keys`);
    assert.deepEqual(heldOutItems(task, 50).map((i) => i.key), held.slice(0, 50).map((i) => i.key));
    assert.deepEqual(MEDIA_TASKS[task].heldOutItems(10), heldOutItems(task, 10));
    assert.deepEqual(MEDIA_TASKS[task].trainItems(4, 10), trainItems(task, 4, 10));
  }
});

test('answer distributions cover every value, near uniformly in training', () => {
  for (const task of TASKS) {
    const values = ANSWERS[task];
    const train = trainItems(task, 21, 1200);
    const counts = new Map<string, number>();
    for (const item of train) counts.set(item.answer, (counts.get(item.answer) ?? 0) + 1);
    assert.deepEqual([...counts.keys()].sort(), [...values].sort(), `${task} train answers`);
    for (const v of values) {
      const share = counts.get(v)! / train.length;
      assert.ok(share > 0.5 / values.length && share < 2 / values.length, `${task}: answer ${v} has share ${share}`);
    }
    const held = new Set(heldOutItems(task).map((i) => i.answer));
    assert.deepEqual([...held].sort(), [...values].sort(), `${task} held-out answers`);
  }
});

test('encodeItemMedia: PNG and WAV bytes decode back to the same pixels and samples', () => {
  for (const task of TASKS) {
    for (const item of [...trainItems(task, 13, 5), ...heldOutItems(task, 3)]) {
      const encoded = encodeItemMedia(item);
      if (item.image) {
        assert.equal(encoded.format, 'png');
        const back = decodeImage(encoded.bytes, 'png');
        assert.equal(back.width, item.image.width);
        assert.equal(back.height, item.image.height);
        assert.deepEqual(back.data, item.image.data, item.id);
      } else {
        assert.equal(encoded.format, 'wav');
        const back = decodeAudio(encoded.bytes);
        const src = item.audio!.samples;
        assert.equal(back.sampleRate, item.audio!.sampleRate);
        assert.equal(back.samples.length, src.length);
        let worst = 0;
        for (let i = 0; i < src.length; i++) worst = Math.max(worst, Math.abs(back.samples[i] - src[i]));
        // encodeWav scales by 32768 as decodeAudio divides by it: half a 16-bit step of rounding.
        assert.ok(worst <= 0.5 / 32768 + 1e-9, `${item.id}: round trip off by ${worst}`);
      }
      assert.deepEqual(encodeItemMedia(item).bytes, encoded.bytes, `${item.id}: encoding is deterministic`);
    }
  }
  assert.throws(() => encodeItemMedia({ id: 'x', task: 'colourAt', split: 'train', key: '', prompt: '', answer: '' }), /no image or audio/);
});

test('bad arguments are refused with a message', () => {
  assert.throws(() => trainItems('countBeeps', 1.5, 3), /seed is 1.5/);
  assert.throws(() => trainItems('countBeeps', 1, -1), /prompt count/);
  assert.throws(() => higherTone(1, -2), /index is -2/);
  assert.throws(() => countBeeps(Number.NaN, 0), /seed is NaN/);
});
