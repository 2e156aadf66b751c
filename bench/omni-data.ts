// The spoken-question data of `relax bench omni` and of test/omni: questions spoken with espeak-ng
// (scripts/spoken-questions.js, cached by seed and counts), kept only where the text model answers
// the same question right when asked in text (its greedy answer to the row's text_prompt), and the
// audio encoder's cost per clip (tfjs, the trainer's engine) in the run's window and in Whisper's 30 s.
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { PACKAGE_ROOT } from '../config/environment';
import { parseRunConfig } from '../config/run-config';
import { audioEncoderHidden, encoderParameterSpec } from '../engines/encoders';
import { decodeAudio } from '../engines/media/decode';
import { audioInput } from '../engines/media/model-inputs';
import type { AudioConfig } from '../engines/model';
import { createTfjsOps } from '../engines/model-tfjs';
import { RolloutEngine } from '../engines/rollout';
import { loadAudioEncoderWeights, readAudioEncoderInfo, resolveAudioEncoder } from '../engines/whisper';
import { evaluateGreedy } from '../rollout/evaluate';
import { initialPolicyWeights, loadRunPolicy } from '../training/policy-model';
import { median } from './measure';

/** A row of scripts/spoken-questions.js. */
export interface SpokenRow {
  prompt: string;
  audio: string;
  answer: string;
  spoken_text: string;
  text_prompt: string;
  voice: string;
}

interface Generator {
  generateSpokenQuestions(o: { out: string; kind: string; seed: number; train: number; test: number; maxSeconds: number; force?: boolean }): Promise<unknown>;
  checkManifest(dir: string, derived?: string[]): string[];
}

export interface SpokenDataOptions {
  /** Where the generated sets are cached. */
  root: string;
  kind: 'arithmetic' | 'digits';
  seed: number;
  train: number;
  test: number;
  maxSeconds: number;
  /** The text model (model.from) that must answer a question in text for it to be kept. */
  textModel: string;
  log: (line: string) => void;
}

export interface SpokenData {
  dir: string;
  train: string;
  test: string;
  /** Rows generated and kept, per split; the text model's accuracy on the distinct questions. */
  generated: { train: number; test: number };
  kept: { train: number; test: number };
  textAccuracy: number;
  questionsKept: number;
  questions: number;
}

const readRows = (file: string): SpokenRow[] =>
  readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l) as SpokenRow);

/** The spoken set (generated once per options), filtered to the questions the text model gets right in text. */
export async function spokenData(o: SpokenDataOptions): Promise<SpokenData> {
  const dir = path.join(o.root, `${o.kind}-s${o.seed}-${o.train}x${o.test}-${o.maxSeconds}s`);
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const generator = require(path.join(PACKAGE_ROOT, 'scripts', 'spoken-questions.js')) as Generator;
  // The kept rows are written beside the generated ones (their clip paths are relative to the folder).
  const keptFiles = { train: 'kept-train.jsonl', test: 'kept-test.jsonl' };
  if (!existsSync(path.join(dir, 'manifest.json')) || generator.checkManifest(dir, Object.values(keptFiles)).length > 0) {
    o.log(`[omni] speaking ${o.train} + ${o.test} ${o.kind} questions with espeak-ng into ${dir}`);
    mkdirSync(dir, { recursive: true });
    await generator.generateSpokenQuestions({ out: dir, kind: o.kind, seed: o.seed, train: o.train, test: o.test, maxSeconds: o.maxSeconds, force: true });
  }
  const rows = { train: readRows(path.join(dir, 'train.jsonl')), test: readRows(path.join(dir, 'test.jsonl')) };
  // The distinct questions, asked in text to the text model (greedy, the run's prompt format).
  const questions = [...new Map([...rows.train, ...rows.test].map((r) => [r.text_prompt, r.answer])).entries()];
  const textFile = path.join(dir, 'text-questions.jsonl');
  writeFileSync(textFile, questions.map(([prompt, answer]) => JSON.stringify({ prompt, answer })).join('\n') + '\n');
  const config = parseRunConfig({ model: { from: o.textModel, context_length: 128 }, data: { train: textFile, eval: textFile, reward: { kind: 'numeric' } }, rollout: { max_new_tokens: 8 } });
  const policy = await loadRunPolicy(config, { log: o.log });
  const engine = await RolloutEngine.create(policy.model);
  let right: Set<string>;
  try {
    engine.setWeights(0, await initialPolicyWeights(policy, config.seed));
    const prompts = policy.task.heldOut();
    const r = await evaluateGreedy(engine, policy.task, prompts, config.rollout.max_new_tokens);
    // The held-out prompts are the text file's rows in order: question i is prompt i.
    right = new Set(questions.filter((_, i) => policy.task.reward(prompts[i], r.responses[i]) >= 1).map(([q]) => q));
  } finally {
    await engine.release();
  }
  const kept = { train: rows.train.filter((r) => right.has(r.text_prompt)), test: rows.test.filter((r) => right.has(r.text_prompt)) };
  if (kept.train.length === 0 || kept.test.length === 0) throw new Error(`the text model ${o.textModel} answered none of the ${questions.length} questions right in text: no spoken question to keep`);
  const train = path.join(dir, keptFiles.train);
  const test = path.join(dir, keptFiles.test);
  writeFileSync(train, kept.train.map((r) => JSON.stringify(r)).join('\n') + '\n');
  writeFileSync(test, kept.test.map((r) => JSON.stringify(r)).join('\n') + '\n');
  rmSync(textFile, { force: true });
  o.log(`[omni] the text model answers ${right.size} of ${questions.length} questions right in text: ${kept.train.length} of ${rows.train.length} train and ${kept.test.length} of ${rows.test.length} held-out clips kept`);
  return {
    dir,
    train,
    test,
    generated: { train: rows.train.length, test: rows.test.length },
    kept: { train: kept.train.length, test: kept.test.length },
    textAccuracy: right.size / questions.length,
    questionsKept: right.size,
    questions: questions.length,
  };
}

/**
 * The audio encoder's forward time per clip (tfjs, as the trainer runs it; ONNX Runtime's rollout is
 * within the same order), the median of `repeats` batches of `clips` clips, in a window of `frames`.
 */
export async function encoderMsPerClip(from: string, home: string, clipFiles: string[], frames: number, repeats = 3): Promise<number> {
  const dir = await resolveAudioEncoder(from, { home });
  const info = await readAudioEncoderInfo(dir);
  const a: AudioConfig = { nMels: info.nMels, maxFrames: frames, dModel: info.dModel, nLayers: info.nLayers, nHeads: info.nHeads, dFF: info.dFF, gelu: info.gelu };
  const spec = encoderParameterSpec({ vocabSize: 2, dModel: 4, nLayers: 1, nHeads: 1, dFF: 4, contextLength: 2, audio: a });
  const weights = await loadAudioEncoderWeights(dir, frames);
  const ops = createTfjsOps({ explicitTransposeGrad: tf.getBackend() === 'wasm' });
  const features = clipFiles.map((f) => audioInput(decodeAudio(new Uint8Array(readFileSync(f))), a));
  const batch = new Float32Array(features.length * frames * a.nMels);
  features.forEach((x, i) => batch.set(x, i * frames * a.nMels));
  const w = Object.fromEntries(spec.filter((p) => p.name in weights).map((p) => [p.name, tf.tensor(weights[p.name], p.shape)]));
  try {
    const times: number[] = [];
    for (let r = 0; r <= repeats; r++) {
      const t0 = performance.now();
      tf.tidy(() => audioEncoderHidden(ops, a, w, tf.tensor3d(batch, [features.length, frames, a.nMels])).dataSync());
      if (r > 0) times.push((performance.now() - t0) / features.length); // the first run warms up
    }
    return median(times);
  } finally {
    for (const t of Object.values(w)) t.dispose();
  }
}
