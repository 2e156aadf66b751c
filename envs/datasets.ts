// Dataset tasks: rows read from a JSONL (.jsonl, or .json lines or array) or Parquet file, validated
// up front, rendered into prompts (raw text or the model's chat template), and graded by a built-in
// rule reward (./rule-rewards). loadDatasetTask turns a run config's `data` section into a Task.
// Rows may carry images and audio clips (./dataset-media.ts), read and checked when the file loads.
import fs from 'node:fs';
import path from 'node:path';
import { TextDecoder } from 'node:util';
import { parseDataConfig, type DataConfig, type DataConfigInput, type DataRewardConfig } from '../config/data-config';
import { mixSeed, randomInt, seededRandom } from '../config/seeds';
import type { MediaKind } from '../engines/media/sources';
import type { Tokenizer } from '../engines/tokenizers/tokenizer';
import { mediaFieldNames, mediaRefsOf, placeMediaPlaceholders, promptMedia, readRowMedia, type MediaFields, type MediaRef, type RowMedia } from './dataset-media';
import { compileRegex, parseNumber, ruleReward } from './rule-rewards';
import { describe, validateRow, type ChatMessage, type DatasetFields, type DatasetRow, type RenderChat } from './dataset-rows';
import { checkPromptCount, type Task, type TaskPrompt } from './task';

export { describe, validateRow, type ChatMessage, type ChatRole, type DatasetFields, type DatasetRow, type RenderChat } from './dataset-rows';

/** How many bad rows one error lists (the count says how many there are). */
const MAX_LISTED_PROBLEMS = 5;

function rowsError(file: string, problems: string[]): Error {
  if (problems.length === 1) return new Error(problems[0]);
  const shown = problems.slice(0, MAX_LISTED_PROBLEMS).join('; ');
  const more = problems.length > MAX_LISTED_PROBLEMS ? `; and ${problems.length - MAX_LISTED_PROBLEMS} more` : '';
  return new Error(`${file}: ${problems.length} bad rows: ${shown}${more}`);
}

/**
 * Validates every row; throws one error listing the bad ones (each as "<file> line N: <problem>").
 * When any row has media, every row's placeholders are checked against its media (a file without
 * any is a text dataset, read as is), and the media are read (relative paths against the file's directory).
 */
async function validateAll(file: string, raws: ReadonlyArray<{ raw: unknown; where: string }>, fields: DatasetFields): Promise<DatasetRow[]> {
  if (raws.length === 0) throw new Error(`${file}: has no rows (the file is empty or only blank lines): add rows, one JSON object per line`);
  const rows: DatasetRow[] = [];
  const refsByRow: MediaRef[][] = [];
  const problems: string[] = [];
  for (const { raw, where } of raws) {
    const source = `${file} ${where}`;
    try {
      const row = validateRow(raw, fields, source);
      refsByRow.push(mediaRefsOf(raw as Record<string, unknown>, fields));
      rows.push(row);
    } catch (err) {
      problems.push(`${source}: ${(err as Error).message}`);
    }
  }
  if (problems.length) throw rowsError(file, problems);
  if (refsByRow.every((refs) => refs.length === 0)) return rows;
  const placed = rows.map((row, i) => {
    try {
      return placeMediaPlaceholders(row, refsByRow[i], fields);
    } catch (err) {
      problems.push(`${row.source}: ${(err as Error).message}`);
      return row;
    }
  });
  if (problems.length) throw rowsError(file, problems);
  const read = await readRowMedia(refsByRow, placed.map((r) => r.source), path.dirname(path.resolve(file)));
  if (read.problems.length) throw rowsError(file, read.problems);
  return placed.map((row, i) => ({ ...row, ...read.media[i] }));
}

function readText(file: string): string {
  try {
    return fs.readFileSync(file, 'utf8').replace(/^\uFEFF/, '');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
    throw new Error(`${file}: cannot read the dataset (${code}): check the path (relative paths are resolved against ${process.cwd()} unless a base directory is given)`);
  }
}

function jsonLines(file: string, text: string): Array<{ raw: unknown; where: string }> {
  const out: Array<{ raw: unknown; where: string }> = [];
  const problems: string[] = [];
  text.split(/\r?\n/).forEach((line, i) => {
    if (line.trim() === '') return;
    try {
      out.push({ raw: JSON.parse(line), where: `line ${i + 1}` });
    } catch (err) {
      problems.push(`${file} line ${i + 1}: not valid JSON (${(err as Error).message}): each line holds one JSON object`);
    }
  });
  if (problems.length) throw rowsError(file, problems);
  return out;
}

function jsonArray(file: string, text: string): Array<{ raw: unknown; where: string }> {
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch (err) {
    throw new Error(`${file}: not valid JSON (${(err as Error).message}): a .json dataset is one JSON array of row objects, or one JSON object per line`);
  }
  if (!Array.isArray(data)) throw new Error(`${file}: expected a JSON array of row objects`);
  return data.map((raw, i) => ({ raw, where: `item ${i} (0-based)` }));
}

/** Binary values as UTF-8 text, as hyparquet decodes them by default (used outside the media fields). */
function binaryAsText(value: unknown, decoder: TextDecoder): unknown {
  if (value instanceof Uint8Array) return decoder.decode(value);
  if (Array.isArray(value)) return value.map((v) => binaryAsText(v, decoder));
  if (value !== null && typeof value === 'object' && Object.getPrototypeOf(value) === Object.prototype) {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, binaryAsText(v, decoder)]));
  }
  return value;
}

/**
 * Parquet rows; binary columns without a string annotation stay bytes in the media fields (images
 * stored inline, e.g. Hugging Face datasets' {bytes, path}) and become UTF-8 text elsewhere.
 */
async function parquetRows(file: string, mediaFields: readonly string[]): Promise<Array<{ raw: unknown; where: string }>> {
  const { asyncBufferFromFile, parquetReadObjects } = await import('hyparquet');
  try {
    fs.accessSync(file, fs.constants.R_OK);
  } catch (err) {
    throw new Error(`${file}: cannot read the dataset (${(err as NodeJS.ErrnoException).code}): check the path (relative paths are resolved against ${process.cwd()} unless a base directory is given)`);
  }
  let rows: Record<string, unknown>[];
  try {
    rows = await parquetReadObjects({ file: await asyncBufferFromFile(file), utf8: false });
  } catch (err) {
    throw new Error(`${file}: not a readable Parquet file (${(err as Error).message}): check that it is Parquet, or give a .jsonl file`);
  }
  const decoder = new TextDecoder();
  const media = new Set(mediaFields);
  return rows.map((row, i) => ({
    raw: Object.fromEntries(Object.entries(row).map(([k, v]) => [k, media.has(k) ? v : binaryAsText(v, decoder)])),
    where: `row ${i} (0-based)`,
  }));
}

/**
 * Reads and validates every row of a dataset file, by extension: .jsonl (one JSON object per line,
 * blank lines allowed; errors name the 1-based line), .json (a JSON array, errors name the 0-based
 * item; or JSON lines), .parquet (errors name the 0-based row). Throws on a file that cannot be
 * read, an unknown extension, an empty file, or any bad row (one error listing the bad rows),
 * including a medium that cannot be read or a prompt whose placeholders do not match its media.
 */
export async function readDatasetRows(file: string, fields: DatasetFields = {}): Promise<DatasetRow[]> {
  const ext = path.extname(file).toLowerCase();
  if (ext === '.parquet') return validateAll(file, await parquetRows(file, [...mediaFieldNames(fields, 'image'), ...mediaFieldNames(fields, 'audio')]), fields);
  if (ext === '.jsonl' || ext === '.json') {
    const text = readText(file);
    const raws = ext === '.json' && text.trimStart().startsWith('[') ? jsonArray(file, text) : jsonLines(file, text);
    return validateAll(file, raws, fields);
  }
  throw new Error(`${file}: unknown dataset format ${JSON.stringify(ext || '(no extension)')}: use .jsonl (one JSON object per line), .json or .parquet`);
}

export interface DatasetTaskOptions {
  name: string;
  train: readonly DatasetRow[];
  eval: readonly DatasetRow[];
  tokenizer: Tokenizer;
  /** Needed when any prompt is chat (prompt_format "chat" or a messages row). */
  renderChat?: RenderChat;
  reward: DataRewardConfig;
  /** Where a response ends (e.g. the chat template's "<|im_end|>", the eos token's text): the reward ignores what follows. */
  stopStrings: readonly string[];
  /** Default "chat". */
  promptFormat?: 'chat' | 'raw';
  /** Chat only: put first in every prompt that has no system message of its own. */
  systemPrompt?: string;
}

/** The prompt text of a row: raw text as is, or the chat template over its messages. */
export function renderRow(row: DatasetRow, opts: Pick<DatasetTaskOptions, 'renderChat' | 'promptFormat' | 'systemPrompt'>): string {
  const format = opts.promptFormat ?? 'chat';
  if (row.prompt !== undefined && format === 'raw') return row.prompt;
  let messages: ChatMessage[] = row.messages ?? [{ role: 'user', content: row.prompt as string }];
  if (opts.systemPrompt !== undefined && messages[0].role !== 'system') messages = [{ role: 'system', content: opts.systemPrompt }, ...messages];
  if (!opts.renderChat) {
    const why = row.messages ? 'it has chat messages' : 'data.prompt_format is "chat"';
    throw new Error(`${row.source}: needs the model's chat template (${why}), and none was given: use a model with a chat template, or set data.prompt_format to "raw" for prompt strings`);
  }
  return opts.renderChat(messages);
}

/** Checks up front that every answer suits the reward (numeric: parses as a number; regex: compiles). */
function checkAnswers(rows: readonly DatasetRow[], reward: DataRewardConfig): void {
  const problems: string[] = [];
  for (const row of rows) {
    if (reward.kind === 'numeric' && parseNumber(row.answer) === undefined) {
      problems.push(`${row.source}: the answer ${describe(row.answer)} is not a number, and data.reward.kind is "numeric": fix the answer or use kind "exact"`);
    } else if (reward.kind === 'regex') {
      try {
        compileRegex(`^(?:${row.answer})$`);
      } catch (err) {
        problems.push(`${row.source}: the answer is read as a regex (data.reward.kind "regex"), and ${(err as Error).message}`);
      }
    }
  }
  if (problems.length) throw rowsError('data.reward', problems);
}

/** A seeded permutation of 0..n-1 (Fisher-Yates). */
function permutation(n: number, seed: number): number[] {
  const rng = seededRandom(seed);
  const order = Array.from({ length: n }, (_, i) => i);
  for (let i = n - 1; i > 0; i--) {
    const j = randomInt(rng, 0, i);
    [order[i], order[j]] = [order[j], order[i]];
  }
  return order;
}

/** A dataset's Task, saying which kinds of media its prompts carry (the model needs an encoder for each). */
export interface DatasetTask extends Task {
  readonly mediaKinds: readonly MediaKind[];
}

const copyPrompt = (p: TaskPrompt): TaskPrompt => (p.media ? { ...p, media: [...p.media] } : { ...p });

/** A row's prompt; with `checkMedia` (the dataset has media) its media in the order of the rendered text's placeholders. */
function rowPrompt(row: DatasetRow, opts: Pick<DatasetTaskOptions, 'renderChat' | 'promptFormat' | 'systemPrompt'>, checkMedia: boolean): TaskPrompt {
  const prompt: TaskPrompt = { text: renderRow(row, opts), answer: row.answer, ...(row.demonstration !== undefined ? { demonstration: row.demonstration } : {}) };
  if (!checkMedia) return prompt;
  const media = promptMedia(prompt.text, row, row.source);
  return media.length ? { ...prompt, media } : prompt;
}

/**
 * A Task over dataset rows. trainPrompts(seed, n) walks seeded shuffles of the train rows: epoch e
 * is the permutation seeded mixSeed(seed, "dataset-epoch-<e>"), so within one call no row repeats
 * before every row has been drawn, and the same (seed, n) always gives the same list. heldOut() is
 * the eval rows in file order. Every prompt is rendered when the task is created, so a row the chat
 * template rejects fails here rather than mid-run.
 */
export function createDatasetTask(opts: DatasetTaskOptions): DatasetTask {
  if (opts.train.length === 0) throw new Error(`dataset task ${opts.name}: no training rows: give data.train rows`);
  if (opts.eval.length === 0) throw new Error(`dataset task ${opts.name}: no evaluation rows: give data.eval rows or a positive data.eval_size`);
  const all = [...opts.train, ...opts.eval];
  checkAnswers(all, opts.reward);
  const mediaKinds = (['image', 'audio'] as const).filter((kind) => all.some((r) => (kind === 'image' ? r.images : r.audio)?.length));
  const toPrompt = (row: DatasetRow): TaskPrompt => rowPrompt(row, opts, mediaKinds.length > 0);
  const train = opts.train.map(toPrompt);
  const heldOut = opts.eval.map(toPrompt);
  const { reward, tokenizer } = opts;
  const stopStrings = [...opts.stopStrings];
  return {
    name: opts.name,
    mediaKinds,
    tokenizer: () => tokenizer,
    trainPrompts(seed: number, n: number): TaskPrompt[] {
      checkPromptCount(seed, n);
      const out: TaskPrompt[] = [];
      for (let epoch = 0; out.length < n; epoch++) {
        for (const i of permutation(train.length, mixSeed(seed, `dataset-epoch-${epoch}`))) {
          if (out.length === n) break;
          out.push(copyPrompt(train[i]));
        }
      }
      return out;
    },
    heldOut: () => heldOut.map(copyPrompt),
    reward: (prompt: TaskPrompt, responseText: string) => ruleReward(reward, responseText, prompt.answer, stopStrings),
  };
}

export interface LoadDatasetOptions {
  tokenizer: Tokenizer;
  renderChat?: RenderChat;
  stopStrings: readonly string[];
  /** Relative data paths are resolved against it; default process.cwd(). */
  baseDir?: string;
  /** Default "dataset:<train file name>". */
  name?: string;
}

/**
 * The Task of a run config's `data` section: reads and validates both files up front (train, and
 * eval or the last eval_size rows of train), media included, so a missing file, any bad row or any
 * unusable medium fails before a run starts.
 */
export async function loadDatasetTask(config: DataConfig | DataConfigInput, opts: LoadDatasetOptions): Promise<DatasetTask> {
  const data = parseDataConfig(config);
  // Without baseDir a relative path stays as written (fs resolves it against the cwd), so errors show it as the user wrote it.
  const resolve = (p: string) => (opts.baseDir === undefined || path.isAbsolute(p) ? p : path.join(opts.baseDir, p));
  const { prompt_field, messages_field, answer_field, demonstration_field, image_field, audio_field } = data;
  const fields: DatasetFields = { prompt_field, messages_field, answer_field, demonstration_field, image_field, audio_field };
  let train = await readDatasetRows(resolve(data.train), fields);
  let evalRows: DatasetRow[];
  if (data.eval !== undefined) {
    evalRows = await readDatasetRows(resolve(data.eval), fields);
  } else {
    const size = data.eval_size ?? 64;
    if (train.length <= size) {
      throw new Error(`${data.train}: has ${train.length} rows; with no data.eval its last ${size} (data.eval_size) are held out, leaving none to train on: add rows, give data.eval, or lower data.eval_size`);
    }
    evalRows = train.slice(train.length - size);
    train = train.slice(0, train.length - size);
  }
  return createDatasetTask({
    name: opts.name ?? `dataset:${path.basename(data.train)}`,
    train,
    eval: evalRows,
    tokenizer: opts.tokenizer,
    renderChat: opts.renderChat,
    reward: data.reward,
    stopStrings: opts.stopStrings,
    promptFormat: data.prompt_format,
    systemPrompt: data.system_prompt,
  });
}
