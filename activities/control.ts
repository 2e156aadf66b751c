// CPU-only activities, hosted by the control worker next to the workflows.
import { ApplicationFailure } from '@temporalio/activity';
import { parseRunConfig, RunConfigError, type RunConfig } from '../config/run-config';
import { loadTask } from '../envs/registry';
import { loadUserExport, UserModuleError, validateRewardConfig } from '../envs/user-modules';
import { recordMetrics } from '../store/metrics';
import { readSamples, setAdvantages } from '../store/transfer-queue';
import { advantagesFor } from '../training/grpo';
import { recordStageEvent, type WorkerContext } from './context';
import { runContext } from './run-context';

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
      if (kind === 'training') {
        const invalid = (field: string, message: string) => ApplicationFailure.create({ message: `invalid run config: ${field}: ${message}`, type: INVALID_RUN_CONFIG, nonRetryable: true });
        let task;
        try {
          task = await loadTask(config.task);
        } catch (err) {
          throw invalid('task', (err as Error).message);
        }
        // User modules resolve, export what they should, and fit the task.
        for (const [field, check] of [
          ['reward', () => validateRewardConfig(config)],
          ['env', () => (config.env.module ? loadUserExport('env', config.env.module, config.env.export) : undefined)],
          ['generate', () => (config.generate.module ? loadUserExport('generate', config.generate.module, config.generate.export) : undefined)],
        ] as const) {
          try {
            await check();
          } catch (err) {
            if (err instanceof UserModuleError) throw invalid(field, err.message);
            throw err;
          }
        }
        if (config.env.module && !task.interaction) {
          throw invalid('env.module', `task ${JSON.stringify(config.task)} is single-turn (it has no environment to replace): use a multi-turn task (calculator, guess-number, gridworld) or a task module that exports an environment`);
        }
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

    /**
     * Kept for executions started before the train step computed advantages from its own batch.
     * Advantage stage: group-relative advantages from the rewards of one iteration's samples. A group
     * with a failed sample is left out (its samples stay unscored and are never trained on).
     */
    async computeAdvantages({ runId, iteration }: { runId: string; iteration: number }): Promise<{ scored: number; skippedGroups: number }> {
      const run = await runContext(ctx.pool, runId);
      const G = run.config.algorithm.group_size;
      const rows = await readSamples(ctx.pool, runId, { iteration });
      const groups = new Map<number, typeof rows>();
      for (const r of rows) groups.set(r.groupIndex, [...(groups.get(r.groupIndex) ?? []), r]);
      const complete = [...groups.values()].filter((g) => g.length === G && g.every((r) => r.status !== 'failed' && r.reward !== null));
      const ordered = complete.flatMap((g) => [...g].sort((a, b) => a.sampleIndex - b.sampleIndex));
      const advantages = ordered.length ? advantagesFor(run.config.algorithm.advantage, ordered.map((r) => r.reward as number), G) : [];
      const scored = await setAdvantages(
        ctx.pool,
        runId,
        ordered.map((r, i) => ({ iteration: r.iteration, groupIndex: r.groupIndex, sampleIndex: r.sampleIndex, advantage: advantages[i] })),
      );
      return { scored, skippedGroups: groups.size - complete.length };
    },

    /** Kept for executions started before the train step recorded its own metrics. */
    async recordMetrics({ runId, step, metrics }: { runId: string; step: number; metrics: Record<string, number> }): Promise<void> {
      await recordMetrics(ctx.pool, runId, step, metrics);
    },

    async finishRun({ runId, status, summary }: { runId: string; status: string; summary: Record<string, unknown> }): Promise<void> {
      await ctx.pool.query('UPDATE runs SET status = $2, updated_at = now() WHERE run_id = $1', [runId, status]);
      await recordStageEvent(ctx, runId, 'run_finished', { status, ...summary });
    },
  };
}

export type ControlActivities = ReturnType<typeof createControlActivities>;
