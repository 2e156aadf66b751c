// gridworld: a 4x4 grid without walls inside. The first observation "31:00;" names the goal (x=3,
// y=1) and the start (0,0); each turn the policy writes a move (u, d, l or r, then eos), the
// environment answers the new position "10;". Reaching the goal ends the episode with reward 1;
// every move costs 0.02; a turn without a move costs 0.05 and changes nothing.
import { CharTokenizer } from '../engines/tokenizers/char';
import type { Environment, StepResult } from './interaction';
import { seededRandom, randomInt } from '../config/seeds';
import { checkPromptCount, type Task, type TaskPrompt } from './task';

const ALPHABET = '0123456789udlr:;?';
export const GRID_SIZE = 4;
const MOVES: Record<string, [number, number]> = { u: [0, -1], d: [0, 1], l: [-1, 0], r: [1, 0] };
const HELD_OUT_SEED = 0x9a1d;

export class GridworldEnv implements Environment {
  private x = 0;
  private y = 0;
  private gx = 0;
  private gy = 0;
  private moves = 0;

  /** The prompt's text is "gxgy:xy;" (goal then start). */
  reset(prompt: TaskPrompt): string {
    const m = /^(\d)(\d):(\d)(\d);$/.exec(prompt.text);
    if (!m) throw new Error(`gridworld prompt ${JSON.stringify(prompt.text)} is not "gxgy:xy;"`);
    [this.gx, this.gy, this.x, this.y] = m.slice(1).map(Number);
    this.moves = 0;
    return prompt.text;
  }

  step(response: string): StepResult {
    const move = /[udlr]/.exec(response);
    const info = (success: number) => ({ success, moves: this.moves, distance: Math.abs(this.gx - this.x) + Math.abs(this.gy - this.y) });
    if (!move) return { observation: '?;', reward: -0.05, terminated: false, truncated: false, info: info(0) };
    const [dx, dy] = MOVES[move[0]];
    this.x = Math.min(GRID_SIZE - 1, Math.max(0, this.x + dx));
    this.y = Math.min(GRID_SIZE - 1, Math.max(0, this.y + dy));
    this.moves += 1;
    if (this.x === this.gx && this.y === this.gy) return { observation: '', reward: 1, terminated: true, truncated: false, info: info(1) };
    return { observation: `${this.x}${this.y};`, reward: -0.02, terminated: false, truncated: false, info: info(0) };
  }
}

export function gridworldPrompt(goal: [number, number], start: [number, number]): TaskPrompt {
  return { text: `${goal[0]}${goal[1]}:${start[0]}${start[1]};`, answer: `${goal[0]}${goal[1]}` };
}

function prompts(seed: number, n: number): TaskPrompt[] {
  checkPromptCount(seed, n);
  const rng = seededRandom(seed);
  const cell = (): [number, number] => [randomInt(rng, 0, GRID_SIZE - 1), randomInt(rng, 0, GRID_SIZE - 1)];
  return Array.from({ length: n }, () => {
    const start = cell();
    let goal = cell();
    while (goal[0] === start[0] && goal[1] === start[1]) goal = cell();
    return gridworldPrompt(goal, start);
  });
}

export const gridworldTask: Task = {
  name: 'gridworld',
  tokenizer: () => new CharTokenizer(ALPHABET),
  trainPrompts: prompts,
  heldOut: () => prompts(HELD_OUT_SEED, 100),
  reward: () => {
    throw new Error('gridworld is rewarded by its environment turn by turn, not by a transcript reward');
  },
  interaction: { createEnv: () => new GridworldEnv(), maxTurns: 8, maxTurnTokens: 2, turnStops: [] },
};
