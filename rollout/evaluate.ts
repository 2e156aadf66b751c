// Held-out evaluation: greedy decoding on the rollout engine, scored by the task's reward; for
// multi-turn tasks, greedy episodes against the task's environment.
import type { GenerationEngine } from '../engines/rollout';
import { stopTokens } from '../engines/tokenizers/tokenizer';
import type { Task, TaskPrompt } from '../envs/task';
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
