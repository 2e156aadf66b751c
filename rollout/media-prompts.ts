// Media between the tasks, the engines and the transfer queue. A prompt (or an observation) with
// images or audio becomes: its tokens with each placeholder expanded to one token per embedding,
// the processed encoder inputs (engines/media/model-inputs.ts), and the media ids, sha256 of the
// bytes, in placeholder order. Rollout writes the bytes to the run's media store (beside its
// checkpoints) and the sample keeps only the ids; the trainer and the reference stage turn the ids
// back into encoder inputs. Processed inputs are cached by id, so the held-out set and repeated
// media are decoded and processed once per process.
import { mediaIdOf, type MediaStore } from '../engines/media/store';
import { expandMediaTokens, modelMediaInput, type SequenceMedia } from '../engines/media/model-inputs';
import { MediaError, type MediaFormat } from '../engines/media/sources';
import type { ModelConfig } from '../engines/model';
import { withBos, type Tokenizer } from '../engines/tokenizers/tokenizer';
import type { PromptMedium, TaskPrompt } from '../envs/task';

/** A prompt as the engines take it. */
export interface PromptInputs {
  /** bos + the text, placeholders expanded. */
  tokens: number[];
  /** Undefined when the prompt has no media. */
  media?: SequenceMedia;
  /** The media ids, in placeholder order (what a sample stores). */
  mediaIds?: string[];
}

interface Processed {
  kind: 'image' | 'audio';
  data: Float32Array;
}

/**
 * The most processed media kept per process, least recently used evicted first (16 image patches
 * of a tiny encoder are 12 KiB; a 2 s clip 64 KiB). Without a store (the in-process loop) a step's
 * media must fit: each is used again by the trainer after rollout.
 */
const CACHE_ENTRIES = 2048;

export class MediaPrompts {
  private readonly cache = new Map<string, Processed>();

  /** `store`: where media are put (rollout) and read back (training); none for purely in-memory use. */
  constructor(
    readonly model: ModelConfig,
    readonly store?: MediaStore,
    private readonly cacheEntries = CACHE_ENTRIES,
  ) {}

  private remember(id: string, p: Processed): Processed {
    if (this.cache.size >= this.cacheEntries) this.cache.delete(this.cache.keys().next().value as string);
    this.cache.set(id, p);
    return p;
  }

  /** The cached input of `id`, marked most recently used. */
  private cached(id: string): Processed | undefined {
    const p = this.cache.get(id);
    if (p) {
      this.cache.delete(id);
      this.cache.set(id, p);
    }
    return p;
  }

  private process(id: string, bytes: Uint8Array, format: MediaFormat): Processed {
    return this.cached(id) ?? this.remember(id, modelMediaInput(bytes, format, this.model));
  }

  /** Processes (and, with a store, stores) media in order; returns their ids and the sequence's encoder inputs. */
  async add(media: readonly PromptMedium[]): Promise<{ ids: string[]; media: SequenceMedia }> {
    const ids: string[] = [];
    const out: SequenceMedia = { images: [], audio: [] };
    for (const m of media) {
      const id = mediaIdOf(m.bytes);
      const p = this.process(id, m.bytes, m.format);
      if (p.kind !== m.kind) throw new MediaError('MediaFormat', `a medium declared ${m.kind} is ${p.kind === 'image' ? 'an image' : 'audio'} (${m.format})`);
      if (this.store) await this.store.put(m.bytes, { kind: m.kind, format: m.format });
      ids.push(id);
      (p.kind === 'image' ? out.images : out.audio).push(p.data);
    }
    return { ids, media: out };
  }

  /** Text (with placeholders) and its media as tokens + inputs; `bos` prepends the tokenizer's bos. */
  async encode(tokenizer: Tokenizer, text: string, media: readonly PromptMedium[] = [], bos = false): Promise<PromptInputs> {
    const ids = tokenizer.encode(text);
    const base = bos ? withBos(tokenizer, ids) : ids;
    if (media.length === 0) return { tokens: base };
    const added = await this.add(media);
    return { tokens: expandMediaTokens(base, this.model, media.map((m) => m.kind)), media: added.media, mediaIds: added.ids };
  }

  /** A task prompt: bos, the text with placeholders expanded, its media. */
  prompt(tokenizer: Tokenizer, prompt: TaskPrompt): Promise<PromptInputs> {
    return this.encode(tokenizer, prompt.text, prompt.media ?? [], true);
  }

  /** The encoder inputs of stored media ids (a sample's), from the cache or the store. */
  async fromIds(ids: readonly string[]): Promise<SequenceMedia> {
    const out: SequenceMedia = { images: [], audio: [] };
    for (const id of ids) {
      let p = this.cached(id);
      if (!p) {
        if (!this.store) throw new MediaError('MediaNotFound', `media ${id} is not in this process's cache and there is no media store to read it from`);
        const { bytes, ref } = await this.store.get(id);
        p = this.process(id, bytes, ref.format);
      }
      (p.kind === 'image' ? out.images : out.audio).push(p.data);
    }
    return out;
  }
}

// An engine's in-memory MediaPrompts (no store), for callers that only generate (evaluation, the
// warm start): its cache then lasts as long as the engine.
const ofEngine = new WeakMap<object, MediaPrompts>();

/** The in-memory MediaPrompts of `engine` (one per engine, created on first use). */
export function mediaPromptsOf(engine: { model: ModelConfig }): MediaPrompts {
  let m = ofEngine.get(engine);
  if (!m) ofEngine.set(engine, (m = new MediaPrompts(engine.model)));
  return m;
}
