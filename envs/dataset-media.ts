// Images and audio in dataset rows (./datasets.ts): which fields hold them, what a source may be (a
// file path relative to the dataset file's directory, a data URL, or in Parquet binary and Hugging
// Face datasets' {bytes, path} structs), how a row's placeholders must match its media (one
// <image> per image and one <audio> per clip, in order, or none of a kind: then they are put before
// the text, as LLaVA-style datasets expect), and reading every medium at load time through
// resolveMediaSource (sniffed format, size limit, no network). Failures are returned as one message
// per row and field, for the dataset reader to report with the file.
import path from 'node:path';
import { MEDIA_LIMITS } from '../engines/media/model-inputs';
import { resolveMediaSource, type MediaKind, type MediaSource, type ResolvedMedia } from '../engines/media/sources';
import type { PromptMedium } from './task';

/** The placeholder of each kind in a prompt's text: the n-th medium of a kind fills its n-th placeholder. */
export const MEDIA_PLACEHOLDER: Record<MediaKind, string> = { image: '<image>', audio: '<audio>' };
const PLACEHOLDER_RE = /<image>|<audio>/g;
const MEDIA_KINDS: readonly MediaKind[] = ['image', 'audio'];

/** Which fields of a row hold its media (config/data-config.ts). */
export interface MediaFields {
  /** Default: "images", falling back to "image". */
  image_field?: string;
  /** Default: "audio". */
  audio_field?: string;
}

/** The fields a kind's media may be in, in the order they are looked for. */
export function mediaFieldNames(fields: MediaFields, kind: MediaKind): string[] {
  if (kind === 'image') return fields.image_field ? [fields.image_field] : ['images', 'image'];
  return fields.audio_field ? [fields.audio_field] : ['audio'];
}

/** A row's media, each kind in field order (a kind is set only when the row has some). */
export interface RowMedia {
  images?: PromptMedium[];
  audio?: PromptMedium[];
}

/** One medium a row names, not yet read: `where` names its field (and index) for errors. */
export interface MediaRef {
  kind: MediaKind;
  field: string;
  where: string;
  source: MediaSource;
}

/** The part of a row whose text holds placeholders. */
interface PromptPart {
  prompt?: string;
  messages?: Array<{ role: string; content: string }>;
}

function describe(value: unknown): string {
  const json = JSON.stringify(value, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v instanceof Uint8Array ? `<${v.length} bytes>` : v));
  if (json === undefined) return String(value);
  return json.length > 60 ? `${json.slice(0, 57)}...` : json;
}

const isRecord = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v) && !(v instanceof Uint8Array);
const present = (row: Record<string, unknown>, key: string): boolean => row[key] !== undefined && row[key] !== null;
const countOf = (text: string, placeholder: string): number => text.split(placeholder).length - 1;
const plural = (n: number, one: string, many: string): string => `${n} ${n === 1 ? one : many}`;
const placeholders = (n: number, kind: MediaKind): string => plural(n, `${MEDIA_PLACEHOLDER[kind]} placeholder`, `${MEDIA_PLACEHOLDER[kind]} placeholders`);
const mediaCount = (n: number, kind: MediaKind): string => (kind === 'image' ? plural(n, 'image', 'images') : plural(n, 'audio clip', 'audio clips'));

/**
 * One medium's source: a string is a data URL, or else a file path (relative to the dataset file's
 * directory; http(s) URLs are passed on to be refused by resolveMediaSource, other URLs refused
 * here); binary (Parquet) is the file's bytes; {bytes, path} is Hugging Face datasets' Image/Audio
 * layout (bytes win; a path alone is a file path).
 */
function mediaSourceOf(value: unknown, where: string): MediaSource {
  if (value instanceof Uint8Array) return { bytes: value };
  if (typeof value === 'string') {
    const s = value.trim();
    if (s === '') throw new Error(`${where} is an empty string: give a file path (relative to the dataset file) or a data URL`);
    if (/^data:/i.test(s) || /^https?:\/\//i.test(s)) return s;
    if (/^[a-z][a-z0-9+.-]*:\/\//i.test(s)) throw new Error(`${where} is the URL "${s.slice(0, 60)}": media are read from files (paths relative to the dataset file) or data URLs, never fetched`);
    return { path: s };
  }
  if (isRecord(value)) {
    if (value.bytes instanceof Uint8Array) return { bytes: value.bytes };
    if (typeof value.path === 'string' && (value.bytes === undefined || value.bytes === null)) return mediaSourceOf(value.path, where);
  }
  throw new Error(`${where} must be a file path (relative to the dataset file) or a data URL (in Parquet also binary, or {bytes, path}), got ${describe(value)}`);
}

/** The media a row names in its image and audio fields (each one source or an array), in field order; throws naming the field. */
export function mediaRefsOf(row: Record<string, unknown>, fields: MediaFields): MediaRef[] {
  const refs: MediaRef[] = [];
  for (const kind of MEDIA_KINDS) {
    const found = mediaFieldNames(fields, kind).filter((f) => present(row, f));
    if (found.length > 1) throw new Error(`has both fields ${found.map((f) => `"${f}"`).join(' and ')}: give the ${kind === 'image' ? 'images' : 'clips'} in one of them (or set data.${kind}_field)`);
    if (found.length === 0) continue;
    const field = found[0];
    const value = row[field];
    const add = (v: unknown, where: string) => refs.push({ kind, field, where, source: mediaSourceOf(v, where) });
    if (Array.isArray(value)) value.forEach((v, i) => add(v, `field "${field}"[${i}]`));
    else add(value, `field "${field}"`);
  }
  return refs;
}

/** The text placeholders are counted in: the prompt, or every message's content. */
const partText = (row: PromptPart): string => row.prompt ?? (row.messages ?? []).map((m) => m.content).join('\n');

/**
 * A row's placeholders checked against its media, kind by kind: as many placeholders as media, or
 * none, and then that kind's placeholders are put before the text (the prompt, or the first user
 * message), followed by a newline. Throws naming the field (`fieldOf`) on a mismatch.
 */
export function placeMediaPlaceholders<R extends PromptPart>(row: R, refs: readonly MediaRef[], fields: MediaFields): R {
  const text = partText(row);
  let lead = '';
  for (const kind of MEDIA_KINDS) {
    const placeholder = MEDIA_PLACEHOLDER[kind];
    const ofKind = refs.filter((r) => r.kind === kind);
    const n = ofKind.length;
    const have = countOf(text, placeholder);
    // Errors name the field the row used, or every field the kind may be in.
    const field = n ? `"${ofKind[0].field}"` : mediaFieldNames(fields, kind).map((f) => `"${f}"`).join(' or ');
    if (have === 0) {
      lead += placeholder.repeat(n);
    } else if (n === 0) {
      throw new Error(`the prompt has ${placeholders(have, kind)} but the row has no ${kind === 'image' ? 'images' : 'audio clips'} (field ${field}): give the ${kind === 'image' ? 'images' : 'clips'} in ${field}, or remove the placeholders`);
    } else if (have !== n) {
      throw new Error(`field ${field} has ${mediaCount(n, kind)} but the prompt has ${placeholders(have, kind)}: put one ${placeholder} where each goes, in order (or none, and they are put before the prompt)`);
    }
  }
  if (lead === '') return row;
  if (row.prompt !== undefined) return { ...row, prompt: `${lead}\n${row.prompt}` };
  const messages = (row.messages ?? []).slice();
  const first = messages.findIndex((m) => m.role === 'user');
  messages[first] = { ...messages[first], content: `${lead}\n${messages[first].content}` };
  return { ...row, messages };
}

/** How many media a file's rows read at once. */
const MEDIA_READ_CONCURRENCY = 8;

/**
 * Reads every medium (relative paths against `baseDir`, each file read once however many rows name
 * it, MEDIA_LIMITS.maxBytes at most, the kind its field expects). Returns each row's media, and a
 * message per medium that cannot be used ("<row source>: field "images"[1]: <why>"), in row order.
 */
export async function readRowMedia(refsByRow: readonly MediaRef[][], sources: readonly string[], baseDir: string): Promise<{ media: RowMedia[]; problems: string[] }> {
  const byPath = new Map<string, Promise<ResolvedMedia>>();
  const resolveOne = (ref: MediaRef): Promise<ResolvedMedia> => {
    const options = { baseDir, maxBytes: MEDIA_LIMITS.maxBytes, expect: ref.kind };
    if (typeof ref.source !== 'object' || !('path' in ref.source)) return resolveMediaSource(ref.source, options);
    const key = `${ref.kind}\0${path.resolve(baseDir, ref.source.path)}`;
    let pending = byPath.get(key);
    if (!pending) byPath.set(key, (pending = resolveMediaSource(ref.source, options)));
    return pending;
  };
  const jobs: Array<{ row: number; index: number; ref: MediaRef }> = [];
  refsByRow.forEach((refs, row) => refs.forEach((ref, index) => jobs.push({ row, index, ref })));
  const resolved: ResolvedMedia[][] = refsByRow.map(() => []);
  const problems: Array<{ row: number; index: number; message: string }> = [];
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < jobs.length) {
      const { row, index, ref } = jobs[next++];
      try {
        resolved[row][index] = await resolveOne(ref);
      } catch (err) {
        problems.push({ row, index, message: `${sources[row]}: ${ref.where}: ${(err as Error).message}` });
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(MEDIA_READ_CONCURRENCY, jobs.length) }, worker));
  problems.sort((a, b) => a.row - b.row || a.index - b.index);
  const media = resolved.map((list): RowMedia => {
    const all = list.map((m): PromptMedium => ({ kind: m.kind, format: m.format, bytes: m.bytes }));
    const images = all.filter((m) => m.kind === 'image');
    const audio = all.filter((m) => m.kind === 'audio');
    return { ...(images.length ? { images } : {}), ...(audio.length ? { audio } : {}) };
  });
  return { media, problems: problems.map((p) => p.message) };
}

/**
 * A rendered prompt's media in the order of its placeholders (the n-th medium fills the n-th
 * <image> or <audio>). Throws, naming `source`, when the text's placeholders do not match the row's
 * media (a system prompt or chat template that adds one).
 */
export function promptMedia(text: string, row: RowMedia, source: string): PromptMedium[] {
  const images = row.images ?? [];
  const audio = row.audio ?? [];
  for (const [kind, media] of [['image', images], ['audio', audio]] as const) {
    const have = countOf(text, MEDIA_PLACEHOLDER[kind]);
    if (have !== media.length) {
      throw new Error(`${source}: the rendered prompt has ${placeholders(have, kind)} but the row has ${mediaCount(media.length, kind)}: data.system_prompt or the chat template must not add ${MEDIA_PLACEHOLDER[kind]}`);
    }
  }
  let i = 0;
  let a = 0;
  return [...text.matchAll(PLACEHOLDER_RE)].map((m) => (m[0] === MEDIA_PLACEHOLDER.image ? images[i++] : audio[a++]));
}
