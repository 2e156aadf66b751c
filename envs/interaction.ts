// Interaction environments: the policy talks to an environment over several turns (tool calls,
// feedback, moves) and is rewarded per turn and/or at the end. A task with `interaction` set is
// rolled out by rollout/episodes.ts instead of single-turn generation: the policy's tokens are
// trained on (loss mask 1), the environment's observations are context only (loss mask 0, no
// log-probs), and the whole trajectory is one sample in the transfer queue.
import type { PromptMedium, TaskPrompt } from './task';

/** An observation with images or audio: one medium per `<image>` / `<audio>` placeholder of its text, in order. */
export interface Observation {
  text: string;
  media?: PromptMedium[];
}

export interface StepResult {
  /** What the policy sees next (ignored once the episode ends). */
  observation: string;
  /** The images / audio of the observation's placeholders (they stay in the episode's context). */
  media?: PromptMedium[];
  /** Reward for this turn; the sample's reward is the sum over turns. */
  reward: number;
  /** The episode reached an end state (solved, answered, failed for good). */
  terminated: boolean;
  /** The episode was cut short (a limit of the environment's own). */
  truncated: boolean;
  /**
   * Anything to record with the sample. Numeric fields of the LAST step are averaged over episodes
   * by evaluation (e.g. success 0/1 becomes eval_success, tool_calls becomes eval_tool_calls).
   */
  info?: Record<string, unknown>;
}

/** One episode's environment. Methods may be async. */
export interface Environment {
  /**
   * Starts the episode for one prompt; returns the first observation (the policy's prompt text). A
   * string with placeholders takes the prompt's media; return an Observation to give other media.
   */
  reset(prompt: TaskPrompt): string | Observation | Promise<string | Observation>;
  /** The policy's turn, decoded with special tokens kept (a turn that ended on eos ends with it). */
  step(response: string): StepResult | Promise<StepResult>;
  close?(): void | Promise<void>;
}

/** A user environment class, loaded by module path (env.module in the run config). */
export type EnvironmentClass = new (options: { task: string; seed: number }) => Environment;

export interface InteractionSpec {
  /** A fresh environment per episode. */
  createEnv(options: { seed: number }): Environment;
  /** Policy turns per episode at most. */
  maxTurns: number;
  /** New tokens per policy turn at most. */
  maxTurnTokens: number;
  /** Texts (single tokens of the task's tokenizer) that end a policy turn besides eos, e.g. "]" closing a tool call. */
  turnStops: string[];
  /**
   * A demonstration episode for the supervised warm start, from the first observation on:
   * segments with `policy` true are what the policy should write (trained; `eos` closes a turn with
   * the end-of-sequence token), the others what the environment answers (context only).
   */
  demonstrate?(prompt: TaskPrompt, random: () => number): DemonstrationSegment[];
}

export interface DemonstrationSegment {
  text: string;
  policy: boolean;
  /** The media of an environment segment's placeholders (the first observation's come from the prompt). */
  media?: PromptMedium[];
  /** Close this policy turn with eos (a turn ending on a turn stop like "]" has it in `text`). */
  eos?: boolean;
}
