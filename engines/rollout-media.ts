// The rollout engine's media (engines/rollout.ts): the checks a call's prompt media must pass before
// anything runs, and a batch's media inputs (batchMediaInputs) as prefill graph feeds.
import * as ort from 'onnxruntime-node';
import { imageSide, placeholderIds, sequenceMediaLayout, type BatchMedia, type SequenceMedia } from './media/model-inputs';
import { MediaError } from './media/sources';
import type { ModelConfig } from './model';
import { GRAPH_NAMES } from './model-onnx';

/**
 * Refuses, naming the prompt, media that cannot go with their prompt: a kind the model has no
 * encoder (or placeholder tokenId) for, a processed medium of the wrong size, placeholder runs that
 * do not match the media. Once any prompt of a call has media, every prompt's placeholders must
 * match its media (none for a prompt without), so a call's result does not depend on its batching.
 */
export function checkPromptMedia(cfg: ModelConfig, prompts: ReadonlyArray<readonly number[]>, media: ReadonlyArray<SequenceMedia | undefined>): void {
  if (media.length !== prompts.length) throw new Error(`generate: ${media.length} media entries for ${prompts.length} prompts; give one per prompt (undefined for a text-only prompt)`);
  const ids = placeholderIds(cfg);
  media.forEach((m, i) => {
    if (!m) return;
    const kinds = [
      { parts: m.images, what: 'images', section: 'vision', present: cfg.vision !== undefined, id: ids.image, size: cfg.vision ? imageSide(cfg.vision) ** 2 * cfg.vision.patchSize ** 2 * 3 : 0 },
      { parts: m.audio, what: 'audio clips', section: 'audio', present: cfg.audio !== undefined, id: ids.audio, size: cfg.audio ? cfg.audio.maxFrames * cfg.audio.nMels : 0 },
    ];
    for (const k of kinds) {
      if (k.parts.length === 0) continue;
      const given = `prompt ${i} has ${k.parts.length} ${k.what}`;
      if (!k.present) throw new MediaError('MediaInvalid', `${given}, but the model has no ${k.section} encoder: add model.${k.section}, or remove the ${k.what}`);
      if (k.id === undefined) throw new MediaError('MediaInvalid', `${given}, but model.${k.section}.tokenId is not set: set it to the placeholder's token id`);
      const bad = k.parts.findIndex((x) => x.length !== k.size);
      if (bad >= 0) throw new MediaError('MediaInvalid', `prompt ${i}: of its ${k.what}, number ${bad} has ${k.parts[bad].length} values, expected ${k.size}: process it with modelMediaInput for this model`);
    }
  });
  if (!media.some((m) => m && (m.images.length > 0 || m.audio.length > 0))) return;
  const none: SequenceMedia = { images: [], audio: [] };
  prompts.forEach((p, i) => {
    try {
      sequenceMediaLayout(p, cfg, media[i] ?? none);
    } catch (err) {
      if (err instanceof MediaError) throw new MediaError(err.code, `prompt ${i}: ${err.message}`);
      throw err;
    }
  });
}

/** A batch's media inputs (batchMediaInputs over B rows of T positions) as prefill graph feeds. */
export function mediaFeeds(m: BatchMedia, B: number, T: number): Record<string, ort.Tensor> {
  return {
    ...(m.images ? { [GRAPH_NAMES.images]: new ort.Tensor('float32', m.images.data, m.images.dims) } : {}),
    ...(m.audio ? { [GRAPH_NAMES.audio]: new ort.Tensor('float32', m.audio.data, m.audio.dims) } : {}),
    [GRAPH_NAMES.embeddingIndex]: new ort.Tensor('int32', m.embeddingIndex, [B, T]),
  };
}
