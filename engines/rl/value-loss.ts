// The critic's clipped value loss of PPO with a critic. From Schulman et al. 2017 (arXiv 1707.06347),
// the clipping as in OpenAI baselines' ppo2 and verl's compute_value_loss: 0.5 * max((V - R)^2, (clip(V, V_old - eps, V_old + eps) - R)^2),
// a token mean over the loss mask. V the value head's prediction, V_old the values GAE used (the
// trainer's pass before the update), R the GAE returns. A differentiable tfjs function of [B, T] tensors.
import * as tf from '@tensorflow/tfjs';

export interface ValueLossInput {
  /** [B, T] the value head's predictions, differentiable. */
  values: tf.Tensor2D;
  /** [B, T] the values before the update (constants). */
  oldValues: tf.Tensor2D;
  /** [B, T] the value targets R = A + V_old. */
  returns: tf.Tensor2D;
  /** [B, T] 0/1 */
  mask: tf.Tensor2D;
  /** eps_v: how far V may move from V_old before its error stops counting; Infinity: no clipping. */
  clip: number;
}

/** The clipped value loss (token mean) and the fraction of loss tokens whose clipped term was the larger. */
export function clippedValueLoss(input: ValueLossInput): { loss: tf.Scalar; clipFraction: tf.Scalar } {
  return tf.tidy(() => {
    const { values, oldValues, returns, mask, clip } = input;
    const unclipped = tf.square(tf.sub(values, returns));
    const clippedValues = Number.isFinite(clip) ? tf.add(oldValues, tf.clipByValue(tf.sub(values, oldValues), -clip, clip)) : values;
    const clipped = tf.square(tf.sub(clippedValues, returns));
    const perToken = tf.mul(tf.scalar(0.5), tf.maximum(unclipped, clipped));
    const tokens = tf.maximum(tf.sum(mask), tf.scalar(1));
    const loss = tf.div(tf.sum(tf.mul(perToken, mask)), tokens) as tf.Scalar;
    const clipFraction = tf.div(tf.sum(tf.mul(tf.cast(tf.greater(clipped, unclipped), 'float32'), mask)), tokens) as tf.Scalar;
    return { loss, clipFraction };
  });
}
