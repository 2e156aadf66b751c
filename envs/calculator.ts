// calculator: multi-turn tool use. The prompt "37*64=" asks for a product of two two-digit numbers,
// which a tiny policy cannot compute reliably by itself; it can call a calculator by writing
// "[37*64]" (the turn ends at "]"), the environment answers "2368;", and the policy then writes its
// final answer "2368" and eos. Reward 1 for a correct final answer, -0.1 for each malformed tool call.
import { CharTokenizer } from '../engines/tokenizers/char';
import type { DemonstrationSegment, Environment, StepResult } from './interaction';
import { seededRandom, randomInt } from '../config/seeds';
import { checkPromptCount, type Task, type TaskPrompt } from './task';

const ALPHABET = '0123456789*=[];?';
const EOS_TEXT = '<eos>';
export const CALCULATOR_FORMAT_PENALTY = 0.1;
const HELD_OUT_SEED = 0xca1c;

export function calculatorTokenizer(): CharTokenizer {
  return new CharTokenizer(ALPHABET);
}

export function calculatorPrompt(a: number, b: number): TaskPrompt {
  return { text: `${a}*${b}=`, answer: String(a * b) };
}

function prompts(seed: number, n: number): TaskPrompt[] {
  checkPromptCount(seed, n);
  const rng = seededRandom(seed);
  return Array.from({ length: n }, () => calculatorPrompt(randomInt(rng, 10, 99), randomInt(rng, 10, 99)));
}

/** The calculator tool: "a*b" -> the product, for operands of 1-3 digits; undefined when malformed. */
export function calculate(expression: string): number | undefined {
  const m = /^(\d{1,3})\*(\d{1,3})$/.exec(expression);
  return m ? Number(m[1]) * Number(m[2]) : undefined;
}

export class CalculatorEnv implements Environment {
  private prompt: TaskPrompt | undefined;
  private toolCalls = 0;
  private malformed = 0;

  reset(prompt: TaskPrompt): string {
    this.prompt = prompt;
    this.toolCalls = 0;
    this.malformed = 0;
    return prompt.text;
  }

  private info(success: number): Record<string, number> {
    return { success, tool_calls: this.toolCalls, tool_use: this.toolCalls > 0 ? 1 : 0, malformed_calls: this.malformed };
  }

  step(response: string): StepResult {
    if (!this.prompt) throw new Error('step() before reset()');
    if (response.endsWith(EOS_TEXT)) {
      const answer = response.slice(0, -EOS_TEXT.length);
      const success = answer === this.prompt.answer ? 1 : 0;
      return { observation: '', reward: success, terminated: true, truncated: false, info: this.info(success) };
    }
    if (response.startsWith('[') && response.endsWith(']')) {
      const value = calculate(response.slice(1, -1));
      if (value !== undefined) {
        this.toolCalls += 1;
        return { observation: `${value};`, reward: 0, terminated: false, truncated: false, info: this.info(0) };
      }
    }
    // A turn that is neither a final answer nor a well-formed call: penalized; it ends the episode if
    // it never closed (no "]" and no eos within the turn's token budget).
    this.malformed += 1;
    const closed = response.endsWith(']');
    return { observation: closed ? '?;' : '', reward: -CALCULATOR_FORMAT_PENALTY, terminated: false, truncated: !closed, info: this.info(0) };
  }
}

/** Demonstrations for the warm start: a tool-using episode with probability toolShare, else a direct answer. */
export function calculatorDemonstration(toolShare: number) {
  return (prompt: TaskPrompt, random: () => number): DemonstrationSegment[] => {
    const [a, b] = prompt.text.slice(0, -1).split('*');
    const segments: DemonstrationSegment[] = [{ text: prompt.text, policy: false }];
    if (random() < toolShare) segments.push({ text: `[${a}*${b}]`, policy: true }, { text: `${prompt.answer};`, policy: false });
    segments.push({ text: prompt.answer, policy: true, eos: true });
    return segments;
  };
}

export const calculatorTask: Task = {
  name: 'calculator',
  tokenizer: calculatorTokenizer,
  trainPrompts: prompts,
  heldOut: () => prompts(HELD_OUT_SEED, 200),
  // A whole transcript: correct when its last turn is the answer and eos.
  reward: (prompt, transcript) => (transcript.endsWith(`${prompt.answer}${EOS_TEXT}`) ? 1 : 0),
  interaction: {
    createEnv: () => new CalculatorEnv(),
    maxTurns: 3,
    maxTurnTokens: 8,
    turnStops: [']'],
    // Few demonstrations call the tool: RL has to discover that calling it pays.
    demonstrate: calculatorDemonstration(0.2),
  },
};
