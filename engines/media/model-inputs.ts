// From a medium's bytes to the exact input a model's encoder takes, and from a batch of token
// sequences with media to the forward pass's MediaInputs (engines/model.ts). Shapes are fixed by the
// model config, so any batch of sequences stacks into one tensor per kind: an image always becomes
// the square grid of floor(sqrt(vision.maxPatches))^2 patches (resized without keeping the aspect
// ratio, as CLIP and SigLIP do), a clip always audio.maxFrames log-mel frames (the
// waveform zero-padded to that length, as Whisper pads every clip to 30 s).
//
// A sequence's tokens hold each medium as a run of its placeholder token (vision.tokenId /
// audio.tokenId), one per embedding (expandMediaTokens); the k-th placeholder position of a kind takes
// row k of that kind's embeddings, so the tokens alone say where the media go.
import { decodeAudio, decodeImage } from './decode';
import { processAudio, type MonoAudio } from './audio';
import { patchify, normalize, resizeBilinear, type RgbImage } from './image';
import { WHISPER_HOP, WHISPER_SAMPLE_RATE } from './mel';
import { MediaError, KIND_OF_FORMAT, type MediaFormat } from './sources';
import { audioEmbeddings, embeddingIndex, expandPlaceholders, type ExpandedPrompt, type MediumKind } from '../encoders';
import type { AudioConfig, ModelConfig, VisionConfig } from '../model';

/** SigLIP's normalization: x / 255 mapped to [-1, 1]. */
export const IMAGE_MEAN: [number, number, number] = [0.5, 0.5, 0.5];
export const IMAGE_STD: [number, number, number] = [0.5, 0.5, 0.5];
/** The largest medium accepted, in bytes, and the most pixels an image may declare. */
export const MEDIA_LIMITS = { maxBytes: 8 * 1024 * 1024, maxPixels: 4096 * 4096 } as const;

/** One sequence's processed media, each kind in order of appearance. */
export interface SequenceMedia {
  /** Each [imageEmbeddings(vision), patchSize^2 * 3]. */
  images: Float32Array[];
  /** Each [audio.maxFrames, audio.nMels]. */
  audio: Float32Array[];
}

/** Patches per side of every image. */
export function imageSide(v: VisionConfig): number {
  return Math.floor(Math.sqrt(v.maxPatches));
}

/** Embeddings (= patches) of one image, and of one clip. */
export function mediumEmbeddings(cfg: ModelConfig, kind: MediumKind): number {
  if (kind === 'image') {
    if (!cfg.vision) throw new MediaError('MediaInvalid', 'an image was given but the model has no vision encoder: add model.vision, or remove the image');
    return imageSide(cfg.vision) ** 2;
  }
  if (!cfg.audio) throw new MediaError('MediaInvalid', 'an audio clip was given but the model has no audio encoder: add model.audio, or remove the clip');
  return audioEmbeddings(cfg.audio);
}

/** An image as the vision encoder's input: [side^2, p*p*3]. */
export function imageInput(img: RgbImage, v: VisionConfig): Float32Array {
  const px = imageSide(v) * v.patchSize;
  return patchify(normalize(resizeBilinear(img, px, px), IMAGE_MEAN, IMAGE_STD), px, px, v.patchSize).patches;
}

/** The longest clip the audio encoder takes, in seconds. */
export function audioSeconds(a: AudioConfig): number {
  return (a.maxFrames * WHISPER_HOP) / WHISPER_SAMPLE_RATE;
}

/** A clip as the audio encoder's input: [maxFrames, nMels]; refused when longer than the encoder's window. */
export function audioInput(audio: MonoAudio, a: AudioConfig): Float32Array {
  const seconds = audioSeconds(a);
  const clipSeconds = audio.samples.length / audio.sampleRate;
  if (clipSeconds > seconds) {
    throw new MediaError('MediaTooLarge', `the audio clip is ${clipSeconds.toFixed(2)} s long, over the audio encoder's ${seconds} s window (model.audio.maxFrames ${a.maxFrames} at 100 frames/s): trim the clip or raise maxFrames`);
  }
  // Pad the waveform with silence to the window, as Whisper does, so every clip gives maxFrames frames.
  const padded = new Float32Array(Math.round(seconds * audio.sampleRate));
  padded.set(audio.samples);
  const mel = processAudio({ sampleRate: audio.sampleRate, samples: padded }, { maxSeconds: seconds, nMels: a.nMels });
  if (mel.nFrames !== a.maxFrames) throw new Error(`internal error: a ${seconds} s window gave ${mel.nFrames} log-mel frames, expected ${a.maxFrames}`);
  return mel.frames;
}

/** Decodes (within MEDIA_LIMITS) and processes one medium for `cfg`'s encoder of its kind. */
export function modelMediaInput(bytes: Uint8Array, format: MediaFormat, cfg: ModelConfig): { kind: MediumKind; data: Float32Array } {
  if (bytes.length > MEDIA_LIMITS.maxBytes) {
    throw new MediaError('MediaTooLarge', `a ${format} medium of ${(bytes.length / 1048576).toFixed(1)} MiB is over the ${MEDIA_LIMITS.maxBytes / 1048576} MiB limit: downscale the image or shorten the clip`);
  }
  const kind = KIND_OF_FORMAT[format];
  mediumEmbeddings(cfg, kind);
  if (kind === 'image') return { kind, data: imageInput(decodeImage(bytes, format, { maxPixels: MEDIA_LIMITS.maxPixels }), cfg.vision as VisionConfig) };
  const a = cfg.audio as AudioConfig;
  return { kind, data: audioInput(decodeAudio(bytes, { maxSeconds: audioSeconds(a) }), a) };
}

/** The placeholder token ids of the model's encoders. */
export function placeholderIds(cfg: ModelConfig): Partial<Record<MediumKind, number>> {
  const ids: Partial<Record<MediumKind, number>> = {};
  if (cfg.vision?.tokenId !== undefined) ids.image = cfg.vision.tokenId;
  if (cfg.audio?.tokenId !== undefined) ids.audio = cfg.audio.tokenId;
  return ids;
}

/** `tokens` with its n-th placeholder repeated once per embedding of kinds[n]. */
export function expandMediaTokens(tokens: readonly number[], cfg: ModelConfig, kinds: readonly MediumKind[]): number[] {
  for (const kind of kinds) {
    const id = kind === 'image' ? cfg.vision?.tokenId : cfg.audio?.tokenId;
    if (id === undefined) throw new MediaError('MediaInvalid', `the model's ${kind === 'image' ? 'vision' : 'audio'} encoder has no tokenId: set model.${kind === 'image' ? 'vision' : 'audio'}.tokenId to the <${kind}> placeholder's token id`);
  }
  return expandPlaceholders(tokens, placeholderIds(cfg), kinds.map((kind) => ({ kind, embeddings: mediumEmbeddings(cfg, kind) }))).tokens;
}

/**
 * Per position of `tokens`: null for text, else the medium kind and the embedding row among this
 * sequence's embeddings of that kind. Throws unless each kind's placeholder positions are exactly
 * its media's embeddings (every medium's run whole).
 */
export function sequenceMediaLayout(tokens: ArrayLike<number>, cfg: ModelConfig, media: SequenceMedia): ExpandedPrompt['media'] {
  const ids = placeholderIds(cfg);
  const rows: Record<MediumKind, number> = { image: 0, audio: 0 };
  const layout: ExpandedPrompt['media'] = [];
  for (let t = 0; t < tokens.length; t++) {
    const kind = tokens[t] === ids.image ? 'image' : tokens[t] === ids.audio ? 'audio' : undefined;
    layout.push(kind ? { kind, row: rows[kind]++ } : null);
  }
  for (const kind of ['image', 'audio'] as const) {
    const given = kind === 'image' ? media.images.length : media.audio.length;
    const expected = given === 0 ? 0 : given * mediumEmbeddings(cfg, kind);
    if (rows[kind] !== expected) {
      throw new MediaError('MediaInvalid', `the sequence has ${rows[kind]} <${kind}> positions but ${given} ${kind === 'image' ? 'images' : 'clips'}${given ? ` x ${mediumEmbeddings(cfg, kind)} embeddings` : ''}: expand each placeholder with expandMediaTokens and give one medium per placeholder`);
    }
  }
  return layout;
}

/** The media inputs of a forward pass over B rows of T positions, as flat arrays with their dims. */
export interface BatchMedia {
  images?: { data: Float32Array; dims: [number, number, number] };
  audio?: { data: Float32Array; dims: [number, number, number] };
  /** [B, T] row-major (MediaInputs.embeddingIndex). */
  embeddingIndex: Int32Array;
}

function stack(parts: Float32Array[], rows: number, width: number): { data: Float32Array; dims: [number, number, number] } {
  const data = new Float32Array(parts.length * rows * width);
  parts.forEach((p, i) => {
    if (p.length !== rows * width) throw new MediaError('MediaInvalid', `a processed medium has ${p.length} values, expected ${rows} x ${width}: process it with modelMediaInput for this model`);
    data.set(p, i * rows * width);
  });
  return { data, dims: [parts.length, rows, width] };
}

/**
 * The media inputs of a batch: row b holds `rows[b].tokens` from position `offset` (its left
 * padding; 0 when right-padded) and is cut at T. Undefined when no row has media. Media positions
 * past T (a sequence's final target) are simply not gathered. A medium given as the same array to
 * several rows (a GRPO group's samples share their prompt's processed media) is encoded once: its
 * rows' positions all gather its embeddings, and their gradients add up there.
 */
export function batchMediaInputs(cfg: ModelConfig, rows: ReadonlyArray<{ tokens: ArrayLike<number>; media?: SequenceMedia; offset?: number }>, T: number): BatchMedia | undefined {
  if (!rows.some((r) => r.media && (r.media.images.length > 0 || r.media.audio.length > 0))) return undefined;
  const empty: SequenceMedia = { images: [], audio: [] };
  const images = rows.flatMap((r) => r.media?.images ?? []);
  const audio = rows.flatMap((r) => r.media?.audio ?? []);
  const perImage = images.length ? mediumEmbeddings(cfg, 'image') : 0;
  const perClip = audio.length ? mediumEmbeddings(cfg, 'audio') : 0;
  const layouts = rows.map((r) => {
    const media = r.media ?? empty;
    const layout = sequenceMediaLayout(r.tokens, cfg, media);
    return { media: [...new Array<null>(r.offset ?? 0).fill(null), ...layout].slice(0, T), rows: { image: media.images.length * perImage, audio: media.audio.length * perClip } };
  });
  const uniqueImages = [...new Set(images)];
  const uniqueAudio = [...new Set(audio)];
  const index = embeddingIndex(layouts, T);
  // Media rows past the B x T text rows: every image's, then every clip's, in the order given; remapped to the unique media's.
  const text = rows.length * T;
  const audioFrom = text + images.length * perImage;
  const imageOf = images.map((m) => uniqueImages.indexOf(m));
  const clipOf = audio.map((m) => uniqueAudio.indexOf(m));
  for (let i = 0; i < index.length; i++) {
    const v = index[i];
    if (v < text) continue;
    if (v < audioFrom) index[i] = text + imageOf[Math.floor((v - text) / perImage)] * perImage + ((v - text) % perImage);
    else index[i] = text + uniqueImages.length * perImage + clipOf[Math.floor((v - audioFrom) / perClip)] * perClip + ((v - audioFrom) % perClip);
  }
  return {
    ...(images.length && cfg.vision ? { images: stack(uniqueImages, mediumEmbeddings(cfg, 'image'), cfg.vision.patchSize ** 2 * 3) } : {}),
    ...(audio.length && cfg.audio ? { audio: stack(uniqueAudio, cfg.audio.maxFrames, cfg.audio.nMels) } : {}),
    embeddingIndex: index,
  };
}
