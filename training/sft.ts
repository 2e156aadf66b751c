// Supervised warm start: teacher-forced cross-entropy on (prompt, answer + eos) pairs until the
// held-out greedy accuracy enters a target band. RL from a policy that is sometimes right is what
// GRPO is for: a policy that is never right gets no learning signal from group-relative rewards.
import type { PolicyWeights } from '../engines/model';
import type { RolloutEngine } from '../engines/rollout';
import type { Trainer, TrainSequence } from '../engines/trainer';
import { sftLoss } from '../engines/trainer-losses';
import type { Task, TaskPrompt } from '../envs/task';
import { evaluateGreedy } from './evaluate';
import { promptTokens } from './policy';

export function sftSequence(task: Task, prompt: TaskPrompt): TrainSequence {
  const tokenizer = task.tokenizer();
  const context = promptTokens(tokenizer, prompt);
  const answer = [...tokenizer.encode(prompt.answer), tokenizer.eosId];
  const tokens = [...context, ...answer];
  const lossMask = new Float32Array(tokens.length - 1);
  lossMask.fill(1, context.length - 1);
  return { tokens, lossMask };
}

export interface WarmStartOptions {
  task: Task;
  trainer: Trainer;
  engine: RolloutEngine;
  seed: number;
  batchSize: number;
  maxSteps: number;
  evalEvery: number;
  /** Stop once held-out accuracy is inside [low, high]. */
  band: [number, number];
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
  const curve: WarmStartResult['curve'] = [];
  for (let step = 1; step <= o.maxSteps; step++) {
    const prompts = o.task.trainPrompts(o.seed * 1_000_003 + step, o.batchSize);
    const m = await o.trainer.trainStep(prompts.map((p) => sftSequence(o.task, p)), loss);
    const point: WarmStartResult['curve'][number] = { step, loss: m.loss };
    curve.push(point);
    if (step % o.evalEvery !== 0) continue;
    const weights = await o.trainer.exportWeights();
    o.engine.setWeights(0, weights);
    point.accuracy = (await evaluateGreedy(o.engine, o.task, heldOut, o.maxNewTokens)).accuracy;
    o.log?.(`[sft] step ${step}: loss ${m.loss.toFixed(3)}, held-out accuracy ${(point.accuracy * 100).toFixed(1)}%`);
    if (point.accuracy >= o.band[0] && point.accuracy <= o.band[1]) return { steps: step, accuracy: point.accuracy, weights, curve };
    if (point.accuracy > o.band[1]) {
      throw new Error(
        `SFT warm start overshot its band: ${(point.accuracy * 100).toFixed(1)}% > ${(o.band[1] * 100).toFixed(0)}% at step ${step}; evaluate more often (evalEvery) or lower the learning rate`,
      );
    }
  }
  throw new Error(`SFT warm start did not reach ${(o.band[0] * 100).toFixed(0)}% held-out accuracy in ${o.maxSteps} steps: raise maxSteps or the learning rate`);
}
