// Supervised warm start: teacher-forced cross-entropy on (prompt, answer + eos) pairs until the
// held-out greedy accuracy enters a target band. RL from a policy that is sometimes right is what
// GRPO is for: a policy that is never right gets no learning signal from group-relative rewards.
import type { SequenceMedia } from '../engines/media/model-inputs';
import { withBos } from '../engines/tokenizers/tokenizer';
import type { PolicyWeights } from '../engines/model';
import type { RolloutEngine } from '../engines/rollout';
import type { Trainer, TrainSequence } from '../engines/trainer';
import { sftLoss } from './losses';
import type { Task, TaskPrompt } from '../envs/task';
import { seededRandom, sftBatchSeed } from '../config/seeds';
import { evaluateGreedy } from '../rollout/evaluate';
import { mediaPromptsOf } from '../rollout/media-prompts';
import { promptTokens } from '../rollout/producers';

/**
 * One supervised example: prompt then answer + eos, or for a multi-turn task a demonstration
 * episode (trained on the policy's turns only).
 */
export function sftSequence(task: Task, prompt: TaskPrompt, random: () => number = Math.random): TrainSequence {
  const tokenizer = task.tokenizer();
  const demonstrate = task.interaction?.demonstrate;
  if (demonstrate) {
    const tokens = [tokenizer.bosId];
    const trained: boolean[] = [false];
    for (const segment of demonstrate(prompt, random)) {
      const ids = [...tokenizer.encode(segment.text), ...(segment.eos ? [tokenizer.eosId] : [])];
      tokens.push(...ids);
      trained.push(...ids.map(() => segment.policy));
    }
    // lossMask[t] says whether token t + 1 (the target at position t) is trained on.
    return { tokens, lossMask: Float32Array.from(trained.slice(1), (b) => (b ? 1 : 0)) };
  }
  const context = promptTokens(tokenizer, prompt);
  const answer = [...tokenizer.encode(prompt.demonstration ?? prompt.answer), tokenizer.eosId];
  const tokens = [...context, ...answer];
  const lossMask = new Float32Array(tokens.length - 1);
  lossMask.fill(1, context.length - 1);
  return { tokens, lossMask };
}

/**
 * sftSequence for every prompt. Prompts with images or audio get their processed media (the
 * engine's cache); in a demonstration the first segment takes the prompt's media, later
 * environment segments their own.
 */
export async function sftSequences(task: Task, engine: RolloutEngine, prompts: readonly TaskPrompt[], random: () => number = Math.random): Promise<TrainSequence[]> {
  if (!prompts.some((p) => p.media?.length)) return prompts.map((p) => sftSequence(task, p, random));
  const tokenizer = task.tokenizer();
  const media = mediaPromptsOf(engine);
  const demonstrate = task.interaction?.demonstrate;
  const out: TrainSequence[] = [];
  for (const p of prompts) {
    const segments = demonstrate ? demonstrate(p, random) : [{ text: p.text, policy: false }, { text: p.demonstration ?? p.answer, policy: true, eos: true }];
    // As the rollout sees the prompt (withBos): a tokenizer that adds no bos gets none here either.
    const tokens = withBos(tokenizer, []);
    const trained: boolean[] = tokens.map(() => false);
    const all: SequenceMedia = { images: [], audio: [] };
    for (const [i, segment] of segments.entries()) {
      const inputs = await media.encode(tokenizer, segment.text, segment.media ?? (i === 0 ? (p.media ?? []) : []));
      const ids = [...inputs.tokens, ...(segment.eos ? [tokenizer.eosId] : [])];
      tokens.push(...ids);
      trained.push(...ids.map(() => segment.policy));
      all.images.push(...(inputs.media?.images ?? []));
      all.audio.push(...(inputs.media?.audio ?? []));
    }
    // lossMask[t] says whether token t + 1 (the target at position t) is trained on.
    out.push({ tokens, lossMask: Float32Array.from(trained.slice(1), (b) => (b ? 1 : 0)), media: all });
  }
  return out;
}

export interface WarmStartOptions {
  task: Task;
  trainer: Trainer;
  engine: RolloutEngine;
  seed: number;
  batchSize: number;
  maxSteps: number;
  evalEvery: number;
  /** The warm start's held-out accuracy must land inside [low, high]. */
  band: [number, number];
  /** Stop at the first evaluation at or above this accuracy (inside the band); default: band[0]. */
  target?: number;
  maxNewTokens: number;
  log?: (line: string) => void;
}

export interface WarmStartResult {
  steps: number;
  accuracy: number;
  weights: PolicyWeights;
  curve: Array<{ step: number; loss: number; accuracy?: number }>;
}

export async function sftWarmStart(o: WarmStartOptions): Promise<WarmStartResult> {
  const heldOut = o.task.heldOut();
  const loss = sftLoss();
  const target = o.target ?? o.band[0];
  const curve: WarmStartResult['curve'] = [];
  let lastInBand: WarmStartResult | undefined;
  for (let step = 1; step <= o.maxSteps; step++) {
    const seed = sftBatchSeed(o.seed, step);
    const prompts = o.task.warmStartPrompts ? o.task.warmStartPrompts(seed, o.batchSize) : o.task.trainPrompts(seed, o.batchSize);
    const random = seededRandom(seed);
    const m = await o.trainer.trainStep(await sftSequences(o.task, o.engine, prompts, random), loss);
    const point: WarmStartResult['curve'][number] = { step, loss: m.loss };
    curve.push(point);
    if (step % o.evalEvery !== 0) continue;
    const weights = await o.trainer.exportWeights();
    o.engine.setWeights(0, weights);
    const accuracy = (await evaluateGreedy(o.engine, o.task, heldOut, o.maxNewTokens)).accuracy;
    point.accuracy = accuracy;
    if (step % (o.evalEvery * 10) === 0) o.log?.(`[sft] step ${step}: loss ${m.loss.toFixed(3)}, held-out accuracy ${(accuracy * 100).toFixed(1)}%`);
    if (accuracy >= o.band[0] && accuracy <= o.band[1]) {
      lastInBand = { steps: step, accuracy, weights, curve: [...curve] };
      if (accuracy >= target) return lastInBand;
    } else if (accuracy > o.band[1]) {
      // Jumped over the band between two evaluations: fall back to the last in-band weights.
      if (lastInBand) return lastInBand;
      throw new Error(
        `SFT warm start overshot its band: ${(accuracy * 100).toFixed(1)}% > ${(o.band[1] * 100).toFixed(0)}% at step ${step} with no earlier evaluation inside it; evaluate more often (evalEvery) or lower the learning rate`,
      );
    }
  }
  if (lastInBand) return lastInBand;
  throw new Error(`SFT warm start did not reach ${(o.band[0] * 100).toFixed(0)}% held-out accuracy in ${o.maxSteps} steps: raise maxSteps or the learning rate`);
}
