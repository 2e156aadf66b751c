// What a task gives the RL loop: a tokenizer, prompts to train on, a fixed held-out set to measure
// on, and a reward. New tasks implement this interface and register in ./registry.
import type { AudioConfig, VisionConfig } from '../engines/model';
import type { MediaFormat } from '../engines/media/sources';
import type { Tokenizer } from '../engines/tokenizers/tokenizer';
import type { InteractionSpec } from './interaction';

/** A medium of a prompt or an observation: the n-th one fills the text's n-th placeholder. */
export interface PromptMedium {
  kind: 'image' | 'audio';
  format: MediaFormat;
  /** The file's bytes (PNG / JPEG / WAV). */
  bytes: Uint8Array;
}

/** The encoders a media task's tiny policy gets unless the run config's model section says otherwise. */
export interface TaskEncoders {
  vision?: Omit<VisionConfig, 'tokenId'>;
  audio?: Omit<AudioConfig, 'tokenId'>;
}

export interface TaskPrompt {
  /** What the policy is conditioned on, e.g. "17+25=". */
  text: string;
  /** The reference answer the reward compares with, e.g. "42" (task-defined; without eos). */
  answer: string;
  /** What the supervised warm start trains the policy to write, when not `answer` (a worked solution ending in it). */
  demonstration?: string;
  /** Images and audio clips, one per `<image>` / `<audio>` placeholder of `text`, in order. */
  media?: PromptMedium[];
}

export interface Task {
  readonly name: string;
  tokenizer(): Tokenizer;
  /** n prompts drawn with `seed`: the same (seed, n) always gives the same list. */
  trainPrompts(seed: number, n: number): TaskPrompt[];
  /**
   * Prompts for the supervised warm start, when they should be drawn differently from trainPrompts
   * (e.g. balanced over the prompt's layouts, so RL starts from a policy that is sometimes right on
   * every kind of prompt). Same contract as trainPrompts; defaults to it.
   */
  warmStartPrompts?(seed: number, n: number): TaskPrompt[];
  /** The fixed evaluation set; identical on every call and every machine. */
  heldOut(): TaskPrompt[];
  /**
   * Reward of one response. `responseText` is tokenizer().decode(responseIds) with special tokens
   * KEPT (skipSpecial false), so the task can see whether and where the response emitted eos.
   */
  reward(prompt: TaskPrompt, responseText: string): number;
  /**
   * Multi-turn tasks: the environment the policy interacts with. Rewards then come from the
   * environment's steps (and `reward` scores a whole transcript, e.g. for a custom reward module).
   */
  interaction?: InteractionSpec;
  /**
   * Media tasks: the encoders the tiny policy gets (placeholder ids come from the tokenizer's
   * `<image>` / `<audio>` tokens), and the context length used when model.context_length is unset.
   */
  encoders?: TaskEncoders;
  contextLength?: number;
}

export function checkPromptCount(seed: number, n: number): void {
  if (!Number.isInteger(seed)) throw new Error(`seed is ${seed}: pass an integer seed`);
  if (!Number.isInteger(n) || n < 0) throw new Error(`prompt count is ${n}: pass a non-negative integer`);
}
