// The names `algorithm.loss_aggregation` takes, kept apart from engines/rl/losses.ts so the run
// config's schema (loaded where tfjs is not) can list them. The formulas: engines/rl/losses.ts.

/**
 * TRL's GRPOTrainer loss_type names, then Relax's earlier names: token_mean is dapo and
 * sequence_mean is grpo (aliases); sequence_sum_norm is the earlier padded-length divisor.
 */
export const LOSS_AGGREGATIONS = ['dapo', 'bnpo', 'grpo', 'dr_grpo', 'token_mean', 'sequence_mean', 'sequence_sum_norm'] as const;
export type LossAggregation = (typeof LOSS_AGGREGATIONS)[number];

/** What an aggregation computes: its alias resolved (token_mean -> dapo, sequence_mean -> grpo). */
export type CanonicalLossAggregation = Exclude<LossAggregation, 'token_mean' | 'sequence_mean'>;

export function canonicalLossAggregation(aggregation: LossAggregation): CanonicalLossAggregation {
  if (aggregation === 'token_mean') return 'dapo';
  if (aggregation === 'sequence_mean') return 'grpo';
  return aggregation;
}

/**
 * How the trainer combines micro-batches for an aggregation: by their share of the batch's loss
 * tokens (dapo, bnpo) or of its sequences (grpo, dr_grpo, sequence_sum_norm). With the batch's
 * totals as the denominators of those shares, the micro-batched loss equals the one-pass formula.
 */
export function lossAggregationWeighting(aggregation: LossAggregation): 'tokens' | 'sequences' {
  const a = canonicalLossAggregation(aggregation);
  return a === 'dapo' || a === 'bnpo' ? 'tokens' : 'sequences';
}

/**
 * TRL's names normalize over the whole batch, samples of advantage 0 included in the denominators
 * (as TRL counts them); Relax's earlier names keep their earlier denominators, the samples with a
 * learning signal only, so runs that name them (or take the default, token_mean) train as before.
 */
export function countsZeroAdvantageSamples(aggregation: LossAggregation): boolean {
  return aggregation === 'dapo' || aggregation === 'bnpo' || aggregation === 'grpo' || aggregation === 'dr_grpo';
}
