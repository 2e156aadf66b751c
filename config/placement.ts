// Placement "colocated" (config `placement`): what the workflow and the train activities agree on.
// Plain constants: workflow code imports this file.

/** Steps the workflow keeps queued on the trainer behind the one in flight. */
export const COLOCATED_LOOKAHEAD = 2;

/**
 * Newest versions checkpoint retention keeps besides every checkpoint.every-th: those a rollout
 * engine may still be asked for (max_staleness + 1), and in placement "colocated" also those the
 * steps queued ahead may have published before the workflow asked for an evaluation (lookahead + 1).
 */
export function protectedVersions(config: { max_staleness: number; placement?: string }): number {
  return config.max_staleness + 1 + (config.placement === 'colocated' ? COLOCATED_LOOKAHEAD + 1 : 0);
}
