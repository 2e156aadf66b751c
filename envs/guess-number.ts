// guess-the-number: a secret digit 0-9; each turn the policy guesses one digit (then eos), the
// environment answers "h" (the secret is higher), "l" (lower) or ends the episode when found.
// Reward for finding it, less for every extra turn: 1 - 0.15 per extra turn (at least 0.1).
// Binary search needs at most 4 turns; a policy guessing at random finds it about half the time in 6.
import { CharTokenizer } from '../engines/tokenizers/char';
import type { Environment, StepResult } from './interaction';
import { seededRandom, randomInt } from '../config/seeds';
import { checkPromptCount, type Task, type TaskPrompt } from './task';

const ALPHABET = '0123456789?hl';
export const GUESS_MAX_TURNS = 6;

export function guessReward(turns: number): number {
  return Math.max(0.1, 1 - 0.15 * (turns - 1));
}

export class GuessNumberEnv implements Environment {
  private secret = 0;
  private turns = 0;
  private invalid = 0;

  reset(prompt: TaskPrompt): string {
    this.secret = Number(prompt.answer);
    if (!Number.isInteger(this.secret) || this.secret < 0 || this.secret > 9) throw new Error(`guess-number secret must be a digit, got ${JSON.stringify(prompt.answer)}`);
    this.turns = 0;
    this.invalid = 0;
    return prompt.text;
  }

  step(response: string): StepResult {
    this.turns += 1;
    const digit = /\d/.exec(response);
    const info = (success: number) => ({ success, turns: this.turns, invalid_guesses: this.invalid });
    if (!digit) {
      this.invalid += 1;
      return { observation: '?', reward: -0.05, terminated: false, truncated: false, info: info(0) };
    }
    const guess = Number(digit[0]);
    if (guess === this.secret) return { observation: '', reward: guessReward(this.turns), terminated: true, truncated: false, info: info(1) };
    return { observation: this.secret > guess ? 'h' : 'l', reward: 0, terminated: false, truncated: false, info: info(0) };
  }
}

function prompts(seed: number, n: number): TaskPrompt[] {
  checkPromptCount(seed, n);
  const rng = seededRandom(seed);
  return Array.from({ length: n }, () => ({ text: '?', answer: String(randomInt(rng, 0, 9)) }));
}

export const guessNumberTask: Task = {
  name: 'guess-number',
  tokenizer: () => new CharTokenizer(ALPHABET),
  trainPrompts: prompts,
  // Every secret, 10 times: the environment is deterministic, so this measures the policy exactly.
  heldOut: () => Array.from({ length: 100 }, (_, i) => ({ text: '?', answer: String(i % 10) })),
  reward: () => {
    throw new Error('guess-number is rewarded by its environment turn by turn, not by a transcript reward');
  },
  interaction: { createEnv: () => new GuessNumberEnv(), maxTurns: GUESS_MAX_TURNS, maxTurnTokens: 2, turnStops: [] },
};
