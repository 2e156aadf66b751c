// The built-in media tasks: the procedural items of ./media-tasks as Tasks the RL loop trains on.
// Each prompt is one placeholder and a short question ("<image>top left:"), its medium (PNG or WAV
// bytes) rides along in TaskPrompt.media, and the reward is 1 for exactly the answer then eos. The
// prompts are short on purpose: a tiny policy learns faster when the question is a few tokens,
// and the medium is most of the context anyway (16 image patches, 70-100 audio embeddings).
//
// | task           | data         | answer                    | encoder defaults                   |
// |----------------|--------------|---------------------------|------------------------------------|
// | vision-colour  | colourAt     | a colour word             | 8x8 patches, 4x4 grid (32 px)      |
// | vision-count   | countShapes  | a digit 1-5               | 8x8 patches, 4x4 grid (32 px)      |
// | audio-tone     | higherTone   | "first" / "second"        | 80 mels, 1.4 s window (70 frames)  |
// | audio-beeps    | countBeeps   | a digit 1-4               | 80 mels, 2 s window (100 frames)   |
import { CharTokenizer } from '../engines/tokenizers/char';
import { encodeItemMedia, GRID_POSITIONS, MEDIA_TASKS, type MediaItem, type MediaTaskName } from './media-tasks';
import type { Task, TaskEncoders, TaskPrompt } from './task';

export const IMAGE_PLACEHOLDER = '<image>';
export const AUDIO_PLACEHOLDER = '<audio>';
const ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789 :?';

export function omniTokenizer(): CharTokenizer {
  return new CharTokenizer(ALPHABET, { specials: [IMAGE_PLACEHOLDER, AUDIO_PLACEHOLDER] });
}

const EOS_TEXT = ((t) => t.decode([t.eosId]))(omniTokenizer());
const HELD_OUT_SIZE = 200;

const ENCODER = { dModel: 32, nLayers: 1, nHeads: 4, dFF: 64 };
// Comparing two tones or counting beeps needs more than one block: with ENCODER the audio tasks'
// SFT stayed at chance for 200 steps; with two 64-wide blocks it reached 92% in 200 steps.
const AUDIO_ENCODER = { dModel: 64, nLayers: 2, nHeads: 4, dFF: 128 };
const VISION: TaskEncoders = { vision: { patchSize: 8, maxPatches: 16, ...ENCODER } };

interface OmniTaskSpec {
  name: string;
  data: MediaTaskName;
  /** The short question after the placeholder. */
  question(item: MediaItem): string;
  encoders: TaskEncoders;
  contextLength: number;
}

const SPECS: OmniTaskSpec[] = [
  {
    name: 'vision-colour',
    data: 'colourAt',
    question: (item) => `${GRID_POSITIONS.find((p) => item.prompt.includes(p))}:`,
    encoders: VISION,
    contextLength: 40,
  },
  { name: 'vision-count', data: 'countShapes', question: () => 'shapes:', encoders: VISION, contextLength: 32 },
  { name: 'audio-tone', data: 'higherTone', question: () => 'higher:', encoders: { audio: { nMels: 80, maxFrames: 140, ...AUDIO_ENCODER } }, contextLength: 96 },
  { name: 'audio-beeps', data: 'countBeeps', question: () => 'beeps:', encoders: { audio: { nMels: 80, maxFrames: 200, ...AUDIO_ENCODER } }, contextLength: 128 },
];

/** One media item as a task prompt: its placeholder, the short question, the medium's file bytes. */
export function omniPrompt(spec: Pick<OmniTaskSpec, 'question'>, item: MediaItem): TaskPrompt {
  const medium = encodeItemMedia(item);
  const placeholder = medium.kind === 'image' ? IMAGE_PLACEHOLDER : AUDIO_PLACEHOLDER;
  return { text: `${placeholder}${spec.question(item)}`, answer: item.answer, media: [medium] };
}

function omniTask(spec: OmniTaskSpec): Task {
  const data = MEDIA_TASKS[spec.data];
  let heldOut: TaskPrompt[] | undefined;
  return {
    name: spec.name,
    tokenizer: omniTokenizer,
    trainPrompts: (seed, n) => data.trainItems(seed, n).map((item) => omniPrompt(spec, item)),
    heldOut: () => (heldOut ??= data.heldOutItems(HELD_OUT_SIZE).map((item) => omniPrompt(spec, item))),
    reward: (prompt, response) => (response === prompt.answer + EOS_TEXT ? 1 : 0),
    encoders: spec.encoders,
    contextLength: spec.contextLength,
  };
}

export const OMNI_TASKS: readonly Task[] = SPECS.map(omniTask);
