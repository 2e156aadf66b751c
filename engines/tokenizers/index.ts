// The tokenizers a task can use: character-level (CharTokenizer) and Hugging Face tokenizer.json (HfTokenizer), and chat templates (ChatTemplate).
export { withBos, type Tokenizer } from './tokenizer';
export { CharTokenizer, CHAR_PAD_ID, CHAR_BOS_ID, CHAR_EOS_ID } from './char';
export { HfTokenizer, type HfSpecialTokens } from './hf';
export { ChatTemplate, type ChatMessage, type ChatSpecialTokens } from './chat-template';
