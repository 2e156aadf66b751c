// TrainingLoss adapters: the trainer's pluggable loss interface over the losses of engines/rl
// (the math lives there, once; these only wire micro-batch tensors to it).
import * as tf from '@tensorflow/tfjs';
import { aggregateLoss, behaviorImportanceWeights, entropyBonus, gspoLoss, klLoss, ppoClipLoss, sftCrossEntropy, stopGradient, type KlEstimator, type LossAggregation } from './rl/losses';
import type { LossInputs, TrainingLoss } from './trainer';

/** Supervised fine-tuning: mean negative log-likelihood of the loss-mask targets. */
export function sftLoss(): TrainingLoss {
  return {
    name: 'sft',
    microBatchWeighting: 'tokens',
    compute: ({ logits, targets, mask }) => ({ loss: sftCrossEntropy(logits, targets, mask) }),
  };
}

export interface PolicyLossOptions {
  algorithm: 'ppo' | 'gspo';
  /** Ratio clipped to [1 - clipLow, 1 + clipHigh]. Defaults: ppo 0.2 / 0.2; gspo 3e-4 / 4e-4 (the paper's). */
  clipLow?: number;
  clipHigh?: number;
  aggregation?: LossAggregation;
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
}

function required(inputs: LossInputs, field: 'oldLogprobs' | 'advantages' | 'refLogprobs', loss: string): tf.Tensor2D {
  const t = inputs[field];
  if (!t) throw new Error(`${loss} loss needs ${field} on every sequence`);
  return t;
}

/** Clipped policy-gradient surrogate (PPO or GSPO) + optional KL-to-reference and entropy terms. */
export function policyLoss(options: PolicyLossOptions): TrainingLoss {
  const gspo = options.algorithm === 'gspo';
  const aggregation = options.aggregation ?? (gspo ? 'sequence_mean' : 'token_mean');
  const clipLow = options.clipLow ?? (gspo ? 3e-4 : 0.2);
  const clipHigh = options.clipHigh ?? (gspo ? 4e-4 : 0.2);
  const klCoef = options.klCoef ?? 0;
  const entropyCoef = options.entropyCoef ?? 0;
  const offPolicy = options.offPolicy ?? 'none';
  const name = options.algorithm;
  return {
    name,
    microBatchWeighting: aggregation === 'token_mean' ? 'tokens' : 'sequences',
    compute(inputs) {
      const behavior = required(inputs, 'oldLogprobs', name);
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
      const surrogate = (gspo ? gspoLoss : ppoClipLoss)({
        logprobs: inputs.logprobs,
        oldLogprobs,
        advantages: required(inputs, 'advantages', name),
        mask: inputs.mask,
        clipLow,
        clipHigh,
        aggregation,
        ...(weights ? { weights } : {}),
      });
      let loss: tf.Scalar = surrogate.loss;
      if (klCoef > 0) {
        const kl = klLoss(inputs.logprobs, required(inputs, 'refLogprobs', name), inputs.mask, options.klEstimator ?? 'k3', aggregation);
        loss = tf.add(loss, tf.mul(kl, tf.scalar(klCoef)));
      }
      if (entropyCoef > 0) loss = tf.add(loss, entropyBonus(inputs.logits, inputs.mask, entropyCoef));
      return { loss, metrics: { ...metrics, clipFraction: surrogate.clipFraction, approxKl: surrogate.approxKl } };
    },
  };
}
