// Prompts of the OpenAI-compatible endpoint (serving/openai-server.ts) as the engine takes them:
// text encoded with bos (a text the tokenizer cannot encode is a 400), chat prompts with image and
// audio content parts (each medium's placeholder at its place, expanded to one token per embedding,
// the media decoded and processed for the model's encoders), placeholders spelled in the text
// refused, and the context checked before any medium is decoded.
import type { MediumKind } from '../engines/encoders';
import { expandMediaTokens, MEDIA_LIMITS, mediumEmbeddings, placeholderIds, type SequenceMedia } from '../engines/media/model-inputs';
import { MediaError, resolveMediaSource } from '../engines/media/sources';
import { withBos, type Tokenizer } from '../engines/tokenizers/tokenizer';
import { mediaPromptsOf } from '../rollout/media-prompts';
import { badParam, OpenAIError, type ChatMediaPart, type ChatPart } from './openai-requests';
import type { ResolvedModel } from '../rollout/resolved-model';
import type { SessionMedium } from './sessions';

export function describeError(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** encode(text); a text the tokenizer cannot encode is a 400. */
export function encodeText(tokenizer: Tokenizer, text: string, param: string): number[] {
  try {
    return tokenizer.encode(text);
  } catch (err) {
    throw badParam(param, `the prompt cannot be encoded by this model's tokenizer: ${(err as Error).message}; send only text the model's vocabulary covers`, 'invalid_prompt');
  }
}

/** [bos, ...encode(text)], as rollout/producers.ts promptTokens. */
export function encodePrompt(tokenizer: Tokenizer, text: string, param: string): number[] {
  return withBos(tokenizer, encodeText(tokenizer, text, param));
}

/** The name of a model in messages. */
export function modelName(resolved: ResolvedModel, requested: string): string {
  return JSON.stringify(resolved.name ?? requested);
}

/**
 * Refuses a prompt whose text spells a media placeholder itself (`<image>` of a tokenizer that has
 * it as a token): a placeholder stands for a medium, and only a media content part gives one.
 * `kinds`: the media given, in order. A model without encoders has no placeholders to check.
 */
function checkPlaceholders(resolved: ResolvedModel, tokens: readonly number[], kinds: readonly MediumKind[], param: string): void {
  const ids = placeholderIds(resolved.engine.model);
  for (const kind of ['image', 'audio'] as const) {
    const id = ids[kind];
    if (id === undefined) continue;
    const extra = tokens.filter((t) => t === id).length - kinds.filter((k) => k === kind).length;
    if (extra > 0) {
      let name = `token ${id}`;
      try {
        name = JSON.stringify(resolved.tokenizer.decode([id]));
      } catch {
        // keep the id
      }
      throw badParam(
        param,
        `the prompt text contains this model's ${kind} placeholder ${name} ${extra} time${extra === 1 ? '' : 's'} without ${kind === 'image' ? 'an image' : 'a clip'} for it: ` +
          `send ${kind === 'image' ? 'images as {"type": "image_url"}' : 'audio as {"type": "input_audio"}'} content parts of a chat message (each puts its placeholder where it is), and remove the placeholder from the text`,
        'invalid_prompt',
      );
    }
  }
}

/** A prompt as the engine takes it. */
export interface PromptInput {
  /** bos + the prompt, media placeholders expanded. */
  tokens: number[];
  /** The processed media; undefined for a text-only prompt. */
  media?: SequenceMedia;
  /** The media with their ids, in placeholder order (what a session records). */
  sessionMedia: SessionMedium[];
}

/** Refuses, with a 400, a prompt (placeholders expanded for `kinds`, its media) that leaves no room in the context for a new token. */
function checkContext(resolved: ResolvedModel, tokens: readonly number[], kinds: readonly MediumKind[], promptParam: string): void {
  const n = tokens.length;
  const C = resolved.engine.model.contextLength;
  if (n >= C) {
    if (kinds.length === 0) {
      throw badParam(
        promptParam,
        `the prompt is ${n} tokens (bos + ${n - 1} of text), but this model's context is ${C} tokens and generation needs room for at least one more: shorten the prompt to at most ${C - 2} tokens of text`,
        'context_length_exceeded',
      );
    }
    const cfg = resolved.engine.model;
    const images = kinds.filter((k) => k === 'image').length;
    const clips = kinds.length - images;
    const mediaTokens = kinds.reduce((sum, k) => sum + mediumEmbeddings(cfg, k), 0);
    const each = [
      images ? `${images} image${images === 1 ? '' : 's'} of ${mediumEmbeddings(cfg, 'image')} tokens each` : '',
      clips ? `${clips} clip${clips === 1 ? '' : 's'} of ${mediumEmbeddings(cfg, 'audio')} tokens each` : '',
    ].filter(Boolean).join(' and ');
    throw badParam(
      promptParam,
      `the prompt is ${n} tokens (bos + ${n - 1 - mediaTokens} of text + ${mediaTokens} for its media: ${each}), but this model's context is ${C} tokens and generation needs room for at least one more: shorten the text or send fewer media`,
      'context_length_exceeded',
    );
  }
}

/** A text-only prompt's tokens. */
export function textPrompt(resolved: ResolvedModel, text: string, promptParam: string): PromptInput {
  const tokens = encodePrompt(resolved.tokenizer, text, promptParam);
  checkPlaceholders(resolved, tokens, [], promptParam);
  checkContext(resolved, tokens, [], promptParam);
  return { tokens, sessionMedia: [] };
}

/** A token-id prompt (vLLM's form), used as it is: ids must be in the vocabulary, no placeholder, room left in the context. */
export function tokenPrompt(resolved: ResolvedModel, tokens: number[], promptParam: string): PromptInput {
  const V = resolved.engine.model.vocabSize;
  const bad = tokens.findIndex((t) => t >= V);
  if (bad >= 0) throw badParam(promptParam, `${promptParam}[${bad}] is token ${tokens[bad]}, but this model's vocabulary has ${V} tokens (ids 0..${V - 1})`);
  checkPlaceholders(resolved, tokens, [], promptParam);
  const C = resolved.engine.model.contextLength;
  if (tokens.length >= C) throw badParam(promptParam, `the prompt is ${tokens.length} tokens, but this model's context is ${C} tokens and generation needs room for at least one more`, 'context_length_exceeded');
  return { tokens, sessionMedia: [] };
}

/** A media part's failure as the 400 (or 500) it is answered with, naming the part. */
function mediaPartError(err: unknown, part: ChatMediaPart): OpenAIError {
  if (!(err instanceof MediaError)) return new OpenAIError(500, `${part.param}: processing the ${part.type === 'image' ? 'image' : 'clip'} failed: ${describeError(err)}`, part.param, 'media_processing_failed');
  if (err.code === 'MediaNetworkRefused') {
    const url = part.type === 'image' ? part.url : '';
    return badParam(
      part.param,
      `${part.param} is the network URL ${JSON.stringify(url.length > 80 ? `${url.slice(0, 77)}...` : url)}, and this endpoint never fetches media from the network: ` +
        'send the image inline as a data URL, "data:image/png;base64,<base64 of the file>" (PNG or JPEG)',
      'media_url_refused',
    );
  }
  return badParam(part.param, `${part.param}: ${err.message}`, err.code === 'MediaTooLarge' ? 'media_too_large' : 'invalid_media');
}

/**
 * A chat prompt with media: bos, each text part's tokens, each medium's placeholder at its place,
 * then the placeholders expanded (one token per embedding) and the media decoded and processed for
 * the model's encoders. A medium the model has no encoder for, a network URL, a medium over
 * MEDIA_LIMITS or the audio encoder's window, or bytes that are not PNG / JPEG / WAV are 400s
 * naming the part.
 */
export async function mediaPrompt(resolved: ResolvedModel, requested: string, parts: readonly ChatPart[], promptParam: string): Promise<PromptInput> {
  const cfg = resolved.engine.model;
  const ids: number[] = [];
  const mediaParts: ChatMediaPart[] = [];
  for (const part of parts) {
    if (part.type === 'text') {
      ids.push(...encodeText(resolved.tokenizer, part.text, promptParam));
      continue;
    }
    const encoder = part.type === 'image' ? 'vision' : 'audio';
    const section = cfg[encoder];
    if (!section) {
      throw badParam(
        part.param,
        `model ${modelName(resolved, requested)} has no ${encoder} encoder, so it cannot take ${part.param} (${part.type === 'image' ? 'an image' : 'an audio clip'}): send text only to this model, or use a model whose config has a \`${encoder}\` section`,
        'unsupported_media',
      );
    }
    if (section.tokenId === undefined) {
      throw badParam(part.param, `model ${modelName(resolved, requested)}'s ${encoder} encoder has no placeholder token (model.${encoder}.tokenId is not set), so it cannot take ${part.param}`, 'unsupported_media');
    }
    ids.push(section.tokenId);
    mediaParts.push(part);
  }
  const kinds = mediaParts.map((p): MediumKind => p.type);
  const unexpanded = withBos(resolved.tokenizer, ids);
  checkPlaceholders(resolved, unexpanded, kinds, promptParam);
  // The context is checked before any medium is decoded.
  const tokens = expandMediaTokens(unexpanded, cfg, kinds);
  checkContext(resolved, tokens, kinds, promptParam);
  const processor = resolved.media ?? mediaPromptsOf(resolved.engine);
  const media: SequenceMedia = { images: [], audio: [] };
  const sessionMedia: SessionMedium[] = [];
  for (const part of mediaParts) {
    try {
      const source = await resolveMediaSource(part.type === 'image' ? part.url : { base64: part.data }, { maxBytes: MEDIA_LIMITS.maxBytes, expect: part.type });
      const medium = { kind: source.kind, format: source.format, bytes: source.bytes };
      const added = await processor.add([medium]);
      media.images.push(...added.media.images);
      media.audio.push(...added.media.audio);
      sessionMedia.push({ ...medium, id: added.ids[0] });
    } catch (err) {
      throw mediaPartError(err, part);
    }
  }
  return { tokens, media, sessionMedia };
}

/**
 * Stop strings to token ids. The engine stops on single tokens, so each stop string must be one
 * token of the tokenizer, or the text eos decodes to (eos always stops anyway).
 */
export function stopTokens(tokenizer: Tokenizer, stops: readonly string[]): number[] {
  const eosText = tokenizer.decode([tokenizer.eosId]);
  const ids = new Set<number>([tokenizer.eosId]);
  for (const s of stops) {
    if (s === eosText) continue;
    let encoded: number[];
    try {
      encoded = s === '' ? [] : tokenizer.encode(s);
    } catch (err) {
      throw badParam('stop', `stop sequence ${JSON.stringify(s)} cannot be encoded by this model's tokenizer: ${(err as Error).message}`);
    }
    if (encoded.length !== 1) {
      throw badParam(
        'stop',
        `stop sequence ${JSON.stringify(s)} is ${encoded.length} tokens of this model's tokenizer, but this endpoint only stops on single tokens: ` +
          `use a stop string that is exactly one token (one character of a character-level model), or ${JSON.stringify(eosText)} for end-of-sequence (which always stops generation)`,
      );
    }
    ids.add(encoded[0]);
  }
  return [...ids];
}
