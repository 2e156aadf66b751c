// add2: two-number addition, "a+b=" -> the digits of a + b, then eos. Small enough for a tiny
// policy trained from scratch to learn within minutes, exact enough that reward is 0/1.
import { CharTokenizer } from '../engines/tokenizers/char';
import { seededRandom, randomInt } from '../config/seeds';
import { checkPromptCount, type Task, type TaskPrompt } from './task';

export const ADD2_MAX_OPERAND = 99;
export const ADD2_HELD_OUT_SIZE = 500;
/** Fixed forever: changing it changes every reported held-out accuracy. */
const HELD_OUT_SEED = 0xadd2;

const ADD2_ALPHABET = '0123456789+=';

export function add2Tokenizer(): CharTokenizer {
  return new CharTokenizer(ADD2_ALPHABET);
}

/** How eos reads in a response decoded with specials kept. */
const EOS_TEXT = ((tokenizer) => tokenizer.decode([tokenizer.eosId]))(add2Tokenizer());

export function add2Prompt(a: number, b: number): TaskPrompt {
  for (const [name, v] of [['a', a], ['b', b]] as const) {
    if (!Number.isInteger(v) || v < 0 || v > ADD2_MAX_OPERAND) {
      throw new Error(`add2 operand ${name} is ${v}: operands are integers in [0, ${ADD2_MAX_OPERAND}]`);
    }
  }
  return { text: `${a}+${b}=`, answer: String(a + b) };
}

/** n prompts with a, b uniform in [0, 99], drawn from seededRandom(seed). */
export function add2TrainPrompts(seed: number, n: number): TaskPrompt[] {
  checkPromptCount(seed, n);
  const rng = seededRandom(seed);
  return Array.from({ length: n }, () => add2Prompt(randomInt(rng, 0, ADD2_MAX_OPERAND), randomInt(rng, 0, ADD2_MAX_OPERAND)));
}

/**
 * n prompts for the SFT warm start, balanced by operand length: each operand is one-digit with
 * probability 1/2 (uniform operands make it 1/10). With learned absolute positions, a one-digit
 * operand moves every later digit to another position; a warm start trained on uniform operands
 * barely knows those layouts, GRPO then sees all-wrong groups there (no signal) and plateaus near
 * 94%. Balanced, the warm start is sometimes right on every layout and GRPO passes 95%
 * (docs/results.md).
 */
export function add2WarmStartPrompts(seed: number, n: number): TaskPrompt[] {
  checkPromptCount(seed, n);
  const rng = seededRandom(seed);
  const operand = () => (rng() < 0.5 ? randomInt(rng, 0, 9) : randomInt(rng, 10, ADD2_MAX_OPERAND));
  return Array.from({ length: n }, () => add2Prompt(operand(), operand()));
}

/** 500 distinct (a, b) pairs from a fixed seed. Not excluded from training: a uniform sample of the task. */
export function add2HeldOut(): TaskPrompt[] {
  const rng = seededRandom(HELD_OUT_SEED);
  const seen = new Set<string>();
  const prompts: TaskPrompt[] = [];
  while (prompts.length < ADD2_HELD_OUT_SIZE) {
    const p = add2Prompt(randomInt(rng, 0, ADD2_MAX_OPERAND), randomInt(rng, 0, ADD2_MAX_OPERAND));
    if (seen.has(p.text)) continue;
    seen.add(p.text);
    prompts.push(p);
  }
  return prompts;
}

/**
 * 1 when the response is exactly the answer's digits followed by eos, else 0. `responseText` is
 * decoded with specials kept; whatever follows the first eos is ignored (generation stops there).
 * A response that never emits eos scores 0: the policy must learn to stop.
 */
export function add2Reward(prompt: TaskPrompt, responseText: string): number {
  const end = responseText.indexOf(EOS_TEXT);
  if (end < 0) return 0;
  return responseText.slice(0, end) === prompt.answer ? 1 : 0;
}

/** Fraction of predictions (decoded responses, specials kept) rewarded 1 for their prompts. */
export function accuracy(predictions: readonly string[], prompts: readonly TaskPrompt[]): number {
  if (predictions.length !== prompts.length) {
    throw new Error(`${predictions.length} predictions for ${prompts.length} prompts: pass one prediction per prompt, in order`);
  }
  if (prompts.length === 0) throw new Error('accuracy of zero prompts is undefined: pass at least one prompt');
  let correct = 0;
  for (let i = 0; i < prompts.length; i++) correct += add2Reward(prompts[i], predictions[i]);
  return correct / prompts.length;
}

export const add2Task: Task = {
  name: 'add2',
  tokenizer: add2Tokenizer,
  trainPrompts: add2TrainPrompts,
  warmStartPrompts: add2WarmStartPrompts,
  heldOut: add2HeldOut,
  reward: add2Reward,
};
