// Dataset tasks (envs/datasets.ts): JSONL and Parquet reading, row validation errors that name the
// file, line/row and field, seeded train prompts, chat rendering, rule rewards, the `data` config
// schema, and the shipped example files under examples/data/.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { DataConfigSchema, parseDataConfig } from '../config/data-config';
import { CharTokenizer } from '../engines/tokenizers/char';
import { createDatasetTask, loadDatasetTask, readDatasetRows, type ChatMessage, type DatasetRow } from '../envs/datasets';

const ROOT = path.resolve(__dirname, '..', '..');
const EXAMPLES = path.join(ROOT, 'examples', 'data');
const tokenizer = new CharTokenizer('0123456789');
/** A ChatML renderer like SmolLM2's template: each message, then the generation prompt. */
const chatml = (messages: ChatMessage[]): string =>
  messages.map((m) => `<|im_start|>${m.role}\n${m.content}<|im_end|>\n`).join('') + '<|im_start|>assistant\n';
const STOPS = ['<|im_end|>'];

let dir: string;
before(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'relax-datasets-'));
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function file(name: string, content: string): Promise<string> {
  const p = path.join(dir, name);
  await writeFile(p, content);
  return p;
}
const jsonl = (rows: unknown[]) => rows.map((r) => JSON.stringify(r)).join('\n') + '\n';

test('readDatasetRows: JSONL prompt and messages rows, answer or label, numbers as strings, blank lines skipped', async () => {
  const p = await file('ok.jsonl', [
    JSON.stringify({ prompt: 'What is 3 + 4?', answer: 7, level: 1 }),
    '',
    '   ',
    JSON.stringify({ messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Capital of France?' }], label: 'Paris' }),
    JSON.stringify({ prompt: [{ role: 'user', content: 'hi' }], answer: 'hello' }),
  ].join('\r\n'));
  const rows = await readDatasetRows(p);
  assert.deepEqual(rows, [
    { prompt: 'What is 3 + 4?', answer: '7', source: `${p} line 1` },
    { messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Capital of France?' }], answer: 'Paris', source: `${p} line 4` },
    { messages: [{ role: 'user', content: 'hi' }], answer: 'hello', source: `${p} line 5` },
  ]);
  // custom field names
  const q = await file('fields.jsonl', jsonl([{ question: 'q', gold: 3 }]));
  assert.deepEqual(await readDatasetRows(q, { prompt_field: 'question', answer_field: 'gold' }), [{ prompt: 'q', answer: '3', source: `${q} line 1` }]);
  // with answer_field set, "label" is no fallback
  await assert.rejects(readDatasetRows(q, { prompt_field: 'question', answer_field: 'label' }), /line 1: field "label" is missing \(rows need "label" \(data.answer_field\)\)/);
});

test('readDatasetRows: a .json file may be one array of rows', async () => {
  const p = await file('arr.json', JSON.stringify([{ prompt: 'a', answer: 1 }, { prompt: 'b' }]));
  await assert.rejects(readDatasetRows(p), (err: Error) => err.message === `${p} item 1 (0-based): field "answer" is missing (rows need "answer" or "label")`);
  const q = await file('lines.json', jsonl([{ prompt: 'a', answer: 1 }]));
  assert.equal((await readDatasetRows(q)).length, 1);
});

test('readDatasetRows: bad rows fail with the file, the line and the field', async () => {
  const cases: Array<[string, string, RegExp]> = [
    ['missing-answer.jsonl', jsonl([{ prompt: 'a', answer: 1 }, { prompt: 'b' }]), /missing-answer\.jsonl line 2: field "answer" is missing \(rows need "answer" or "label"\)$/],
    ['bad-json.jsonl', `${JSON.stringify({ prompt: 'a', answer: 1 })}\n\n{"prompt": "b", answer: 2}\n`, /bad-json\.jsonl line 3: not valid JSON \(.+\): each line holds one JSON object$/],
    ['not-array.jsonl', jsonl([{ messages: 'hi', answer: 1 }]), /not-array\.jsonl line 1: field "messages" must be an array of \{role, content\} messages, got "hi"/],
    ['empty-messages.jsonl', jsonl([{ messages: [], answer: 1 }]), /line 1: field "messages" is an empty array/],
    ['wrong-role.jsonl', jsonl([{ messages: [{ role: 'bot', content: 'x' }], answer: 1 }]), /wrong-role\.jsonl line 1: messages\[0\]\.role is "bot": roles are "system", "user" or "assistant"/],
    ['bad-content.jsonl', jsonl([{ messages: [{ role: 'user', content: 3 }], answer: 1 }]), /line 1: messages\[0\]\.content must be a string, got 3/],
    ['ends-assistant.jsonl', jsonl([{ messages: [{ role: 'user', content: 'x' }, { role: 'assistant', content: 'y' }], answer: 1 }]), /line 1: field "messages" ends with a "assistant" message/],
    ['no-prompt.jsonl', jsonl([{ question: 'x', answer: 1 }]), /line 1: has neither field "prompt" nor "messages"/],
    ['bad-answer.jsonl', jsonl([{ prompt: 'x', answer: [1] }]), /line 1: field "answer" must be a string or a number, got \[1\]/],
    ['empty-answer.jsonl', jsonl([{ prompt: 'x', answer: ' ' }]), /line 1: field "answer" is an empty string/],
    ['not-object.jsonl', '[1, 2]\n', /line 1: a row must be a JSON object, got \[1,2\]/],
    ['empty.jsonl', '', /empty\.jsonl: has no rows \(the file is empty or only blank lines\)/],
    ['blank.jsonl', '\n \n', /blank\.jsonl: has no rows/],
    ['data.csv', 'prompt,answer\n', /data\.csv: unknown dataset format "\.csv": use \.jsonl \(one JSON object per line\), \.json or \.parquet/],
  ];
  for (const [name, content, re] of cases) {
    const p = await file(name, content);
    await assert.rejects(readDatasetRows(p), (err: Error) => {
      assert.match(err.message, re, name);
      assert.ok(err.message.includes(p), `${name}: the error names the file: ${err.message}`);
      return true;
    });
  }
  await assert.rejects(readDatasetRows(path.join(dir, 'nope.jsonl')), /nope\.jsonl: cannot read the dataset \(ENOENT\): check the path/);
  await assert.rejects(readDatasetRows(path.join(dir, 'nope.parquet')), /nope\.parquet: cannot read the dataset \(ENOENT\)/);
  const notParquet = await file('fake.parquet', 'not parquet at all');
  await assert.rejects(readDatasetRows(notParquet), /fake\.parquet: not a readable Parquet file/);
  // several bad rows: one error listing them all, with a count
  const many = await file('many.jsonl', jsonl([{ prompt: 'a' }, { prompt: 'b', answer: 1 }, { answer: 2 }]));
  await assert.rejects(readDatasetRows(many), /many\.jsonl: 2 bad rows: .*many\.jsonl line 1: field "answer" is missing.*; .*many\.jsonl line 3: has neither field/);
});

test('readDatasetRows: Parquet gives the same rows as JSONL; bad Parquet rows name the 0-based row', async () => {
  const { parquetWriteFile } = await import('hyparquet-writer');
  const rows = [
    { prompt: 'What is 3 + 4?', answer: 7 },
    { prompt: 'Capital of France?', answer: 'Paris' },
  ];
  const j = await file('same.jsonl', jsonl(rows));
  const pq = path.join(dir, 'same.parquet');
  parquetWriteFile({
    filename: pq,
    columnData: [
      { name: 'prompt', data: rows.map((r) => r.prompt), type: 'STRING' },
      { name: 'answer', data: rows.map((r) => String(r.answer)), type: 'STRING' },
      { name: 'messages', data: [null, [{ role: 'user', content: 'Capital of France?' }]] },
    ],
  });
  const strip = (rs: DatasetRow[]) => rs.map(({ source: _s, ...r }) => r);
  const fromParquet = await readDatasetRows(pq);
  // the second row has messages (they win over the prompt)
  assert.deepEqual(strip(fromParquet), [{ prompt: 'What is 3 + 4?', answer: '7' }, { messages: [{ role: 'user', content: 'Capital of France?' }], answer: 'Paris' }]);
  assert.equal(fromParquet[1].source, `${pq} row 1 (0-based)`);
  assert.deepEqual((await readDatasetRows(j))[0], { ...fromParquet[0], source: `${j} line 1` });

  const bad = path.join(dir, 'bad.parquet');
  parquetWriteFile({ filename: bad, columnData: [{ name: 'prompt', data: ['a', 'b', 'c'], type: 'STRING' }, { name: 'answer', data: [1, null, 3], type: 'INT32' }] });
  await assert.rejects(readDatasetRows(bad), (err: Error) => err.message === `${bad} row 1 (0-based): field "answer" is missing (rows need "answer" or "label")`);
  const big = path.join(dir, 'big.parquet');
  parquetWriteFile({ filename: big, columnData: [{ name: 'prompt', data: ['a'], type: 'STRING' }, { name: 'answer', data: [BigInt(12)], type: 'INT64' }] });
  assert.equal((await readDatasetRows(big))[0].answer, '12');
});

const rowsOf = (n: number): DatasetRow[] => Array.from({ length: n }, (_, i) => ({ prompt: `What is ${i} + 1?`, answer: String(i + 1), source: `t line ${i + 1}` }));
const numeric = DataConfigSchema.parse({ train: 'x.jsonl', reward: { kind: 'numeric' } }).reward;

test('createDatasetTask: seeded trainPrompts are deterministic, cycle without replacement, and heldOut is fixed', () => {
  const task = createDatasetTask({ name: 't', train: rowsOf(10), eval: rowsOf(3), tokenizer, reward: numeric, stopStrings: STOPS, promptFormat: 'raw' });
  assert.equal(task.tokenizer(), tokenizer);
  const a = task.trainPrompts(7, 25);
  assert.deepEqual(task.trainPrompts(7, 25), a);
  assert.equal(a.length, 25);
  // each epoch of 10 draws every row once
  for (const epoch of [a.slice(0, 10), a.slice(10, 20)]) assert.equal(new Set(epoch.map((p) => p.text)).size, 10);
  assert.equal(new Set(a.slice(20).map((p) => p.text)).size, 5);
  // a prefix of a longer draw, and a different list for another seed
  assert.deepEqual(task.trainPrompts(7, 12), a.slice(0, 12));
  assert.notDeepEqual(task.trainPrompts(8, 10).map((p) => p.text), a.slice(0, 10).map((p) => p.text));
  // not in file order
  assert.notDeepEqual(a.slice(0, 10).map((p) => p.text), rowsOf(10).map((r) => r.prompt));
  assert.deepEqual(task.trainPrompts(7, 0), []);
  assert.throws(() => task.trainPrompts(1.5, 2), /seed is 1.5/);
  // mutating a returned prompt does not change the task
  a[0].text = 'changed';
  assert.notEqual(task.trainPrompts(7, 1)[0].text, 'changed');
  assert.deepEqual(task.heldOut(), rowsOf(3).map((r) => ({ text: r.prompt, answer: r.answer })));
  assert.deepEqual(task.heldOut(), task.heldOut());
});

test('createDatasetTask: chat prompts go through renderChat, with the system prompt when the row has none', () => {
  const rows: DatasetRow[] = [
    { prompt: 'What is 3 + 4?', answer: '7', source: 'a line 1' },
    { messages: [{ role: 'system', content: 'Own system.' }, { role: 'user', content: 'What is 1 + 1?' }], answer: '2', source: 'a line 2' },
  ];
  const task = createDatasetTask({ name: 't', train: rows, eval: rows, tokenizer, renderChat: chatml, reward: numeric, stopStrings: STOPS, systemPrompt: 'Answer with a number.' });
  assert.deepEqual(task.heldOut().map((p) => p.text), [
    '<|im_start|>system\nAnswer with a number.<|im_end|>\n<|im_start|>user\nWhat is 3 + 4?<|im_end|>\n<|im_start|>assistant\n',
    '<|im_start|>system\nOwn system.<|im_end|>\n<|im_start|>user\nWhat is 1 + 1?<|im_end|>\n<|im_start|>assistant\n',
  ]);
  const plain = createDatasetTask({ name: 't', train: rows.slice(0, 1), eval: rows.slice(0, 1), tokenizer, renderChat: chatml, reward: numeric, stopStrings: STOPS });
  assert.equal(plain.heldOut()[0].text, '<|im_start|>user\nWhat is 3 + 4?<|im_end|>\n<|im_start|>assistant\n');
  // raw keeps a prompt string as is, but a messages row still needs the chat template
  assert.throws(
    () => createDatasetTask({ name: 't', train: rows, eval: rows, tokenizer, reward: numeric, stopStrings: STOPS, promptFormat: 'raw' }),
    /a line 2: needs the model's chat template \(it has chat messages\), and none was given/,
  );
  assert.throws(() => createDatasetTask({ name: 't', train: rows, eval: rows, tokenizer, reward: numeric, stopStrings: STOPS }), /a line 1: needs the model's chat template \(data.prompt_format is "chat"\)/);
});

test('createDatasetTask: reward is the rule reward for each kind, cut at the stop strings', () => {
  const make = (reward: unknown, rows: DatasetRow[]) =>
    createDatasetTask({ name: 't', train: rows, eval: rows, tokenizer, reward: DataConfigSchema.parse({ train: 'x.jsonl', reward }).reward, stopStrings: STOPS, promptFormat: 'raw' });
  const n = make({ kind: 'numeric' }, rowsOf(2));
  const p = n.heldOut()[1];
  assert.equal(n.reward(p, 'The answer is 2.<|im_end|>9'), 1);
  assert.equal(n.reward(p, '3<|im_end|>2'), 0);
  const e = make({ kind: 'exact' }, [{ prompt: 'Capital?', answer: 'Paris', source: 's' }]);
  assert.equal(e.reward(e.heldOut()[0], 'paris.<|im_end|>'), 1);
  const r = make({ kind: 'regex' }, [{ prompt: 'Colour?', answer: 'colou?r', source: 's' }]);
  assert.equal(r.reward(r.heldOut()[0], 'color<|im_end|>'), 1);
  const b = make({ kind: 'numeric', extract: 'boxed' }, [{ prompt: 'Half?', answer: '0.5', source: 's' }]);
  assert.equal(b.reward(b.heldOut()[0], '\\boxed{\\frac{1}{2}}<|im_end|>'), 1);
  // answers that cannot suit the reward fail up front
  assert.throws(() => make({ kind: 'numeric' }, [{ prompt: 'q', answer: 'seven', source: 'f line 4' }]), /f line 4: the answer "seven" is not a number, and data.reward.kind is "numeric"/);
  assert.throws(() => make({ kind: 'regex' }, [{ prompt: 'q', answer: '(', source: 'f line 2' }]), /f line 2: the answer is read as a regex/);
});

test('DataConfigSchema: defaults, dependent defaults and errors', () => {
  assert.deepEqual(parseDataConfig({ train: 'a.jsonl' }), {
    train: 'a.jsonl',
    eval_size: 64,
    prompt_field: 'prompt',
    messages_field: 'messages',
    prompt_format: 'chat',
    reward: { kind: 'exact', extract: 'none' },
  });
  const withEval = parseDataConfig({ train: 'a.jsonl', eval: 'b.jsonl', reward: { kind: 'numeric' } });
  assert.equal(withEval.eval_size, undefined);
  assert.deepEqual(parseDataConfig(withEval), withEval);
  assert.throws(() => parseDataConfig({}), /data.train: /);
  assert.throws(() => parseDataConfig({ train: 'a.jsonl', eval: 'b.jsonl', eval_size: 3 }), /data.eval_size: is used only without data.eval/);
  assert.throws(() => parseDataConfig({ train: 'a.jsonl', prompt_format: 'raw', system_prompt: 'x' }), /data.system_prompt: needs prompt_format "chat"/);
  assert.throws(() => parseDataConfig({ train: 'a.jsonl', reward: { kind: 'exact', tolerance: 1 } }), /data.reward.tolerance: applies only to kind "numeric"/);
  assert.throws(() => parseDataConfig({ train: 'a.jsonl', shuffle: true }), /data.shuffle: unknown field/);
});

test('loadDatasetTask: holds out the last eval_size rows without eval; resolves paths against baseDir', async () => {
  const sub = path.join(dir, 'sub');
  fs.mkdirSync(sub, { recursive: true });
  await writeFile(path.join(sub, 'train.jsonl'), jsonl(rowsOf(10).map((r) => ({ prompt: r.prompt, answer: Number(r.answer) }))));
  const task = await loadDatasetTask({ train: 'train.jsonl', eval_size: 3, prompt_format: 'raw', reward: { kind: 'numeric' } }, { tokenizer, stopStrings: STOPS, baseDir: sub });
  assert.equal(task.name, 'dataset:train.jsonl');
  assert.deepEqual(task.heldOut().map((p) => p.answer), ['8', '9', '10']);
  const drawn = new Set(task.trainPrompts(1, 7).map((p) => p.answer));
  assert.equal(drawn.size, 7);
  for (const a of ['8', '9', '10']) assert.ok(!drawn.has(a), 'held-out rows are not trained on');
  await assert.rejects(
    loadDatasetTask({ train: 'train.jsonl' }, { tokenizer, renderChat: chatml, stopStrings: STOPS, baseDir: sub }),
    /train\.jsonl: has 10 rows; with no data\.eval its last 64 \(data\.eval_size\) are held out, leaving none to train on/,
  );
  await assert.rejects(loadDatasetTask({ train: 'train.jsonl', eval: 'missing.jsonl' }, { tokenizer, renderChat: chatml, stopStrings: STOPS, baseDir: sub }), /missing\.jsonl: cannot read the dataset \(ENOENT\)/);
  await assert.rejects(loadDatasetTask({ train: 'train.jsonl', reward: { kind: 'nope' } } as never, { tokenizer, stopStrings: STOPS, baseDir: sub }), /invalid data config: data.reward.kind/);
});

test('the shipped example data (examples/data) loads, JSONL and Parquet agree, and the splits are disjoint', async () => {
  const opts = { tokenizer, renderChat: chatml, stopStrings: STOPS, baseDir: ROOT };
  const trainJsonl = await readDatasetRows(path.join(EXAMPLES, 'arith-train.jsonl'));
  const trainParquet = await readDatasetRows(path.join(EXAMPLES, 'arith-train.parquet'));
  const evalRows = await readDatasetRows(path.join(EXAMPLES, 'arith-eval.jsonl'));
  const chatRows = await readDatasetRows(path.join(EXAMPLES, 'arith-chat-eval.jsonl'));
  assert.equal(trainJsonl.length, 1500);
  assert.equal(evalRows.length, 150);
  assert.ok(chatRows.length >= 24 && chatRows.every((r) => r.messages?.[0].role === 'system'));
  const strip = (rs: DatasetRow[]) => rs.map(({ source: _s, ...r }) => r);
  assert.deepEqual(strip(trainParquet), strip(trainJsonl));
  const trainTexts = new Set(trainJsonl.map((r) => r.prompt));
  for (const r of evalRows) assert.ok(!trainTexts.has(r.prompt), `eval row in train: ${r.prompt}`);
  for (const r of chatRows) assert.ok(!trainTexts.has(r.messages?.[1].content), `chat eval row in train: ${r.messages?.[1].content}`);
  for (const name of fs.readdirSync(EXAMPLES)) assert.ok(fs.statSync(path.join(EXAMPLES, name)).size < 300_000, `${name} is over 300 KB`);

  for (const train of ['examples/data/arith-train.jsonl', 'examples/data/arith-train.parquet']) {
    const task = await loadDatasetTask({ train, eval: 'examples/data/arith-eval.jsonl', reward: { kind: 'numeric' } }, opts);
    assert.equal(task.heldOut().length, 150);
    const [p] = task.trainPrompts(0, 1);
    assert.match(p.text, /^<\|im_start\|>user\n.+<\|im_end\|>\n<\|im_start\|>assistant\n$/s);
    assert.equal(task.reward(p, `The answer is ${p.answer}.<|im_end|>`), 1);
  }
  const chat = await loadDatasetTask({ train: 'examples/data/arith-train.jsonl', eval: 'examples/data/arith-chat-eval.jsonl', reward: { kind: 'numeric' } }, opts);
  assert.match(chat.heldOut()[0].text, /^<\|im_start\|>system\nYou are a helpful assistant/);
});
