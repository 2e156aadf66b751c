// What an endpoint model name resolves to (ResolvedModel) and the error for a name that is not
// served (ModelNotFoundError): the contract between a model resolver (rollout/policy-engine.ts)
// and the HTTP endpoint that asks it (serving/openai-server.ts answers ModelNotFoundError as a 404).
import type { GenerationEngine } from '../engines/rollout';
import type { Tokenizer } from '../engines/tokenizers/tokenizer';
import type { MediaPrompts } from './media-prompts';

/** What a model name resolves to. */
export interface ResolvedModel {
  engine: GenerationEngine;
  tokenizer: Tokenizer;
  /** The policy version the engine holds for this name. */
  policyVersion: number;
  /** The name to report in responses (e.g. "run@7" for "run"); default the requested name. */
  name?: string;
  /**
   * Processes the media of requests for this engine's encoders (and, with a media store, stores
   * them, e.g. the run's, so sessions' samples can reference them); default the engine's in-memory
   * mediaPromptsOf(engine).
   */
  media?: MediaPrompts;
}

/** A model name the resolver does not serve; `detail` says what it does serve or why not. */
export class ModelNotFoundError extends Error {
  override readonly name = 'ModelNotFoundError';
  constructor(
    readonly model: string,
    readonly detail?: string,
  ) {
    super(`The model \`${model}\` does not exist${detail ? `: ${detail}` : ''}`);
  }
}
