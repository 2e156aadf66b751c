// CPU-only activities, hosted by the control worker next to the workflows.
import { ApplicationFailure } from '@temporalio/activity';
import { parseRunConfig, RunConfigError, type RunConfig } from '../config/run-config';
import { recordStageEvent, type WorkerContext } from './context';

export interface StartRunInput {
  input: unknown;
  workflowId: string;
  kind: string;
}

export const INVALID_RUN_CONFIG = 'InvalidRunConfig';

export function createControlActivities(ctx: WorkerContext) {
  return {
    /**
     * Validates a run's config, fills its defaults and registers the run. Invalid input is a
     * non-retryable failure naming every bad field, so the workflow fails at once instead of
     * retrying a workflow task forever.
     */
    async startRun({ input, workflowId, kind }: StartRunInput): Promise<RunConfig> {
      let config: RunConfig;
      try {
        config = parseRunConfig(input);
      } catch (err) {
        if (err instanceof RunConfigError) {
          throw ApplicationFailure.create({ message: err.message, type: INVALID_RUN_CONFIG, nonRetryable: true, details: err.problems });
        }
        throw err;
      }
      config = { ...config, run_id: config.run_id ?? workflowId };
      const runId = config.run_id as string;
      const { rows } = await ctx.pool.query<{ workflow_id: string }>(
        `INSERT INTO runs (run_id, workflow_id, kind, config) VALUES ($1, $2, $3, $4)
         ON CONFLICT (run_id) DO UPDATE SET updated_at = now() RETURNING workflow_id`,
        [runId, workflowId, kind, JSON.stringify(config)],
      );
      if (rows[0].workflow_id !== workflowId) {
        throw ApplicationFailure.create({
          message: `run_id "${runId}" already belongs to workflow ${rows[0].workflow_id}: choose another run_id`,
          type: 'DuplicateRunId',
          nonRetryable: true,
        });
      }
      await recordStageEvent(ctx, runId, 'run_started', { kind });
      return config;
    },

    /** Smoke stage: group-relative advantages computed from the rewards in the transfer queue. */
    async smokeAdvantage({ runId, iteration }: { runId: string; iteration: number }): Promise<{ samples: number }> {
      await recordStageEvent(ctx, runId, 'activity_started');
      const { rowCount } = await ctx.pool.query(
        `UPDATE samples s SET advantage = s.reward - g.mean_reward, status = 'scored', updated_at = now()
           FROM (SELECT group_index, avg(reward) AS mean_reward FROM samples
                  WHERE run_id = $1 AND iteration = $2 GROUP BY group_index) g
          WHERE s.run_id = $1 AND s.iteration = $2 AND s.group_index = g.group_index`,
        [runId, iteration],
      );
      await recordStageEvent(ctx, runId, 'activity_completed', { samples: rowCount });
      return { samples: rowCount ?? 0 };
    },

    async finishRun({ runId, status, summary }: { runId: string; status: string; summary: Record<string, unknown> }): Promise<void> {
      await ctx.pool.query('UPDATE runs SET status = $2, updated_at = now() WHERE run_id = $1', [runId, status]);
      await recordStageEvent(ctx, runId, 'run_finished', { status, ...summary });
    },
  };
}

export type ControlActivities = ReturnType<typeof createControlActivities>;
