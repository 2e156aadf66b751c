// Policy losses by name, as the trainer's pluggable TrainingLoss. A run's `algorithm.policy_loss`
// names a registered loss ("ppo_clip", "gspo", "cispo", "sapo") or a user module ({ module, export }) whose export
// builds a TrainingLoss from { tf, algorithm, options }; `algorithm.policy_loss_options` is validated
// by the loss's own schema. A new loss is one function and one registerPolicyLoss call (verl's
// `register_policy_loss`). The math lives in engines/rl/losses.ts; these only wire micro-batch
// tensors to it. Split in two because the registry loads user modules (envs/) and reads the run
// config, which engines/, a library free of both, may not import.
import * as tf from '@tensorflow/tfjs';
import { z } from 'zod';
import type { RunConfig } from '../config/run-config';
import { aggregateLoss, behaviorImportanceWeights, gspoLoss, klLoss, lossAggregationWeighting, ppoClipLoss, stopGradient, type BatchTotals, type KlEstimator, type LossAggregation, type PolicyLossInput as SurrogateInput, type PolicyLossOutput } from '../engines/rl/losses';
import { cispoLoss, sapoLoss } from '../engines/rl/cispo-sapo';
import { rolloutCorrectionActive, rolloutCorrectionMask, type RolloutCorrection } from '../engines/rl/rollout-correction';
import type { LossInputs, TrainingLoss } from '../engines/trainer';
import { loadUserExport } from '../envs/user-modules';
import { AlgorithmConfigError, registeredOptions } from './advantages';
import { withValueLoss } from './critic-step';

type Algorithm = RunConfig['algorithm'];

/** Supervised fine-tuning: mean negative log-likelihood of the loss-mask targets. */
export function sftLoss(): TrainingLoss {
  return {
    name: 'sft',
    microBatchWeighting: 'tokens',
    // The trainer's log-probs of the targets (from its one log-softmax): the same as sftCrossEntropy(logits, targets, mask).
    compute: ({ logprobs, mask }) => ({ loss: tf.neg(aggregateLoss(logprobs, mask, 'token_mean')) as tf.Scalar }),
  };
}

export interface PolicyLossOptions {
  /** The surrogate: PPO clip, GSPO, CISPO (engines/rl/cispo-sapo.ts) or SAPO (the same). */
  algorithm: 'ppo' | 'gspo' | 'cispo' | 'sapo';
  /**
   * Ratio clipped to [1 - clipLow, 1 + clipHigh] (CISPO: its IS weight). Defaults: ppo and cispo
   * 0.2 / 0.2, but no lower bound for cispo (the paper's); gspo 3e-4 / 4e-4 (the paper's). SAPO has none.
   */
  clipLow?: number;
  clipHigh?: number;
  /** SAPO's gate temperatures for positive / non-positive advantages. Defaults 1 / 1.05 (the paper's). */
  tauPos?: number;
  tauNeg?: number;
  /** Default: dapo (ppo, cispo), grpo (gspo, sapo). */
  aggregation?: LossAggregation;
  /**
   * dr_grpo's L when the step does not bring one (LossInputs.batch.maxCompletionTokens, the run's
   * rollout.max_new_tokens, comes first).
   */
  maxCompletionTokens?: number;
  /** Coefficient of the KL(pi || ref) loss term (GRPO); 0 disables it. */
  klCoef?: number;
  klEstimator?: KlEstimator;
  /** Coefficient of the entropy bonus; 0 disables it. */
  entropyCoef?: number;
  /**
   * Off-policy correction (behaviorImportanceWeights): 'tis' truncates the importance weight at
   * `importanceCap` (default 2); 'decoupled' leaves it uncapped unless `importanceCap` is given.
   */
  offPolicy?: 'none' | 'tis' | 'decoupled';
  importanceCap?: number;
  /** MIS / OPSM masks on the policy-gradient term (engines/rl/rollout-correction.ts); absent: none. */
  rolloutCorrection?: RolloutCorrection;
}

/**
 * A TrainingLoss that says whether a sample of advantage 0 has a gradient under it. The built-in
 * policy losses do exactly when they carry a KL-to-reference or entropy term; otherwise such a
 * sample adds 0 to the loss and its gradient, and the caller may leave it out of the forward pass
 * while still counting it in the batch totals (BatchTotals) the loss is normalized by.
 */
export type PolicyTrainingLoss = TrainingLoss & { zeroAdvantageGradient: boolean };

/**
 * Whether samples of advantage 0 must be trained on under `loss` (their KL or entropy term has a
 * gradient). A loss that does not say (a user module's) is taken not to need them: it gets them in
 * its denominators through the batch totals, as the built-in ones do.
 */
export function zeroAdvantageHasGradient(loss: TrainingLoss): boolean {
  return (loss as Partial<PolicyTrainingLoss>).zeroAdvantageGradient === true;
}

/** The whole batch's totals where the trainer passes them (LossInputs.batch); undefined from a trainer that does not. */
function batchOf(inputs: LossInputs): BatchTotals | undefined {
  return (inputs as LossInputs & { batch?: BatchTotals }).batch;
}

function required(inputs: LossInputs, field: 'oldLogprobs' | 'advantages' | 'refLogprobs', loss: string): tf.Tensor2D {
  const t = inputs[field];
  if (!t) throw new Error(`${loss} loss needs ${field} on every sequence`);
  return t;
}

/**
 * A policy-gradient surrogate (PPO clip, GSPO, CISPO or SAPO; its per-token factors are the off-policy
 * importance weights and the rollout-correction masks) + optional KL-to-reference and entropy terms, every
 * term aggregated with `aggregation` (engines/rl/losses.ts aggregateLoss) over the micro-batch; the
 * trainer weights micro-batches by their share of the batch's tokens or sequences
 * (lossAggregationWeighting), which makes the sum the aggregation's formula over the whole batch.
 */
export function policyLoss(options: PolicyLossOptions): PolicyTrainingLoss {
  const kind = options.algorithm;
  const sequenceMean = kind === 'gspo' || kind === 'sapo';
  const aggregation = options.aggregation ?? (sequenceMean ? 'grpo' : 'dapo');
  const clip = {
    clipLow: options.clipLow ?? (kind === 'gspo' ? 3e-4 : kind === 'cispo' ? undefined : 0.2),
    clipHigh: options.clipHigh ?? (kind === 'gspo' ? 4e-4 : 0.2),
  };
  const klCoef = options.klCoef ?? 0;
  const entropyCoef = options.entropyCoef ?? 0;
  const offPolicy = options.offPolicy ?? 'none';
  const name = kind;
  return {
    name,
    microBatchWeighting: lossAggregationWeighting(aggregation),
    zeroAdvantageGradient: klCoef > 0 || entropyCoef > 0,
    compute(inputs) {
      const behavior = required(inputs, 'oldLogprobs', name);
      const advantages = required(inputs, 'advantages', name);
      const aggregate = { maxCompletionTokens: batchOf(inputs)?.maxCompletionTokens ?? options.maxCompletionTokens };
      const metrics: Record<string, tf.Scalar> = {
        // Mean |log pi_trainer - log pi_rollout| over loss tokens: the engines' numeric mismatch plus,
        // in async mode, how far the policy moved since the sample was generated.
        logprobMismatch: aggregateLoss(tf.abs(tf.sub(stopGradient(inputs.logprobs), behavior)), inputs.mask, 'token_mean'),
      };
      let oldLogprobs = behavior;
      let weights: tf.Tensor2D | undefined;
      if (offPolicy !== 'none') {
        const cap = options.importanceCap ?? (offPolicy === 'tis' ? 2 : Infinity);
        ({ weights, proxLogprobs: oldLogprobs } = behaviorImportanceWeights(inputs.logprobs, behavior, cap));
        metrics.importanceWeightMean = aggregateLoss(weights, inputs.mask, 'token_mean');
        if (Number.isFinite(cap)) metrics.importanceTruncatedFraction = aggregateLoss(tf.cast(tf.greaterEqual(weights, tf.scalar(cap)), 'float32'), inputs.mask, 'token_mean');
      }
      weights = withRolloutCorrection(inputs, behavior, advantages, options.rolloutCorrection, weights, metrics);
      const surrogate = surrogateLoss(options, clip, {
        logprobs: inputs.logprobs,
        oldLogprobs,
        advantages,
        mask: inputs.mask,
        aggregation,
        ...(aggregate.maxCompletionTokens !== undefined ? { maxCompletionTokens: aggregate.maxCompletionTokens } : {}),
        ...(weights ? { weights } : {}),
      });
      let loss: tf.Scalar = surrogate.loss;
      if (klCoef > 0) {
        const kl = klLoss(inputs.logprobs, required(inputs, 'refLogprobs', name), inputs.mask, options.klEstimator ?? 'k3', aggregation, aggregate);
        loss = tf.add(loss, tf.mul(kl, tf.scalar(klCoef)));
      }
      // The entropy bonus -coef * entropy (engines/rl/losses.ts entropyBonus), from the trainer's
      // per-token entropy, aggregated as the other terms so the micro-batch weighting is exact for it too.
      if (entropyCoef > 0) loss = tf.add(loss, tf.mul(aggregateLoss(inputs.entropy, inputs.mask, aggregation, aggregate), tf.scalar(-entropyCoef)));
      return { loss, metrics: { ...metrics, clipFraction: surrogate.clipFraction, approxKl: surrogate.approxKl } };
    },
  };
}

/** The surrogate `options.algorithm` names, over the micro-batch's tensors. */
function surrogateLoss(options: PolicyLossOptions, clip: { clipLow: number | undefined; clipHigh: number }, input: Omit<SurrogateInput, 'clipLow' | 'clipHigh'>): PolicyLossOutput {
  switch (options.algorithm) {
    case 'cispo':
      return cispoLoss({ ...input, ...(clip.clipLow !== undefined ? { clipLow: clip.clipLow } : {}), clipHigh: clip.clipHigh });
    case 'sapo':
      return sapoLoss({ ...input, tauPos: options.tauPos ?? 1, tauNeg: options.tauNeg ?? 1.05 });
    default:
      return (options.algorithm === 'gspo' ? gspoLoss : ppoClipLoss)({ ...input, clipLow: clip.clipLow ?? 0.2, clipHigh: clip.clipHigh });
  }
}

/**
 * The per-token factors of the policy-gradient term with MIS / OPSM's keep-mask folded in (a masked
 * token adds 0 and stays in the denominators), and the fractions they masked as metrics.
 */
function withRolloutCorrection(
  inputs: LossInputs,
  behavior: tf.Tensor2D,
  advantages: tf.Tensor2D,
  correction: RolloutCorrection | undefined,
  weights: tf.Tensor2D | undefined,
  metrics: Record<string, tf.Scalar>,
): tf.Tensor2D | undefined {
  if (!rolloutCorrectionActive(correction)) return weights;
  const masks = rolloutCorrectionMask(inputs.logprobs, behavior, advantages, inputs.mask, correction);
  metrics.rolloutMaskedFraction = masks.maskedFraction;
  if (masks.misMaskedFraction) metrics.misMaskedFraction = masks.misMaskedFraction;
  if (masks.opsmMaskedFraction) metrics.opsmMaskedFraction = masks.opsmMaskedFraction;
  return weights ? (tf.mul(weights, masks.keep) as tf.Tensor2D) : masks.keep;
}

/** What a policy-loss factory is given. `tf` is the trainer's own tfjs instance: build tensors with it. */
export interface PolicyLossInput {
  tf: typeof tf;
  algorithm: Algorithm;
  /** algorithm.policy_loss_options, validated by the loss's schema. */
  options: Record<string, unknown>;
}

export type PolicyLossFactory = (input: PolicyLossInput) => TrainingLoss;

export interface PolicyLossDefinition {
  name: string;
  /** Schema of algorithm.policy_loss_options for this loss. */
  options: z.ZodType<Record<string, unknown>>;
  create: PolicyLossFactory;
}

const losses = new Map<string, PolicyLossDefinition>();

export function registerPolicyLoss(loss: PolicyLossDefinition): void {
  if (losses.has(loss.name)) throw new Error(`a policy loss named "${loss.name}" is already registered`);
  losses.set(loss.name, loss);
}

export function policyLossNames(): string[] {
  return [...losses.keys()];
}

/** The run's settings every built-in policy loss shares: aggregation, KL-in-loss, entropy bonus, off-policy and rollout corrections. */
function sharedSettings(algorithm: Algorithm): Omit<PolicyLossOptions, 'algorithm'> {
  const correction = algorithm.rollout_correction;
  return {
    aggregation: algorithm.loss_aggregation,
    klCoef: algorithm.kl_mode === 'loss' ? algorithm.kl_coef : 0,
    klEstimator: algorithm.kl_estimator,
    entropyCoef: algorithm.entropy_coef,
    offPolicy: algorithm.off_policy,
    ...(algorithm.importance_cap !== undefined ? { importanceCap: algorithm.importance_cap } : {}),
    ...(correction
      ? {
          rolloutCorrection: {
            mask: correction.mask,
            ...(correction.lower !== undefined ? { lower: correction.lower } : {}),
            ...(correction.upper !== undefined ? { upper: correction.upper } : {}),
            ...(correction.opsm_delta !== undefined ? { opsmDelta: correction.opsm_delta } : {}),
          },
        }
      : {}),
  };
}

/** The clipped surrogate with the run's clip range and shared settings. */
function clippedLossFor(kind: 'ppo' | 'gspo'): PolicyLossFactory {
  return ({ algorithm }) => policyLoss({ algorithm: kind, clipLow: algorithm.clip_low, clipHigh: algorithm.clip_high, ...sharedSettings(algorithm) });
}

/** CISPO's IS-weight clip: clip_high defaults to the run's algorithm.clip_high; no lower bound unless clip_low is given (the paper's choice). */
const CispoOptionsSchema = z
  .object({
    clip_low: z.number().gt(0, 'must be > 0 (the weight\'s lower bound is 1 - clip_low; leave it out for none)').max(1, 'must be <= 1 (the weight\'s lower bound is 1 - clip_low)').optional(),
    clip_high: z.number().gt(0, 'must be > 0 (the weight\'s upper bound is 1 + clip_high)').max(10, 'must be <= 10').optional(),
  })
  .strict();

/** SAPO's gate temperatures (the paper's defaults). */
const SapoOptionsSchema = z
  .object({
    tau_pos: z.number().gt(0, 'must be > 0').max(100, 'must be <= 100').default(1),
    tau_neg: z.number().gt(0, 'must be > 0').max(100, 'must be <= 100').default(1.05),
  })
  .strict();

registerPolicyLoss({ name: 'ppo_clip', options: z.object({}).strict(), create: clippedLossFor('ppo') });
registerPolicyLoss({ name: 'gspo', options: z.object({}).strict(), create: clippedLossFor('gspo') });
registerPolicyLoss({
  name: 'cispo',
  options: CispoOptionsSchema,
  create: ({ algorithm, options }) => {
    const o = options as z.infer<typeof CispoOptionsSchema>;
    return policyLoss({ algorithm: 'cispo', ...(o.clip_low !== undefined ? { clipLow: o.clip_low } : {}), clipHigh: o.clip_high ?? algorithm.clip_high, ...sharedSettings(algorithm) });
  },
});
registerPolicyLoss({
  name: 'sapo',
  options: SapoOptionsSchema,
  create: ({ algorithm, options }) => {
    const o = options as z.infer<typeof SapoOptionsSchema>;
    return policyLoss({ algorithm: 'sapo', tauPos: o.tau_pos, tauNeg: o.tau_neg, ...sharedSettings(algorithm) });
  },
});

/**
 * The TrainingLoss `algorithm.policy_loss` names, built with the run's settings. Throws
 * AlgorithmConfigError naming the field, or UserModuleError for a module that cannot be loaded.
 */
export async function resolvePolicyLoss(algorithm: Algorithm): Promise<TrainingLoss> {
  const spec = algorithm.policy_loss;
  let create: PolicyLossFactory;
  let options = algorithm.policy_loss_options;
  if (typeof spec !== 'string') {
    create = (await loadUserExport('policy_loss', spec.module, spec.export)) as PolicyLossFactory;
  } else {
    const loss = losses.get(spec);
    if (!loss) throw new AlgorithmConfigError('algorithm.policy_loss', `unknown policy loss ${JSON.stringify(spec)}: use one of ${policyLossNames().join(', ')}, or { "module": "<path>", "export": "<name>" } for your own`);
    create = loss.create;
    options = registeredOptions(loss.options, options, 'algorithm.policy_loss_options', `policy loss "${spec}"`);
  }
  const built = create({ tf, algorithm, options });
  if (!built || typeof built.compute !== 'function' || (built.microBatchWeighting !== 'tokens' && built.microBatchWeighting !== 'sequences')) {
    throw new AlgorithmConfigError('algorithm.policy_loss', 'the loss factory must return { name, microBatchWeighting: "tokens" | "sequences", compute(inputs) }');
  }
  // algorithm.advantage "gae": the critic's clipped value loss is added (training/critic-step.ts).
  return withValueLoss(built, algorithm);
}
