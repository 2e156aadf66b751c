#!/usr/bin/env node
// Generates a dataset of SPOKEN questions with espeak-ng (Debian package espeak-ng; `npm run setup --
// --test-tools` installs it) for Relax's `data` section: WAV clips under <out>/clips/, train.jsonl and
// test.jsonl rows in the dataset loader's format (envs/datasets.ts, envs/dataset-media.ts), and a
// manifest.json (espeak-ng version, voices, speeds, counts, durations, the sha256 of every file).
//
//   node scripts/spoken-questions.js --out <dir> [--kind arithmetic|digits] [--seed N] [--train N]
//        [--test N] [--max-seconds S] [--force]
//   node scripts/spoken-questions.js --check <dir>    (rehashes the files manifest.json lists)
//
// Kinds: "arithmetic" asks "what is three plus four?" (a, b in 0..9, plus, or minus with a >= b),
// "digits" says one number 0..20 ("seventeen"); the answer is the number in digits ("7", "17").
// A row: {"prompt": "<audio>\nAnswer with the number only.", "audio": "clips/train-00000.wav",
// "answer": "7", "spoken_text", "text_prompt" (the same prompt with the question written in place of
// the clip, numbers in digits as a transcript writes them: "What is 3 plus 4?", for asking a
// text-only model the same question; SmolLM2-135M answers none written in words), "demonstration"
// (what a warm start trains on, data.demonstration_field: the heard calculation and its result,
// "3 + 4 = 7": each number heard is a target of its own, so a new projector learns to listen in
// tens of steps where the bare answer taught it nothing in 40), "voice", "speed", "seconds"}; the
// loader reads prompt, audio and answer and ignores the rest. The prompt is a plain string: with
// data.prompt_format "chat" (the default) it becomes the user message of the model's chat template.
//
// Voices: 8 English accents x 16 variants (none, m1-m7, f1-f5, klatt, klatt2, klatt3), speeds
// 130-190 words a minute in steps of 10. The held-out split is by VOICE: the accent/variant pair
// (a, v) is a test voice when (a + v) % 4 == 0 (32 of 128), so every accent and every variant is
// heard in training but no test voice is, and no (question, voice) pair of the test set occurs in
// train. Questions are not held out (the text model knows arithmetic; the test is about hearing).
// espeak-ng is run with -z (no pause after the last word). A clip longer than --max-seconds
// (default 3) is spoken again 20 wpm faster, up to MAX_SPEED, and else dropped and replaced by a
// new draw; the counts are in the manifest. A clip whose bytes equal a kept clip's is dropped too
// (train is made first): for short words some accents sound alike (espeak-ng 1.51 says "four" in
// en-gb+f4 and en-us-nyc+f4 identically), and a test clip must not be a train clip. Accents are
// named by their voice files (gmw/en-GB-x-rp): espeak-ng 1.51 ignores a variant on "en-gb"
// (en-gb+m3 == en-gb) and falls back silently on an unknown voice, so every voice is first spoken
// once and two identical probes are an error.
//
// Deterministic: draws come from the project's seeded generator (config/seeds.ts, from dist/), and
// espeak-ng 1.51 writes the same bytes for the same text, voice and speed (test/spoken-questions.test.ts
// generates twice and compares), so the same seed and espeak-ng build give byte-identical files.
'use strict';
const { execFile, execFileSync } = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const { mixSeed, seededRandom } = require(path.join(__dirname, '..', 'dist', 'config', 'seeds.js'));

/** The accents: the names rows use, and the espeak-ng voice files they are spoken with. */
const ACCENTS = [
  { name: 'en-us', voice: 'gmw/en-US' },
  { name: 'en-gb', voice: 'gmw/en' },
  { name: 'en-gb-scotland', voice: 'gmw/en-GB-scotland' },
  { name: 'en-gb-x-gbclan', voice: 'gmw/en-GB-x-gbclan' },
  { name: 'en-gb-x-gbcwmd', voice: 'gmw/en-GB-x-gbcwmd' },
  { name: 'en-gb-x-rp', voice: 'gmw/en-GB-x-rp' },
  { name: 'en-029', voice: 'gmw/en-029' },
  { name: 'en-us-nyc', voice: 'gmw/en-US-nyc' },
];
/** espeak-ng's voice variants (pitch, formants, synthesizer); '' is the accent's own voice. */
const VARIANTS = ['', 'm1', 'm2', 'm3', 'm4', 'm5', 'm6', 'm7', 'f1', 'f2', 'f3', 'f4', 'f5', 'klatt', 'klatt2', 'klatt3'];
const SPEEDS = [130, 140, 150, 160, 170, 180, 190];
const SPEED_STEP = 20;
const MAX_SPEED = 250;
const DEFAULT_MAX_SECONDS = 3.0;
const PROBE_TEXT = 'what is seven minus two?';

const NUMBER_WORDS = ['zero', 'one', 'two', 'three', 'four', 'five', 'six', 'seven', 'eight', 'nine', 'ten', 'eleven', 'twelve', 'thirteen', 'fourteen', 'fifteen', 'sixteen', 'seventeen', 'eighteen', 'nineteen', 'twenty'];

/** Each kind's questions ({text, answer}) and the instruction after the clip (and after the words in text_prompt). */
const KINDS = {
  arithmetic: {
    instruction: 'Answer with the number only.',
    questions() {
      const out = [];
      for (let a = 0; a <= 9; a++) for (let b = 0; b <= 9; b++) out.push({ text: `what is ${NUMBER_WORDS[a]} plus ${NUMBER_WORDS[b]}?`, written: `What is ${a} plus ${b}?`, demonstration: `${a} + ${b} = ${a + b}`, answer: String(a + b) });
      for (let a = 0; a <= 9; a++) for (let b = 0; b <= a; b++) out.push({ text: `what is ${NUMBER_WORDS[a]} minus ${NUMBER_WORDS[b]}?`, written: `What is ${a} minus ${b}?`, demonstration: `${a} - ${b} = ${a - b}`, answer: String(a - b) });
      return out;
    },
  },
  digits: {
    instruction: 'Which number is this? Answer with digits only.',
    questions: () => NUMBER_WORDS.map((text, n) => ({ text, answer: String(n) })),
  },
};

/** The split of the voice (accent index, variant index): see the file comment. */
const splitOf = (a, v) => ((a + v) % 4 === 0 ? 'test' : 'train');

/** Every voice of a split: { name (row), espeak (the -v argument) }. */
function voicesOf(split) {
  const out = [];
  ACCENTS.forEach((accent, a) =>
    VARIANTS.forEach((variant, v) => {
      if (splitOf(a, v) !== split) return;
      const suffix = variant ? `+${variant}` : '';
      out.push({ name: `${accent.name}${suffix}`, espeak: `${accent.voice}${suffix}` });
    }),
  );
  return out;
}

/** espeak-ng's version ("1.51") and, where dpkg knows it, the Debian package's ("1.51+dfsg-10+deb12u2"); throws when it is missing. */
function espeakVersion() {
  let text;
  try {
    text = execFileSync('espeak-ng', ['--version'], { encoding: 'utf8' });
  } catch (err) {
    throw new Error(`espeak-ng is not installed (${err.code || err.message}): \`npm run setup -- --test-tools\` as root installs it, or apt-get install -y --no-install-recommends espeak-ng`);
  }
  const m = /text-to-speech:\s*(\S+)/.exec(text);
  let pkg = null;
  try {
    pkg = execFileSync('dpkg-query', ['-W', '-f', '${Version}', 'espeak-ng'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim() || null;
  } catch {
    // not a dpkg system, or espeak-ng built from source
  }
  return { version: m ? m[1] : text.trim(), package: pkg };
}

const sha256 = (bytes) => crypto.createHash('sha256').update(bytes).digest('hex');

/** A PCM WAV's duration in seconds, from its fmt and data chunks. */
function wavSeconds(bytes) {
  if (bytes.toString('ascii', 0, 4) !== 'RIFF' || bytes.toString('ascii', 8, 12) !== 'WAVE') throw new Error('not a RIFF/WAVE file');
  let blockAlign;
  let rate;
  for (let at = 12; at + 8 <= bytes.length; ) {
    const id = bytes.toString('ascii', at, at + 4);
    const size = bytes.readUInt32LE(at + 4);
    if (id === 'fmt ') {
      rate = bytes.readUInt32LE(at + 12);
      blockAlign = bytes.readUInt16LE(at + 20);
    } else if (id === 'data') {
      if (!rate || !blockAlign) throw new Error('data chunk before fmt chunk');
      return Math.floor(Math.min(size, bytes.length - at - 8) / blockAlign) / rate;
    }
    at += 8 + size + (size % 2);
  }
  throw new Error('no data chunk');
}

/** Speaks `text` into `file`; resolves to the file's bytes. */
function speak(text, voice, speed, file) {
  return new Promise((resolve, reject) => {
    execFile('espeak-ng', ['-z', '-v', voice, '-s', String(speed), '-w', file, text], (err, _stdout, stderr) => {
      if (err) return reject(new Error(`espeak-ng -v ${voice} -s ${speed} failed: ${stderr || err.message}`));
      resolve(fs.readFileSync(file));
    });
  });
}

/** Runs `fn` over `items` with at most `limit` at once; results in item order. */
async function mapLimit(items, limit, fn) {
  const out = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i], i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}

/** Speaks the probe in every voice; throws when two voices give the same audio (a variant or voice espeak-ng ignored). */
async function probeVoices(dir, concurrency) {
  const voices = [...voicesOf('train'), ...voicesOf('test')];
  const hashes = await mapLimit(voices, concurrency, async (v, i) => {
    const file = path.join(dir, `.probe-${i}.wav`);
    const bytes = await speak(PROBE_TEXT, v.espeak, 160, file);
    fs.rmSync(file);
    return sha256(bytes);
  });
  const seen = new Map();
  hashes.forEach((h, i) => {
    if (seen.has(h)) throw new Error(`espeak-ng speaks voices ${voices[seen.get(h)].espeak} and ${voices[i].espeak} identically: one of them is missing or its variant is ignored by this espeak-ng; fix ACCENTS / VARIANTS in scripts/spoken-questions.js`);
    seen.set(h, i);
  });
}

/** Speaks one drawn item, 20 wpm faster while it is over maxSeconds (up to MAX_SPEED); null when still over. */
async function speakWithin(item, file, maxSeconds) {
  for (let speed = item.speed; speed <= MAX_SPEED; speed += SPEED_STEP) {
    const bytes = await speak(item.question.text, item.voice.espeak, speed, file);
    const seconds = wavSeconds(bytes);
    if (seconds <= maxSeconds) return { speed, seconds, bytes };
  }
  fs.rmSync(file, { force: true });
  return null;
}

/**
 * The clips of one split: draws (question, voice, speed) without repeats from its own seeded stream,
 * speaks them `concurrency` at a time, and replaces the dropped ones by further draws, in rounds, so
 * which items are kept depends on the seed alone. Returns the rows (file order) and the counts.
 */
async function generateSplit({ out, kind, seed, split, count, maxSeconds, concurrency, seenAudio }) {
  const questions = KINDS[kind].questions();
  const voices = voicesOf(split);
  const combos = questions.length * voices.length * SPEEDS.length;
  if (count > combos) throw new Error(`--${split} ${count}: the ${split} split has only ${combos} distinct (question, voice, speed) items for kind ${kind}`);
  const rng = seededRandom(mixSeed(seed, `spoken-questions/${kind}/${split}`));
  const pick = (xs) => xs[Math.floor(rng() * xs.length)];
  const used = new Set();
  const draw = () => {
    for (;;) {
      const item = { question: pick(questions), voice: pick(voices), speed: pick(SPEEDS) };
      const key = `${item.question.text}|${item.voice.name}|${item.speed}`;
      if (!used.has(key)) return used.add(key), item;
    }
  };
  const kept = [];
  let raised = 0;
  let dropped = 0;
  let duplicates = 0;
  while (kept.length < count) {
    if (used.size >= combos || dropped + duplicates > 10 * count) {
      throw new Error(`only ${kept.length} of ${count} ${split} clips could be made (${dropped} over --max-seconds ${maxSeconds}, ${duplicates} duplicating another clip): raise --max-seconds or ask for fewer`);
    }
    const round = Array.from({ length: Math.min(count - kept.length, combos - used.size) }, draw);
    const spoken = await mapLimit(round, concurrency, (item, i) => speakWithin(item, path.join(out, 'clips', `.${split}-draw-${i}.wav`), maxSeconds).then((s) => ({ item, i, s })));
    for (const { item, i, s } of spoken) {
      const draft = path.join(out, 'clips', `.${split}-draw-${i}.wav`);
      if (!s) {
        dropped++;
        continue;
      }
      const digest = sha256(s.bytes);
      if (seenAudio.has(digest)) {
        duplicates++;
        fs.rmSync(draft);
        continue;
      }
      seenAudio.add(digest);
      if (s.speed !== item.speed) raised++;
      const rel = `clips/${split}-${String(kept.length).padStart(5, '0')}.wav`;
      fs.renameSync(draft, path.join(out, rel));
      kept.push({ rel, item, speed: s.speed, seconds: s.seconds });
    }
  }
  const instruction = KINDS[kind].instruction;
  const rows = kept.map(({ rel, item, speed, seconds }) => ({
    prompt: `<audio>\n${instruction}`,
    audio: rel,
    answer: item.question.answer,
    demonstration: item.question.demonstration ?? item.question.answer,
    spoken_text: item.question.text,
    text_prompt: `${item.question.written ?? item.question.text}\n${instruction}`,
    voice: item.voice.name,
    speed,
    seconds: Number(seconds.toFixed(4)),
  }));
  return { rows, raised, dropped, duplicates };
}

function durationStats(rows) {
  const s = rows.map((r) => r.seconds).sort((a, b) => a - b);
  if (s.length === 0) return { min: null, median: null, max: null };
  const mid = s.length >> 1;
  const median = s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
  return { min: s[0], median: Number(median.toFixed(4)), max: s[s.length - 1] };
}

/** Every file under `dir` but manifest.json, relative with '/' separators, sorted. */
function listFiles(dir, sub = '') {
  const out = [];
  for (const e of fs.readdirSync(path.join(dir, sub), { withFileTypes: true })) {
    const rel = sub ? `${sub}/${e.name}` : e.name;
    if (e.isDirectory()) out.push(...listFiles(dir, rel));
    else if (rel !== 'manifest.json') out.push(rel);
  }
  return out.sort();
}

/**
 * Generates the dataset into `out` (created; it must be empty unless `force`, which clears it).
 * Options: kind ("arithmetic"), seed (0), train (200), test (50), maxSeconds (3), concurrency (the
 * cores), force. Resolves to { manifest, seconds } (seconds: wall time, not in the manifest).
 */
async function generateSpokenQuestions(options) {
  const { out, kind = 'arithmetic', seed = 0, train = 200, test = 50, maxSeconds = DEFAULT_MAX_SECONDS, force = false } = options;
  const concurrency = options.concurrency ?? Math.max(1, os.availableParallelism ? os.availableParallelism() : os.cpus().length);
  if (!KINDS[kind]) throw new Error(`kind ${JSON.stringify(kind)}: use ${Object.keys(KINDS).join(' or ')}`);
  if (!Number.isInteger(seed)) throw new Error(`seed ${seed}: give an integer`);
  for (const [name, n] of [['train', train], ['test', test]]) if (!Number.isInteger(n) || n < 0) throw new Error(`--${name} ${n}: give a count >= 0`);
  if (!(maxSeconds > 0)) throw new Error(`--max-seconds ${maxSeconds}: give a positive number of seconds`);
  if (!out) throw new Error('give --out <dir>');
  const espeak = espeakVersion();
  if (fs.existsSync(out) && fs.readdirSync(out).length) {
    if (!force) throw new Error(`${out} is not empty: give an empty or new directory, or --force to clear it`);
    fs.rmSync(out, { recursive: true, force: true });
  }
  fs.mkdirSync(path.join(out, 'clips'), { recursive: true });
  const started = process.hrtime.bigint();
  await probeVoices(path.join(out, 'clips'), concurrency);
  const splits = {};
  const seenAudio = new Set();
  for (const [split, count] of [['train', train], ['test', test]]) {
    splits[split] = await generateSplit({ out, kind, seed, split, count, maxSeconds, concurrency, seenAudio });
    const jsonl = splits[split].rows.map((r) => JSON.stringify(r)).join('\n') + (count ? '\n' : '');
    fs.writeFileSync(path.join(out, `${split}.jsonl`), jsonl);
  }
  const files = {};
  for (const rel of listFiles(out)) files[rel] = sha256(fs.readFileSync(path.join(out, rel)));
  const manifest = {
    generator: 'scripts/spoken-questions.js',
    kind,
    seed,
    espeak_ng: { ...espeak, options: ['-z'] },
    prompt: `<audio>\n${KINDS[kind].instruction}`,
    held_out: 'by voice: accent/variant pair (a, v) is a test voice when (a + v) % 4 == 0',
    voices: { train: voicesOf('train'), test: voicesOf('test') },
    speeds: { drawn: SPEEDS, raise_step: SPEED_STEP, max: MAX_SPEED },
    max_seconds: maxSeconds,
    counts: Object.fromEntries(Object.entries(splits).map(([s, r]) => [s, { clips: r.rows.length, speed_raised: r.raised, dropped_too_long: r.dropped, dropped_duplicate_audio: r.duplicates }])),
    seconds: Object.fromEntries(Object.entries(splits).map(([s, r]) => [s, durationStats(r.rows)])),
    files,
  };
  fs.writeFileSync(path.join(out, 'manifest.json'), `${JSON.stringify(manifest, null, 2)}\n`);
  return { manifest, seconds: Number(process.hrtime.bigint() - started) / 1e9 };
}

/**
 * Rehashes the files manifest.json in `dir` lists: returns one line per missing, changed or unlisted
 * file (none: identical). `derived` names files written there since (e.g. filtered copies of the
 * rows), not counted as unlisted.
 */
function checkManifest(dir, derived = []) {
  const manifest = JSON.parse(fs.readFileSync(path.join(dir, 'manifest.json'), 'utf8'));
  const problems = [];
  for (const [rel, digest] of Object.entries(manifest.files)) {
    const file = path.join(dir, rel);
    if (!fs.existsSync(file)) problems.push(`${rel}: missing`);
    else if (sha256(fs.readFileSync(file)) !== digest) problems.push(`${rel}: sha256 differs from the manifest`);
  }
  for (const rel of listFiles(dir)) if (!(rel in manifest.files) && !derived.includes(rel)) problems.push(`${rel}: not in the manifest`);
  return problems;
}

function parseArgs(argv) {
  const opts = {};
  const num = (flag, v) => {
    const n = Number(v);
    if (v === undefined || Number.isNaN(n)) throw new Error(`${flag} needs a number`);
    return n;
  };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    const value = () => argv[++i];
    if (flag === '--out') opts.out = value();
    else if (flag === '--check') opts.check = value();
    else if (flag === '--kind') opts.kind = value();
    else if (flag === '--seed') opts.seed = num(flag, value());
    else if (flag === '--train') opts.train = num(flag, value());
    else if (flag === '--test') opts.test = num(flag, value());
    else if (flag === '--max-seconds') opts.maxSeconds = num(flag, value());
    else if (flag === '--concurrency') opts.concurrency = num(flag, value());
    else if (flag === '--force') opts.force = true;
    else throw new Error(`unknown argument ${flag}: usage: node scripts/spoken-questions.js --out <dir> [--kind arithmetic|digits] [--seed N] [--train N] [--test N] [--max-seconds S] [--force] | --check <dir>`);
  }
  return opts;
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  if (opts.check) {
    const problems = checkManifest(opts.check);
    for (const p of problems) console.log(`[spoken-questions] ${p}`);
    console.log(`[spoken-questions] ${opts.check}: ${problems.length ? `${problems.length} differences` : 'every file matches manifest.json'}`);
    process.exit(problems.length ? 1 : 0);
  }
  const { manifest, seconds } = await generateSpokenQuestions(opts);
  const { train, test } = manifest.counts;
  const fmt = (s) => `min ${s.min} s, median ${s.median} s, max ${s.max} s`;
  console.log(`[spoken-questions] espeak-ng ${manifest.espeak_ng.version} (${manifest.espeak_ng.package ?? 'no dpkg version'}), kind ${manifest.kind}, seed ${manifest.seed}`);
  console.log(`[spoken-questions] train ${train.clips} clips (${fmt(manifest.seconds.train)}), test ${test.clips} clips (${fmt(manifest.seconds.test)})`);
  console.log(`[spoken-questions] over ${manifest.max_seconds} s: ${train.speed_raised + test.speed_raised} spoken faster, ${train.dropped_too_long + test.dropped_too_long} dropped; ${train.dropped_duplicate_audio + test.dropped_duplicate_audio} dropped as duplicates of another clip's audio`);
  console.log(`[spoken-questions] ${train.clips + test.clips} clips in ${seconds.toFixed(2)} s -> ${opts.out}`);
}

if (require.main === module) {
  main().catch((err) => {
    console.error(`[spoken-questions] ${err.message}`);
    process.exit(1);
  });
}

module.exports = { ACCENTS, VARIANTS, SPEEDS, KINDS, voicesOf, wavSeconds, generateSpokenQuestions, checkManifest, espeakVersion };
