// CISPO and SAPO, two policy-gradient surrogates that keep the gradient the hard PPO clip drops. As
// differentiable tfjs functions with the same inputs and outputs as ./losses (ppoClipLoss, gspoLoss):
//   CISPO (MiniMax-M1, arXiv 2506.13585, eq. 4): clip the importance-sampling WEIGHT, not the update:
//     l_t = -sg(clip(r_t, 1 - eps_low, 1 + eps_high)) * A_t * log pi_theta(y_t),  r_t = pi_theta / pi_old,
//     so every token keeps the REINFORCE gradient -r^_t A_t grad log pi (a clipped token's too); the paper
//     sets no lower bound (eps_low "large") and tunes eps_high; token-level aggregation (1 / sum |o_i|).
//   SAPO (Soft Adaptive Policy Optimization, Qwen, arXiv 2511.20347): a soft, temperature-controlled
//     gate instead of the clip: l_t = -f(r_t; tau) * A_t with f(r; tau) = sigmoid(tau (r - 1)) * 4 / tau,
//     tau = tau_pos where A_t > 0 and tau_neg otherwise (paper: 1.0 / 1.05; verl's compute_policy_loss_sapo
//     uses the same gate, temperatures and sequence-mean-token-mean aggregation). f'(1) = 1: on-policy
//     the gradient equals the unclipped surrogate's; off-policy it decays smoothly (weight 4 s (1 - s) r).
// Shapes, masks, aggregation names and `weights` (constant per-token multipliers: importance weights
// and rollout-correction masks) are those of ./losses.
import * as tf from '@tensorflow/tfjs';
import { LOG_RATIO_CLAMP } from './kl';
import { aggregateLoss, stopGradient, type PolicyLossInput, type PolicyLossOutput } from './losses';

type SurrogateInput = Omit<PolicyLossInput, 'clipLow' | 'clipHigh'>;

export interface CispoLossInput extends SurrogateInput {
  /** The IS weight's lower bound is 1 - clipLow; absent: no lower bound (the paper's choice). */
  clipLow?: number;
  /** The IS weight's upper bound is 1 + clipHigh (the paper's eps_high^IS). */
  clipHigh: number;
}

export interface SapoLossInput extends SurrogateInput {
  /** Gate temperature where the advantage is > 0 (paper: 1.0). */
  tauPos: number;
  /** Gate temperature where the advantage is <= 0 (paper: 1.05; larger: faster decay). */
  tauNeg: number;
}

function tokenAdvantages(advantages: tf.Tensor): tf.Tensor {
  return advantages.rank === 1 ? tf.expandDims(advantages, 1) : advantages;
}

/** r_t = exp(logprobs - oldLogprobs), the log clamped as ./losses does. */
function tokenRatio(input: SurrogateInput): tf.Tensor2D {
  return tf.exp(tf.clipByValue(tf.sub(input.logprobs, input.oldLogprobs), -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)) as tf.Tensor2D;
}

/** Loss, ratio mean and approximate KL(pi_old || pi) over the valid tokens, as ./losses reports them. */
function surrogateOutput(perToken: tf.Tensor, ratio: tf.Tensor2D, clipFraction: tf.Scalar, input: SurrogateInput, defaultAggregation: 'dapo' | 'grpo'): PolicyLossOutput {
  const weighted = input.weights ? tf.mul(stopGradient(input.weights), perToken) : perToken;
  const loss = aggregateLoss(weighted, input.mask, input.aggregation ?? defaultAggregation, { maxCompletionTokens: input.maxCompletionTokens });
  const ratioMean = aggregateLoss(stopGradient(ratio), input.mask, 'token_mean');
  const approxKl = aggregateLoss(stopGradient(tf.sub(input.oldLogprobs, input.logprobs)), input.mask, 'token_mean');
  return { loss, clipFraction, ratio, ratioMean, approxKl };
}

/**
 * CISPO: -sg(clip(r_t, 1 - clipLow, 1 + clipHigh)) * A_t * log pi(y_t) per token; default aggregation
 * dapo (the paper's token mean). clipFraction: the tokens whose weight was clipped (their gradient is
 * still there, scaled by the clipped weight).
 */
export function cispoLoss(input: CispoLossInput): PolicyLossOutput {
  const { clipLow, clipHigh } = input;
  if (clipLow !== undefined && !(clipLow >= 0 && clipLow <= 1)) throw new Error(`CISPO clipLow is ${clipLow}: the IS weight's lower bound 1 - clipLow needs clipLow in [0, 1] (leave it out for no lower bound)`);
  if (!(clipHigh >= 0)) throw new Error(`CISPO clipHigh is ${clipHigh}: the IS weight's upper bound 1 + clipHigh needs clipHigh >= 0`);
  return tf.tidy(() => {
    const ratio = tokenRatio(input);
    const clipped = tf.clipByValue(ratio, clipLow === undefined ? 0 : 1 - clipLow, 1 + clipHigh);
    const perToken = tf.neg(tf.mul(tf.mul(stopGradient(clipped), tokenAdvantages(input.advantages)), input.logprobs));
    const clipFraction = aggregateLoss(tf.cast(tf.notEqual(clipped, ratio), 'float32'), input.mask, 'token_mean');
    return surrogateOutput(perToken, ratio, clipFraction, input, 'dapo');
  });
}

/** SAPO's soft gate f(r; tau) = sigmoid(tau (r - 1)) * 4 / tau (tau a tensor broadcast against r). */
export function sapoGate(ratio: tf.Tensor, tau: tf.Tensor): tf.Tensor {
  return tf.tidy(() => tf.div(tf.mul(tf.sigmoid(tf.mul(tau, tf.sub(ratio, 1))), 4), tau));
}

/**
 * SAPO: -f(r_t; tau) * A_t per token, tau = tauPos where A_t > 0, tauNeg elsewhere; default
 * aggregation grpo (the paper's and verl's sequence mean of token means). No clip: clipFraction 0.
 */
export function sapoLoss(input: SapoLossInput): PolicyLossOutput {
  const { tauPos, tauNeg } = input;
  if (!(tauPos > 0) || !(tauNeg > 0)) throw new Error(`SAPO temperatures are tauPos ${tauPos}, tauNeg ${tauNeg}: both must be > 0`);
  return tf.tidy(() => {
    const ratio = tokenRatio(input);
    const advantages = tokenAdvantages(input.advantages);
    const positive = tf.cast(tf.greater(advantages, 0), 'float32');
    const tau = tf.add(tf.mul(positive, tauPos - tauNeg), tauNeg);
    const perToken = tf.neg(tf.mul(sapoGate(ratio, tau), advantages));
    return surrogateOutput(perToken, ratio, tf.scalar(0), input, 'grpo');
  });
}
