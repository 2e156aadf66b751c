// A whole multi-turn task in one file, for the tutorial in docs/environments.md.
//
// parity: the environment shows a digit; the policy answers "e" (even) or "o" (odd), then eos; the
// environment scores the answer (+0.25 when right) and shows the next digit. Four digits per episode.
//
// Train on it:  relax train --config examples/parity.json   (or --config '{"task": "examples/envs/parity.js", ...}', then key=value overrides such as train.steps=10)
// (module paths resolve against the workers' working directory; an absolute path always works).
'use strict';

const DIGITS_PER_EPISODE = 4;

// Prompts are plain { text, answer } objects; here the "answer" carries the episode's digits.
function episode(random) {
  let digits = '';
  for (let i = 0; i < DIGITS_PER_EPISODE; i++) digits += String(Math.floor(random() * 10));
  return { text: digits[0], answer: digits };
}

// A small seeded generator, so the same seed always gives the same prompts (Relax requires it).
function seeded(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

class ParityEnv {
  constructor({ seed }) {
    this.seed = seed; // available for environments that randomize; this one is deterministic
  }

  reset(prompt) {
    this.digits = prompt.answer;
    this.index = 0;
    this.correct = 0;
    return this.digits[0]; // the first observation: what the policy sees first
  }

  step(response) {
    // `response` is the policy's turn, special tokens kept: e.g. "e<eos>".
    const said = response.charAt(0);
    const odd = Number(this.digits[this.index]) % 2 === 1;
    const right = (said === 'o' && odd) || (said === 'e' && !odd);
    if (right) this.correct += 1;
    this.index += 1;
    const done = this.index === this.digits.length;
    return {
      observation: done ? '' : this.digits[this.index],
      reward: right ? 0.25 : 0,
      terminated: done,
      truncated: false,
      // Numeric info of the last step becomes evaluation metrics (eval_success, eval_correct).
      info: { success: done && this.correct === this.digits.length ? 1 : 0, correct: this.correct },
    };
  }
}

module.exports = {
  name: 'parity',
  alphabet: '0123456789eo',
  trainPrompts(seed, n) {
    const random = seeded(seed);
    return Array.from({ length: n }, () => episode(random));
  },
  heldOut() {
    const random = seeded(12345);
    return Array.from({ length: 100 }, () => episode(random));
  },
  environment: ParityEnv,
  maxTurns: DIGITS_PER_EPISODE,
  maxTurnTokens: 2,
};
