// Reference stage activities: log-probs under the frozen reference policy, for the KL term.
import { recordStageEvent, workerInfoActivity, type WorkerContext } from './context';

export function createReferenceActivities(ctx: WorkerContext) {
  return {
    workerInfo: workerInfoActivity(ctx),

    /** Smoke stage: reads the iteration's samples and writes reference log-probs back. */
    async smokeReference({ runId, iteration }: { runId: string; iteration: number }): Promise<{ samples: number }> {
      await recordStageEvent(ctx, runId, 'activity_started');
      const { rowCount } = await ctx.pool.query(
        `UPDATE samples SET ref_logprobs = rollout_logprobs, updated_at = now()
          WHERE run_id = $1 AND iteration = $2`,
        [runId, iteration],
      );
      await recordStageEvent(ctx, runId, 'activity_completed', { samples: rowCount });
      return { samples: rowCount ?? 0 };
    },
  };
}

export type ReferenceActivities = ReturnType<typeof createReferenceActivities>;
