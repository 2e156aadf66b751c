// The one interface the trainer, the rollout engine and the tasks see, whatever the vocabulary.
export interface Tokenizer {
  readonly vocabSize: number;
  readonly padId: number;
  readonly bosId: number;
  readonly eosId: number;
  /** Whether sequences start with bosId (default true); Hugging Face tokenizers say so in tokenizer_config.json add_bos_token. */
  readonly addBos?: boolean;
  /** Every token that ends a response (default [eosId]); a model's generation_config.json may list several. */
  readonly stopIds?: readonly number[];
  /** Text to ids, without bos/eos: the caller adds them where the sequence layout needs them. */
  encode(text: string): number[];
  /** Ids to text; skipSpecial drops pad/bos/eos (and the tokenizer's other special tokens). */
  decode(ids: readonly number[], opts?: { skipSpecial?: boolean }): string;
}

/** A prompt's ids as the model expects them: bos first, unless the tokenizer adds none. */
export function withBos(tokenizer: Tokenizer, ids: number[]): number[] {
  return tokenizer.addBos === false ? ids : [tokenizer.bosId, ...ids];
}

/** The tokens that end a response: the tokenizer's stop ids, else its eos. */
export function stopTokens(tokenizer: Tokenizer): number[] {
  return tokenizer.stopIds ? [...tokenizer.stopIds] : [tokenizer.eosId];
}

/** The id of `text` when the tokenizer encodes it as exactly one token (a special such as "<image>"), else undefined. */
export function singleTokenId(tokenizer: Tokenizer, text: string): number | undefined {
  try {
    const ids = tokenizer.encode(text);
    return ids.length === 1 ? ids[0] : undefined;
  } catch {
    return undefined; // a text outside the vocabulary has no token
  }
}
