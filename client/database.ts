// What the client reads from a run's Postgres database (read-only, parameterized SQL): its metric
// series, its published checkpoint versions, its stage spans, its run events and the rollout
// engines. The statements and the shapes they return are store/'s (one module per table); this is
// the client's connection to them, opened on first use.
import { Pool } from 'pg';
import { listEvaluations, type EvaluationRecord } from '../store/evaluations';
import { checkpointVersions, type CheckpointVersion } from '../store/checkpoint-registry';
import { ping } from '../store/db';
import { eventsAfter, type RunEventRecord } from '../store/events';
import { latestRunMetrics, metricSeries, type LatestRunMetric, type MetricSeries } from '../store/metrics';
import { rolloutEngines } from '../store/rollout-engines';
import { newestStageSpans, type StageSpan } from '../store/spans';

export type { CheckpointVersion, LatestRunMetric, MetricSeries, RunEventRecord, StageSpan };

/** A rollout engine of the capacity provider (rollout_engines; store/rollout-engines.ts writes it). */
export interface RolloutEngineInfo {
  engineId: string;
  kind: string;
  host: string;
  pid: number | null;
  identity: string | null;
  url: string | null;
  state: string;
  initial: boolean;
  detail: Record<string, unknown>;
  createdAt: Date;
  updatedAt: Date;
}

export class RunDatabase {
  private pool?: Pool;
  constructor(private readonly url: string | undefined) {}

  private db(): Pool {
    if (!this.url) {
      throw new Error('no database URL: set DATABASE_URL (the database the run\'s workers use), start `relax dev` (it writes stack.json), or pass databaseUrl to RelaxClient.connect');
    }
    this.pool ??= new Pool({ connectionString: this.url, max: 2 });
    return this.pool;
  }

  async metrics(runId: string, names?: string[]): Promise<MetricSeries> {
    return metricSeries(this.db(), runId, names);
  }

  /**
   * The newest value of every series of the runs that are running or changed within `recentSecs`:
   * what a metrics endpoint exports as gauges (one row per run and series).
   */
  async latestRunMetrics(recentSecs = 900): Promise<LatestRunMetric[]> {
    return latestRunMetrics(this.db(), recentSecs);
  }

  /** The run's newest stage spans (when each stage ran, on which worker), oldest first. */
  async spans(runId: string, limit = 200): Promise<StageSpan[]> {
    return newestStageSpans(this.db(), runId, limit);
  }

  /** The run's sampled evaluations (evaluations table), oldest version first. */
  async evaluations(runId: string): Promise<EvaluationRecord[]> {
    return listEvaluations(this.db(), runId);
  }

  /** Throws unless the database answers. */
  async ping(): Promise<void> {
    await ping(this.db());
  }

  /** Rollout engines, oldest first; removed ones only with `includeRemoved`. */
  async rolloutEngines(includeRemoved = false): Promise<RolloutEngineInfo[]> {
    return rolloutEngines(this.db(), includeRemoved);
  }

  async checkpoints(runId: string): Promise<CheckpointVersion[]> {
    return checkpointVersions(this.db(), runId);
  }

  async events(runId: string, afterId = 0, limit = 1000): Promise<RunEventRecord[]> {
    return eventsAfter(this.db(), runId, afterId, limit);
  }

  async close(): Promise<void> {
    const pool = this.pool;
    this.pool = undefined;
    await pool?.end();
  }
}
