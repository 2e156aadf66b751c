export type { Tokenizer } from './tokenizer';
export { CharTokenizer, CHAR_PAD_ID, CHAR_BOS_ID, CHAR_EOS_ID } from './char';
export { HfTokenizer, type HfSpecialTokens } from './hf';
