// The built-in rule rewards (envs/rule-rewards.ts): normalization, extraction (last number, boxed,
// regex), matching (exact, numeric, regex) and ruleReward's combination with stop strings and format.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  cutAtStop,
  exactMatch,
  extractBoxed,
  extractByRegex,
  extractLastNumber,
  normalizeAnswer,
  numericMatch,
  parseNumber,
  regexMatch,
  ruleReward,
} from '../envs/rule-rewards';
import { DataRewardConfigSchema } from '../config/data-config';

test('normalizeAnswer: trims, lowercases, collapses spaces, strips wrappers, trailing punctuation and thousands commas', () => {
  assert.equal(normalizeAnswer('  Paris. '), 'paris');
  assert.equal(normalizeAnswer('New   York\n City!'), 'new york city');
  assert.equal(normalizeAnswer('$42$'), '42');
  assert.equal(normalizeAnswer('"42."'), '42');
  assert.equal(normalizeAnswer("'yes'"), 'yes');
  assert.equal(normalizeAnswer('`x`'), 'x');
  assert.equal(normalizeAnswer('**7**'), '7');
  assert.equal(normalizeAnswer('1,234,567'), '1234567');
  assert.equal(normalizeAnswer('1,2'), '1,2');
  assert.equal(normalizeAnswer('3.5'), '3.5');
  assert.equal(normalizeAnswer(''), '');
});

test('extractLastNumber: the last number, thousands commas removed, signs only when not a minus between terms', () => {
  assert.equal(extractLastNumber('The answer is 1,234.'), '1234');
  assert.equal(extractLastNumber('-7'), '-7');
  assert.equal(extractLastNumber('x = -3.5'), '-3.5');
  assert.equal(extractLastNumber('5-3 = 2'), '2');
  assert.equal(extractLastNumber('5-3'), '3');
  assert.equal(extractLastNumber('half is 1/2'), '1/2');
  assert.equal(extractLastNumber('3 / 4'), '3/4');
  assert.equal(extractLastNumber('It costs $12.50 each.'), '12.50');
  assert.equal(extractLastNumber('.5 of it'), '.5');
  assert.equal(extractLastNumber('2e3 grams'), '2e3');
  assert.equal(extractLastNumber('1,2,3'), '3');
  assert.equal(extractLastNumber('19<|im_end|>garbage'), '19');
  assert.equal(extractLastNumber('no numbers here'), undefined);
  assert.equal(extractLastNumber(''), undefined);
});

test('extractBoxed: the content of the last \\boxed{...}, nested braces included', () => {
  assert.equal(extractBoxed('so \\boxed{\\frac{1}{2}}'), '\\frac{1}{2}');
  assert.equal(extractBoxed('\\boxed{1} then \\boxed{ 2 }'), '2');
  assert.equal(extractBoxed('\\boxed{a{b{c}}d}.'), 'a{b{c}}d');
  assert.equal(extractBoxed('\\fbox{9}'), '9');
  // an unclosed last box falls back to the last closed one
  assert.equal(extractBoxed('\\boxed{3} and \\boxed{4'), '3');
  assert.equal(extractBoxed('\\boxed{4'), undefined);
  assert.equal(extractBoxed('42'), undefined);
});

test('extractByRegex: the first group (or whole match) of the last match', () => {
  assert.equal(extractByRegex('Answer: 3. Answer: 5', 'Answer:\\s*(\\d+)'), '5');
  assert.equal(extractByRegex('#### 42', '####\\s*\\S+'), '#### 42');
  assert.equal(extractByRegex('ANSWER: x', /answer: (\w)/i), 'x');
  assert.equal(extractByRegex('nothing', 'Answer: (\\d+)'), undefined);
  assert.throws(() => extractByRegex('x', '('), /regex "\(" is invalid/);
});

test('exactMatch: equal after normalization', () => {
  assert.ok(exactMatch(' Paris.', 'paris'));
  assert.ok(exactMatch('1,234', '1234'));
  assert.ok(!exactMatch('Paris is the capital', 'Paris'));
});

test('parseNumber and numericMatch: integers, decimals, thousands commas, fractions, \\frac, percent', () => {
  assert.equal(parseNumber('1,234'), 1234);
  assert.equal(parseNumber('-3.5'), -3.5);
  assert.equal(parseNumber('1/2'), 0.5);
  assert.equal(parseNumber('-3/4'), -0.75);
  assert.equal(parseNumber('\\frac{1}{2}'), 0.5);
  assert.equal(parseNumber('-\\dfrac{3}{4}'), -0.75);
  assert.equal(parseNumber('$5'), 5);
  assert.equal(parseNumber('50%'), 50);
  assert.equal(parseNumber('7.'), 7);
  assert.equal(parseNumber('1e-3'), 0.001);
  for (const bad of ['', 'seven', '1,2', '2x', '1/0', '--1']) assert.equal(parseNumber(bad), undefined, bad);

  assert.ok(numericMatch('0.5', '1/2'));
  assert.ok(numericMatch('\\frac{1}{2}', '0.5'));
  assert.ok(numericMatch('1234', '1,234'));
  assert.ok(numericMatch('7.0', '7'));
  assert.ok(!numericMatch('7.01', '7'));
  assert.ok(numericMatch('7.01', '7', 0.01));
  // relative above 1: 1e6 * 1e-6 = 1
  assert.ok(numericMatch('1000000.5', '1000000'));
  assert.ok(!numericMatch('1000002', '1000000'));
  // absolute below 1
  assert.ok(!numericMatch('0.000003', '0.000001'));
  assert.ok(!numericMatch('seven', '7'));
  assert.throws(() => numericMatch('1', '1', -1), /tolerance is -1/);
});

test('regexMatch: the whole trimmed text matches', () => {
  assert.ok(regexMatch(' Paris ', 'paris|Paris'));
  assert.ok(!regexMatch('Paris, France', 'Paris'));
  assert.ok(regexMatch('42', '\\d+'));
});

test('cutAtStop: cuts at the earliest stop string', () => {
  assert.equal(cutAtStop('19<|im_end|>garbage', ['<|im_end|>']), '19');
  assert.equal(cutAtStop('a</s>b<|im_end|>', ['<|im_end|>', '</s>']), 'a');
  assert.equal(cutAtStop('abc', ['<eos>', '']), 'abc');
});

test('ruleReward: extraction + match, cut at the stop string, with an optional format share', () => {
  const numeric = DataRewardConfigSchema.parse({ kind: 'numeric' });
  const stops = ['<|im_end|>'];
  assert.equal(ruleReward(numeric, 'The answer is 19.<|im_end|>garbage 20', '19', stops), 1);
  assert.equal(ruleReward(numeric, '19<|im_end|>garbage', '19', stops), 1);
  // without the stop string, the last number of the garbage counts
  assert.equal(ruleReward(numeric, '19<|im_end|>20', '19'), 0);
  assert.equal(ruleReward(numeric, 'I do not know', '19', stops), 0);

  const exact = DataRewardConfigSchema.parse({});
  assert.equal(ruleReward(exact, ' Paris.<|im_end|>', 'paris', stops), 1);
  assert.equal(ruleReward(exact, 'It is Paris', 'paris', stops), 0);

  const boxed = DataRewardConfigSchema.parse({ kind: 'numeric', extract: 'boxed' });
  assert.equal(ruleReward(boxed, 'so \\boxed{\\frac{1}{2}}', '0.5'), 1);
  assert.equal(ruleReward(boxed, 'so 0.5', '0.5'), 0);

  const byRegex = DataRewardConfigSchema.parse({ kind: 'exact', extract: 'regex', pattern: 'Answer:\\s*(.+)' });
  assert.equal(ruleReward(byRegex, 'thinking...\nAnswer: Blue', 'blue'), 1);

  const regexKind = DataRewardConfigSchema.parse({ kind: 'regex' });
  assert.equal(ruleReward(regexKind, 'colour', 'colou?r'), 1);
  assert.equal(ruleReward(regexKind, 'colours', 'colou?r'), 0);

  const formatted = DataRewardConfigSchema.parse({ kind: 'numeric', format_pattern: '<think>.*</think>\\s*\\d+', format_weight: 0.2 });
  assert.equal(ruleReward(formatted, '<think>3+4\n=7</think> 7<|im_end|>', '7', stops), 1);
  assert.ok(Math.abs(ruleReward(formatted, '<think>3+4</think> 8', '7') - 0.2) < 1e-12);
  assert.ok(Math.abs(ruleReward(formatted, 'it is 7', '7') - 0.8) < 1e-12);
  assert.equal(ruleReward(formatted, 'nope', '7'), 0);
});

test('DataRewardConfigSchema: kind-dependent defaults, and errors that say how to fix', () => {
  assert.deepEqual(DataRewardConfigSchema.parse({}), { kind: 'exact', extract: 'none' });
  assert.deepEqual(DataRewardConfigSchema.parse({ kind: 'numeric' }), { kind: 'numeric', extract: 'last_number', tolerance: 1e-6 });
  const f = DataRewardConfigSchema.parse({ kind: 'numeric', format_pattern: '.*' });
  assert.equal(f.format_weight, 0.1);
  // the output parses to itself
  assert.deepEqual(DataRewardConfigSchema.parse(f), f);
  const fails = (input: unknown, re: RegExp) => {
    const r = DataRewardConfigSchema.safeParse(input);
    assert.ok(!r.success, JSON.stringify(input));
    assert.match(r.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; '), re);
  };
  fails({ kind: 'exact', tolerance: 0.1 }, /tolerance: applies only to kind "numeric"/);
  fails({ extract: 'regex' }, /pattern: is required with extract "regex"/);
  fails({ pattern: 'x' }, /pattern: is used only with extract "regex"/);
  fails({ format_weight: 0.5 }, /format_weight: needs format_pattern/);
  fails({ extract: 'regex', pattern: '(' }, /pattern: is not a valid regular expression/);
  fails({ kind: 'fuzzy' }, /kind/);
  fails({ tolerence: 1 }, /tolerence/);
});
