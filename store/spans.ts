// Stage spans: when each stage activity of a run ran, on which worker. The run's timeline, each
// role's busy and idle time, and a Chrome trace (chrome://tracing, ui.perfetto.dev) come from here.
import type { Queryable } from './transfer-queue';

export interface Span {
  runId: string;
  role: string;
  stage: string;
  worker: string;
  step?: number;
  iteration?: number;
  policyVersion?: number;
  startedAt: Date;
  endedAt: Date;
  detail?: Record<string, unknown>;
}

export async function recordSpan(db: Queryable, s: Span): Promise<void> {
  await db.query(
    `INSERT INTO stage_spans (run_id, role, stage, worker, step, iteration, policy_version, started_at, ended_at, detail)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
    [s.runId, s.role, s.stage, s.worker, s.step ?? null, s.iteration ?? null, s.policyVersion ?? null, s.startedAt, s.endedAt, JSON.stringify(s.detail ?? {})],
  );
}

interface SpanDbRow {
  run_id: string;
  role: string;
  stage: string;
  worker: string;
  step: number | null;
  iteration: number | null;
  policy_version: number | null;
  started_at: Date;
  ended_at: Date;
  detail: Record<string, unknown>;
}

export async function listSpans(db: Queryable, runId: string): Promise<Span[]> {
  const { rows } = await db.query<SpanDbRow>('SELECT * FROM stage_spans WHERE run_id = $1 ORDER BY started_at, id', [runId]);
  return rows.map((r) => ({
    runId: r.run_id,
    role: r.role,
    stage: r.stage,
    worker: r.worker,
    ...(r.step !== null ? { step: r.step } : {}),
    ...(r.iteration !== null ? { iteration: r.iteration } : {}),
    ...(r.policy_version !== null ? { policyVersion: r.policy_version } : {}),
    startedAt: r.started_at,
    endedAt: r.ended_at,
    detail: r.detail,
  }));
}

/** The end of the newest span of `stage` in a run before `before`, if any. */
export async function previousSpanEnd(db: Queryable, runId: string, stage: string, before: Date): Promise<Date | undefined> {
  const { rows } = await db.query<{ ended_at: Date | null }>('SELECT max(ended_at) AS ended_at FROM stage_spans WHERE run_id = $1 AND stage = $2 AND ended_at <= $3', [runId, stage, before]);
  return rows[0]?.ended_at ?? undefined;
}

/** When one stage activity of a run ran (stage_spans), as the client reads it. */
export interface StageSpan {
  role: string;
  stage: string;
  worker: string;
  step: number | null;
  startedAt: Date;
  endedAt: Date;
}

/** The run's newest `limit` stage spans, oldest first. */
export async function newestStageSpans(db: Queryable, runId: string, limit: number): Promise<StageSpan[]> {
  const { rows } = await db.query<{ role: string; stage: string; worker: string; step: number | null; started_at: Date; ended_at: Date }>(
    'SELECT role, stage, worker, step, started_at, ended_at FROM (SELECT * FROM stage_spans WHERE run_id = $1 ORDER BY started_at DESC, id DESC LIMIT $2) s ORDER BY started_at, id',
    [runId, limit],
  );
  return rows.map((r) => ({ role: r.role, stage: r.stage, worker: r.worker, step: r.step, startedAt: r.started_at, endedAt: r.ended_at }));
}

/** Seconds each stage (generate, train) was busy within the last `windowSecs`, over every run. */
export async function recentStageBusySeconds(db: Queryable, windowSecs: number): Promise<{ generate?: number; train?: number }> {
  const { rows } = await db.query<{ stage: 'generate' | 'train'; busy: number }>(
    `SELECT stage, sum(extract(epoch FROM least(ended_at, now()) - greatest(started_at, now() - make_interval(secs => $1))))::float8 AS busy
       FROM stage_spans
      WHERE stage IN ('generate', 'train') AND ended_at > now() - make_interval(secs => $1)
      GROUP BY stage`,
    [windowSecs],
  );
  return Object.fromEntries(rows.map((r) => [r.stage, Number(r.busy)]));
}

/** The run's generate and train spans, unordered, with `s` / `e` their start and end (relax bench scale). */
export async function generateAndTrainSpans(db: Queryable, runId: string): Promise<Array<{ stage: string; step: number | null; iteration: number | null; s: Date; e: Date }>> {
  const { rows } = await db.query<{ stage: string; step: number | null; iteration: number | null; s: Date; e: Date }>(
    `SELECT stage, step, iteration, started_at AS s, ended_at AS e FROM stage_spans WHERE run_id = $1 AND stage IN ('generate', 'train')`,
    [runId],
  );
  return rows;
}

/** The run's generate, train and evaluate spans in start order (relax bench real-model). */
export async function stepStageSpans(db: Queryable, runId: string): Promise<Array<{ stage: string; step: number | null; iteration: number | null; started_at: Date; ended_at: Date }>> {
  const { rows } = await db.query<{ stage: string; step: number | null; iteration: number | null; started_at: Date; ended_at: Date }>(
    `SELECT stage, step, iteration, started_at, ended_at FROM stage_spans WHERE run_id = $1 AND stage IN ('generate', 'train', 'evaluate') ORDER BY started_at`,
    [runId],
  );
  return rows;
}

export interface RoleUtilization {
  /** Union of the role's spans (overlapping spans of several workers count once), ms. */
  busyMs: number;
  /** From the first span of any role to the last, ms. */
  windowMs: number;
  /** 1 - busy / window. */
  idleFraction: number;
  spans: number;
}

/**
 * Busy and idle time per role over the window a set of spans covers (by default the whole run).
 * Overlapping spans of one role are merged, so two rollout workers busy at once count once.
 */
export function utilization(spans: readonly Span[], window?: { from: number; to: number }): Record<string, RoleUtilization> {
  if (!spans.length) return {};
  const from = window?.from ?? Math.min(...spans.map((s) => s.startedAt.getTime()));
  const to = window?.to ?? Math.max(...spans.map((s) => s.endedAt.getTime()));
  const windowMs = Math.max(0, to - from);
  const byRole = new Map<string, Array<[number, number]>>();
  for (const s of spans) {
    const a = Math.max(from, s.startedAt.getTime());
    const b = Math.min(to, s.endedAt.getTime());
    if (b <= a) continue;
    const list = byRole.get(s.role) ?? [];
    list.push([a, b]);
    byRole.set(s.role, list);
  }
  const out: Record<string, RoleUtilization> = {};
  for (const [role, intervals] of byRole) {
    intervals.sort((x, y) => x[0] - y[0]);
    let busy = 0;
    let [curA, curB] = intervals[0];
    for (const [a, b] of intervals.slice(1)) {
      if (a > curB) {
        busy += curB - curA;
        [curA, curB] = [a, b];
      } else curB = Math.max(curB, b);
    }
    busy += curB - curA;
    out[role] = { busyMs: busy, windowMs, idleFraction: windowMs > 0 ? 1 - busy / windowMs : 0, spans: intervals.length };
  }
  return out;
}

/**
 * The run as a Chrome trace (the Trace Event Format's JSON object form): one process per role, one
 * thread per worker, a complete event ("X") per span. Opens in ui.perfetto.dev or chrome://tracing.
 */
export function chromeTrace(spans: readonly Span[]): { traceEvents: unknown[]; displayTimeUnit: 'ms'; otherData: Record<string, unknown> } {
  const origin = spans.length ? Math.min(...spans.map((s) => s.startedAt.getTime())) : 0;
  const roles = [...new Set(spans.map((s) => s.role))].sort();
  const workers = [...new Set(spans.map((s) => `${s.role}\u0000${s.worker}`))].sort();
  const pid = (role: string) => roles.indexOf(role) + 1;
  const tid = (role: string, worker: string) => workers.indexOf(`${role}\u0000${worker}`) + 1;
  const meta = [
    ...roles.map((role) => ({ name: 'process_name', ph: 'M', pid: pid(role), args: { name: role } })),
    ...workers.map((key) => {
      const [role, worker] = key.split('\u0000');
      return { name: 'thread_name', ph: 'M', pid: pid(role), tid: tid(role, worker), args: { name: worker } };
    }),
  ];
  const events = spans.map((s) => ({
    name: s.step !== undefined ? `${s.stage} step ${s.step}` : s.iteration !== undefined ? `${s.stage} iteration ${s.iteration}` : s.stage,
    cat: s.role,
    ph: 'X',
    ts: (s.startedAt.getTime() - origin) * 1000,
    dur: (s.endedAt.getTime() - s.startedAt.getTime()) * 1000,
    pid: pid(s.role),
    tid: tid(s.role, s.worker),
    args: { ...(s.step !== undefined ? { step: s.step } : {}), ...(s.iteration !== undefined ? { iteration: s.iteration } : {}), ...(s.policyVersion !== undefined ? { policy_version: s.policyVersion } : {}), ...s.detail },
  }));
  return { traceEvents: [...meta, ...events], displayTimeUnit: 'ms', otherData: { run_id: spans[0]?.runId, origin: new Date(origin).toISOString() } };
}
