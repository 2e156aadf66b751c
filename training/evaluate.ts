// Held-out evaluation: greedy decoding on the rollout engine, scored by the task's reward.
import type { RolloutEngine } from '../engines/rollout';
import type { Task, TaskPrompt } from '../envs/task';
import { promptTokens } from './policy';

export interface EvalResult {
  accuracy: number;
  /** Decoded responses (specials kept), in prompt order. */
  responses: string[];
}

export async function evaluateGreedy(engine: RolloutEngine, task: Task, prompts: readonly TaskPrompt[], maxNewTokens: number): Promise<EvalResult> {
  const tokenizer = task.tokenizer();
  const samples = await engine.generate(
    prompts.map((p) => promptTokens(tokenizer, p)),
    { maxNewTokens, greedy: true, stopTokens: [tokenizer.eosId] },
  );
  const responses = samples.map((s) => tokenizer.decode(s.tokens));
  const correct = responses.reduce((n, r, i) => n + task.reward(prompts[i], r), 0);
  return { accuracy: correct / prompts.length, responses };
}
