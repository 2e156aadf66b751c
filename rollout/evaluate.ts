// Held-out evaluation: greedy decoding on the rollout engine, scored by the task's reward; for
// multi-turn tasks, greedy episodes against the task's environment. Sampled evaluation: k samples
// per prompt at a temperature, scored as pass@1, pass@k, maj@k and mean@k (engines/rl/pass-at-k.ts).
import type { GeneratedSample, GenerationEngine } from '../engines/rollout';
import { majAtK, meanAtK, passAtK } from '../engines/rl/pass-at-k';
import { stopTokens } from '../engines/tokenizers/tokenizer';
import type { Task, TaskPrompt } from '../envs/task';
import { scoreGroup, type LoadedReward } from '../envs/user-modules';
import { evaluateEpisodes } from './episodes';
import { mediaPromptsOf } from './media-prompts';
import { promptTokens } from './producers';

export interface EvalResult {
  accuracy: number;
  /** Decoded responses (specials kept; whole transcripts for multi-turn tasks), in prompt order. */
  responses: string[];
  /** Multi-turn tasks: means of the environments' numeric info (e.g. tool_use), reward and turns. */
  metrics?: Record<string, number>;
}

/** Per environment call in evaluation episodes. */
const EVAL_ENV_TIMEOUT_MS = 10_000;

export async function evaluateGreedy(engine: GenerationEngine, task: Task, prompts: readonly TaskPrompt[], maxNewTokens: number): Promise<EvalResult> {
  if (task.interaction) {
    const r = await evaluateEpisodes(engine, task, prompts, { timeoutMs: EVAL_ENV_TIMEOUT_MS });
    return { accuracy: r.accuracy, responses: r.episodes.map((e) => e.text), metrics: r.metrics };
  }
  const tokenizer = task.tokenizer();
  const params = { maxNewTokens, greedy: true, stopTokens: stopTokens(tokenizer) };
  let samples;
  if (prompts.some((p) => p.media?.length)) {
    const media = mediaPromptsOf(engine);
    const inputs = await Promise.all(prompts.map((p) => media.prompt(tokenizer, p)));
    samples = await engine.generate(inputs.map((i) => i.tokens), params, inputs.map((i) => i.media));
  } else samples = await engine.generate(prompts.map((p) => promptTokens(tokenizer, p)), params);
  const responses = samples.map((s) => tokenizer.decode(s.tokens));
  const correct = responses.reduce((n, r, i) => n + task.reward(prompts[i], r), 0);
  return { accuracy: correct / prompts.length, responses };
}

/** An evaluation this task or prompt set cannot have (a retry cannot help). */
export class SampledEvalError extends Error {
  override readonly name = 'SampledEvalError';
}

export interface SampledEvalOptions {
  k: number;
  temperature: number;
  maxNewTokens: number;
  topP?: number;
  seed?: number;
  /** The run's reward.module (loadRewardFunction); absent: the task's reward. */
  reward?: LoadedReward;
  /** Per reward call (reward.timeout_ms). */
  rewardTimeoutMs: number;
}

/** Dataset means over the prompts, each prompt scored on its own k samples. */
export interface SampledEvalResult {
  prompts: number;
  pass_at_1: number;
  pass_at_k: number;
  maj_at_k: number;
  mean_at_k: number;
}

/**
 * A sample's answer for maj@k: its decoded tokens up to (not including) the first stop token,
 * whitespace-trimmed. Two samples vote together when they say the same thing before they stop.
 */
export function sampleAnswer(sample: GeneratedSample, stop: ReadonlySet<number>, decode: (tokens: number[]) => string): string {
  const end = sample.tokens.findIndex((t) => stop.has(t));
  return decode(end < 0 ? sample.tokens : sample.tokens.slice(0, end)).trim();
}

/** One prompt's scores from its samples' rewards and answers; a sample is correct when its reward is >= 1 (the task's full reward). */
export function promptScores(rewards: readonly number[], answers: readonly string[], k: number): Omit<SampledEvalResult, 'prompts'> {
  const correct = rewards.map((r) => r >= 1);
  const c = correct.filter(Boolean).length;
  return { pass_at_1: passAtK(rewards.length, c, 1), pass_at_k: passAtK(rewards.length, c, k), maj_at_k: majAtK(answers, correct), mean_at_k: meanAtK(rewards) };
}

/**
 * k samples of every prompt at `temperature` (one generate call; sample i draws from its own seeded
 * stream), each scored by the run's reward (reward.module, else the task's). Single-turn tasks only.
 */
export async function evaluateSampled(engine: GenerationEngine, task: Task, prompts: readonly TaskPrompt[], o: SampledEvalOptions): Promise<SampledEvalResult> {
  if (task.interaction) throw new SampledEvalError(`task ${task.name} is multi-turn: sampled evaluation (pass@k) covers single-turn tasks; use the run's greedy eval_accuracy`);
  if (prompts.length === 0) throw new SampledEvalError('no prompts to evaluate: the dataset (or the held-out set) is empty');
  const tokenizer = task.tokenizer();
  const stop = stopTokens(tokenizer);
  const params = { maxNewTokens: o.maxNewTokens, temperature: o.temperature, stopTokens: stop, ...(o.topP !== undefined ? { topP: o.topP } : {}), seed: o.seed ?? 0 };
  const repeated = prompts.flatMap((p) => Array.from({ length: o.k }, () => p));
  let samples: GeneratedSample[];
  if (prompts.some((p) => p.media?.length)) {
    const media = mediaPromptsOf(engine);
    const inputs = await Promise.all(repeated.map((p) => media.prompt(tokenizer, p)));
    samples = await engine.generate(inputs.map((i) => i.tokens), params, inputs.map((i) => i.media));
  } else samples = await engine.generate(repeated.map((p) => promptTokens(tokenizer, p)), params);
  const stopSet = new Set(stop);
  const sums = { pass_at_1: 0, pass_at_k: 0, maj_at_k: 0, mean_at_k: 0 };
  // The run's own reward, as its rollouts are scored; a sample whose reward call fails scores 0.
  const scored = await Promise.all(
    prompts.map((prompt, i) => scoreGroup({ task, reward: o.reward, prompt, responses: samples.slice(i * o.k, (i + 1) * o.k).map((s) => tokenizer.decode(s.tokens)), timeoutMs: o.rewardTimeoutMs })),
  );
  scored.forEach((group, i) => {
    const answers = samples.slice(i * o.k, (i + 1) * o.k).map((s) => sampleAnswer(s, stopSet, (t) => tokenizer.decode(t)));
    const scores = promptScores(group.map((g) => g.reward ?? 0), answers, o.k);
    for (const key of Object.keys(sums) as Array<keyof typeof sums>) sums[key] += scores[key];
  });
  const mean = (v: number) => v / prompts.length;
  return { prompts: prompts.length, pass_at_1: mean(sums.pass_at_1), pass_at_k: mean(sums.pass_at_k), maj_at_k: mean(sums.maj_at_k), mean_at_k: mean(sums.mean_at_k) };
}
