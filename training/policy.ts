// From a run's config (snake_case JSON) to the engines' options, in one place.
import type { RunConfig } from '../config/run-config';
import type { ModelConfig } from '../engines/model';
import type { Tokenizer } from '../engines/tokenizers/tokenizer';
import type { TaskPrompt } from '../envs/task';

export function policyModelConfig(model: RunConfig['model'], vocabSize: number): ModelConfig {
  return {
    vocabSize,
    dModel: model.d_model,
    nLayers: model.n_layers,
    nHeads: model.n_heads,
    dFF: model.d_ff,
    contextLength: model.context_length,
  };
}

/** The token ids a prompt is conditioned on: bos, then the prompt text. */
export function promptTokens(tokenizer: Tokenizer, prompt: TaskPrompt): number[] {
  return [tokenizer.bosId, ...tokenizer.encode(prompt.text)];
}
