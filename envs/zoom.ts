// zoom: multimodal multi-turn tool use in the spirit of DeepEyes. The prompt is a 128 x 128 image
// with one small (16 x 16 px) coloured square in each quadrant and a question naming a quadrant
// ("<image>tl:"); the answer is that dot's colour. The policy sees every image through its encoder's
// fixed 32 x 32 grid, where the overview shrinks each square to 4 x 4 pixels (part of one patch or
// split over two to four); it can call `zoom(x,y,w,h)` (the turn ends at ")") and the environment
// answers with the crop as a new image observation ("<image>"): a quadrant's crop shows its square
// as 8 x 8 pixels, a whole patch's worth. Then the policy writes the colour and eos.
//
// Reward (DeepEyes' shape): 1 for the right colour, plus ZOOM_BONUS when the right answer came after a
// well-formed zoom; -0.1 for a malformed call, which ends the episode; 0 otherwise. info: success,
// tool_use, tool_calls.
import { decodeImage, encodePng, type RgbImage } from '../engines/media/decode';
import { CharTokenizer } from '../engines/tokenizers/char';
import { mixSeed, randomInt, seededRandom } from '../config/seeds';
import type { DemonstrationSegment, Environment, StepResult } from './interaction';
import { COLOURS, COLOUR_NAMES } from './media-tasks';
import { checkPromptCount, type PromptMedium, type Task, type TaskPrompt } from './task';

export const ZOOM_IMAGE_SIZE = 128;
export const ZOOM_DOT = 16;
export const ZOOM_BONUS = 0.2;
export const ZOOM_FORMAT_PENALTY = 0.1;
const ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789:(),';
const QUADRANTS = ['tl', 'tr', 'bl', 'br'] as const;
const HELD_OUT_SEED = 0x200e;
const HELD_OUT_SIZE = 200;

export function zoomTokenizer(): CharTokenizer {
  return new CharTokenizer(ALPHABET, { specials: ['<image>'] });
}
const EOS_TEXT = ((t) => t.decode([t.eosId]))(zoomTokenizer());

interface Scene {
  /** The dot colour of each quadrant, tl tr bl br. */
  colours: string[];
  /** Each dot's top-left pixel (even coordinates). */
  dots: Array<[number, number]>;
  asked: number;
}

function drawScene(rng: () => number): Scene {
  const half = ZOOM_IMAGE_SIZE / 2;
  const colours = QUADRANTS.map(() => COLOUR_NAMES[randomInt(rng, 0, COLOUR_NAMES.length - 1)]);
  const dots = QUADRANTS.map((_, q): [number, number] => {
    // 4-12 px from the quadrant's top left corner: inside one encoder patch of the overview (a tiny
    // encoder learned colour there; anywhere in the quadrant, it did not within 400 SFT steps).
    const offset = () => 8 + 2 * randomInt(rng, -2, 2);
    const x = (q % 2) * half + offset();
    const y = Math.floor(q / 2) * half + offset();
    return [x, y];
  });
  return { colours, dots, asked: randomInt(rng, 0, QUADRANTS.length - 1) };
}

function renderScene(scene: Scene): RgbImage {
  const n = ZOOM_IMAGE_SIZE;
  const img: RgbImage = { width: n, height: n, data: new Uint8Array(n * n * 3).fill(255) };
  scene.dots.forEach(([x0, y0], q) => {
    const rgb = COLOURS[scene.colours[q]];
    for (let y = y0; y < y0 + ZOOM_DOT; y++) for (let x = x0; x < x0 + ZOOM_DOT; x++) img.data.set(rgb, (y * n + x) * 3);
  });
  return img;
}

/** The crop [x, x + w) x [y, y + h) of img (clamped to it). */
export function crop(img: RgbImage, x: number, y: number, w: number, h: number): RgbImage {
  const x0 = Math.max(0, Math.min(img.width - 1, x));
  const y0 = Math.max(0, Math.min(img.height - 1, y));
  const x1 = Math.max(x0 + 1, Math.min(img.width, x + w));
  const y1 = Math.max(y0 + 1, Math.min(img.height, y + h));
  const out: RgbImage = { width: x1 - x0, height: y1 - y0, data: new Uint8Array((x1 - x0) * (y1 - y0) * 3) };
  for (let r = y0; r < y1; r++) out.data.set(img.data.subarray((r * img.width + x0) * 3, (r * img.width + x1) * 3), (r - y0) * out.width * 3);
  return out;
}

const pngMedium = (img: RgbImage): PromptMedium => ({ kind: 'image', format: 'png', bytes: encodePng(img) });

/** The quadrant's zoom call, as a demonstration writes it. */
export function quadrantZoom(q: number): string {
  const half = ZOOM_IMAGE_SIZE / 2;
  return `zoom(${(q % 2) * half},${Math.floor(q / 2) * half},${half},${half})`;
}

function scenePrompt(scene: Scene): TaskPrompt {
  return { text: `<image>${QUADRANTS[scene.asked]}:`, answer: scene.colours[scene.asked], media: [pngMedium(renderScene(scene))] };
}

function prompts(seed: number, n: number): TaskPrompt[] {
  checkPromptCount(seed, n);
  return Array.from({ length: n }, (_, i) => scenePrompt(drawScene(seededRandom(mixSeed(seed, `zoom#${i}`)))));
}

export class ZoomEnv implements Environment {
  private prompt: TaskPrompt | undefined;
  private image: RgbImage | undefined;
  private toolCalls = 0;

  reset(prompt: TaskPrompt): string {
    const png = prompt.media?.[0];
    if (!png || png.kind !== 'image') throw new Error('a zoom prompt carries its image in prompt.media');
    this.prompt = prompt;
    this.image = decodeImage(png.bytes, 'png');
    this.toolCalls = 0;
    return prompt.text;
  }

  private info(success: number): Record<string, number> {
    return { success, tool_calls: this.toolCalls, tool_use: this.toolCalls > 0 ? 1 : 0 };
  }

  step(response: string): StepResult {
    if (!this.prompt || !this.image) throw new Error('step() before reset()');
    if (response.endsWith(EOS_TEXT)) {
      const success = response.slice(0, -EOS_TEXT.length) === this.prompt.answer ? 1 : 0;
      const reward = success + (success && this.toolCalls > 0 ? ZOOM_BONUS : 0);
      return { observation: '', reward, terminated: true, truncated: false, info: this.info(success) };
    }
    const call = /^zoom\((\d{1,3}),(\d{1,3}),(\d{1,3}),(\d{1,3})\)$/.exec(response);
    if (call) {
      const [x, y, w, h] = call.slice(1).map(Number);
      if (w >= 8 && h >= 8) {
        this.toolCalls += 1;
        return { observation: '<image>', media: [pngMedium(crop(this.image, x, y, w, h))], reward: 0, terminated: false, truncated: false, info: this.info(0) };
      }
    }
    // Neither an answer nor a well-formed call: the episode ends, penalized.
    return { observation: '', reward: -ZOOM_FORMAT_PENALTY, terminated: true, truncated: false, info: this.info(0) };
  }
}

/** Demonstrations: zoom into the asked quadrant with probability toolShare, else answer from the overview. */
export function zoomDemonstration(toolShare: number) {
  return (prompt: TaskPrompt, random: () => number): DemonstrationSegment[] => {
    const q = QUADRANTS.indexOf(prompt.text.slice('<image>'.length, -1) as (typeof QUADRANTS)[number]);
    const segments: DemonstrationSegment[] = [{ text: prompt.text, policy: false }];
    if (random() < toolShare) {
      const half = ZOOM_IMAGE_SIZE / 2;
      const image = decodeImage(prompt.media![0].bytes, 'png');
      segments.push({ text: quadrantZoom(q), policy: true }, { text: '<image>', policy: false, media: [pngMedium(crop(image, (q % 2) * half, Math.floor(q / 2) * half, half, half))] });
    }
    segments.push({ text: prompt.answer, policy: true, eos: true });
    return segments;
  };
}

let heldOut: TaskPrompt[] | undefined;

export const zoomTask: Task = {
  name: 'zoom',
  tokenizer: zoomTokenizer,
  trainPrompts: prompts,
  heldOut: () => (heldOut ??= prompts(HELD_OUT_SEED, HELD_OUT_SIZE)),
  reward: (prompt, transcript) => (transcript.endsWith(`${prompt.answer}${EOS_TEXT}`) ? 1 : 0),
  interaction: { createEnv: () => new ZoomEnv(), maxTurns: 3, maxTurnTokens: 16, turnStops: [')'], demonstrate: zoomDemonstration(0.1) },
  encoders: { vision: { patchSize: 8, maxPatches: 16, dModel: 32, nLayers: 1, nHeads: 4, dFF: 64 } },
  contextLength: 72,
};
