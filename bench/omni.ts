// `relax bench omni`: an audio-language model from pretrained parts, through the trainingRun workflow:
// SmolLM2-135M-Instruct (model.from) with Whisper base's encoder in front of it (model.audio.from,
// frozen), a new two-layer projector and LoRA, on spoken arithmetic questions (espeak-ng, voices of
// the held-out split never heard in training) kept where the text model answers the same question
// right when asked in text (bench/omni-data.ts). The run's init.sft trains the projector alone on
// the rows' demonstrations ("9 + 5 = 14": the heard calculation, then the answer) until held-out
// accuracy lands in its band (the model learns to listen), then GRPO trains the projector and the
// adapters on the numeric reward (the response's last number). Keys: initial_accuracy (after the warm start, step 0), final_accuracy,
// steps, step_s (median wall seconds per GRPO step), encoder_ms_per_clip (the frozen encoder's
// forward per clip in the run's window; encoder_ms_per_clip_30s in Whisper's own window), and
// warm_start_accuracy, sft_steps, text_accuracy, kept clips, curve, wall_s. Options (--set):
// steps, eval_every, prompts, group, lr, sft_lr, sft_batch, sft_max_steps, sft_eval_every, band_low, band_high, sft_target,
// window_s, stack, projector_hidden, rank, train, test, seed, kind (arithmetic | digits).
import { PLAINTEXT_TEMPORAL } from '../security/temporal-connection';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { plot } from 'asciichart';
import { z } from 'zod';
import { RelaxClient } from '../client';
import { relaxEnvironment } from '../config/environment';
import { parseRunConfig, type RunConfigInput } from '../config/run-config';
import { loadTfjsBackend } from '../engines/backends';
import { audioEmbeddingCount } from '../engines/encoders';
import { startEphemeralStack } from '../workers/local-stack';
import type { Bench } from './index';
import { round } from './measure';
import { encoderMsPerClip, spokenData, type SpokenData } from './omni-data';
import { stepTimeFigures, stepTimes } from './real-model';

const optionsSchema = z
  .object({
    steps: z.coerce.number().int().min(1).default(120),
    eval_every: z.coerce.number().int().min(1).default(10),
    prompts: z.coerce.number().int().min(1).default(8),
    group: z.coerce.number().int().min(2).default(8),
    lr: z.coerce.number().positive().default(2e-4),
    sft_lr: z.coerce.number().positive().default(2e-3),
    sft_batch: z.coerce.number().int().min(1).default(16),
    sft_max_steps: z.coerce.number().int().min(1).default(300),
    sft_eval_every: z.coerce.number().int().min(1).default(5),
    band_low: z.coerce.number().min(0).max(1).default(0.2),
    band_high: z.coerce.number().min(0).max(1).default(0.6),
    /** init.sft.target: train on until an evaluation reaches it (default band_low). */
    sft_target: z.coerce.number().min(0).max(1).optional(),
    window_s: z.coerce.number().positive().max(30).default(2.2),
    stack: z.coerce.number().int().min(1).default(5),
    projector_hidden: z.coerce.number().int().min(1).default(1024),
    rank: z.coerce.number().int().min(1).default(16),
    train: z.coerce.number().int().min(1).default(800),
    test: z.coerce.number().int().min(1).default(100),
    seed: z.coerce.number().int().min(0).default(0),
    kind: z.enum(['arithmetic', 'digits']).default('arithmetic'),
  })
  .strict();
export type OmniOptions = z.output<typeof optionsSchema>;

export function parseOmniOptions(raw: Record<string, string>): OmniOptions {
  const r = optionsSchema.safeParse(raw);
  if (r.success) return r.data;
  throw new Error(`bench omni --set: ${r.error.issues.map((i) => (i.code === 'unrecognized_keys' ? `unknown option ${i.keys.join(', ')} (known: ${Object.keys(optionsSchema.shape).join(', ')})` : `${i.path.join('.') || 'options'}: ${i.message}`)).join('; ')}`);
}

export const OMNI_TEXT_MODEL = 'smollm2-135m-instruct';

/** The run: SmolLM2 + Whisper base + projector + LoRA, init.sft of the projector, then GRPO. */
export function omniRunConfig(o: OmniOptions, data: Pick<SpokenData, 'train' | 'test'>): RunConfigInput {
  return {
    seed: o.seed,
    model: { from: OMNI_TEXT_MODEL, context_length: 128, add_special_tokens: ['<audio>'], audio: { from: 'whisper-base', window_s: o.window_s, stack: o.stack, projector_hidden: o.projector_hidden } },
    lora: { rank: o.rank, alpha: 2 * o.rank, dropout: 0 },
    data: { train: data.train, eval: data.test, demonstration_field: 'demonstration', reward: { kind: 'numeric', extract: 'last_number' } },
    init: { sft: { lr: o.sft_lr, batch_size: o.sft_batch, max_steps: o.sft_max_steps, eval_every: o.sft_eval_every, band: [o.band_low, o.band_high], ...(o.sft_target !== undefined ? { target: o.sft_target } : {}), trainable: ['audio_projector'] } },
    algorithm: { advantage: 'grpo', policy_loss: 'ppo_clip', group_size: o.group, clip_low: 0.2, clip_high: 0.28 },
    rollout: { prompts_per_step: o.prompts, max_new_tokens: 12, temperature: 1 },
    train: { steps: o.steps, lr: o.lr, warmup_steps: 0, lr_decay: 'constant', grad_clip: 1, micro_batch: o.prompts * o.group, micro_batch_tokens: 1024, eval_every: o.eval_every, trainable: ['audio_projector', 'language_model'] },
    checkpoint: { every: 10, keep_last: 2 },
  };
}

export interface OmniRunResult {
  runId: string;
  initialAccuracy: number | null;
  finalAccuracy: number | null;
  warmStart: { accuracy: number; sftSteps: number; cached: boolean } | null;
  steps: number;
  accuracies: Array<[number, number]>;
  rewards: Array<[number, number]>;
  wallS: number;
  stepFigures: ReturnType<typeof stepTimeFigures>;
}

/** Runs `input` through the workflow on a fresh ephemeral stack. */
export async function runOmni(input: RunConfigInput, log: (line: string) => void): Promise<OmniRunResult> {
  // Under the data directory: the workers keep run files only there (RELAX_ALLOWED_DATA_ROOTS' default).
  const runs = path.join(relaxEnvironment().home, 'bench-runs');
  fs.mkdirSync(runs, { recursive: true });
  const stackHome = fs.mkdtempSync(path.join(runs, 'omni-'));
  const stack = await startEphemeralStack(stackHome);
  try {
    const client = await RelaxClient.connect(stack.temporalAddress, undefined, PLAINTEXT_TEMPORAL);
    try {
      const runId = `bench-omni-${Date.now().toString(36)}`;
      const t0 = performance.now();
      const handle = await client.startTraining({ ...input, run_id: runId, checkpoint: { ...input.checkpoint, dir: path.join(stackHome, 'checkpoints') } });
      log(`[omni] run ${runId}: the SFT warm start of the projector, then ${String(input.train?.steps)} GRPO steps, through the workflow`);
      const result = await handle.result();
      const wallS = (performance.now() - t0) / 1000;
      const progress = await client.progress(runId).catch(() => undefined);
      return {
        runId,
        initialAccuracy: result.initialAccuracy ?? null,
        finalAccuracy: result.evalAccuracy ?? null,
        warmStart: progress?.warmStart ?? null,
        steps: result.steps,
        accuracies: result.accuracies,
        rewards: result.rewards,
        wallS,
        stepFigures: stepTimeFigures(await stepTimes(stack.databaseUrl, runId)),
      };
    } finally {
      await client.close();
    }
  } finally {
    await stack.stop();
    fs.rmSync(stackHome, { recursive: true, force: true });
  }
}

export const omniBench: Bench = async (ctx) => {
  const o = parseOmniOptions(ctx.options);
  await loadTfjsBackend({ kind: 'cpu' });
  const home = relaxEnvironment().home;
  const t0 = performance.now();
  const data = await spokenData({ root: path.join(home, 'bench-data', 'spoken'), kind: o.kind, seed: o.seed, train: o.train, test: o.test, maxSeconds: o.window_s, textModel: OMNI_TEXT_MODEL, log: ctx.log });
  const clips = fs.readFileSync(data.test, 'utf8').split('\n').filter(Boolean).slice(0, 8).map((l) => path.join(data.dir, (JSON.parse(l) as { audio: string }).audio));
  const frames = Math.round(o.window_s * 100);
  const encoderMs = await encoderMsPerClip('whisper-base', home, clips, frames);
  const encoderMs30 = await encoderMsPerClip('whisper-base', home, clips.slice(0, 2), 3000, 1);
  ctx.log(`[omni] Whisper base encoder: ${encoderMs.toFixed(1)} ms a clip in a ${o.window_s} s window, ${encoderMs30.toFixed(0)} ms in its 30 s window (tfjs, ${os.availableParallelism()} cores)`);
  const input = omniRunConfig(o, data);
  parseRunConfig(input);
  const run = await runOmni(input, ctx.log);
  ctx.log('');
  ctx.log('held-out accuracy (GRPO step 0 = the warm start):');
  if (run.accuracies.length > 1) ctx.log(plot(run.accuracies.map(([, a]) => a), { height: 8 }));
  for (const [step, a] of run.accuracies) ctx.log(`  step ${step}: ${(a * 100).toFixed(1)}%`);
  const summary = {
    initial_accuracy: run.initialAccuracy,
    final_accuracy: run.finalAccuracy,
    steps: run.steps,
    step_s: run.stepFigures.step_s === null ? null : round(run.stepFigures.step_s),
    encoder_ms_per_clip: Number(encoderMs.toFixed(1)),
    encoder_ms_per_clip_30s: Number(encoderMs30.toFixed(1)),
    window_s: o.window_s,
    audio_tokens_per_clip: audioEmbeddingCount(frames) / o.stack,
    warm_start_accuracy: run.warmStart?.accuracy ?? null,
    sft_steps: run.warmStart?.sftSteps ?? null,
    text_accuracy: round(data.textAccuracy),
    questions_kept: data.questionsKept,
    questions: data.questions,
    clips_kept: data.kept,
    clips_generated: data.generated,
    rollout_s: run.stepFigures.rollout_s,
    train_s: run.stepFigures.train_s,
    curve: run.accuracies.map(([step, accuracy]) => ({ step, accuracy })),
    wall_s: round((performance.now() - t0) / 1000, 1),
  };
  const out = path.join(home, 'results', `omni-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
  fs.mkdirSync(path.dirname(out), { recursive: true });
  fs.writeFileSync(out, `${JSON.stringify({ ...summary, options: o }, null, 2)}\n`);
  ctx.log(`[omni] saved to ${out}`);
  return summary;
};
