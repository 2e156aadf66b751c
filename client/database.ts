// What the client reads from a run's Postgres database (read-only, parameterized SQL): its metric
// series, its published checkpoint versions and its run events. The tables are store/'s
// (store/migrations.ts); the client layer may not import store/, so the few reads are written here.
import { Pool } from 'pg';

/** A run's metric series: name -> [step, value] pairs in step order (e.g. `eval_accuracy`, `loss`, `reward_mean`). */
export type MetricSeries = Record<string, Array<[number, number]>>;

/** A published policy version of a run (the checkpoints registry). */
export interface CheckpointVersion {
  policyVersion: number;
  /** The train step whose update produced it (0: the initial policy). */
  step: number;
  /** The checkpoint directory. */
  path: string;
  /** sha256 of its weights file. */
  sha256: string;
  createdAt: Date;
  /** Set when checkpoint retention deleted its files (the row stays for the lineage). */
  prunedAt?: Date;
}

/** One row of run_events: a stage's start or end, with the worker and task queue that handled it. */
export interface RunEventRecord {
  /** Increasing: pass the last one seen as `afterId` to read only newer events. */
  id: number;
  kind: string;
  role?: string;
  taskQueue?: string;
  worker?: string;
  detail: Record<string, unknown>;
  createdAt: Date;
}

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

/** When one stage activity of a run ran (stage_spans). */
export interface StageSpan {
  role: string;
  stage: string;
  worker: string;
  step: number | null;
  startedAt: Date;
  endedAt: Date;
}

/** One series' newest value for one run (latestRunMetrics). */
export interface LatestRunMetric {
  runId: string;
  status: string;
  name: string;
  step: number;
  value: number;
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
    const { rows } = await this.db().query<{ step: number; name: string; value: number }>(
      'SELECT step, name, value FROM metrics WHERE run_id = $1 AND ($2::text[] IS NULL OR name = ANY($2::text[])) ORDER BY step, name',
      [runId, names && names.length ? names : null],
    );
    const out: MetricSeries = {};
    for (const r of rows) (out[r.name] ??= []).push([r.step, Number(r.value)]);
    return out;
  }

  /**
   * The newest value of every series of the runs that are running or changed within `recentSecs`:
   * what a metrics endpoint exports as gauges (one row per run and series).
   */
  async latestRunMetrics(recentSecs = 900): Promise<LatestRunMetric[]> {
    const { rows } = await this.db().query<{ run_id: string; status: string; name: string; step: number; value: number }>(
      `SELECT DISTINCT ON (m.run_id, m.name) m.run_id, r.status, m.name, m.step, m.value
         FROM metrics m JOIN runs r USING (run_id)
        WHERE r.status = 'running' OR r.updated_at > now() - make_interval(secs => $1)
        ORDER BY m.run_id, m.name, m.step DESC`,
      [recentSecs],
    );
    return rows.map((r) => ({ runId: r.run_id, status: r.status, name: r.name, step: r.step, value: Number(r.value) }));
  }

  /** The run's newest stage spans (when each stage ran, on which worker), oldest first. */
  async spans(runId: string, limit = 200): Promise<StageSpan[]> {
    const { rows } = await this.db().query<{ role: string; stage: string; worker: string; step: number | null; started_at: Date; ended_at: Date }>(
      'SELECT role, stage, worker, step, started_at, ended_at FROM (SELECT * FROM stage_spans WHERE run_id = $1 ORDER BY started_at DESC, id DESC LIMIT $2) s ORDER BY started_at, id',
      [runId, limit],
    );
    return rows.map((r) => ({ role: r.role, stage: r.stage, worker: r.worker, step: r.step, startedAt: r.started_at, endedAt: r.ended_at }));
  }

  /** Throws unless the database answers. */
  async ping(): Promise<void> {
    await this.db().query('SELECT 1');
  }

  /** Rollout engines, oldest first; removed ones only with `includeRemoved`. */
  async rolloutEngines(includeRemoved = false): Promise<RolloutEngineInfo[]> {
    const { rows } = await this.db().query<{ engine_id: string; kind: string; host: string; pid: number | null; identity: string | null; url: string | null; state: string; initial: boolean; detail: Record<string, unknown>; created_at: Date; updated_at: Date }>(
      `SELECT * FROM rollout_engines WHERE $1::boolean OR state <> 'removed' ORDER BY created_at, engine_id`,
      [includeRemoved],
    );
    return rows.map((r) => ({ engineId: r.engine_id, kind: r.kind, host: r.host, pid: r.pid, identity: r.identity, url: r.url, state: r.state, initial: r.initial, detail: r.detail, createdAt: r.created_at, updatedAt: r.updated_at }));
  }

  async checkpoints(runId: string): Promise<CheckpointVersion[]> {
    const { rows } = await this.db().query<{ policy_version: number; step: number; path: string; sha256: string; created_at: Date; pruned_at: Date | null }>(
      'SELECT policy_version, step, path, sha256, created_at, pruned_at FROM checkpoints WHERE run_id = $1 ORDER BY policy_version',
      [runId],
    );
    return rows.map((r) => ({
      policyVersion: r.policy_version,
      step: r.step,
      path: r.path,
      sha256: r.sha256,
      createdAt: r.created_at,
      ...(r.pruned_at ? { prunedAt: r.pruned_at } : {}),
    }));
  }

  async events(runId: string, afterId = 0, limit = 1000): Promise<RunEventRecord[]> {
    const { rows } = await this.db().query<{ id: string; kind: string; role: string | null; task_queue: string | null; worker: string | null; detail: Record<string, unknown>; created_at: Date }>(
      'SELECT id, kind, role, task_queue, worker, detail, created_at FROM run_events WHERE run_id = $1 AND id > $2 ORDER BY id LIMIT $3',
      [runId, afterId, limit],
    );
    return rows.map((r) => ({
      id: Number(r.id),
      kind: r.kind,
      ...(r.role ? { role: r.role } : {}),
      ...(r.task_queue ? { taskQueue: r.task_queue } : {}),
      ...(r.worker ? { worker: r.worker } : {}),
      detail: r.detail ?? {},
      createdAt: r.created_at,
    }));
  }

  async close(): Promise<void> {
    const pool = this.pool;
    this.pool = undefined;
    await pool?.end();
  }
}
