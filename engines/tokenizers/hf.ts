// Hugging Face tokenizer.json files, loaded locally with @huggingface/tokenizers (pure JS, no network).
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { Tokenizer as HfTokenizerModel } from '@huggingface/tokenizers' with { 'resolution-mode': 'import' };
import { planSpecialTokens, tokenizerChanges, withAddedTokens, withAddedTokensConfig, type AddedSpecialToken } from './added-tokens';
import type { Tokenizer } from './tokenizer';

// The package is an ES module whose CommonJS build (its "require" export) this CommonJS project
// loads synchronously; TypeScript under node16 only lets a CommonJS file take its types.
const { Tokenizer: HfTokenizerClass } = require('@huggingface/tokenizers') as { Tokenizer: typeof HfTokenizerModel };

export interface HfSpecialTokens {
  /** Token strings, e.g. '<pad>' or '<|endoftext|>'. Unset ones come from tokenizer_config.json next to the file. */
  padToken?: string;
  bosToken?: string;
  eosToken?: string;
}

export interface HfTokenizerOptions {
  /**
   * Special tokens to add (model.add_special_tokens, engines/tokenizers/added-tokens.ts): one the
   * vocabulary has as ONE token keeps its id; each other one takes the next id, in order.
   */
  addSpecialTokens?: readonly string[];
}

type Role = 'pad' | 'bos' | 'eos';

function buildModel(json: Record<string, unknown>, config: Record<string, unknown>, path: string): HfTokenizerModel {
  try {
    return new HfTokenizerClass(json, config);
  } catch (err) {
    throw new Error(`tokenizer file ${path} is not a usable Hugging Face tokenizer.json: ${(err as Error).message}`);
  }
}

/** One past the largest id of the vocabulary, added tokens included. */
function vocabSizeOf(model: HfTokenizerModel): number {
  let maxId = -1;
  for (const id of model.get_vocab(true).values()) maxId = Math.max(maxId, id);
  return maxId + 1;
}

/** tokenizer_config.json writes a special token either as a string or as an AddedToken object. */
export function tokenString(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (value !== null && typeof value === 'object' && typeof (value as { content?: unknown }).content === 'string') {
    return (value as { content: string }).content;
  }
  return undefined;
}

function readJson(path: string, what: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new Error(`cannot read ${what} ${path}: ${(err as Error).message}`);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    throw new Error(`${what} ${path} does not parse as JSON: ${(err as Error).message}`);
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
    throw new Error(`${what} ${path} is not a JSON object`);
  }
  return parsed as Record<string, unknown>;
}

export class HfTokenizer implements Tokenizer {
  readonly vocabSize: number;
  readonly padId: number;
  readonly bosId: number;
  readonly eosId: number;
  readonly addBos: boolean;
  readonly stopIds: readonly number[];
  /** What options.addSpecialTokens resolved to (ids, and which are new to the vocabulary); empty without it. */
  readonly addedSpecialTokens: readonly AddedSpecialToken[];

  private constructor(
    private readonly model: HfTokenizerModel,
    ids: Record<Role, number>,
    addBos: boolean,
    extraStopIds: readonly number[],
    added: readonly AddedSpecialToken[],
  ) {
    this.addBos = addBos;
    this.stopIds = [...new Set([ids.eos, ...extraStopIds])];
    this.padId = ids.pad;
    this.bosId = ids.bos;
    this.eosId = ids.eos;
    this.vocabSize = vocabSizeOf(model);
    this.addedSpecialTokens = added;
  }

  /**
   * Loads `path` (a tokenizer.json) and, when present, the tokenizer_config.json beside it; special
   * tokens given in `special` win over the config's pad_token/bos_token/eos_token. With
   * options.addSpecialTokens the tokenizer is the file's with those tokens added (the files are not changed).
   */
  static fromFile(path: string, special: HfSpecialTokens = {}, options: HfTokenizerOptions = {}): HfTokenizer {
    let json = readJson(path, 'tokenizer file');
    const configPath = join(dirname(path), 'tokenizer_config.json');
    let config = existsSync(configPath) ? readJson(configPath, 'tokenizer config') : {};
    let model = buildModel(json, config, path);
    let added: AddedSpecialToken[] = [];
    if (options.addSpecialTokens?.length) {
      // Planned on the file's tokenizer, then built again from the edited JSON: the library has no
      // way to add a token to a built tokenizer, and the edit is the one an export writes out.
      const addedIds = new Set(model.get_added_tokens_decoder().keys());
      const base = model;
      added = planSpecialTokens(options.addSpecialTokens, { idOf: (t) => base.token_to_id(t), isAddedToken: (id) => addedIds.has(id), vocabSize: vocabSizeOf(base) });
      json = withAddedTokens(json, tokenizerChanges(added));
      config = withAddedTokensConfig(config, tokenizerChanges(added));
      model = buildModel(json, config, path);
    }
    const names: Record<Role, string | undefined> = {
      pad: special.padToken ?? tokenString(config.pad_token),
      bos: special.bosToken ?? tokenString(config.bos_token),
      eos: special.eosToken ?? tokenString(config.eos_token),
    };
    const option: Record<Role, string> = { pad: 'padToken', bos: 'bosToken', eos: 'eosToken' };
    const ids = {} as Record<Role, number>;
    for (const role of ['pad', 'bos', 'eos'] as const) {
      const name = names[role];
      if (name === undefined) {
        throw new Error(`tokenizer ${path}: no ${role} token is named; pass ${option[role]} (e.g. the eos token string) or set ${role}_token in ${configPath}`);
      }
      const id = model.token_to_id(name);
      if (id === undefined) {
        throw new Error(`tokenizer ${path}: the ${role} token ${JSON.stringify(name)} is not in its vocabulary; pass an existing token string as ${option[role]}`);
      }
      ids[role] = id;
    }
    // generation_config.json beside it may name more end-of-turn ids (an int or a list).
    const generationPath = join(dirname(path), 'generation_config.json');
    const generation = existsSync(generationPath) ? readJson(generationPath, 'generation config') : {};
    const eos = generation.eos_token_id;
    const extra = (typeof eos === 'number' ? [eos] : Array.isArray(eos) ? eos : []).filter((id): id is number => Number.isInteger(id) && model.id_to_token(id) !== undefined);
    return new HfTokenizer(model, ids, config.add_bos_token === true, extra, added);
  }

  encode(text: string): number[] {
    return this.model.encode(text, { add_special_tokens: false }).ids;
  }

  decode(ids: readonly number[], opts: { skipSpecial?: boolean } = {}): string {
    const skipSpecial = opts.skipSpecial ?? false;
    // pad/bos/eos are chosen by name and need not be flagged special in the file, so drop them here too.
    const kept = skipSpecial ? ids.filter((id) => id !== this.padId && id !== this.bosId && id !== this.eosId) : [...ids];
    return this.model.decode(kept, { skip_special_tokens: skipSpecial });
  }
}
