// The multimodal figures of `relax bench engines` (issue 13): the engines on the tiny policy the
// media tasks train (the LM d_model 64, 2 layers, 4 heads, d_ff 128, with the omni tasks' encoders:
// vision-colour's 8x8-patch 4x4-grid vision encoder and audio-tone's 80-mel 140-frame audio encoder,
// envs/omni-tasks.ts), one model for every figure so the ratios compare like with like:
//  - rollout generated tokens/s and train tokens/s (every token of prompt + response, media
//    placeholder positions included) on the same questions as text only, with an image, with an
//    audio clip, and on text prompts as long as the image / audio prompts (so the encoder's own
//    cost shows apart from the longer sequence);
//  - the processors: media file bytes to the encoder's input (modelMediaInput: decode, then resize +
//    normalize + patchify, or pad to the window + log-mel), images/s and audio seconds/s;
//  - the media store: MiB/s of MediaStore.put and .get (with its sha256 check) for 1 MiB media and
//    for the tasks' own small files.
// The variants take turns call by call (a neighbour's burst lands on all of them) and each figure
// is a median call. Nothing asserts a time.
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { parseRunConfig } from '../config/run-config';
import { seededRandom } from '../config/seeds';
import type { Device } from '../engines/device';
import { audioSeconds, modelMediaInput, type SequenceMedia } from '../engines/media/model-inputs';
import { mediaIdOf, MediaStore } from '../engines/media/store';
import { encodeWav } from '../engines/media/decode';
import type { MediaFormat } from '../engines/media/sources';
import { parameterCount, type ModelConfig } from '../engines/model';
import { RolloutEngine } from '../engines/rollout';
import { Trainer, trainSequenceFromSample, type TrainSequence } from '../engines/trainer';
import { colourAt, encodeItemMedia, higherTone } from '../envs/media-tasks';
import { OMNI_TASKS } from '../envs/omni-tasks';
import type { Task, TaskPrompt } from '../envs/task';
import { MediaPrompts } from '../rollout/media-prompts';
import { policyLoss } from '../training/losses';
import { policyModelConfig } from '../training/options';
import { median, peakRssMb, round, timeCalls } from './measure';

/** The LM side of the media tasks' tiny policy. */
export const MEDIA_POLICY_LM = { d_model: 64, n_layers: 2, n_heads: 4, d_ff: 128 } as const;

const VARIANTS = ['text', 'image', 'audio', 'text_as_long_as_image', 'text_as_long_as_audio'] as const;
type Variant = (typeof VARIANTS)[number];
/** Timed put + get passes over fresh media (after one warmup pass). */
const STORE_ROUNDS = 3;

/**
 * Times `fns` call by call in turn (one call each, then again), after one untimed call each, until
 * every one has `minCalls` calls and `minMs` of timed wall time (or `maxCalls`): a burst of load
 * from a neighbour lands on all of them alike. Each one's call times, ms.
 */
async function interleaved(fns: ReadonlyArray<() => Promise<unknown>>, o: { minMs: number; minCalls: number; maxCalls: number }): Promise<number[][]> {
  for (const fn of fns) await fn();
  const times = fns.map(() => [] as number[]);
  const spent = fns.map(() => 0);
  const more = (i: number) => times[i].length < o.maxCalls && (times[i].length < o.minCalls || spent[i] < o.minMs);
  while (fns.some((_, i) => more(i))) {
    for (let i = 0; i < fns.length; i++) {
      if (!more(i)) continue;
      const t0 = performance.now();
      await fns[i]();
      const dt = performance.now() - t0;
      times[i].push(dt);
      spent[i] += dt;
    }
  }
  return times;
}

export interface MultimodalOptions {
  device: Device;
  /** ONNX Runtime intra-op threads (undefined: its default). */
  ortThreads?: number;
  /** Timed wall time per figure, ms (split over the rounds). */
  minMs: number;
  /** New tokens per rollout sample, and the response length of the train sequences (capped to what the context leaves). */
  maxNewTokens: number;
  /** Prompts per rollout call. */
  batch: number;
  /** Sequences per train step (one micro-batch). */
  trainSequences: number;
  seed: number;
  log: (line: string) => void;
}

export interface MultimodalFigures {
  model: ModelConfig & { parameters: number };
  tfjs: string;
  rollout_batch: number;
  rollout_max_new_tokens: number;
  /** Mean prompt length in tokens, media placeholder positions included. */
  prompt_tokens: Record<Variant, number>;
  /** Generated tokens / s of one generate call (median). */
  rollout_tokens_per_s: Record<Variant, number>;
  train_sequences: number;
  train_tokens_per_step: Record<Variant, number>;
  /** All tokens of the training sequences (prompt incl. placeholders + response) / s of one trainStep (median). */
  train_tokens_per_s: Record<Variant, number>;
  train_step_ms: Record<Variant, number>;
  /** image / text and audio / text of the two figures above, and against the length-matched text. */
  ratios: {
    rollout: { image_over_text: number; audio_over_text: number; image_over_text_as_long: number; audio_over_text_as_long: number };
    train: { image_over_text: number; audio_over_text: number; image_over_text_as_long: number; audio_over_text_as_long: number };
  };
  image_processor_images_per_s: number;
  image_processor_images_per_s_by_size: Record<string, number>;
  audio_processor_audio_s_per_s: number;
  audio_processor_clips_per_s: number;
  media_store: {
    write_mib_per_s: number;
    read_mib_per_s: number;
    medium_mib: number;
    media_per_call: number;
    task_media: { mean_bytes: number; media_per_call: number; write_mib_per_s: number; read_mib_per_s: number; writes_per_s: number; reads_per_s: number };
  };
  peak_rss_mb: number;
  wall_s: number;
}

const byName = (name: string): Task => {
  const task = OMNI_TASKS.find((t) => t.name === name);
  if (!task) throw new Error(`internal error: the media task ${name} is missing from envs/omni-tasks.ts`);
  return task;
};

/** The media tasks' tiny policy with both encoders: vision-colour's vision and audio-tone's audio, audio-tone's context. */
export function mediaPolicyModel(): ModelConfig {
  const vision = byName('vision-colour');
  const audio = byName('audio-tone');
  const both: Pick<Task, 'name' | 'tokenizer' | 'encoders' | 'contextLength'> = {
    name: 'vision-colour+audio-tone',
    tokenizer: vision.tokenizer,
    encoders: { ...vision.encoders, ...audio.encoders },
    contextLength: Math.max(vision.contextLength ?? 0, audio.contextLength ?? 0),
  };
  return policyModelConfig(parseRunConfig({ model: MEDIA_POLICY_LM }).model, vision.tokenizer().vocabSize, both);
}

/** A prompt's text with its placeholders removed (the same question, no medium). */
const withoutPlaceholders = (text: string) => text.replace(/<image>|<audio>/g, '');

interface PromptSet {
  tokens: number[][];
  media?: SequenceMedia[];
}

/** Text prompts as long as `like`'s: each one's question tokens, left-padded with random letters to the same length. */
function lengthMatched(question: PromptSet, like: PromptSet, letters: readonly number[], seed: number): PromptSet {
  const rand = seededRandom(seed);
  return {
    tokens: question.tokens.map((q, i) => {
      const filler = Array.from({ length: Math.max(0, like.tokens[i].length - q.length) }, () => letters[Math.floor(rand() * letters.length)]);
      return [q[0], ...filler, ...q.slice(1)];
    }),
  };
}

const meanLength = (rows: readonly ArrayLike<number>[]) => rows.reduce((n, r) => n + r.length, 0) / rows.length;
const sequenceTokens = (batch: readonly TrainSequence[]) => batch.reduce((n, s) => n + s.tokens.length, 0);

/** Media bytes processed per second by modelMediaInput (decode + process), median of repeated passes over `media`. */
async function processorRate(media: ReadonlyArray<{ bytes: Uint8Array; format: MediaFormat }>, cfg: ModelConfig, minMs: number): Promise<number> {
  const timing = await timeCalls(() => media.forEach((m) => modelMediaInput(m.bytes, m.format, cfg)), { warmup: 1, minCalls: 3, minMs });
  return media.length / (timing.medianMs / 1000);
}

/**
 * MediaStore put (fresh media each round, into a fresh store: puts are idempotent) then get (with
 * its hash check) of `make(round)`'s distinct media, after one warmup round: median MiB/s and
 * media/s over the rounds. Reads come from the page cache (just written).
 */
async function storeRates(root: string, make: (round: number) => Array<{ bytes: Uint8Array; format: 'png' | 'wav' }>, rounds: number): Promise<{ writeMibPerS: number; readMibPerS: number; writesPerS: number; readsPerS: number; meanBytes: number; perCall: number }> {
  const rates = { writeMib: [] as number[], readMib: [] as number[], writes: [] as number[], reads: [] as number[], meanBytes: [] as number[], perCall: [] as number[] };
  for (let r = 0; r <= rounds; r++) {
    const seen = new Set<string>();
    const media = make(r).filter((m) => !seen.has(mediaIdOf(m.bytes)) && seen.add(mediaIdOf(m.bytes))); // a repeat would skip its write
    const store = new MediaStore(path.join(root, `round-${r}`));
    const t0 = performance.now();
    const refs = [];
    for (const m of media) refs.push(await store.put(m.bytes, { kind: m.format === 'png' ? 'image' : 'audio', format: m.format }));
    const t1 = performance.now();
    for (const ref of refs) await store.get(ref.id);
    const t2 = performance.now();
    if (r === 0) continue; // warmup
    const mib = media.reduce((n, m) => n + m.bytes.length, 0) / 1048576;
    rates.writeMib.push(mib / ((t1 - t0) / 1000));
    rates.readMib.push(mib / ((t2 - t1) / 1000));
    rates.writes.push(media.length / ((t1 - t0) / 1000));
    rates.reads.push(media.length / ((t2 - t1) / 1000));
    rates.meanBytes.push((mib * 1048576) / media.length);
    rates.perCall.push(media.length);
  }
  return { writeMibPerS: median(rates.writeMib), readMibPerS: median(rates.readMib), writesPerS: median(rates.writes), readsPerS: median(rates.reads), meanBytes: median(rates.meanBytes), perCall: Math.round(median(rates.perCall)) };
}

/** `count` distinct 16-bit mono WAVs of `bytes` bytes each: one header, random samples (the store only sniffs the header). */
function noiseWavs(bytes: number, count: number): Uint8Array[] {
  const template = encodeWav({ sampleRate: 16000, samples: new Float32Array(Math.floor((bytes - 44) / 2)) });
  const header = template.length - Math.floor((bytes - 44) / 2) * 2;
  return Array.from({ length: count }, () => {
    const wav = Uint8Array.from(template);
    wav.set(randomBytes(wav.length - header), header);
    return wav;
  });
}

// Over 80 lines because it is one benchmark script, in order (model, media inputs, rollout and
// train timings per medium, figures); not yet split (issue 33).
export async function multimodalEnginesFigures(o: MultimodalOptions): Promise<MultimodalFigures> {
  const started = performance.now();
  const cfg = mediaPolicyModel();
  const parameters = parameterCount(cfg);
  const tokenizer = byName('vision-colour').tokenizer();
  o.log(`multimodal: model ${JSON.stringify(cfg)} (${parameters} parameters)`);

  // Prompts: the two media tasks' own (bos + <image>/<audio> expanded + the question), and the same
  // questions as text only. The text baseline takes the image task's questions ("top left:").
  const prompts = new MediaPrompts(cfg);
  const encode = async (ps: TaskPrompt[]): Promise<PromptSet> => {
    const inputs = await Promise.all(ps.map((p) => prompts.prompt(tokenizer, p)));
    return { tokens: inputs.map((x) => x.tokens), media: inputs.map((x) => x.media ?? { images: [], audio: [] }) };
  };
  const n = Math.max(o.batch, o.trainSequences);
  const imagePrompts = byName('vision-colour').trainPrompts(o.seed, n);
  const audioPrompts = byName('audio-tone').trainPrompts(o.seed, n);
  const image = await encode(imagePrompts);
  const audio = await encode(audioPrompts);
  const text: PromptSet = { tokens: imagePrompts.map((p) => [tokenizer.bosId, ...tokenizer.encode(withoutPlaceholders(p.text))]) };
  const letters = tokenizer.encode('abcdefghijklmnopqrstuvwxyz');
  const sets: Record<Variant, PromptSet> = {
    text,
    image,
    audio,
    text_as_long_as_image: lengthMatched(text, image, letters, o.seed + 1),
    text_as_long_as_audio: lengthMatched(text, audio, letters, o.seed + 2),
  };
  const longest = Math.max(...Object.values(sets).flatMap((s) => s.tokens.map((t) => t.length)));
  // The audio prompts nearly fill the context: a larger max_new_tokens is capped to what fits.
  const maxNewTokens = Math.min(o.maxNewTokens, cfg.contextLength - longest);
  if (maxNewTokens < o.maxNewTokens) o.log(`multimodal: ${maxNewTokens} new tokens per sample, not ${o.maxNewTokens}: prompts of up to ${longest} tokens leave no more of the context of ${cfg.contextLength}`);
  const slice = (s: PromptSet, k: number): PromptSet => ({ tokens: s.tokens.slice(0, k), ...(s.media ? { media: s.media.slice(0, k) } : {}) });

  const trainer = Trainer.create({ model: cfg, seed: o.seed, optimizer: { lr: 1e-3 }, microBatchSize: o.trainSequences });
  const engine = await RolloutEngine.create(cfg, { device: o.device, ...(o.ortThreads ? { intraOpNumThreads: o.ortThreads } : {}), maxBatchSize: n });
  const root = await mkdtemp(path.join(tmpdir(), 'relax-bench-engines-media-'));
  try {
    engine.setWeights(0, await trainer.exportWeights());

    // Rollout: no stop tokens, every sample runs to maxNewTokens; one warmup call per variant
    // (the first media call also builds that kind's prefill graph), then the variants take turns
    // call by call.
    const rollout = VARIANTS.map((v) => ({ v, set: slice(sets[v], o.batch), tokens: 0 }));
    let seed = 0;
    const rolloutTimes = await interleaved(
      rollout.map((x) => async () => {
        const samples = await engine.generate(x.set.tokens, { maxNewTokens, temperature: 1, seed: seed++ }, x.set.media);
        x.tokens = samples.reduce((k, s) => k + s.tokens.length, 0);
      }),
      { minMs: o.minMs, minCalls: 5, maxCalls: 500 },
    );
    const rolloutTokensPerS = Object.fromEntries(rollout.map((x, i) => [x.v, x.tokens / (median(rolloutTimes[i]) / 1000)])) as Record<Variant, number>;

    // Train: PPO steps on sampled responses to each variant's prompts (advantages +-1), media along.
    const loss = policyLoss({ algorithm: 'ppo' });
    const train = [];
    for (const v of VARIANTS) {
      const set = slice(sets[v], o.trainSequences);
      const samples = await engine.generate(set.tokens, { maxNewTokens, seed: 1000 + seed++ }, set.media);
      const rand = seededRandom(o.seed + 17);
      const batch = samples.map((s, i) => trainSequenceFromSample(set.tokens[i], s, { advantage: rand() < 0.5 ? -1 : 1, ...(set.media ? { media: set.media[i] } : {}) }));
      train.push({ v, batch });
    }
    // One warmup step each (this shape's kernels and allocations), then the variants take turns step by step.
    const trainTimes = await interleaved(train.map((x) => () => trainer.trainStep(x.batch, loss)), { minMs: o.minMs, minCalls: 3, maxCalls: 200 });
    const trainStepMs = Object.fromEntries(train.map((x, i) => [x.v, median(trainTimes[i])])) as Record<Variant, number>;
    const trainTokens = Object.fromEntries(train.map((x) => [x.v, sequenceTokens(x.batch)])) as Record<Variant, number>;
    const trainTokensPerS = Object.fromEntries(VARIANTS.map((v) => [v, trainTokens[v] / (trainStepMs[v] / 1000)])) as Record<Variant, number>;
    for (const v of VARIANTS) {
      o.log(`multimodal ${v.padEnd(21)}: prompt ${meanLength(sets[v].tokens).toFixed(1)} tokens; rollout ${rolloutTokensPerS[v].toFixed(0)} generated tok/s (batch ${o.batch}); train ${trainTokensPerS[v].toFixed(0)} tok/s (${trainTokens[v]} tokens, ${trainStepMs[v].toFixed(1)} ms/step)`);
    }

    // Processors: file bytes to encoder input, as MediaPrompts does for every new medium.
    // The tasks' 64x64 PNGs, and 512x512 ones (a data set's photo-sized image: decoding dominates).
    const items = (size: number, k: number) => Array.from({ length: k }, (_, i) => encodeItemMedia(colourAt(o.seed, i, 'train', { width: size, height: size })));
    const imageBySize: Record<string, number> = {};
    for (const [size, k] of [[64, 16], [512, 4]]) imageBySize[`${size}x${size}`] = await processorRate(items(size, k), cfg, o.minMs / 4);
    const clips = Array.from({ length: 16 }, (_, i) => encodeItemMedia(higherTone(o.seed, i)));
    const clipsPerS = await processorRate(clips, cfg, o.minMs / 4);
    const windowS = audioSeconds(cfg.audio as NonNullable<ModelConfig['audio']>);
    o.log(`multimodal processors: images ${Object.entries(imageBySize).map(([s, r]) => `${s} ${r.toFixed(0)}/s`).join(', ')}; audio ${clipsPerS.toFixed(0)} clips/s = ${(clipsPerS * windowS).toFixed(0)} audio s/s (${windowS} s window)`);

    // Media store: 1 MiB media (distinct WAVs), and the tasks' own PNGs and WAVs. Last on purpose:
    // on this machine the CPU figures measured in the seconds after this much file I/O came out
    // up to ~2x lower (kernel writeback), and recovered after ~15 s idle.
    const large = await storeRates(path.join(root, 'large'), () => noiseWavs(1048576, 16).map((bytes) => ({ bytes, format: 'wav' as const })), STORE_ROUNDS);
    const small = await storeRates(path.join(root, 'small'), (r) => Array.from({ length: 64 }, (_, i) => {
      const m = i % 2 ? higherTone(o.seed + 100 + r, i) : colourAt(o.seed + 100 + r, i);
      const e = encodeItemMedia(m);
      return { bytes: e.bytes, format: e.format };
    }), STORE_ROUNDS);
    o.log(`multimodal media store: 1 MiB media put ${large.writeMibPerS.toFixed(0)} MiB/s, get ${large.readMibPerS.toFixed(0)} MiB/s; task media (${(small.meanBytes / 1024).toFixed(1)} KiB mean) put ${small.writesPerS.toFixed(0)}/s, get ${small.readsPerS.toFixed(0)}/s`);

    const ratio = (a: number, b: number) => round(a / b);
    const ratios = (f: Record<Variant, number>) => ({
      image_over_text: ratio(f.image, f.text),
      audio_over_text: ratio(f.audio, f.text),
      image_over_text_as_long: ratio(f.image, f.text_as_long_as_image),
      audio_over_text_as_long: ratio(f.audio, f.text_as_long_as_audio),
    });
    const rounded = (f: Record<Variant, number>) => Object.fromEntries(VARIANTS.map((v) => [v, round(f[v])])) as Record<Variant, number>;
    const figures: MultimodalFigures = {
      model: { ...cfg, parameters },
      tfjs: tf.getBackend(),
      rollout_batch: o.batch,
      rollout_max_new_tokens: maxNewTokens,
      prompt_tokens: rounded(Object.fromEntries(VARIANTS.map((v) => [v, meanLength(sets[v].tokens)])) as Record<Variant, number>),
      rollout_tokens_per_s: rounded(rolloutTokensPerS),
      train_sequences: o.trainSequences,
      train_tokens_per_step: trainTokens,
      train_tokens_per_s: rounded(trainTokensPerS),
      train_step_ms: rounded(trainStepMs),
      ratios: { rollout: ratios(rolloutTokensPerS), train: ratios(trainTokensPerS) },
      image_processor_images_per_s: round(imageBySize['64x64']),
      image_processor_images_per_s_by_size: Object.fromEntries(Object.entries(imageBySize).map(([s, r]) => [s, round(r)])),
      audio_processor_audio_s_per_s: round(clipsPerS * windowS),
      audio_processor_clips_per_s: round(clipsPerS),
      media_store: {
        write_mib_per_s: round(large.writeMibPerS),
        read_mib_per_s: round(large.readMibPerS),
        medium_mib: round(large.meanBytes / 1048576),
        media_per_call: large.perCall,
        task_media: {
          mean_bytes: Math.round(small.meanBytes),
          media_per_call: small.perCall,
          write_mib_per_s: round(small.writeMibPerS),
          read_mib_per_s: round(small.readMibPerS),
          writes_per_s: round(small.writesPerS),
          reads_per_s: round(small.readsPerS),
        },
      },
      peak_rss_mb: round(peakRssMb()),
      wall_s: round((performance.now() - started) / 1000),
    };
    o.log(`multimodal ratios: rollout image/text ${figures.ratios.rollout.image_over_text}, audio/text ${figures.ratios.rollout.audio_over_text} (vs length-matched text ${figures.ratios.rollout.image_over_text_as_long}, ${figures.ratios.rollout.audio_over_text_as_long}); train image/text ${figures.ratios.train.image_over_text}, audio/text ${figures.ratios.train.audio_over_text} (vs length-matched text ${figures.ratios.train.image_over_text_as_long}, ${figures.ratios.train.audio_over_text_as_long})`);
    return figures;
  } finally {
    trainer.dispose();
    await engine.release();
    await rm(root, { recursive: true, force: true });
  }
}
