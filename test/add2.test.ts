// The add2 task: prompts, reward, held-out set and the seeded generator its prompt sets come from.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { accuracy, add2HeldOut, add2Prompt, add2Reward, add2Task, add2Tokenizer, add2TrainPrompts, add2WarmStartPrompts } from '../envs/add2';
import { seededRandom } from '../config/seeds';
import { getTask, taskNames } from '../envs/registry';

const P = add2Prompt(17, 25);

test('add2Prompt: "a+b=" and the digits of the sum', () => {
  assert.deepEqual(P, { text: '17+25=', answer: '42' });
  assert.deepEqual(add2Prompt(0, 0), { text: '0+0=', answer: '0' });
  assert.deepEqual(add2Prompt(99, 99), { text: '99+99=', answer: '198' });
  assert.throws(() => add2Prompt(100, 1), /operand a is 100/);
});

test('add2Reward: exact digits then eos is 1, anything else 0', () => {
  assert.equal(add2Reward(P, '42<eos>'), 1);
  // whatever follows the first eos is ignored: generation stopped there
  assert.equal(add2Reward(P, '42<eos><pad><pad>'), 1);
  assert.equal(add2Reward(P, '43<eos>'), 0);
  // extra characters before eos
  assert.equal(add2Reward(P, '421<eos>'), 0);
  assert.equal(add2Reward(P, '042<eos>'), 0);
  assert.equal(add2Reward(P, '42+<eos>'), 0);
  assert.equal(add2Reward(P, '4<eos>2<eos>'), 0);
  // never stopped
  assert.equal(add2Reward(P, '42'), 0);
  assert.equal(add2Reward(P, '<eos>'), 0);
  assert.equal(add2Reward(P, ''), 0);
});

test('add2Reward on a response decoded from token ids with specials kept', () => {
  const tok = add2Tokenizer();
  assert.equal(tok.vocabSize, 15);
  assert.deepEqual(tok.encode('17+25='), [4, 10, 13, 5, 8, 14]);
  assert.equal(add2Reward(P, tok.decode([...tok.encode('42'), tok.eosId])), 1);
  assert.equal(add2Reward(P, tok.decode([...tok.encode('42'), tok.eosId], { skipSpecial: true })), 0);
});

test('add2HeldOut: 500 distinct, well-formed prompts, the same on every call', () => {
  const heldOut = add2HeldOut();
  assert.equal(heldOut.length, 500);
  assert.equal(new Set(heldOut.map((p) => p.text)).size, 500);
  for (const p of heldOut) {
    const m = /^(\d+)\+(\d+)=$/.exec(p.text);
    assert.ok(m, `malformed prompt ${p.text}`);
    assert.equal(p.answer, String(Number(m[1]) + Number(m[2])));
  }
  assert.deepEqual(add2HeldOut(), heldOut);
  // pinned: a change to the seed or the generator would silently change every reported held-out accuracy
  assert.deepEqual(heldOut.slice(0, 3).map((p) => p.text), ['87+99=', '90+58=', '46+96=']);
});

test('add2TrainPrompts: reproducible per seed, uniform operands over [0, 99]', () => {
  assert.deepEqual(add2TrainPrompts(7, 50), add2TrainPrompts(7, 50));
  assert.notDeepEqual(add2TrainPrompts(7, 50), add2TrainPrompts(8, 50));
  // a prefix of a longer draw: the same stream
  assert.deepEqual(add2TrainPrompts(7, 10), add2TrainPrompts(7, 50).slice(0, 10));
  const operands = add2TrainPrompts(3, 20000).flatMap((p) => p.text.slice(0, -1).split('+').map(Number));
  assert.equal(Math.min(...operands), 0);
  assert.equal(Math.max(...operands), 99);
  // uniform on 0..99: mean 49.5, sd 28.87, standard error over 40,000 draws 0.144; 1.0 is ~7 standard errors
  const mean = operands.reduce((s, x) => s + x, 0) / operands.length;
  assert.ok(Math.abs(mean - 49.5) < 1, `mean operand ${mean}`);
  assert.throws(() => add2TrainPrompts(1.5, 3), /seed is 1.5/);
  assert.throws(() => add2TrainPrompts(1, -1), /prompt count is -1/);
});

test('seededRandom stays in [0, 1) and depends on the seed', () => {
  const a = seededRandom(42);
  const b = seededRandom(42);
  const c = seededRandom(43);
  const xs = Array.from({ length: 1000 }, () => a());
  assert.deepEqual(Array.from({ length: 1000 }, () => b()), xs);
  assert.notEqual(c(), xs[0]);
  assert.ok(xs.every((x) => x >= 0 && x < 1));
});

test('accuracy: fraction of prompts answered exactly', () => {
  const prompts = [add2Prompt(17, 25), add2Prompt(1, 1), add2Prompt(50, 50), add2Prompt(0, 9)];
  assert.equal(accuracy(['42<eos>', '3<eos>', '100<eos>', '9'], prompts), 0.5);
  assert.throws(() => accuracy(['42<eos>'], prompts), /1 predictions for 4 prompts/);
});

test('task registry: add2 by name; an unknown name lists the known tasks', () => {
  assert.equal(getTask('add2'), add2Task);
  assert.ok(taskNames().includes('add2'));
  assert.throws(() => getTask('add3'), /unknown task "add3": known tasks are add2/);
  const task = getTask('add2');
  assert.equal(task.heldOut().length, 500);
  assert.equal(task.reward(task.trainPrompts(1, 1)[0], 'x'), 0);
  assert.equal(task.tokenizer().eosId, 2);
});

test('add2WarmStartPrompts: seeded, valid, one-digit operands about half the time (uniform: a tenth)', () => {
  const prompts = add2WarmStartPrompts(7, 4000);
  assert.deepEqual(add2WarmStartPrompts(7, 4000), prompts);
  assert.notDeepEqual(add2WarmStartPrompts(8, 20), prompts.slice(0, 20));
  const operands = prompts.flatMap((p) => p.text.slice(0, -1).split('+').map(Number));
  for (const p of prompts) {
    const [a, b] = p.text.slice(0, -1).split('+').map(Number);
    assert.deepEqual(p, add2Prompt(a, b));
  }
  const oneDigit = operands.filter((x) => x < 10).length / operands.length;
  assert.ok(oneDigit > 0.45 && oneDigit < 0.55, `one-digit share ${oneDigit}`);
  const uniform = add2TrainPrompts(7, 4000).flatMap((p) => p.text.slice(0, -1).split('+').map(Number));
  assert.ok(uniform.filter((x) => x < 10).length / uniform.length < 0.15);
  assert.equal(add2Task.warmStartPrompts, add2WarmStartPrompts);
});
