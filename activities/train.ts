// Train stage activities. The trainer holds weights and optimizer state in memory, so its stateful
// activities run on the worker's own instance queue; `workerInfo` on the shared queue picks one.
import { recordStageEvent, workerInfoActivity, type WorkerContext } from './context';

export function createTrainActivities(ctx: WorkerContext) {
  return {
    workerInfo: workerInfoActivity(ctx),

    /** Smoke stage: consumes the iteration's scored samples and records one metric. */
    async smokeTrain({ runId, iteration, step }: { runId: string; iteration: number; step: number }): Promise<{ samples: number; meanAdvantage: number }> {
      await recordStageEvent(ctx, runId, 'activity_started');
      // Retried attempts re-select the same rows: consumption is keyed by (run, step).
      await ctx.pool.query(
        `UPDATE samples SET consumed_by_step = $3, status = 'consumed', updated_at = now()
          WHERE run_id = $1 AND iteration = $2 AND status = 'scored'`,
        [runId, iteration, step],
      );
      const { rows } = await ctx.pool.query<{ n: string; mean: number | null }>(
        'SELECT count(*) AS n, avg(advantage) AS mean FROM samples WHERE run_id = $1 AND consumed_by_step = $2',
        [runId, step],
      );
      const samples = Number(rows[0].n);
      const meanAdvantage = Number(rows[0].mean ?? 0);
      await ctx.pool.query(
        `INSERT INTO metrics (run_id, step, name, value) VALUES ($1, $2, 'smoke/mean_advantage', $3)
         ON CONFLICT (run_id, step, name) DO UPDATE SET value = EXCLUDED.value`,
        [runId, step, meanAdvantage],
      );
      await recordStageEvent(ctx, runId, 'activity_completed', { samples });
      return { samples, meanAdvantage };
    },
  };
}

export type TrainActivities = ReturnType<typeof createTrainActivities>;
