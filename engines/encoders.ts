// The vision and audio encoders of the one model definition (engines/model.ts), forward pass only,
// written against the same TensorOps as the language model so the trainer (tfjs) and rollout (ONNX)
// run the same function. Both are pre-LayerNorm transformers with the GPT block shapes and
// non-causal attention, a final LayerNorm and a linear projector to the language model's width:
//
// - vision: patches [nImages, n, p*p*3] (engines/media/image.ts processImage) -> linear patch
//   embedding + learned positions -> blocks -> ln_f -> proj: n embeddings per image.
// - audio (Whisper's front end): log-mel [nClips, F, nMels] (engines/media/audio.ts processAudio) ->
//   conv1 (kernel 3, stride 1, padding 1) GELU -> conv2 (kernel 3, stride 2, padding 1) GELU ->
//   positions (learned, or Whisper's fixed table: engines/whisper.ts) -> blocks -> ln_f -> `stack`
//   consecutive positions concatenated -> proj (one linear, or linear GELU linear):
//   ceil(F / 2) / stack embeddings per clip. `gelu: "erf"` makes every GELU before the projector exact.
//
// Also here: expandPlaceholders (a prompt's `<image>` / `<audio>` token repeated once per embedding)
// and embeddingIndex (the gather index that puts the media embeddings at those positions).
import { blockGelu, gptBlock, gptBlockParameters, LAYER_NORM_EPS, type BlockDims } from './gpt-block';
import type { AudioConfig, MediaInputs, ModelConfig, ParameterSpec, TensorOps } from './model';

/** Kernel width of both audio convolutions (Whisper's). */
export const AUDIO_KERNEL = 3;

/** Embeddings an audio clip of `frames` log-mel frames produces: conv2's stride halves them, rounding up. */
export function audioEmbeddingCount(frames: number): number {
  return Math.floor((frames + 2 - AUDIO_KERNEL) / 2) + 1;
}

function blockSpec(prefix: string, D: number, F: number, nLayers: number): ParameterSpec[] {
  const zeros = { kind: 'zeros' as const };
  const ones = { kind: 'ones' as const };
  const residualStd = 0.02 / Math.sqrt(2 * nLayers);
  const spec: ParameterSpec[] = [];
  for (let l = 0; l < nLayers; l++) spec.push(...gptBlockParameters(`${prefix}blocks.${l}.`, D, F, residualStd));
  spec.push({ name: `${prefix}ln_f.weight`, shape: [D], init: ones }, { name: `${prefix}ln_f.bias`, shape: [D], init: zeros });
  return spec;
}

/** A projector from `din` to the LM's width D: one linear layer, or linear + GELU + linear (`proj.out`) through `hidden`. */
function projectorSpec(prefix: string, din: number, D: number, hidden: number | undefined): ParameterSpec[] {
  const normal = (std: number) => ({ kind: 'normal' as const, std });
  const zeros = { kind: 'zeros' as const };
  const first = hidden ?? D;
  const spec: ParameterSpec[] = [
    { name: `${prefix}proj.weight`, shape: [din, first], init: normal(0.02) },
    { name: `${prefix}proj.bias`, shape: [first], init: zeros },
  ];
  if (hidden !== undefined) spec.push({ name: `${prefix}proj.out.weight`, shape: [hidden, D], init: normal(0.02) }, { name: `${prefix}proj.out.bias`, shape: [D], init: zeros });
  return spec;
}

/** The encoders' parameters (none when cfg has neither vision nor audio), in a fixed order after the language model's. */
export function encoderParameterSpec(cfg: ModelConfig): ParameterSpec[] {
  const spec: ParameterSpec[] = [];
  const normal = (std: number) => ({ kind: 'normal' as const, std });
  const zeros = { kind: 'zeros' as const };
  const D = cfg.dModel;
  const v = cfg.vision;
  if (v) {
    const dv = v.dModel;
    spec.push(
      { name: 'vision.patch_embed.weight', shape: [v.patchSize * v.patchSize * 3, dv], init: normal(0.02) },
      { name: 'vision.patch_embed.bias', shape: [dv], init: zeros },
      { name: 'vision.pos_emb.weight', shape: [v.maxPatches, dv], init: normal(0.01) },
      ...blockSpec('vision.', dv, v.dFF, v.nLayers),
      { name: 'vision.proj.weight', shape: [dv, D], init: normal(0.02) },
      { name: 'vision.proj.bias', shape: [D], init: zeros },
    );
  }
  const a = cfg.audio;
  if (a) {
    const da = a.dModel;
    spec.push(
      // [k, Cin, Cout]: tfjs's conv1d filter layout (PyTorch / Hugging Face Whisper store [Cout, Cin, k]).
      { name: 'audio.conv1.weight', shape: [AUDIO_KERNEL, a.nMels, da], init: normal(0.02) },
      { name: 'audio.conv1.bias', shape: [da], init: zeros },
      { name: 'audio.conv2.weight', shape: [AUDIO_KERNEL, da, da], init: normal(0.02) },
      { name: 'audio.conv2.bias', shape: [da], init: zeros },
      { name: 'audio.pos_emb.weight', shape: [audioEmbeddingCount(a.maxFrames), da], init: normal(0.01) },
      ...blockSpec('audio.', da, a.dFF, a.nLayers),
      ...projectorSpec('audio.', (a.stack ?? 1) * da, D, a.projectorHidden),
    );
  }
  return spec;
}

/** Positions, blocks and final LayerNorm of one encoder: x [N, n, d] -> [N, n, d] (its output before the projector). */
export function encoderHidden<T>(ops: TensorOps<T>, dims: BlockDims & { nLayers: number }, w: Record<string, T>, prefix: string, x: T): T {
  let h = ops.add(x, ops.leadingRows(w[`${prefix}pos_emb.weight`], x));
  for (let l = 0; l < dims.nLayers; l++) h = gptBlock(ops, dims, w, `${prefix}blocks.${l}.`, h, undefined).x;
  return ops.layerNorm(h, w[`${prefix}ln_f.weight`], w[`${prefix}ln_f.bias`], LAYER_NORM_EPS);
}

/** The projector: h [N, n, din] -> [N * n, D] (a second layer when `proj.out.weight` exists). */
function project<T>(ops: TensorOps<T>, cfg: ModelConfig, w: Record<string, T>, prefix: string, h: T): T {
  let y = ops.linear(h, w[`${prefix}proj.weight`], w[`${prefix}proj.bias`]);
  if (w[`${prefix}proj.out.weight`] !== undefined) y = ops.linear(ops.gelu(y), w[`${prefix}proj.out.weight`], w[`${prefix}proj.out.bias`]);
  return ops.reshape(y, [-1, cfg.dModel]);
}

function encoderTrunk<T>(ops: TensorOps<T>, cfg: ModelConfig, dims: { dModel: number; nHeads: number; nLayers: number }, w: Record<string, T>, prefix: string, x: T): T {
  return project(ops, cfg, w, prefix, encoderHidden(ops, dims, w, prefix, x));
}

/** Embeddings a clip gives the language model: the encoder's positions over audio.stack. */
export function audioEmbeddings(a: AudioConfig): number {
  return audioEmbeddingCount(a.maxFrames) / (a.stack ?? 1);
}

/** patches [nImages, n, p*p*3] -> [nImages * n, D]. */
export function visionEncoder<T>(ops: TensorOps<T>, cfg: ModelConfig, w: Record<string, T>, patches: T): T {
  if (!cfg.vision) throw new Error('images given but the model config has no vision encoder');
  return encoderTrunk(ops, cfg, cfg.vision, w, 'vision.', ops.linear(patches, w['vision.patch_embed.weight'], w['vision.patch_embed.bias']));
}

/** The audio encoder before its projector: log-mel [nClips, F, nMels] -> [nClips, ceil(F / 2), d] (Whisper's encoder output). */
export function audioEncoderHidden<T>(ops: TensorOps<T>, a: AudioConfig, w: Record<string, T>, frames: T): T {
  const h1 = blockGelu(ops, a, ops.conv1d(frames, w['audio.conv1.weight'], w['audio.conv1.bias'], 1, 1));
  const h2 = blockGelu(ops, a, ops.conv1d(h1, w['audio.conv2.weight'], w['audio.conv2.bias'], 2, 1));
  return encoderHidden(ops, a, w, 'audio.', h2);
}

/** log-mel [nClips, F, nMels] -> [nClips * audioEmbeddings(audio), D]: audio.stack consecutive positions per embedding. */
export function audioEncoder<T>(ops: TensorOps<T>, cfg: ModelConfig, w: Record<string, T>, frames: T): T {
  const a = cfg.audio;
  if (!a) throw new Error('audio given but the model config has no audio encoder');
  const h = audioEncoderHidden(ops, a, w, frames);
  const stack = a.stack ?? 1;
  return project(ops, cfg, w, 'audio.', stack === 1 ? h : ops.reshape(h, [0, -1, stack * a.dModel]));
}

/** The media embedding rows, in embeddingIndex's order: every image's, then every clip's. */
export function mediaEmbeddings<T>(ops: TensorOps<T>, cfg: ModelConfig, w: Record<string, T>, media: MediaInputs<T>): T[] {
  const rows: T[] = [];
  if (media.images !== undefined) rows.push(visionEncoder(ops, cfg, w, media.images));
  if (media.audio !== undefined) rows.push(audioEncoder(ops, cfg, w, media.audio));
  return rows;
}

export type MediumKind = 'image' | 'audio';

/** One medium of a prompt, in order of appearance: its kind and how many embeddings it produces. */
export interface PromptMedium {
  kind: MediumKind;
  /** image: the patch count (processImage's `count`); audio: audioEmbeddingCount(frames). */
  embeddings: number;
}

export interface ExpandedPrompt {
  /** The prompt with each placeholder token repeated once per embedding of its medium. */
  tokens: number[];
  /** Per position: null for text, else the medium's kind and the row among this prompt's embeddings of that kind. */
  media: Array<{ kind: MediumKind; row: number } | null>;
}

/**
 * Expands each placeholder token (`placeholders.image` / `.audio`) of `tokens` into `embeddings`
 * copies of itself, pairing the n-th placeholder with media[n]; throws when the kinds or the counts
 * of placeholders and media disagree.
 */
export function expandPlaceholders(tokens: readonly number[], placeholders: Partial<Record<MediumKind, number>>, media: readonly PromptMedium[]): ExpandedPrompt {
  const out: ExpandedPrompt = { tokens: [], media: [] };
  const rows: Record<MediumKind, number> = { image: 0, audio: 0 };
  let next = 0;
  for (const token of tokens) {
    const kind = (['image', 'audio'] as const).find((k) => placeholders[k] === token);
    if (!kind) {
      out.tokens.push(token);
      out.media.push(null);
      continue;
    }
    const medium = media[next++];
    if (!medium) throw new Error(`placeholder ${next} (<${kind}>) has no medium: ${media.length} given`);
    if (medium.kind !== kind) throw new Error(`placeholder ${next} is <${kind}> but medium ${next} is ${medium.kind === 'image' ? 'an image' : 'audio'}`);
    if (!Number.isInteger(medium.embeddings) || medium.embeddings < 1) throw new Error(`medium ${next} has ${medium.embeddings} embeddings, expected a positive integer`);
    for (let i = 0; i < medium.embeddings; i++) {
      out.tokens.push(token);
      out.media.push({ kind, row: rows[kind]++ });
    }
  }
  if (next !== media.length) throw new Error(`${media.length} media given but the prompt has ${next} placeholders`);
  return out;
}

/**
 * The gather index of MediaInputs.embeddingIndex ([B, T] flat, row-major) for B expanded prompts
 * padded to T positions: text (and padding) positions point at their own text row b * T + t, media
 * positions past the B * T text rows at their image (all prompts' images first, prompt by prompt)
 * or audio row (then all prompts' clips). `rows` gives a prompt's embedding rows per kind when its
 * positions were cut short of its media (default: counted from `media`).
 */
export function embeddingIndex(prompts: ReadonlyArray<Pick<ExpandedPrompt, 'media'> & { rows?: Record<MediumKind, number> }>, T: number): Int32Array {
  const B = prompts.length;
  // The embedding rows each prompt contributes: its media's, even where its positions were cut at T.
  const rows = prompts.map((p) => p.rows ?? { image: p.media.filter((m) => m?.kind === 'image').length, audio: p.media.filter((m) => m?.kind === 'audio').length });
  const index = new Int32Array(B * T);
  let imageBase = B * T;
  let audioBase = B * T + rows.reduce((a, r) => a + r.image, 0);
  prompts.forEach((p, b) => {
    if (p.media.length > T) throw new Error(`prompt ${b} has ${p.media.length} positions, more than T = ${T}`);
    for (let t = 0; t < T; t++) {
      const m = p.media[t];
      index[b * T + t] = !m ? b * T + t : m.kind === 'image' ? imageBase + m.row : audioBase + m.row;
    }
    imageBase += rows[b].image;
    audioBase += rows[b].audio;
  });
  return index;
}
