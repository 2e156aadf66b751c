// Special tokens added to a pretrained Hugging Face tokenizer (model.add_special_tokens), as
// transformers' add_special_tokens adds additional special tokens: each an "added token" of
// tokenizer.json (matched before the model splits text, so never split; special, so skipped when
// decoding with skip_special_tokens), a token the vocabulary lacks taking the next id. The same plain-JSON edits make the tokenizer the run loads (engines/tokenizers/hf.ts) and the
// files an export writes (writeAddedTokens), so `tokenizers` and `transformers` read the exported
// directory with the same ids.
import { existsSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';

export interface AddedSpecialToken {
  content: string;
  id: number;
  /**
   * "new": not in the vocabulary, given the next id (the model's embedding grows a row for it);
   * "vocabulary": a plain vocabulary entry, its id reused and made an added token (so it is never
   * split); "added": already an added token of tokenizer.json, reused untouched.
   */
  origin: 'new' | 'vocabulary' | 'added';
}

/** What the planning needs of a loaded tokenizer. */
export interface VocabularyLookup {
  /** The id of `content` as one token of the vocabulary (added tokens included), else undefined. */
  idOf(content: string): number | undefined;
  /** Whether `id` is an added token of tokenizer.json. */
  isAddedToken(id: number): boolean;
  /** One past the largest id (the id the first new token gets). */
  vocabSize: number;
}

/**
 * Resolves `contents` against the vocabulary: a token it already has as ONE token is reused with its
 * id (never added twice); each other one takes the next id from vocabSize, in order. This is what
 * `tokenizers`' AddedVocabulary does, so the ids match what Python assigns reading the same file.
 */
export function planSpecialTokens(contents: readonly string[], vocab: VocabularyLookup): AddedSpecialToken[] {
  let next = vocab.vocabSize;
  const seen = new Set<string>();
  const out: AddedSpecialToken[] = [];
  for (const content of contents) {
    if (seen.has(content)) continue; // the config schema refuses repeats; planning stays total anyway
    seen.add(content);
    const id = vocab.idOf(content);
    if (id === undefined) out.push({ content, id: next++, origin: 'new' });
    else out.push({ content, id, origin: vocab.isAddedToken(id) ? 'added' : 'vocabulary' });
  }
  return out;
}

/** The tokens that change the tokenizer files: all but those already added tokens there (left untouched). */
export function tokenizerChanges(tokens: readonly AddedSpecialToken[]): AddedSpecialToken[] {
  return tokens.filter((t) => t.origin !== 'added');
}

/** The number of vocabulary ids `tokens` add (their embeddings are new rows). */
export function newTokenCount(tokens: readonly AddedSpecialToken[]): number {
  return tokens.filter((t) => t.origin === 'new').length;
}

/** tokenizer.json's AddedToken fields for a special token: matched verbatim, never normalized or stripped. */
function addedTokenEntry(t: AddedSpecialToken): Record<string, unknown> {
  return { id: t.id, content: t.content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true };
}

const asObjectList = (v: unknown): Array<Record<string, unknown>> => (Array.isArray(v) ? v.filter((e): e is Record<string, unknown> => e !== null && typeof e === 'object') : []);

/**
 * tokenizer.json with `tokens` in its added_tokens (those it lacks; idempotent), sorted by id as the
 * `tokenizers` library writes them (it reads them in order, each new one taking the next id).
 */
export function withAddedTokens(tokenizerJson: Record<string, unknown>, tokens: readonly AddedSpecialToken[]): Record<string, unknown> {
  const list = asObjectList(tokenizerJson.added_tokens);
  const have = new Set(list.map((e) => e.content));
  const added = tokens.filter((t) => !have.has(t.content)).map(addedTokenEntry);
  if (added.length === 0) return tokenizerJson;
  const merged = [...list, ...added].sort((a, b) => Number(a.id) - Number(b.id));
  return { ...tokenizerJson, added_tokens: merged };
}

/** additional_special_tokens with `tokens` appended (strings or AddedToken objects already there are kept). */
function withAdditional(current: unknown, tokens: readonly AddedSpecialToken[]): unknown[] {
  const list = Array.isArray(current) ? [...current] : [];
  const names = new Set(list.map((e) => (typeof e === 'string' ? e : (e as { content?: unknown } | null)?.content)));
  for (const t of tokens) if (!names.has(t.content)) list.push(t.content);
  return list;
}

/**
 * tokenizer_config.json with `tokens` in added_tokens_decoder (transformers checks it against
 * tokenizer.json) and in additional_special_tokens (transformers' skip_special_tokens drops only the
 * tokens its special-token lists name). Idempotent.
 */
export function withAddedTokensConfig(tokenizerConfig: Record<string, unknown>, tokens: readonly AddedSpecialToken[]): Record<string, unknown> {
  if (tokens.length === 0) return tokenizerConfig;
  const current = tokenizerConfig.added_tokens_decoder;
  const decoder: Record<string, unknown> = current !== null && typeof current === 'object' && !Array.isArray(current) ? { ...(current as Record<string, unknown>) } : {};
  for (const t of tokens) {
    if (decoder[String(t.id)] !== undefined) continue;
    const { id: _id, ...entry } = addedTokenEntry(t);
    decoder[String(t.id)] = entry;
  }
  const byId = Object.fromEntries(Object.entries(decoder).sort(([a], [b]) => Number(a) - Number(b)));
  return { ...tokenizerConfig, added_tokens_decoder: byId, additional_special_tokens: withAdditional(tokenizerConfig.additional_special_tokens, tokens) };
}

async function readJsonObject(file: string): Promise<Record<string, unknown>> {
  const value: unknown = JSON.parse(await readFile(file, 'utf8'));
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new Error(`${file} is not a JSON object`);
  return value as Record<string, unknown>;
}

const writeJson = (file: string, value: unknown) => writeFile(file, `${JSON.stringify(value, null, 2)}\n`);

/**
 * Writes the tokens of `all` that change the tokenizer (tokenizerChanges) into the tokenizer files
 * of model directory `dir`: tokenizer.json's added_tokens (the file must be there),
 * tokenizer_config.json (made if missing) and, when present, special_tokens_map.json's
 * additional_special_tokens. Idempotent.
 */
export async function writeAddedTokens(dir: string, all: readonly AddedSpecialToken[]): Promise<void> {
  const tokens = tokenizerChanges(all);
  if (tokens.length === 0) return;
  const tokenizerFile = path.join(dir, 'tokenizer.json');
  if (!existsSync(tokenizerFile)) throw new Error(`${dir}: no tokenizer.json to add the special tokens ${JSON.stringify(tokens.map((t) => t.content))} to`);
  await writeJson(tokenizerFile, withAddedTokens(await readJsonObject(tokenizerFile), tokens));
  const configFile = path.join(dir, 'tokenizer_config.json');
  await writeJson(configFile, withAddedTokensConfig(existsSync(configFile) ? await readJsonObject(configFile) : {}, tokens));
  const mapFile = path.join(dir, 'special_tokens_map.json');
  if (existsSync(mapFile)) {
    const map = await readJsonObject(mapFile);
    await writeJson(mapFile, { ...map, additional_special_tokens: withAdditional(map.additional_special_tokens, tokens) });
  }
}
