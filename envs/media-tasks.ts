// Procedural data for the small learnable omni-modal tasks (issue 13): two vision tasks (count the
// shapes, name the colour of one cell of a 2x2 grid) and two audio tasks (count the beeps, say which
// of two tones is higher). Each item is a prompt with an `<image>` or `<audio>` placeholder, the
// answer, and the raw media (RGB pixels or 16 kHz mono samples); encodeItemMedia turns the media into
// PNG / WAV bytes for the media store. Generation is pure and deterministic: item `index` of seed
// `seed` draws from seededRandom(mixSeed(seed, task#index)), so the same seed gives the same bytes.
// Train and held-out items are disjoint by construction: every item has a key (its integer
// parameters, which fix the clean image or signal) and a hash of the key puts it in one split; a
// generator redraws until the key lands in the split asked for, so no held-out key ever appears in
// training, whatever the seeds. The held-out set is drawn from a fixed seed, with distinct keys.
import { encodePng, encodeWav, type MonoAudio, type RgbImage } from '../engines/media/decode';
import { mixSeed, randomInt, seededRandom } from '../config/seeds';
import { checkPromptCount } from './task';

export type MediaSplit = 'train' | 'heldOut';

export interface MediaItem {
  /** `task/split/seed/index`: unique within a split and seed. */
  id: string;
  task: MediaTaskName;
  split: MediaSplit;
  /** The item's parameters as text; equal keys mean the same clean image or signal. */
  key: string;
  /** The prompt, with one '<image>' or '<audio>' placeholder. */
  prompt: string;
  answer: string;
  image?: RgbImage;
  audio?: MonoAudio;
}

export type MediaTaskName = 'countShapes' | 'colourAt' | 'countBeeps' | 'higherTone';

/** One held-out bucket in HELD_OUT_BUCKETS: the share of the key space kept out of training. */
export const HELD_OUT_BUCKETS = 8;
export const MEDIA_HELD_OUT_SIZE = 200;
/** Fixed forever: changing either changes every reported held-out accuracy. */
const SPLIT_SALT = 0x5eed13;
const HELD_OUT_SEED = 0x0e13;
const MAX_REDRAWS = 10_000;

/** The split a key belongs to (a hash of task and key). */
export function splitOfKey(task: MediaTaskName, key: string): MediaSplit {
  return mixSeed(SPLIT_SALT, `${task}|${key}`) % HELD_OUT_BUCKETS === 0 ? 'heldOut' : 'train';
}

/** Draws parameters from item (seed, index)'s stream until their key lies in `split`. */
function drawInSplit<P>(task: MediaTaskName, seed: number, index: number, split: MediaSplit,
  draw: (rng: () => number) => P, keyOf: (p: P) => string): { params: P; key: string; rng: () => number } {
  if (!Number.isInteger(seed)) throw new Error(`seed is ${seed}: pass an integer seed`);
  if (!Number.isInteger(index) || index < 0) throw new Error(`item index is ${index}: pass a non-negative integer`);
  const rng = seededRandom(mixSeed(seed, `${task}#${index}`));
  for (let attempt = 0; attempt < MAX_REDRAWS; attempt++) {
    const params = draw(rng);
    const key = keyOf(params);
    if (splitOfKey(task, key) === split) return { params, key, rng };
  }
  throw new Error(`${task} drew no ${split} item in ${MAX_REDRAWS} tries: the parameter space is too small for the split`);
}

// ---- vision ----------------------------------------------------------------------------------

export interface ImageTaskOptions {
  /** Image size in pixels (default 64 x 64; at least 32 each). */
  width?: number;
  height?: number;
}

function imageSize(options: ImageTaskOptions): { width: number; height: number } {
  const width = options.width ?? 64;
  const height = options.height ?? 64;
  for (const [name, v] of [['width', width], ['height', height]] as const) {
    if (!Number.isInteger(v) || v < 32 || v > 1024) throw new Error(`image ${name} is ${v}: pass an integer in [32, 1024]`);
  }
  return { width, height };
}

/** Saturated colours, far from white and from each other. */
export const COLOURS: Readonly<Record<string, readonly [number, number, number]>> = {
  red: [220, 30, 30],
  green: [30, 170, 50],
  blue: [30, 60, 220],
  yellow: [235, 200, 20],
  purple: [140, 40, 170],
  orange: [245, 130, 20],
};
export const COLOUR_NAMES = Object.keys(COLOURS);

function blankImage(width: number, height: number): RgbImage {
  return { width, height, data: new Uint8Array(width * height * 3).fill(255) };
}

function setPixel(img: RgbImage, x: number, y: number, rgb: readonly number[]): void {
  const o = (y * img.width + x) * 3;
  img.data[o] = rgb[0]; img.data[o + 1] = rgb[1]; img.data[o + 2] = rgb[2];
}

export interface Shape { kind: 'square' | 'circle'; colour: string; x: number; y: number; size: number }
export const MAX_SHAPES = 5;
/** Empty pixels kept between any two shapes' bounding boxes, so they never touch. */
export const SHAPE_GAP = 2;

function drawShapes(rng: () => number, width: number, height: number): Shape[] {
  const minSide = Math.floor(Math.min(width, height) / 8);
  const maxSide = Math.floor(Math.min(width, height) / 4);
  for (;;) {
    const count = randomInt(rng, 1, MAX_SHAPES);
    const shapes: Shape[] = [];
    for (let tries = 0; shapes.length < count && tries < 500; tries++) {
      const size = randomInt(rng, minSide, maxSide);
      const x = randomInt(rng, 1, width - size - 1);
      const y = randomInt(rng, 1, height - size - 1);
      const clear = shapes.every((s) => x >= s.x + s.size + SHAPE_GAP || s.x >= x + size + SHAPE_GAP
        || y >= s.y + s.size + SHAPE_GAP || s.y >= y + size + SHAPE_GAP);
      if (!clear) continue;
      const kind = rng() < 0.5 ? 'square' : 'circle';
      shapes.push({ kind, colour: COLOUR_NAMES[randomInt(rng, 0, COLOUR_NAMES.length - 1)], x, y, size });
    }
    if (shapes.length === count) return shapes;
  }
}

function renderShapes(width: number, height: number, shapes: readonly Shape[]): RgbImage {
  const img = blankImage(width, height);
  for (const s of shapes) {
    const r = s.size / 2;
    const cx = s.x + r;
    const cy = s.y + r;
    for (let y = s.y; y < s.y + s.size; y++) {
      for (let x = s.x; x < s.x + s.size; x++) {
        const inside = s.kind === 'square' || (x + 0.5 - cx) ** 2 + (y + 0.5 - cy) ** 2 <= r * r;
        if (inside) setPixel(img, x, y, COLOURS[s.colour]);
      }
    }
  }
  return img;
}

/** A white image with 1..5 non-overlapping filled squares and circles; the answer is the count. */
export function countShapes(seed: number, index: number, split: MediaSplit = 'train', options: ImageTaskOptions = {}): MediaItem {
  const { width, height } = imageSize(options);
  const { params, key } = drawInSplit('countShapes', seed, index, split, (rng) => drawShapes(rng, width, height),
    (shapes) => `${width}x${height}:` + shapes.map((s) => `${s.kind[0]}${s.colour},${s.x},${s.y},${s.size}`).join(';'));
  return {
    id: `countShapes/${split}/${seed}/${index}`, task: 'countShapes', split, key,
    prompt: '<image>How many shapes?', answer: String(params.length), image: renderShapes(width, height, params),
  };
}

export const GRID_POSITIONS = ['top left', 'top right', 'bottom left', 'bottom right'] as const;
export type GridPosition = (typeof GRID_POSITIONS)[number];

/** The pixel rectangle of one cell of the 2x2 grid: [x0, x1) x [y0, y1). */
export function gridCell(width: number, height: number, position: GridPosition): { x0: number; x1: number; y0: number; y1: number } {
  const i = GRID_POSITIONS.indexOf(position);
  const halfW = Math.floor(width / 2);
  const halfH = Math.floor(height / 2);
  const right = i % 2 === 1;
  const bottom = i >= 2;
  return { x0: right ? halfW : 0, x1: right ? width : halfW, y0: bottom ? halfH : 0, y1: bottom ? height : halfH };
}

/** A 2x2 grid of coloured squares (colours may repeat); the answer is the colour at the asked cell. */
export function colourAt(seed: number, index: number, split: MediaSplit = 'train', options: ImageTaskOptions = {}): MediaItem {
  const { width, height } = imageSize(options);
  const { params, key } = drawInSplit('colourAt', seed, index, split, (rng) => ({
    cells: GRID_POSITIONS.map(() => COLOUR_NAMES[randomInt(rng, 0, COLOUR_NAMES.length - 1)]),
    asked: randomInt(rng, 0, GRID_POSITIONS.length - 1),
  }), (p) => `${width}x${height}:${p.cells.join(',')}@${p.asked}`);
  const img = blankImage(width, height);
  GRID_POSITIONS.forEach((position, i) => {
    const c = gridCell(width, height, position);
    for (let y = c.y0; y < c.y1; y++) for (let x = c.x0; x < c.x1; x++) setPixel(img, x, y, COLOURS[params.cells[i]]);
  });
  return {
    id: `colourAt/${split}/${seed}/${index}`, task: 'colourAt', split, key,
    prompt: `<image>What colour is the ${GRID_POSITIONS[params.asked]} square?`, answer: params.cells[params.asked], image: img,
  };
}

// ---- audio -----------------------------------------------------------------------------------

export const AUDIO_SAMPLE_RATE = 16000;
export const MAX_CLIP_SECONDS = 2;
export const MAX_BEEPS = 4;
/** Standard deviation of the Gaussian background noise. */
export const NOISE_STD = 0.005;
/** Attack and release of every burst, so the clip has no clicks. */
const RAMP_MS = 5;

interface Burst { onsetMs: number; durationMs: number; freqHz: number; amplitudePct: number }

const msToSamples = (ms: number): number => Math.round((ms * AUDIO_SAMPLE_RATE) / 1000);

/** Sums sine bursts (raised-cosine ramps) over Gaussian noise drawn from `rng`. */
function renderBursts(bursts: readonly Burst[], totalMs: number, rng: () => number): MonoAudio {
  const samples = new Float32Array(msToSamples(totalMs));
  for (let i = 0; i < samples.length; i += 2) {
    // Box-Muller: two Gaussian samples from two uniforms (1 - u keeps the log finite).
    const r = Math.sqrt(-2 * Math.log(1 - rng())) * NOISE_STD;
    const theta = 2 * Math.PI * rng();
    samples[i] = r * Math.cos(theta);
    if (i + 1 < samples.length) samples[i + 1] = r * Math.sin(theta);
  }
  const ramp = msToSamples(RAMP_MS);
  for (const b of bursts) {
    const start = msToSamples(b.onsetMs);
    const n = msToSamples(b.durationMs);
    const amplitude = b.amplitudePct / 100;
    for (let k = 0; k < n && start + k < samples.length; k++) {
      const edge = Math.min(k, n - 1 - k);
      const env = edge >= ramp ? 1 : 0.5 - 0.5 * Math.cos((Math.PI * edge) / ramp);
      samples[start + k] += amplitude * env * Math.sin((2 * Math.PI * b.freqHz * k) / AUDIO_SAMPLE_RATE);
    }
  }
  return { sampleRate: AUDIO_SAMPLE_RATE, samples };
}

const burstKey = (b: Burst): string => `${b.onsetMs}+${b.durationMs}@${b.freqHz}*${b.amplitudePct}`;

/** 1..4 beeps (80-120 ms sine bursts at 800-1200 Hz, random gaps, light noise), at most 2 s. */
export function countBeeps(seed: number, index: number, split: MediaSplit = 'train'): MediaItem {
  const { params, key, rng } = drawInSplit('countBeeps', seed, index, split, (r) => {
    const count = randomInt(r, 1, MAX_BEEPS);
    const bursts: Burst[] = [];
    let end = randomInt(r, 50, 300); // lead silence
    for (let i = 0; i < count; i++) {
      const onsetMs = i === 0 ? end : end + randomInt(r, 80, 300);
      const durationMs = randomInt(r, 80, 120);
      bursts.push({ onsetMs, durationMs, freqHz: randomInt(r, 800, 1200), amplitudePct: randomInt(r, 30, 60) });
      end = onsetMs + durationMs;
    }
    // Worst case 300 + 4 * 120 + 3 * 300 + 100 = 1780 ms.
    return { bursts, totalMs: end + 100 };
  }, (p) => `${p.totalMs}:${p.bursts.map(burstKey).join(';')}`);
  return {
    id: `countBeeps/${split}/${seed}/${index}`, task: 'countBeeps', split, key,
    prompt: '<audio>How many beeps?', answer: String(params.bursts.length), audio: renderBursts(params.bursts, params.totalMs, rng),
  };
}

export const TONE_MIN_HZ = 300;
export const TONE_MAX_HZ = 900;
/** A major third (four semitones): the smallest ratio between the two tones. */
export const MIN_TONE_RATIO = 2 ** (4 / 12);

/** Two tones one after the other, at least a major third apart in 300-900 Hz; the answer is which is higher. */
export function higherTone(seed: number, index: number, split: MediaSplit = 'train'): MediaItem {
  const { params, key, rng } = drawInSplit('higherTone', seed, index, split, (r) => {
    const low = randomInt(r, TONE_MIN_HZ, Math.floor(TONE_MAX_HZ / MIN_TONE_RATIO));
    const high = randomInt(r, Math.ceil(low * MIN_TONE_RATIO), TONE_MAX_HZ);
    const firstHigher = r() < 0.5;
    const lead = randomInt(r, 50, 200);
    const d1 = randomInt(r, 250, 400);
    const gap = randomInt(r, 100, 250);
    const d2 = randomInt(r, 250, 400);
    const bursts: Burst[] = [
      { onsetMs: lead, durationMs: d1, freqHz: firstHigher ? high : low, amplitudePct: randomInt(r, 30, 60) },
      { onsetMs: lead + d1 + gap, durationMs: d2, freqHz: firstHigher ? low : high, amplitudePct: randomInt(r, 30, 60) },
    ];
    // Worst case 200 + 400 + 250 + 400 + 100 = 1350 ms.
    return { bursts, totalMs: lead + d1 + gap + d2 + 100, firstHigher };
  }, (p) => `${p.totalMs}:${p.bursts.map(burstKey).join(';')}`);
  return {
    id: `higherTone/${split}/${seed}/${index}`, task: 'higherTone', split, key,
    prompt: '<audio>Which tone is higher, first or second?', answer: params.firstHigher ? 'first' : 'second',
    audio: renderBursts(params.bursts, params.totalMs, rng),
  };
}

// ---- splits and encoding ---------------------------------------------------------------------

export type MediaGenerator = (seed: number, index: number, split?: MediaSplit) => MediaItem;

export const MEDIA_GENERATORS: Readonly<Record<MediaTaskName, MediaGenerator>> = {
  countShapes: (seed, index, split) => countShapes(seed, index, split),
  colourAt: (seed, index, split) => colourAt(seed, index, split),
  countBeeps,
  higherTone,
};

/** Items 0..n-1 of seed `seed`, all in the train split. */
export function trainItems(task: MediaTaskName, seed: number, n: number): MediaItem[] {
  checkPromptCount(seed, n);
  const generate = MEDIA_GENERATORS[task];
  return Array.from({ length: n }, (_, i) => generate(seed, i, 'train'));
}

/** The fixed held-out set: the first n distinct held-out keys of the held-out seed (a prefix of any larger set). */
export function heldOutItems(task: MediaTaskName, n = MEDIA_HELD_OUT_SIZE): MediaItem[] {
  checkPromptCount(HELD_OUT_SEED, n);
  const generate = MEDIA_GENERATORS[task];
  const seen = new Set<string>();
  const items: MediaItem[] = [];
  for (let i = 0; items.length < n; i++) {
    if (i >= n * 20 + 1000) throw new Error(`${task} has fewer than ${n} distinct held-out items: ask for fewer`);
    const item = generate(HELD_OUT_SEED, i, 'heldOut');
    if (seen.has(item.key)) continue;
    seen.add(item.key);
    items.push(item);
  }
  return items;
}

export interface MediaTaskData {
  name: MediaTaskName;
  trainItems(seed: number, n: number): MediaItem[];
  heldOutItems(n?: number): MediaItem[];
}

/** Each task's train and held-out item lists, by name. */
export const MEDIA_TASKS: Readonly<Record<MediaTaskName, MediaTaskData>> = Object.fromEntries(
  (Object.keys(MEDIA_GENERATORS) as MediaTaskName[]).map((name) => [name, {
    name,
    trainItems: (seed: number, n: number) => trainItems(name, seed, n),
    heldOutItems: (n?: number) => heldOutItems(name, n),
  }]),
) as Record<MediaTaskName, MediaTaskData>;

/** The item's media as file bytes for the media store: PNG for an image, 16-bit PCM WAV for audio. */
export function encodeItemMedia(item: MediaItem): { kind: 'image'; format: 'png'; bytes: Uint8Array } | { kind: 'audio'; format: 'wav'; bytes: Uint8Array } {
  if (item.image) return { kind: 'image', format: 'png', bytes: encodePng(item.image) };
  if (item.audio) return { kind: 'audio', format: 'wav', bytes: encodeWav(item.audio) };
  throw new Error(`item ${item.id} has no image or audio to encode`);
}
