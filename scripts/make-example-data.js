#!/usr/bin/env node
// Generates the shipped example dataset under examples/data/ (see its README.md): arithmetic
// problems in three difficulty levels with numeric answers, as JSONL (train, eval, a chat-format
// eval) plus a Parquet copy of train. Deterministic: a fixed seed, so rerunning it rewrites the
// same bytes. Run (after `npm run setup`): node scripts/make-example-data.js
'use strict';
const fs = require('node:fs');
const path = require('node:path');

const OUT_DIR = path.resolve(__dirname, '..', 'examples', 'data');
const SEED = 0x5eed2025;
const TRAIN_PER_LEVEL = { 1: 300, 2: 600, 3: 600 };
const EVAL_PER_LEVEL = { 1: 50, 2: 50, 3: 50 };
const CHAT_EVAL_PER_LEVEL = { 1: 12, 2: 12, 3: 12 };
const CHAT_SYSTEM_PROMPT = 'You are a helpful assistant that solves arithmetic problems. Give the final answer as a number.';

// The project's one seeded generator (config/seeds.ts), from the build (`npm run setup` makes it).
const { seededRandom } = require(path.join(__dirname, '..', 'dist', 'config', 'seeds.js'));
const rng = seededRandom(SEED);
const int = (lo, hi) => lo + Math.floor(rng() * (hi - lo + 1));
const pick = (xs) => xs[Math.floor(rng() * xs.length)];
function shuffle(xs) {
  for (let i = xs.length - 1; i > 0; i--) {
    const j = int(0, i);
    [xs[i], xs[j]] = [xs[j], xs[i]];
  }
  return xs;
}

const NAMES = ['Tom', 'Sara', 'Ben', 'Mia', 'Leo', 'Ana', 'Sam', 'Zoe', 'Max', 'Lily', 'Omar', 'Nina'];
const ITEMS = ['apples', 'pencils', 'marbles', 'stickers', 'books', 'cookies', 'cards', 'balloons', 'shells', 'coins'];
const LEVEL1_TEMPLATES = [
  (a, b) => `What is ${a} + ${b}?`,
  (a, b) => `What is ${a} plus ${b}?`,
  (a, b) => `Add ${a} and ${b}.`,
  (a, b) => `Calculate ${a} + ${b}.`,
];

// Level 3: short one-step word problems; each returns { prompt, answer }.
const LEVEL3_TEMPLATES = [
  () => {
    const [n, it, a, b] = [pick(NAMES), pick(ITEMS), int(2, 30), int(2, 20)];
    return { prompt: `${n} has ${a} ${it} and buys ${b} more. How many ${it} does ${n} have?`, answer: a + b };
  },
  () => {
    const [n, m] = twoNames();
    const it = pick(ITEMS);
    const a = int(10, 40);
    const b = int(1, a - 1);
    return { prompt: `${n} had ${a} ${it} and gave ${b} of them to ${m}. How many ${it} does ${n} have left?`, answer: a - b };
  },
  () => {
    const [n, it, a] = [pick(NAMES), pick(ITEMS), int(10, 50)];
    const b = int(1, a - 1);
    return { prompt: `There are ${a} ${it} in a box. ${n} takes out ${b}. How many ${it} are left in the box?`, answer: a - b };
  },
  () => {
    const [n, it, a, b] = [pick(NAMES), pick(ITEMS), int(2, 9), int(2, 9)];
    return { prompt: `${n} has ${a} bags with ${b} ${it} in each bag. How many ${it} does ${n} have in total?`, answer: a * b };
  },
  () => {
    const [n, a, b] = [pick(NAMES), int(5, 40), int(5, 40)];
    return { prompt: `${n} reads ${a} pages on Monday and ${b} pages on Tuesday. How many pages does ${n} read in total?`, answer: a + b };
  },
  () => {
    const [n, m] = twoNames();
    const [it, a, b] = [pick(ITEMS), int(2, 25), int(2, 15)];
    return { prompt: `${n} has ${a} ${it}. ${m} has ${b} more ${it} than ${n}. How many ${it} does ${m} have?`, answer: a + b };
  },
  () => {
    const [n, it, each, friends] = [pick(NAMES), pick(ITEMS), int(2, 9), int(2, 6)];
    return { prompt: `${n} shares ${each * friends} ${it} equally among ${friends} friends. How many ${it} does each friend get?`, answer: each };
  },
  () => {
    const [a, b] = [int(15, 35), int(1, 9)];
    return { prompt: `A class has ${a} students. ${b} of them are absent today. How many students are in class today?`, answer: a - b };
  },
];
function twoNames() {
  const n = pick(NAMES);
  let m = pick(NAMES);
  while (m === n) m = pick(NAMES);
  return [n, m];
}

/**
 * One problem of `level` with its split key: problems sharing a key never land in different splits.
 * Levels 1 and 2 are keyed by the arithmetic itself (so "What is 3 + 4?" in eval means no phrasing
 * of 3 + 4 is in train); level 3 by its text.
 */
function problem(level) {
  if (level === 1) {
    const [a, b] = [int(0, 9), int(0, 9)];
    return { key: `1:${a}+${b}`, prompt: pick(LEVEL1_TEMPLATES)(a, b), answer: a + b };
  }
  if (level === 2) {
    let [a, b] = [int(10, 99), int(10, 99)];
    if (rng() < 0.5) return { key: `2:${a}+${b}`, prompt: `What is ${a} + ${b}?`, answer: a + b };
    if (a < b) [a, b] = [b, a];
    return { key: `2:${a}-${b}`, prompt: `What is ${a} - ${b}?`, answer: a - b };
  }
  const p = pick(LEVEL3_TEMPLATES)();
  return { key: `3:${p.prompt}`, ...p };
}

/**
 * Level 1 has only 100 sums (4 phrasings each): the eval splits may claim only this many of them,
 * so enough are left for train.
 */
const LEVEL1_MAX_KEYS = { eval: 15, chat: 4 };

/** Draws distinct problems of `level` into each split in turn (eval first), never sharing a key across splits. */
function drawLevel(level, counts) {
  const owner = new Map(); // key -> split name
  const keysOf = new Map(); // split name -> number of keys it owns
  const seenText = new Set();
  const out = Object.fromEntries(Object.keys(counts).map((s) => [s, []]));
  for (const [split, count] of Object.entries(counts)) {
    let attempts = 0;
    while (out[split].length < count) {
      if (++attempts > 200_000) throw new Error(`level ${level}: cannot draw ${count} distinct ${split} problems; lower the count`);
      const p = problem(level);
      if ((owner.has(p.key) && owner.get(p.key) !== split) || seenText.has(p.prompt)) continue;
      if (!owner.has(p.key)) {
        if (level === 1 && (keysOf.get(split) ?? 0) >= (LEVEL1_MAX_KEYS[split] ?? Infinity)) continue;
        keysOf.set(split, (keysOf.get(split) ?? 0) + 1);
      }
      owner.set(p.key, split);
      seenText.add(p.prompt);
      out[split].push({ level, prompt: p.prompt, answer: p.answer });
    }
  }
  return out;
}

function main() {
  const splits = { eval: [], chat: [], train: [] };
  for (const level of [1, 2, 3]) {
    const drawn = drawLevel(level, { eval: EVAL_PER_LEVEL[level], chat: CHAT_EVAL_PER_LEVEL[level], train: TRAIN_PER_LEVEL[level] });
    for (const s of Object.keys(splits)) splits[s].push(...drawn[s]);
  }
  const withIds = (rows, prefix) => shuffle(rows).map((r, i) => ({ id: `${prefix}-${String(i + 1).padStart(4, '0')}`, ...r }));
  const train = withIds(splits.train, 'train');
  const evalRows = withIds(splits.eval, 'eval');
  const chat = withIds(splits.chat, 'chat-eval').map(({ id, level, prompt, answer }) => ({
    id,
    level,
    messages: [{ role: 'system', content: CHAT_SYSTEM_PROMPT }, { role: 'user', content: prompt }],
    answer,
  }));

  fs.mkdirSync(OUT_DIR, { recursive: true });
  const writeJsonl = (name, rows) => {
    fs.writeFileSync(path.join(OUT_DIR, name), rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
    console.log(`[make-example-data] ${name}: ${rows.length} rows`);
  };
  writeJsonl('arith-train.jsonl', train);
  writeJsonl('arith-eval.jsonl', evalRows);
  writeJsonl('arith-chat-eval.jsonl', chat);
  return train;
}

async function writeParquet(train) {
  const { parquetWriteFile } = await import('hyparquet-writer');
  parquetWriteFile({
    filename: path.join(OUT_DIR, 'arith-train.parquet'),
    columnData: [
      { name: 'id', data: train.map((r) => r.id), type: 'STRING' },
      { name: 'level', data: train.map((r) => r.level), type: 'INT32' },
      { name: 'prompt', data: train.map((r) => r.prompt), type: 'STRING' },
      { name: 'answer', data: train.map((r) => r.answer), type: 'INT32' },
    ],
    createdBy: 'relax scripts/make-example-data.js',
  });
  console.log(`[make-example-data] arith-train.parquet: ${train.length} rows`);
}

writeParquet(main()).catch((err) => {
  console.error(`[make-example-data] ${err.message}`);
  process.exit(1);
});
