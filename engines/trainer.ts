// The trainer: the policy (engines/model.ts) as tfjs variables, forward log-probs for any token
// sequences, and a train step = micro-batched gradient accumulation of a pluggable loss, global-norm
// clipping, AdamW with decoupled weight decay, and a warmup + decay learning-rate schedule.
// gradients() and applyGradients() are a step's two halves, for data parallelism: ranks sum their
// shards' gradients between them (training/data-parallel.ts, docs/scaling.md).
//
// Conventions (shared with engines/rl/losses.ts): a sequence of n tokens has n - 1 TARGETS, target
// t being tokens[t + 1] predicted from tokens[0..t]. Every per-token array of a TrainSequence
// (lossMask, oldLogprobs, refLogprobs, token advantages) and every row returned by logprobs() has
// n - 1 entries in that order. Log-probs are the policy's own, at temperature 1 (the rollout
// engine's `logprobs` follow the same rule, so the two agree).
//
// Images and audio: a TrainSequence may carry its processed media (engines/media/model-inputs.ts),
// each medium a run of its placeholder token in `tokens`; the encoders run inside the forward pass,
// so their parameters train with the rest. TrainerOptions.trainable picks the parts that train
// (language model, each encoder, each projector); the others are held as constants.
//
// The event loop: one micro-batch's forward + backward is synchronous tfjs work; between micro-batches
// (and before the update) the trainer yields with setImmediate, so a Temporal worker in the same
// process keeps heartbeating during a step. Pick microBatchSize to bound the longest blocking stretch.
//
// Over 400 lines because the trainer is one stateful object (variables, held constants, AdamW
// moments, schedule) whose parts (micro-batched accumulation, clipping, the update, weight and
// optimizer-state export) all work on that state; splitting it would pass its internals between
// files. Padding and the batch arrays, which need none of it, are in engines/trainer-batch.ts; a
// step's metric read-back and totals in engines/trainer-metrics.ts.
import * as tf from '@tensorflow/tfjs';
import { publishCheckpoint, type CheckpointInfo } from './checkpoint';
import { attentionBias, checkWeights, forwardHidden, fuseFrozenProjections, unembed, unembeddingWeight, valueHead, initWeights, parameterPart, parameterSpec, parseModelConfig, ropeTables, selectedParameterSpec, trainableParameterSpec, valueHeadParameterSpec, type MediaInputs, type ModelConfig, type PolicyWeights, type TrainablePart } from './model';
import type { AdamWOptimizer, AdamWOptions } from './adamw';
import { createAdamW } from './adamw-fused';
import { blockFrozenWeight, createTfjsOps } from './model-tfjs';
import { registerWasmTrainingKernels } from './wasm-kernels';
import { entropyFromLogSoftmax, microBatchShare, targetLogprobs, vocabLogSoftmax, type BatchTotals } from './rl/losses';
import { readMicroBatchMetrics, StepMetricTotals, type MicroBatchData } from './trainer-metrics';
import type { GeneratedSample } from './rollout';
import type { SequenceMedia } from './media/model-inputs';
import { columnsFrom, firstLossColumn, mediaTensors, packGroups, padBatch, promptPrefix, sharedPrefixes, type PackedGroups, type PaddedBatch } from './trainer-batch';
import { headLogprobsAndEntropy } from './vocab-head';
import { variableGradsReleasing } from './tfjs-backprop';

export type { AdamWOptions } from './adamw';
export { TRAINABLE_PARTS, type TrainablePart } from './model';
import { decodeSafetensors, encodeSafetensors, type NamedTensor } from './safetensors';

/** One training sequence. Per-token arrays have tokens.length - 1 entries (see the file comment). */
export interface TrainSequence {
  /** The whole sequence: prompt, response and any interleaved environment tokens. */
  tokens: ArrayLike<number>;
  /** 1 where target t (tokens[t + 1]) carries loss, 0 on prompt, environment and padding tokens. */
  lossMask: ArrayLike<number>;
  /** One advantage for the whole sequence, or one per target. */
  advantages?: number | ArrayLike<number>;
  /** Log-probs of the targets under the policy that generated them (rollout `logprobs`). */
  oldLogprobs?: ArrayLike<number>;
  /** Log-probs of the targets under the frozen reference policy. */
  refLogprobs?: ArrayLike<number>;
  /** PPO's critic (a model with a value head): each target's value before the update (Trainer.values) and its GAE return. */
  oldValues?: ArrayLike<number>;
  returns?: ArrayLike<number>;
  /** The sequence's images and clips, processed for the model's encoders, in order of their placeholder runs in `tokens`. */
  media?: SequenceMedia;
}

/**
 * A sequence to score (Trainer.logprobs): its tokens, or its tokens with media, and optionally `promptLength`, the
 * tokens of its prompt: sequences of a micro-batch that give it and share their prompt (a group's
 * samples) compute it once (sharePrompts).
 */
export type ScoredSequence = ArrayLike<number> | { tokens: ArrayLike<number>; media?: SequenceMedia; promptLength?: number };

/**
 * The TrainSequence of a rollout sample: prompt + generated tokens, loss on the generated targets,
 * the rollout's policy log-probs as oldLogprobs. `refLogprobs` (if any) is a full Trainer.logprobs row.
 */
export function trainSequenceFromSample(
  prompt: readonly number[],
  sample: Pick<GeneratedSample, 'tokens' | 'logprobs'>,
  extra: {
    advantage?: number;
    refLogprobs?: ArrayLike<number>;
    /** Per response token (0: not trained on, e.g. tool output); default all 1. */
    lossMask?: ArrayLike<number>;
    /** The media of the prompt's (and any observation's) placeholder runs. */
    media?: SequenceMedia;
  } = {},
): TrainSequence {
  const tokens = [...prompt, ...sample.tokens];
  const lossMask = new Float32Array(tokens.length - 1);
  const oldLogprobs = new Float32Array(tokens.length - 1);
  if (extra.lossMask && extra.lossMask.length !== sample.tokens.length) {
    throw new Error(`lossMask has ${extra.lossMask.length} entries for ${sample.tokens.length} response tokens: pass one per response token`);
  }
  sample.tokens.forEach((_, j) => {
    lossMask[prompt.length - 1 + j] = extra.lossMask ? extra.lossMask[j] : 1;
    oldLogprobs[prompt.length - 1 + j] = sample.logprobs[j];
  });
  return {
    tokens,
    lossMask,
    oldLogprobs,
    ...(extra.advantage !== undefined ? { advantages: extra.advantage } : {}),
    ...(extra.refLogprobs ? { refLogprobs: extra.refLogprobs } : {}),
    ...(extra.media ? { media: extra.media } : {}),
  };
}

/** What a loss sees for one micro-batch; all [B, T] tensors are aligned with the targets. */
export interface LossInputs {
  /** [B, T, V] */
  logits: tf.Tensor3D;
  /** [B, T] int32 */
  targets: tf.Tensor2D;
  /** [B, T, V] log-softmax of the logits, computed once per micro-batch (log-probs and entropy come from it). */
  logSoftmax: tf.Tensor3D;
  /** [B, T] log pi(target), differentiable. */
  logprobs: tf.Tensor2D;
  /** [B, T] entropy of the policy at each position, differentiable (the entropy bonus and metric). */
  entropy: tf.Tensor2D;
  /** [B, T] float 0/1 */
  mask: tf.Tensor2D;
  oldLogprobs?: tf.Tensor2D;
  refLogprobs?: tf.Tensor2D;
  /** [B, T]: a per-sequence advantage is broadcast over its targets. */
  advantages?: tf.Tensor2D;
  /** [B, T] the value head's V(s_t), differentiable, computed when read (models with a value head only). */
  values?: tf.Tensor2D;
  /** [B, T] values before the update and GAE returns, when the sequences carry them (PPO's clipped value loss). */
  oldValues?: tf.Tensor2D;
  returns?: tf.Tensor2D;
  /**
   * The whole batch's totals the micro-batch shares are taken of (TrainStepOptions.batch, or the
   * step's own sequences'); `maxCompletionTokens` is dr_grpo's L.
   */
  batch?: BatchTotals;
}

export interface TrainStepOptions {
  /**
   * The totals of the whole batch the loss is normalized over, when it holds more than the
   * sequences given (samples of advantage 0 left out because their loss and gradient are 0): each
   * micro-batch is weighted by its share of these (microBatchShare). Default: the sequences' own.
   */
  batch?: BatchTotals;
}

export interface LossOutput {
  loss: tf.Scalar;
  /** Extra scalars to report (e.g. clipFraction), averaged over micro-batches like the loss. */
  metrics?: Record<string, tf.Scalar>;
}

export interface TrainingLoss {
  name: string;
  /**
   * How micro-batch losses combine into the batch loss: weighted by their share of the batch's loss
   * tokens (exact for token-mean losses) or of its sequences (exact for sequence-mean losses).
   */
  microBatchWeighting: 'tokens' | 'sequences';
  compute(inputs: LossInputs): LossOutput;
}

export interface LrSchedule {
  kind: 'constant' | 'linear' | 'cosine';
  /** Linear warmup from lr / warmupSteps to lr over the first warmupSteps steps. */
  warmupSteps?: number;
  /** Steps over which linear/cosine decay from lr to lr * minLrRatio (after warmup). Required for those kinds. */
  totalSteps?: number;
  minLrRatio?: number;
}

export interface TrainerOptions {
  model: ModelConfig;
  /** Initial weights; default: initWeights(model, seed). */
  weights?: PolicyWeights;
  seed?: number;
  optimizer: AdamWOptions;
  schedule?: LrSchedule;
  /**
   * The value head's peak learning rate (PPO's critic, algorithm.critic.lr: a parameter group of
   * its own, as verl's critic.optim.lr), under the same schedule; default optimizer.lr.
   */
  valueHeadLr?: number;
  /** Global gradient-norm clip; default 1. Infinity disables clipping. */
  maxGradNorm?: number;
  /** Sequences per forward/backward pass; default 32. */
  microBatchSize?: number;
  /**
   * Packs each train step's micro-batches by a token budget instead: sequences sorted by length,
   * each micro-batch as many as fit in this many padded tokens (sequences x longest), at most
   * microBatchSize. Default: microBatchSize sequences at a time, in the given order.
   */
  microBatchTokens?: number;
  /**
   * Compute a prompt once per micro-batch (default true): sequences of a micro-batch that read the
   * same tokens before its first loss target (a GRPO group's samples) are packed one row per prompt
   * (packGroups), the prompt once and each sequence's completion after it, attending to it; the
   * prompt's gradient is the sum over the group, as in the unshared computation. Micro-batches by a
   * token budget keep a prompt's sequences together. Also for logprobs() of sequences that give
   * promptLength. Not with media inputs. With loraDropout, the group shares the prompt's dropout mask.
   */
  sharePrompts?: boolean;
  /** LoRA models: dropout on each adapter's input during train steps (not in logprobs); default 0. */
  loraDropout?: number;
  /**
   * Gradient checkpointing (default false): a train step keeps each decoder layer's input only and
   * computes the layer again in the backward pass. The activations it holds drop from every
   * intermediate of every layer to one layer's, so a micro-batch of many more tokens fits, for a
   * second forward pass of the decoder layers.
   */
  gradientCheckpointing?: boolean;
  /**
   * The parts that train (TRAINABLE_PARTS); default all. The others are held as constants: no
   * variables, optimizer state or gradients, yet exportWeights still returns them (unchanged). With
   * LoRA, 'language_model' is the adapters, and the encoders are frozen with the base.
   */
  trainable?: readonly TrainablePart[];
}

export interface TrainStepMetrics {
  loss: number;
  /** Global gradient norm before clipping. */
  gradNorm: number;
  /** Whether clipping scaled this step's gradient. */
  gradClipped: boolean;
  lr: number;
  /** The value head's learning rate this step, when it has one of its own (TrainerOptions.valueHeadLr). */
  valueHeadLr?: number;
  /** Optimizer steps applied so far, including this one. */
  step: number;
  sequences: number;
  lossTokens: number;
  /** Mean next-token entropy over loss tokens (nats). */
  entropy: number;
  /** KL(pi || ref), k3 estimate, mean over loss tokens; present when refLogprobs were given. */
  kl?: number;
  /** pi / pi_old over loss tokens; present when oldLogprobs were given. */
  ratioMean?: number;
  ratioMin?: number;
  ratioMax?: number;
  /** Fraction of loss tokens whose ratio was clipped; present when the loss reports it (ppo, gspo). */
  clipFraction?: number;
  /** Every scalar the loss reported (ppo/gspo: clipFraction, approxKl). */
  lossMetrics: Record<string, number>;
  /** Forward/backward passes this step took, and the tokens they processed padding included. */
  microBatches: number;
  paddedTokens: number;
  /** Wall time of the step, ms. */
  durationMs: number;
}

/**
 * The micro-batches of a train step, as indices into its sequences. Without a token budget:
 * consecutive runs of `maxSequences`. With one: longest first, each micro-batch as many sequences as
 * fit in `maxTokens` padded tokens (count x its longest; a sequence longer than the budget goes
 * alone), at most `maxSequences`, so similar lengths share a micro-batch and little is padding.
 * With `prompts` (each sequence's promptPrefix, when the trainer shares prompts), a prompt's
 * sequences are kept together, prompts longest first, and a micro-batch costs what its packed rows
 * hold (packGroups): one row per prompt, rows padded to the longest.
 */
export function planMicroBatches(lengths: readonly number[], maxSequences: number, maxTokens?: number, prompts?: ReadonlyArray<{ key: string; length: number }>): number[][] {
  const order = lengths.map((_, i) => i);
  if (maxTokens === undefined) {
    const plan: number[][] = [];
    for (let start = 0; start < order.length; start += maxSequences) plan.push(order.slice(start, start + maxSequences));
    return plan;
  }
  let cost = (mb: number[]) => mb.length * Math.max(...mb.map((i) => lengths[i]));
  if (prompts) {
    const groupLongest = new Map<string, number>();
    order.forEach((i) => groupLongest.set(prompts[i].key, Math.max(groupLongest.get(prompts[i].key) ?? 0, lengths[i])));
    const firstOf = new Map<string, number>();
    order.forEach((i) => firstOf.has(prompts[i].key) || firstOf.set(prompts[i].key, i));
    const rank = (i: number) => [groupLongest.get(prompts[i].key)!, -firstOf.get(prompts[i].key)!, lengths[i], -i];
    order.sort((a, b) => {
      const [ra, rb] = [rank(a), rank(b)];
      for (let k = 0; k < ra.length; k++) if (ra[k] !== rb[k]) return rb[k] - ra[k];
      return 0;
    });
    // Packed one row per prompt (packGroups): the prompt up to the micro-batch's shortest, then each
    // of its sequences' remaining inputs (length - 1 each); rows padded to the longest.
    cost = (mb) => {
      const from = Math.min(...mb.map((i) => prompts[i].length));
      const rows = new Map<string, number>();
      for (const i of mb) rows.set(prompts[i].key, (rows.get(prompts[i].key) ?? from) + Math.max(0, lengths[i] - 1 - from));
      return rows.size * Math.max(...rows.values());
    };
  } else order.sort((a, b) => lengths[b] - lengths[a] || a - b);
  const plan: number[][] = [];
  let current: number[] = [];
  for (const i of order) {
    if (current.length > 0 && (current.length >= maxSequences || cost([...current, i]) > maxTokens)) {
      plan.push(current);
      current = [];
    }
    current.push(i);
  }
  if (current.length) plan.push(current);
  return plan;
}

/** A train step refused to update because the loss or a gradient was NaN or infinite. */
export class NonFiniteUpdateError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'NonFiniteUpdateError';
  }
}

const yieldToEventLoop = () => new Promise<void>((resolve) => setImmediate(resolve));

/** The AdamW parameter group (engines/adamw.ts lrGroup) of the value head, when TrainerOptions.valueHeadLr gives it its own learning rate. */
const VALUE_HEAD_GROUP = 'value_head';

/** The learning rate of optimizer step `step` (0-based). */
export function learningRate(peak: number, schedule: LrSchedule, step: number): number {
  const warmup = schedule.warmupSteps ?? 0;
  if (step < warmup) return (peak * (step + 1)) / warmup;
  if (schedule.kind === 'constant') return peak;
  const total = schedule.totalSteps;
  if (total === undefined) throw new Error(`schedule.totalSteps is required for a ${schedule.kind} schedule`);
  const minLr = peak * (schedule.minLrRatio ?? 0);
  const progress = Math.min(1, (step - warmup) / Math.max(1, total - warmup));
  const factor = schedule.kind === 'linear' ? 1 - progress : 0.5 * (1 + Math.cos(Math.PI * progress));
  return minLr + (peak - minLr) * factor;
}

function checkOptions(o: TrainerOptions): void {
  const fail = (field: string, why: string) => {
    throw new Error(`trainer options: ${field} ${why}`);
  };
  if (!(o.optimizer.lr > 0)) fail('optimizer.lr', `must be > 0, got ${o.optimizer.lr}`);
  if (o.valueHeadLr !== undefined && !(o.valueHeadLr > 0)) fail('valueHeadLr', `must be > 0, got ${o.valueHeadLr}`);
  if (o.optimizer.weightDecay !== undefined && !(o.optimizer.weightDecay >= 0)) fail('optimizer.weightDecay', `must be >= 0, got ${o.optimizer.weightDecay}`);
  if (o.maxGradNorm !== undefined && !(o.maxGradNorm > 0)) fail('maxGradNorm', `must be > 0, got ${o.maxGradNorm}`);
  if (o.microBatchSize !== undefined && !(Number.isInteger(o.microBatchSize) && o.microBatchSize >= 1)) fail('microBatchSize', `must be an integer >= 1, got ${o.microBatchSize}`);
  if (o.microBatchTokens !== undefined && !(Number.isInteger(o.microBatchTokens) && o.microBatchTokens >= 2)) fail('microBatchTokens', `must be an integer >= 2, got ${o.microBatchTokens}`);
  const s = o.schedule;
  if (s) {
    if (s.warmupSteps !== undefined && !(Number.isInteger(s.warmupSteps) && s.warmupSteps >= 0)) fail('schedule.warmupSteps', `must be an integer >= 0, got ${s.warmupSteps}`);
    if (s.kind !== 'constant' && !(Number.isInteger(s.totalSteps) && (s.totalSteps ?? 0) >= 1)) fail('schedule.totalSteps', `is required (an integer >= 1) for a ${s.kind} schedule`);
    if (s.minLrRatio !== undefined && !(s.minLrRatio >= 0 && s.minLrRatio <= 1)) fail('schedule.minLrRatio', `must be in [0, 1], got ${s.minLrRatio}`);
  }
}

export class Trainer {
  readonly model: ModelConfig;
  /** The trained parameters (with LoRA: the adapters only; without the parts options.trainable leaves out). */
  private readonly variables: Map<string, tf.Variable>;
  /**
   * The constant weights: a LoRA base, and the parts options.trainable leaves out (plus a tied
   * embedding's transpose, computed once, and fused projections).
   */
  private readonly frozen = new Map<string, tf.Tensor>();
  /** The parts left out of options.trainable, as given (exportWeights returns them; `frozen` may hold them fused or blocked). */
  private readonly held = new Map<string, Float32Array>();
  /** wasm: the row blocks frozen projections are multiplied by (their whole tensors are disposed). */
  private readonly frozenBlocks: tf.Tensor[] = [];
  private readonly loraDropout: number;
  private readonly adamw: AdamWOptimizer;
  private readonly ops: ReturnType<typeof createTfjsOps>;
  /**
   * Native backends compute the vocabulary head fused, in row chunks (engines/vocab-head.ts); wasm
   * keeps the unfused head, whose transposed matmuls are its fast path.
   */
  private readonly fusedHead: boolean;
  private optimizer: AdamWOptions;
  private schedule: LrSchedule;
  private valueHeadLr: number | undefined;
  private readonly maxGradNorm: number;
  private readonly microBatchSize: number;
  private readonly microBatchTokens: number | undefined;
  private readonly sharePrompts: boolean;
  private readonly gradientCheckpointing: boolean;
  private stepsApplied = 0;
  private busy = false;
  /** tfjs variable names are process-global: each trainer prefixes its own. */
  private static instances = 0;

  private constructor(options: TrainerOptions, weights: PolicyWeights) {
    this.model = options.model;
    this.optimizer = options.optimizer;
    this.schedule = options.schedule ?? { kind: 'constant' };
    this.valueHeadLr = options.valueHeadLr;
    this.maxGradNorm = options.maxGradNorm ?? 1;
    this.microBatchSize = options.microBatchSize ?? 32;
    this.microBatchTokens = options.microBatchTokens;
    this.sharePrompts = options.sharePrompts ?? true;
    this.gradientCheckpointing = options.gradientCheckpointing ?? false;
    this.loraDropout = options.loraDropout ?? 0;
    const backend = tf.getBackend();
    if (backend === 'wasm') registerWasmTrainingKernels();
    this.ops = createTfjsOps({ explicitTransposeGrad: backend === 'wasm' });
    this.fusedHead = backend !== 'wasm';
    Trainer.instances += 1;
    const trained = selectedParameterSpec(this.model, options.trainable);
    const isTrained = new Set(trained.map((p) => p.name));
    this.variables = new Map(
      trained.map((p) => {
        const initial = tf.tensor(weights[p.name], p.shape, 'float32');
        const variable = tf.variable(initial, true, `trainer${Trainer.instances}/${p.name}`);
        initial.dispose();
        return [p.name, variable];
      }),
    );
    const valueHead = new Set(valueHeadParameterSpec(this.model).map((p) => p.name));
    this.adamw = createAdamW(
      trained.map((p) => ({ name: p.name, variable: this.variables.get(p.name)!, decayed: p.shape.length >= 2, ...(valueHead.has(p.name) ? { lrGroup: VALUE_HEAD_GROUP } : {}) })),
      this.optimizer,
    );
    for (const p of parameterSpec(this.model).filter((q) => !isTrained.has(q.name))) {
      if (!p.frozen) this.held.set(p.name, weights[p.name].slice());
      this.frozen.set(p.name, tf.tensor(weights[p.name], p.shape, 'float32'));
    }
    if (this.model.tieEmbeddings && this.frozen.has('tok_emb.weight')) this.frozen.set('lm_head.weight', tf.transpose(this.frozen.get('tok_emb.weight')!));
    // A LoRA base (or a language model held constant): frozen q/k/v (and gate/up) of a layer become
    // one wider matmul (engines/model.ts projectAll).
    const { fused, replaced } = fuseFrozenProjections(this.model, this.frozen, (ws) => tf.concat(ws, ws[0].rank - 1));
    for (const name of replaced) {
      this.frozen.get(name)!.dispose();
      this.frozen.delete(name);
    }
    for (const [name, w] of fused) this.frozen.set(name, w);
    if (backend === 'wasm') {
      // Frozen projections multiply block by block on wasm (engines/model-tfjs.ts blockFrozenWeight);
      // the whole matrix is then no longer read, so only its blocks stay on the heap.
      for (const [name, w] of this.frozen) {
        // Embedding tables are gathered from (or sliced), not multiplied: they stay whole.
        if (name === 'tok_emb.weight' || name.endsWith('pos_emb.weight')) continue;
        const blocks = blockFrozenWeight(w);
        if (blocks.length === 0) continue;
        this.frozenBlocks.push(...blocks);
        w.dispose();
      }
    }
  }

  /**
   * A trainer on the current tfjs backend (load one first with engines/backends.ts loadTfjsBackend;
   * on wasm the missing training kernels are registered here).
   */
  static create(options: TrainerOptions): Trainer {
    parseModelConfig(options.model);
    checkOptions(options);
    try {
      selectedParameterSpec(options.model, options.trainable);
    } catch (err) {
      throw new Error(`trainer options: ${(err as Error).message}`);
    }
    let weights = options.weights ?? initWeights(options.model, options.seed ?? 0);
    if (options.model.lora && options.weights) {
      // Base weights given without adapters: fresh adapters (B = 0, so the model starts as the base).
      const adapters = trainableParameterSpec(options.model).filter((p) => !(p.name in weights));
      if (adapters.length > 0) weights = { ...weights, ...initWeights(options.model, options.seed ?? 0, adapters) };
    }
    checkWeights(options.model, weights);
    if (options.loraDropout !== undefined && !(options.loraDropout >= 0 && options.loraDropout < 1)) throw new Error(`trainer options: loraDropout must be in [0, 1), got ${options.loraDropout}`);
    return new Trainer(options, weights);
  }

  /** Optimizer steps applied so far. */
  get step(): number {
    return this.stepsApplied;
  }

  /** The peak learning rate and its schedule in force (and the value head's peak, when it has its own). */
  get learningRateSchedule(): { lr: number; schedule: LrSchedule; valueHeadLr?: number } {
    return { lr: this.optimizer.lr, schedule: { ...this.schedule }, ...(this.valueHeadLr !== undefined ? { valueHeadLr: this.valueHeadLr } : {}) };
  }

  /**
   * Changes the peak learning rate and its schedule from the next train step on (a mid-run
   * hyperparameter update); the weights, AdamW moments and step count stay. The schedule is read at
   * the step count, so step `n` gets learningRate(lr, schedule, n) of the new values. `valueHeadLr`:
   * the value head's peak (TrainerOptions.valueHeadLr); undefined: the value head follows `lr`.
   */
  setLearningRate(lr: number, schedule: LrSchedule, valueHeadLr?: number): void {
    checkOptions({ model: this.model, optimizer: { ...this.optimizer, lr }, schedule, valueHeadLr });
    this.optimizer = { ...this.optimizer, lr };
    this.schedule = { ...schedule };
    this.valueHeadLr = valueHeadLr;
  }

  /**
   * A copy of the weights (never aliasing backend storage, so callers may keep or modify it): every
   * parameter, or with LoRA the adapters only (what a published version holds). Parts held constant
   * (options.trainable) are included, unchanged.
   */
  async exportWeights(): Promise<PolicyWeights> {
    const out: PolicyWeights = {};
    for (const p of trainableParameterSpec(this.model)) {
      const v = this.variables.get(p.name);
      out[p.name] = v ? ((await v.data()) as Float32Array).slice() : this.held.get(p.name)!.slice();
    }
    return out;
  }

  /**
   * Replaces the trained weights (e.g. from a checkpoint; with LoRA the adapters); optimizer state is
   * kept. The parts held constant must come back as they are: changing them needs a new trainer.
   */
  loadWeights(weights: PolicyWeights): void {
    const trainable = trainableParameterSpec(this.model);
    const only = Object.fromEntries(trainable.map((p) => [p.name, weights[p.name]]).filter(([, w]) => w !== undefined));
    checkWeights(this.model, only, undefined, 'trainable');
    for (const [name, values] of this.held) {
      if (weights[name].some((x, i) => x !== values[i])) {
        throw new Error(`loadWeights: "${name}" differs from the value this trainer holds constant (its ${parameterPart(name)} is not in options.trainable); create a new Trainer to change it`);
      }
    }
    for (const [name, variable] of this.variables) {
      const shape = variable.shape;
      tf.tidy(() => variable.assign(tf.tensor(weights[name], shape, 'float32')));
    }
  }

  /** Publishes the current weights as `policyVersion` under a checkpoint root (see engines/checkpoint.ts). */
  async publish(root: string, policyVersion: number): Promise<CheckpointInfo> {
    return publishCheckpoint(root, policyVersion, this.model, await this.exportWeights());
  }

  private weightTensors(): Record<string, tf.Tensor> {
    return { ...Object.fromEntries(this.frozen), ...Object.fromEntries(this.variables) };
  }

  /**
   * [B, T, V] logits for [B, T] int32 inputs, positions 0..T-1 and a causal mask; for positions
   * `from`.. only when given (the targets before it carry no loss). `media`: the batch's images and
   * clips (mediaTensors), whose embeddings replace their placeholder positions.
   */
  private logits(inputs: tf.Tensor2D, training = false, from = 0, media?: MediaInputs<tf.Tensor>): tf.Tensor3D {
    return unembed(this.ops, this.model, this.weightTensors(), this.hidden(inputs, training, from, media)) as tf.Tensor3D;
  }

  /**
   * Per target, its log-prob and the policy's entropy, [B, T - from] each, from the hidden states
   * (`hidden`, [B, T - from, D]): fused and chunked on native backends, else through the full logits.
   */
  private headOutputs(hidden: tf.Tensor3D, targets: tf.Tensor2D): { logprobs: tf.Tensor2D; entropy: tf.Tensor2D } {
    const [B, T, D] = hidden.shape;
    if (!this.fusedHead) {
      const logSoftmax = vocabLogSoftmax(unembed(this.ops, this.model, this.weightTensors(), hidden) as tf.Tensor3D);
      return { logprobs: targetLogprobs(logSoftmax, targets), entropy: entropyFromLogSoftmax(logSoftmax) };
    }
    // A frozen tied embedding is held in both layouts (the [D, V] copy made at construction).
    const w = this.weightTensors();
    const { weight, transposed } = unembeddingWeight(w);
    const head = transposed ? { vd: weight as tf.Tensor2D } : { dv: weight as tf.Tensor2D, ...(this.model.tieEmbeddings ? { vd: w['tok_emb.weight'] as tf.Tensor2D } : {}) };
    const trained = weight instanceof tf.Variable ? (transposed ? 'vd' : 'dv') : undefined;
    const both = headLogprobsAndEntropy(tf.reshape(hidden, [B * T, D]), head, tf.reshape(tf.cast(targets, 'int32'), [B * T]), trained);
    return { logprobs: tf.reshape(tf.slice(both, [0, 0], [-1, 1]), [B, T]), entropy: tf.reshape(tf.slice(both, [0, 1], [-1, 1]), [B, T]) };
  }

  /** The final hidden states [B, T - from, D] (the logits' input); see logits(). */
  private hidden(inputs: tf.Tensor2D, training = false, from = 0, media?: MediaInputs<tf.Tensor>): tf.Tensor3D {
    const [B, T] = inputs.shape;
    return forwardHidden(this.ops, this.model, this.weightTensors(), { tokens: inputs, ...this.positionInputs(B, T), loraInput: this.loraInput(training), recomputeLayers: training && this.gradientCheckpointing, logitsFrom: from, media }).hidden as tf.Tensor3D;
  }

  /**
   * The same hidden states as hidden(inputs, training, from) ([B, T - from, D]) from the micro-batch
   * packed one row per prompt (packGroups): each prompt computed once, its sequences' inputs after
   * it, none padded; gathered back to the padded layout (the gather's gradient sums a prompt's
   * gradients over its sequences).
   */
  private packedHidden(packed: { tokens: tf.Tensor2D; positions: tf.Tensor2D; bias: tf.Tensor4D; gather: tf.Tensor1D; rope?: { cos: tf.Tensor; sin: tf.Tensor } }, B: number, S: number, training: boolean): tf.Tensor3D {
    const [U, L] = packed.tokens.shape;
    const { hidden } = forwardHidden(this.ops, this.model, this.weightTensors(), { tokens: packed.tokens, positions: packed.positions, attentionBias: packed.bias, rope: packed.rope, loraInput: this.loraInput(training), recomputeLayers: training && this.gradientCheckpointing });
    const D = (hidden as tf.Tensor).shape[2] as number;
    return tf.reshape(tf.gather(tf.reshape(hidden as tf.Tensor, [U * L, D]), packed.gather), [B, S, D]);
  }

  /** The tensors of packed rows (packGroups); the caller disposes them. */
  private packedTensors(packed: PackedGroups): { tokens: tf.Tensor2D; positions: tf.Tensor2D; bias: tf.Tensor4D; gather: tf.Tensor1D; rope?: { cos: tf.Tensor; sin: tf.Tensor } } {
    return {
      tokens: tf.tensor2d(packed.tokens, [packed.rows, packed.length], 'int32'),
      positions: tf.tensor2d(packed.positions, [packed.rows, packed.length], 'int32'),
      bias: tf.tensor4d(packed.bias, [packed.rows, 1, packed.length, packed.length]),
      gather: tf.tensor1d(packed.gather, 'int32'),
      rope: this.ropeOf(packed.positions, packed.rows, packed.length),
    };
  }

  /** Positions 0..length-1 of `rows` rows: position ids, the causal bias, rotary tables. */
  private positionInputs(rows: number, length: number): { positions: tf.Tensor; attentionBias: tf.Tensor; rope?: { cos: tf.Tensor; sin: tf.Tensor } } {
    const positions = tf.tile(tf.range(0, length, 1, 'int32').reshape([1, length]), [rows, 1]);
    const bias = tf.tensor(attentionBias(1, length, 0), [1, 1, length, length]);
    return { positions, attentionBias: bias, rope: this.ropeOf(Int32Array.from({ length }, (_, t) => t), 1, length) };
  }

  /** llama: the rotary tables [rows, 1, length, Dh] of row-major positions [rows, length]; undefined for other architectures. */
  private ropeOf(positions: ArrayLike<number>, rows: number, length: number): { cos: tf.Tensor; sin: tf.Tensor } | undefined {
    if (this.model.architecture !== 'llama') return undefined;
    const tables = ropeTables(this.model, positions, rows, length);
    const Dh = tables.cos.length / (rows * length);
    return { cos: tf.tensor(tables.cos, [rows, 1, length, Dh]), sin: tf.tensor(tables.sin, [rows, 1, length, Dh]) };
  }

  /**
   * LoRA dropout for one forward pass: each projection's mask seeded by the pass and the
   * projection's name, so a layer computed again (gradient checkpointing) draws the same mask.
   */
  private loraInput(training: boolean): ((x: tf.Tensor, projection: string) => tf.Tensor) | undefined {
    if (!training || this.loraDropout === 0) return undefined;
    const pass = Math.floor(Math.random() * 2 ** 31);
    return (x, projection) => tf.dropout(x, this.loraDropout, undefined, `${pass}:${projection}`);
  }

  /**
   * Log-probs of every target of each sequence under the current weights (reference policy, old
   * log-probs): row i has tokens.length - 1 entries. A sequence is its tokens, or its tokens and media.
   */
  async logprobs(sequences: ReadonlyArray<ScoredSequence>, options: { microBatchSize?: number } = {}): Promise<Float32Array[]> {
    return this.perTarget(sequences, options.microBatchSize, (chunk, batch) => {
      // Input columns before the shortest prompt are the same in a group's rows: packed, computed once.
      const promptLengths = chunk.map((s) => s.promptLength);
      const from = this.sharePrompts && !batch.media && promptLengths.every((p) => p !== undefined && p >= 1) ? Math.min(...(promptLengths as number[])) : 0;
      const shared = from > 0 ? sharedPrefixes(batch, from) : undefined;
      const packed = shared && packGroups(batch, from, chunk.map((s) => s.tokens.length - 1), shared, 0);
      const targets = tf.tensor2d(batch.targets, [batch.B, batch.T], 'int32');
      if (packed) return this.headOutputs(this.packedHidden(this.packedTensors(packed), batch.B, batch.T, false), targets).logprobs;
      const inputs = tf.tensor2d(batch.inputs, [batch.B, batch.T], 'int32');
      return this.headOutputs(this.hidden(inputs, false, 0, mediaTensors(batch)), targets).logprobs;
    });
  }

  /**
   * The value head's V(s_t) of every target of each sequence under the current weights (PPO's
   * V_old, before an update): row i has tokens.length - 1 entries. Models with a value head only.
   */
  async values(sequences: ReadonlyArray<ScoredSequence>, options: { microBatchSize?: number } = {}): Promise<Float32Array[]> {
    if (!this.model.valueHead) throw new Error('values: this model has no value head (set valueHead: true in its config; a run sets it with algorithm.advantage "gae")');
    return this.perTarget(sequences, options.microBatchSize, (_, batch) => this.valuesOf(this.hidden(tf.tensor2d(batch.inputs, [batch.B, batch.T], 'int32'), false, 0, mediaTensors(batch))));
  }

  /**
   * One number per target of each sequence (logprobs, values): the sequences in chunks of
   * `microBatchSize` (default the trainer's), each padded and given to `compute` (inside tf.tidy) for
   * a [B, T] tensor, read back and cut to each sequence's tokens.length - 1 targets.
   */
  private async perTarget(sequences: ReadonlyArray<ScoredSequence>, microBatchSize: number | undefined, compute: (chunk: Array<Exclude<ScoredSequence, ArrayLike<number>>>, batch: PaddedBatch) => tf.Tensor): Promise<Float32Array[]> {
    const size = microBatchSize ?? this.microBatchSize;
    const out: Float32Array[] = [];
    for (let start = 0; start < sequences.length; start += size) {
      if (start > 0) await yieldToEventLoop();
      const chunk = sequences.slice(start, start + size).map((s) => ('tokens' in s ? s : { tokens: s }));
      const batch = padBatch(this.model, chunk.map((s) => ({ ...s, lossMask: [] })), false);
      const rows = tf.tidy(() => compute(chunk, batch));
      const data = (await rows.data()) as Float32Array;
      rows.dispose();
      chunk.forEach((s, b) => out.push(data.slice(b * batch.T, b * batch.T + s.tokens.length - 1)));
    }
    return out;
  }

  /** The value head on hidden states [B, T, D] -> [B, T]. */
  private valuesOf(hidden: tf.Tensor3D): tf.Tensor2D {
    const [B, T] = hidden.shape;
    return tf.reshape(valueHead(this.ops, this.weightTensors(), hidden), [B, T]);
  }

  /** The logits [T, V] (row-major) of one sequence (and its media) under the current weights (reference checks, exports). */
  async forwardLogits(tokens: ArrayLike<number>, media?: SequenceMedia): Promise<Float32Array> {
    // One more token than the inputs, as a target to pad with: any id that is not a placeholder.
    const placeholders = [this.model.vision?.tokenId, this.model.audio?.tokenId];
    let extra = 0;
    while (placeholders.includes(extra)) extra += 1;
    const batch = padBatch(this.model, [{ tokens: [...Array.from(tokens), extra], lossMask: [], media }], false);
    const logits = tf.tidy(() => this.logits(tf.tensor2d(batch.inputs, [1, batch.T], 'int32'), false, 0, mediaTensors(batch)));
    const values = (await logits.data()) as Float32Array;
    logits.dispose();
    return values;
  }

  /**
   * One optimizer step on `sequences` with `loss`. The update is applied only if the loss and every
   * gradient are finite; otherwise NonFiniteUpdateError names the culprit and the weights and
   * optimizer state are untouched.
   */
  async trainStep(sequences: readonly TrainSequence[], loss: TrainingLoss, options: TrainStepOptions = {}): Promise<TrainStepMetrics> {
    if (this.busy) throw new Error('trainStep is already running on this trainer: await the previous step first');
    if (sequences.length === 0) throw new Error('trainStep needs at least one sequence');
    this.busy = true;
    try {
      return await this.runStep(sequences, loss, options);
    } finally {
      this.busy = false;
    }
  }

  private async runStep(sequences: readonly TrainSequence[], loss: TrainingLoss, options: TrainStepOptions): Promise<TrainStepMetrics> {
    const started = performance.now();
    /** The step's gradients so far, summed over micro-batches as each is complete (variableGradsReleasing). */
    const summed: tf.NamedTensorMap = {};
    try {
      const { full, totals, microBatches, paddedTokens } = await this.accumulateGradients(sequences, loss, options, summed);
      await yieldToEventLoop();
      const { gradNorm, clipScale, lr, valueHeadLr } = await this.applyUpdate([...this.variables.values()], summed, loss.name);
      const { mean, ratioMin, ratioMax } = totals;
      const lossMetrics = totals.lossMetrics();
      return {
        // The batch loss: the sum of the weighted micro-batch losses (their shares sum to less than 1
        // when the batch totals count samples not given).
        loss: totals.sums.loss,
        gradNorm,
        gradClipped: clipScale < 1,
        lr,
        ...(valueHeadLr !== undefined ? { valueHeadLr } : {}),
        step: this.stepsApplied,
        sequences: sequences.length,
        lossTokens: full.lossTokens,
        entropy: mean('entropy')!,
        ...(mean('kl') !== undefined ? { kl: mean('kl') } : {}),
        ...(mean('ratioMean') !== undefined ? { ratioMean: mean('ratioMean'), ratioMin, ratioMax } : {}),
        ...(lossMetrics.clipFraction !== undefined ? { clipFraction: lossMetrics.clipFraction } : {}),
        lossMetrics,
        microBatches,
        paddedTokens,
        durationMs: performance.now() - started,
      };
    } finally {
      tf.dispose(Object.values(summed));
    }
  }

  /**
   * A step's forward and backward passes, micro-batch by micro-batch, each weighted by its share of
   * the batch totals (options.batch, default the sequences' own): the gradients summed into `summed`
   * (by variable name), the metric totals returned. Throws NonFiniteUpdateError on a non-finite loss.
   */
  private async accumulateGradients(sequences: readonly TrainSequence[], loss: TrainingLoss, options: TrainStepOptions, summed: tf.NamedTensorMap): Promise<{ full: PaddedBatch; totals: StepMetricTotals; microBatches: number; paddedTokens: number }> {
    const full = padBatch(this.model, sequences, true, false);
    if (full.lossTokens === 0) throw new Error('trainStep: no sequence has a loss token (every lossMask is all 0)');
    const batch: BatchTotals = options.batch ?? { sequences: full.sequencesWithLoss, lossTokens: full.lossTokens };
    microBatchShare(loss.microBatchWeighting, full, batch); // throws unless the totals cover the sequences given
    const names = [...this.variables.keys()];
    const varList = names.map((n) => this.variables.get(n)!);
    const parts = names.map(parameterPart);
    const totals = new StepMetricTotals();
    let paddedTokens = 0;
    let microBatches = 0;
    const plan = planMicroBatches(
      sequences.map((q) => q.tokens.length),
      this.microBatchSize,
      this.microBatchTokens,
      this.sharePrompts ? sequences.map((q) => promptPrefix(q.tokens, q.lossMask)) : undefined,
    );
    for (const [k, indices] of plan.entries()) {
      if (k > 0) await yieldToEventLoop();
      const mb = padBatch(this.model, indices.map((i) => sequences[i]), true);
      const share = microBatchShare(loss.microBatchWeighting, mb, batch);
      if (share === 0) continue;
      microBatches += 1;
      const lengths = indices.map((i) => sequences[i].tokens.length - 1);
      const metric = await this.microBatchStep(mb, lengths, share, loss, batch, { varList, parts, summed }, (padded) => (paddedTokens += padded));
      if (!Number.isFinite(metric.loss)) {
        throw new NonFiniteUpdateError(
          `${loss.name} loss is not finite (${metric.loss}) on micro-batch ${k + 1} of ${plan.length} (sequences ${indices.slice(0, 8).join(', ')}${indices.length > 8 ? ', ...' : ''}); the update was not applied (check advantages, old log-probs and the learning rate)`,
        );
      }
      totals.add(metric, share);
    }
    return { full, totals, microBatches, paddedTokens };
  }

  /**
   * Data parallelism (training/data-parallel.ts): this trainer's part of a step's gradient, read back
   * and NOT applied. Micro-batches are weighted by their share of options.batch as in trainStep, so
   * with the whole batch's totals the parts of one batch split across trainers sum to trainStep's
   * gradient of the whole batch. Every trained parameter is returned (zeros where none was reached);
   * `loss` is this part's share of the batch loss.
   */
  async gradients(sequences: readonly TrainSequence[], loss: TrainingLoss, options: TrainStepOptions = {}): Promise<{ gradients: PolicyWeights; loss: number; lossTokens: number; microBatches: number }> {
    if (this.busy) throw new Error('gradients: a step is already running on this trainer: await it first');
    this.busy = true;
    const summed: tf.NamedTensorMap = {};
    try {
      const { full, totals, microBatches } = await this.accumulateGradients(sequences, loss, options, summed);
      const gradients: PolicyWeights = {};
      for (const [name, v] of this.variables) gradients[name] = summed[v.name] ? ((await summed[v.name].data()) as Float32Array).slice() : new Float32Array(v.size);
      return { gradients, loss: totals.sums.loss, lossTokens: full.lossTokens, microBatches };
    } finally {
      tf.dispose(Object.values(summed));
      this.busy = false;
    }
  }

  /**
   * One optimizer step with given gradients (one per trained parameter, e.g. the all-reduced sum of
   * gradients() over a batch's shards), exactly as trainStep applies its own: global-norm clipping,
   * AdamW at the scheduled learning rate, refused with NonFiniteUpdateError when one is not finite.
   */
  async applyGradients(gradients: PolicyWeights, lossName = 'all-reduced'): Promise<{ gradNorm: number; gradClipped: boolean; lr: number; step: number }> {
    if (this.busy) throw new Error('applyGradients: a step is already running on this trainer: await it first');
    this.busy = true;
    const summed: tf.NamedTensorMap = {};
    try {
      for (const [name, v] of this.variables) {
        const g = gradients[name];
        if (!g || g.length !== v.size) throw new Error(`applyGradients: the gradient of "${name}" has ${g?.length ?? 'no'} values, expected ${v.size}`);
        summed[v.name] = tf.tensor(g, v.shape, 'float32');
      }
      const { gradNorm, clipScale, lr } = await this.applyUpdate([...this.variables.values()], summed, lossName);
      return { gradNorm, gradClipped: clipScale < 1, lr, step: this.stepsApplied };
    } finally {
      tf.dispose(Object.values(summed));
      this.busy = false;
    }
  }

  /**
   * One micro-batch's forward and backward: its gradients added into `grads.summed`, its scalar
   * metrics read back, every tensor it made disposed. `lengths`: each sequence's target count;
   * `countPadded` is told the token positions it computes (before the forward).
   */
  private async microBatchStep(
    mb: PaddedBatch,
    lengths: number[],
    share: number,
    loss: TrainingLoss,
    batch: BatchTotals,
    grads: { varList: tf.Variable[]; parts: TrainablePart[]; summed: tf.NamedTensorMap },
    countPadded: (tokens: number) => void,
  ): Promise<Record<string, number>> {
    // Targets before the micro-batch's first loss token (prompts) carry no loss: no logits for
    // them, which on a large vocabulary is most of a step's memory.
    const from = firstLossColumn(mb);
    const cols = (values: Float32Array | Int32Array) => columnsFrom(values, mb.B, mb.T, from);
    const shape: [number, number] = [mb.B, mb.T - from];
    // Rows with the same inputs before `from` (a group's prompt) compute those columns once.
    const shared = this.sharePrompts && !mb.media ? sharedPrefixes(mb, from) : undefined;
    const packed = shared && packGroups(mb, from, lengths, shared);
    countPadded(packed ? packed.rows * packed.length : mb.B * mb.T);
    // The batch's constants are made outside the differentiated closure: the gradient tape
    // records (and keeps copies for) every op inside it.
    const data: MicroBatchData = {
      inputs: packed ? undefined : tf.tensor2d(mb.inputs, [mb.B, mb.T], 'int32'),
      targets: tf.tensor2d(cols(mb.targets), shape, 'int32'),
      mask: tf.tensor2d(cols(mb.mask), shape),
      oldLogprobs: mb.oldLogprobs && tf.tensor2d(cols(mb.oldLogprobs), shape),
      refLogprobs: mb.refLogprobs && tf.tensor2d(cols(mb.refLogprobs), shape),
      advantages: mb.advantages && tf.tensor2d(cols(mb.advantages), shape),
      oldValues: mb.oldValues && tf.tensor2d(cols(mb.oldValues), shape),
      returns: mb.returns && tf.tensor2d(cols(mb.returns), shape),
    };
    const media = mediaTensors(mb);
    const packedInputs = packed && this.packedTensors(packed);
    const constants = [...Object.values(data), ...Object.values(media ?? {}), ...(packedInputs ? [packedInputs.tokens, packedInputs.positions, packedInputs.bias, packedInputs.gather, ...(packedInputs.rope ? [packedInputs.rope.cos, packedInputs.rope.sin] : [])] : [])].filter((t): t is tf.Tensor => t !== undefined);
    // Only the variables this micro-batch reaches are differentiated: an encoder's (and its
    // projector's) when the micro-batch has that medium, the language model's always. The
    // others get a zero gradient at the update (a loss that reaches no variable is not differentiated).
    const reaches = (part: TrainablePart) => part === 'language_model' || (part.startsWith('vision') ? mb.media?.images : mb.media?.audio) !== undefined;
    const reached = grads.varList.filter((_, i) => reaches(grads.parts[i]));
    const lossMetrics: Record<string, tf.Scalar> = {};
    const kept: { logprobs?: tf.Tensor2D; entropy?: tf.Tensor2D } = {};
    let value: tf.Scalar;
    try {
      const microBatchLoss = () => {
        const hidden = packedInputs ? this.packedHidden(packedInputs, mb.B, mb.T - from, true) : this.hidden(data.inputs!, true, from, media);
        return this.microBatchLoss(hidden, data, share, loss, batch, lossMetrics, kept);
      };
      // The backward pass frees each op's saved tensors and gradients once done with them.
      value = reached.length > 0 ? variableGradsReleasing(microBatchLoss, reached, grads.summed).value : tf.tidy(microBatchLoss);
    } catch (err) {
      tf.dispose([...constants, ...Object.values(lossMetrics)]);
      throw err;
    }
    return readMicroBatchMetrics({ data, shape, share, value, lossMetrics, logprobs: kept.logprobs!, entropy: kept.entropy!, constants });
  }

  /**
   * A micro-batch's loss times its share, from its last hidden states (inside the differentiated
   * closure); the loss's own metrics and the log-probs and entropy are kept for readMicroBatchMetrics.
   */
  private microBatchLoss(
    hidden: tf.Tensor3D,
    data: MicroBatchData,
    share: number,
    loss: TrainingLoss,
    batch: BatchTotals,
    lossMetrics: Record<string, tf.Scalar>,
    kept: { logprobs?: tf.Tensor2D; entropy?: tf.Tensor2D },
  ): tf.Scalar {
    const { logprobs, entropy } = this.headOutputs(hidden, data.targets);
    const { targets, mask, oldLogprobs, refLogprobs, advantages } = data;
    // The full [B, T, V] logits and log-softmax only for a loss that reads them (the built-in ones do not).
    let logits: tf.Tensor3D | undefined;
    let logSoftmax: tf.Tensor3D | undefined;
    const fullLogits = () => (logits ??= unembed(this.ops, this.model, this.weightTensors(), hidden) as tf.Tensor3D);
    let values: tf.Tensor2D | undefined;
    const valuesOf = () => (values ??= this.valuesOf(hidden));
    const inputs: LossInputs = {
      get logits() {
        return fullLogits();
      },
      get logSoftmax() {
        return (logSoftmax ??= vocabLogSoftmax(fullLogits()));
      },
      get values() {
        return valuesOf();
      },
      logprobs,
      entropy,
      targets,
      mask,
      oldLogprobs,
      refLogprobs,
      advantages,
      oldValues: data.oldValues,
      returns: data.returns,
      batch,
    };
    const out = loss.compute(inputs);
    for (const [k, v] of Object.entries(out.metrics ?? {})) lossMetrics[`loss.${k}`] = tf.keep(v);
    kept.logprobs = tf.keep(logprobs);
    kept.entropy = tf.keep(entropy);
    return tf.mul(out.loss, tf.scalar(share)) as tf.Scalar;
  }

  /** Clips the summed gradients to maxGradNorm and applies AdamW at the scheduled learning rate, unless a gradient is not finite. */
  private async applyUpdate(varList: tf.Variable[], summed: tf.NamedTensorMap, lossName: string): Promise<{ gradNorm: number; clipScale: number; lr: number; valueHeadLr?: number }> {
    // A variable no micro-batch reached (an encoder whose medium the step lacks) has a zero gradient.
    const flat = this.adamw.prepare(varList.map((v) => summed[v.name] ?? tf.zerosLike(v)));
    let gradNorm: number;
    let clipScale: number;
    let lr: number;
    let valueHeadLr: number | undefined;
    try {
      const squares = await this.adamw.sumsOfSquares(flat);
      const bad = squares.findIndex((x) => !Number.isFinite(x));
      if (bad >= 0) {
        throw new NonFiniteUpdateError(`the gradient of "${await this.adamw.nonFiniteParameter(flat, bad)}" is not finite (${lossName} loss); the update was not applied`);
      }
      gradNorm = Math.sqrt(squares.reduce((a, b) => a + b, 0));
      clipScale = gradNorm > this.maxGradNorm ? this.maxGradNorm / (gradNorm + 1e-6) : 1;
      lr = learningRate(this.optimizer.lr, this.schedule, this.stepsApplied);
      // The value head's own peak under the same schedule (warmup and decay alike).
      valueHeadLr = this.valueHeadLr === undefined ? undefined : learningRate(this.valueHeadLr, this.schedule, this.stepsApplied);
      this.adamw.apply(flat, this.stepsApplied + 1, clipScale, lr, valueHeadLr === undefined ? {} : { [VALUE_HEAD_GROUP]: valueHeadLr });
    } finally {
      tf.dispose(flat);
    }
    this.stepsApplied += 1;
    return { gradNorm, clipScale, lr, ...(valueHeadLr !== undefined ? { valueHeadLr } : {}) };
  }

  /** Optimizer state (AdamW moments + step) as safetensors bytes, to resume training elsewhere. */
  async exportOptimizerState(): Promise<Uint8Array> {
    const tensors: Array<[string, NamedTensor]> = [];
    for (const s of await this.adamw.exportMoments()) {
      tensors.push([`m.${s.name}`, { shape: s.shape, data: s.m }]);
      tensors.push([`v.${s.name}`, { shape: s.shape, data: s.v }]);
    }
    return encodeSafetensors(tensors, { 'relax.optimizer': 'adamw', 'relax.step': String(this.stepsApplied) });
  }

  /** Restores exportOptimizerState() output; shapes must match this trainer's model. */
  importOptimizerState(bytes: Uint8Array): void {
    const file = decodeSafetensors(bytes, 'optimizer state');
    const step = Number(file.metadata['relax.step']);
    if (!Number.isInteger(step) || step < 0) throw new Error(`optimizer state: metadata relax.step is ${file.metadata['relax.step']}, expected a step count`);
    const restored = new Map<string, { m: Float32Array; v: Float32Array }>();
    // Moments of parts this trainer holds constant (options.trainable) are not read.
    for (const p of trainableParameterSpec(this.model).filter((q) => this.variables.has(q.name))) {
      const m = file.tensors.get(`m.${p.name}`);
      const v = file.tensors.get(`v.${p.name}`);
      if (!m && !v) continue;
      for (const [key, t] of [[`m.${p.name}`, m], [`v.${p.name}`, v]] as const) {
        if (!t) throw new Error(`optimizer state: tensor "${key}" is missing`);
        if (t.shape.join(',') !== p.shape.join(',')) throw new Error(`optimizer state: tensor "${key}" has shape [${t.shape}], expected [${p.shape}]`);
      }
      restored.set(p.name, { m: Float32Array.from(m!.data), v: Float32Array.from(v!.data) });
    }
    this.adamw.importMoments(restored);
    this.stepsApplied = step;
  }

  /** Frees every tensor this trainer holds. */
  dispose(): void {
    for (const v of this.variables.values()) v.dispose();
    for (const t of this.frozen.values()) t.dispose();
    for (const t of this.frozenBlocks) t.dispose();
    this.adamw.dispose();
  }
}

