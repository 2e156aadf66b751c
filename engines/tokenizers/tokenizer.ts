// The one interface the trainer, the rollout engine and the tasks see, whatever the vocabulary.
export interface Tokenizer {
  readonly vocabSize: number;
  readonly padId: number;
  readonly bosId: number;
  readonly eosId: number;
  /** Text to ids, without bos/eos: the caller adds them where the sequence layout needs them. */
  encode(text: string): number[];
  /** Ids to text; skipSpecial drops pad/bos/eos (and the tokenizer's other special tokens). */
  decode(ids: readonly number[], opts?: { skipSpecial?: boolean }): string;
}
