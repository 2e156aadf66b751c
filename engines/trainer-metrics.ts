// A train step's metrics (engines/trainer.ts): one micro-batch's scalars (loss, the loss's own
// metrics, entropy, KL to the reference, the importance ratio) read back in one transfer, and their
// share-weighted totals over the step's micro-batches.
import * as tf from '@tensorflow/tfjs';
import { aggregateLoss, klLoss } from './rl/losses';

/** A micro-batch's constant tensors (targets and per-token arrays from its first loss column; inputs unless packed). */
export interface MicroBatchData {
  inputs: tf.Tensor2D | undefined;
  targets: tf.Tensor2D;
  mask: tf.Tensor2D;
  oldLogprobs: tf.Tensor2D | undefined;
  refLogprobs: tf.Tensor2D | undefined;
  advantages: tf.Tensor2D | undefined;
  /** PPO's critic: values before the update and GAE returns (absent without a value loss). */
  oldValues?: tf.Tensor2D;
  returns?: tf.Tensor2D;
}

/**
 * The step's own metrics of one micro-batch, off the tape, from the kept log-probs and entropy, and
 * every scalar (loss, loss metrics, these) read back in one transfer; then every tensor of the
 * micro-batch (`value`, the kept ones, `constants`) is disposed. `value` is the loss times `share`.
 */
export async function readMicroBatchMetrics(m: {
  data: MicroBatchData;
  shape: [number, number];
  share: number;
  value: tf.Scalar;
  lossMetrics: Record<string, tf.Scalar>;
  logprobs: tf.Tensor2D;
  entropy: tf.Tensor2D;
  constants: tf.Tensor[];
}): Promise<Record<string, number>> {
  const { data, shape, share, value, lossMetrics } = m;
  const names = ['loss', ...Object.keys(lossMetrics), 'entropy'];
  const stacked = tf.tidy(() => {
    const { mask, oldLogprobs, refLogprobs } = data;
    const scalars: tf.Tensor[] = [tf.div(value, tf.scalar(share)), ...Object.values(lossMetrics), aggregateLoss(m.entropy, mask, 'token_mean')];
    if (refLogprobs) {
      names.push('kl');
      scalars.push(klLoss(m.logprobs, refLogprobs, mask, 'k3'));
    }
    if (oldLogprobs) {
      const ratio = tf.exp(tf.sub(m.logprobs, oldLogprobs));
      const valid = tf.cast(mask, 'bool');
      names.push('ratioMean', 'ratioMin', 'ratioMax');
      scalars.push(tf.div(tf.sum(tf.mul(ratio, mask)), tf.sum(mask)), tf.min(tf.where(valid, ratio, tf.fill(shape, Infinity))), tf.max(tf.where(valid, ratio, tf.fill(shape, -Infinity))));
    }
    return tf.stack(scalars.map((t) => tf.reshape(t, [])));
  });
  const values = (await stacked.data()) as Float32Array;
  tf.dispose([stacked, value, m.logprobs, m.entropy, ...Object.values(lossMetrics), ...m.constants]);
  return Object.fromEntries(names.map((n, i) => [n, values[i]]));
}

/** The micro-batches' metrics over a step: share-weighted sums (means by `mean`), and the ratio's extremes. */
export class StepMetricTotals {
  readonly sums: Record<string, number> = {};
  private readonly weightOf: Record<string, number> = {};
  ratioMin = Infinity;
  ratioMax = -Infinity;

  add(metric: Record<string, number>, share: number): void {
    for (const [k, v] of Object.entries(metric)) {
      if (k === 'ratioMin') this.ratioMin = Math.min(this.ratioMin, v);
      else if (k === 'ratioMax') this.ratioMax = Math.max(this.ratioMax, v);
      else this.addMetric(k, v, share);
    }
  }

  private addMetric(key: string, value: number, weight: number): void {
    this.sums[key] = (this.sums[key] ?? 0) + value * weight;
    this.weightOf[key] = (this.weightOf[key] ?? 0) + weight;
  }

  readonly mean = (k: string): number | undefined => (this.weightOf[k] ? this.sums[k] / this.weightOf[k] : undefined);

  /** The loss's own metrics (`loss.<name>`), by name. */
  lossMetrics(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const k of Object.keys(this.sums)) if (k.startsWith('loss.')) out[k.slice(5)] = this.mean(k)!;
    return out;
  }
}
