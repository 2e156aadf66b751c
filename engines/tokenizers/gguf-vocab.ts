// A GGUF file's tokenizer metadata (tokenizer.ggml.*) as Hugging Face tokenizer.json and
// tokenizer_config.json objects: byte-level BPE ("gpt2" model) with the pre-tokenizer llama.cpp
// names in tokenizer.ggml.pre, control tokens as special added tokens. Used by engines/gguf.ts.

/** llama.cpp token types (llama_token_type / gguf TokenType). */
const TOKEN_TYPE = { NORMAL: 1, UNKNOWN: 2, CONTROL: 3, USER_DEFINED: 4, UNUSED: 5, BYTE: 6 } as const;

const byteLevel = (useRegex: boolean) => ({ type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: useRegex });

/**
 * tokenizer.ggml.pre -> the Hugging Face pre_tokenizer that splits text the same way. llama.cpp's
 * llama-vocab.cpp gives the "digits" family the regexes \p{N} then GPT-2's; Hugging Face's SmolLM2
 * and StarCoder tokenizer.json files write that as Sequence[Digits(individual), ByteLevel(regex)].
 */
const PRE_TOKENIZERS: Record<string, () => unknown> = {
  default: () => byteLevel(true),
  gpt2: () => byteLevel(true),
  'gpt-2': () => byteLevel(true),
  ...Object.fromEntries(
    ['smollm', 'starcoder', 'refact', 'codeshell'].map((name) => [
      name,
      () => ({ type: 'Sequence', pretokenizers: [{ type: 'Digits', individual_digits: true }, byteLevel(true)] }),
    ]),
  ),
};

export interface GgufTokenizerFiles {
  /** tokenizer.json content. */
  tokenizerJson: Record<string, unknown>;
  /** tokenizer_config.json content. */
  tokenizerConfig: Record<string, unknown>;
}

function strings(value: unknown, key: string, source: string): string[] {
  if (!Array.isArray(value) || !value.every((v) => typeof v === 'string')) throw new Error(`${source}: metadata ${key} is missing or not a list of strings`);
  return value as string[];
}

/** The BPE vocabulary (token -> id) and the added tokens (control and user-defined ones) of a GGUF token list. */
function vocabulary(tokens: string[], types: number[], source: string): { vocab: Record<string, number>; addedTokens: Array<Record<string, unknown>> } {
  const vocab: Record<string, number> = {};
  const addedTokens: Array<Record<string, unknown>> = [];
  tokens.forEach((token, id) => {
    if (Object.hasOwn(vocab, token)) throw new Error(`${source}: token ${JSON.stringify(token)} appears twice in tokenizer.ggml.tokens (ids ${vocab[token]} and ${id})`);
    vocab[token] = id;
    const type = types[id];
    if (type === TOKEN_TYPE.CONTROL || type === TOKEN_TYPE.USER_DEFINED) {
      addedTokens.push({ id, content: token, single_word: false, lstrip: false, rstrip: false, normalized: false, special: type === TOKEN_TYPE.CONTROL });
    }
  });
  return { vocab, addedTokens };
}

/** Builds the Hugging Face tokenizer files from GGUF metadata; `source` names the file in errors. */
export function ggufTokenizerFiles(metadata: Record<string, unknown>, source: string): GgufTokenizerFiles {
  const model = metadata['tokenizer.ggml.model'];
  if (model !== 'gpt2') {
    throw new Error(`${source}: tokenizer.ggml.model is ${JSON.stringify(model)}; only "gpt2" (byte-level BPE) tokenizers can be converted (SentencePiece "llama" vocabularies are not): import the original Hugging Face model directory instead`);
  }
  const pre = (metadata['tokenizer.ggml.pre'] as string | undefined) ?? 'default';
  const preTokenizer = PRE_TOKENIZERS[pre];
  if (!preTokenizer) {
    throw new Error(`${source}: tokenizer.ggml.pre ${JSON.stringify(pre)} is not supported (supported: ${Object.keys(PRE_TOKENIZERS).join(', ')}); import the original Hugging Face model directory instead`);
  }
  const tokens = strings(metadata['tokenizer.ggml.tokens'], 'tokenizer.ggml.tokens', source);
  const merges = strings(metadata['tokenizer.ggml.merges'], 'tokenizer.ggml.merges', source);
  const types = (metadata['tokenizer.ggml.token_type'] as number[] | undefined) ?? [];
  const { vocab, addedTokens } = vocabulary(tokens, types, source);
  const tokenAt = (key: string): string | undefined => {
    const id = metadata[key];
    if (id === undefined) return undefined;
    if (typeof id !== 'number' || !tokens[id]) throw new Error(`${source}: metadata ${key} = ${String(id)} is not a token id (vocabulary of ${tokens.length})`);
    return tokens[id];
  };
  const bos = tokenAt('tokenizer.ggml.bos_token_id');
  const eos = tokenAt('tokenizer.ggml.eos_token_id');
  const pad = tokenAt('tokenizer.ggml.padding_token_id');
  const unk = tokenAt('tokenizer.ggml.unknown_token_id');
  const addBos = metadata['tokenizer.ggml.add_bos_token'] === true;
  const bosId = metadata['tokenizer.ggml.bos_token_id'] as number;
  const postProcessor = addBos && bos
    ? {
        type: 'TemplateProcessing',
        single: [{ SpecialToken: { id: bos, type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
        pair: [{ SpecialToken: { id: bos, type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: bos, type_id: 1 } }, { Sequence: { id: 'B', type_id: 1 } }],
        special_tokens: { [bos]: { id: bos, ids: [bosId], tokens: [bos] } },
      }
    : { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true };
  const tokenizerJson = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: addedTokens,
    normalizer: null,
    pre_tokenizer: preTokenizer(),
    post_processor: postProcessor,
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: unk ?? null,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: false,
      vocab,
      merges,
    },
  };
  const special = addedTokens.filter((t) => t.special).map((t) => t.content as string);
  const tokenizerConfig: Record<string, unknown> = {
    add_bos_token: addBos,
    add_eos_token: metadata['tokenizer.ggml.add_eos_token'] === true,
    added_tokens_decoder: Object.fromEntries(addedTokens.map(({ id, ...rest }) => [String(id), rest])),
    additional_special_tokens: special.filter((t) => t !== bos && t !== eos && t !== pad && t !== unk),
    bos_token: bos ?? null,
    eos_token: eos ?? null,
    pad_token: pad ?? null,
    unk_token: unk ?? null,
    clean_up_tokenization_spaces: false,
    model_max_length: metadata['llama.context_length'] ?? 2048,
    tokenizer_class: 'GPT2Tokenizer',
  };
  if (typeof metadata['tokenizer.chat_template'] === 'string') tokenizerConfig.chat_template = metadata['tokenizer.chat_template'];
  return { tokenizerJson, tokenizerConfig };
}
