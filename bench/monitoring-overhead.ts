// The monitoring part of `relax bench pipeline`: the same sync GRPO run through the trainingRun
// workflow with monitoring off (RELAX_METRICS=off: no worker metrics endpoints, no activity
// interceptor, no SDK telemetry; no health manager) and on (every endpoint, the health manager
// checking every HEALTH_INTERVAL_S, and every endpoint scraped every SCRAPE_INTERVAL_S, with the
// run-series read the API's GET /metrics makes per scrape; both settable). Runs in the order off, on, on, off so
// drift cancels; each side's step time is the median of its runs' pooled steady-state intervals.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Pool } from 'pg';
import { NoCapacityProviderError, RelaxClient } from '../client';
import type { RunConfig } from '../config/run-config';
import { stackServiceWorkflowId } from '../client/scaling';
import { PLAINTEXT_TEMPORAL } from '../security/temporal-connection';
import { appliedStepIntervalsMs } from '../store/step-records';
import { startLocalCapacity } from '../workers/local-capacity';
import { startEphemeralStack } from '../workers/local-stack';
import { median } from './measure';

/** The health manager's interval: its default (--set health_interval=S). */
const HEALTH_INTERVAL_S = 15;
/** Every metrics endpoint is scraped this often: a common Prometheus setting (its default is 1 minute; --set scrape_interval=S). */
const SCRAPE_INTERVAL_S = 15;

export interface MonitoringOptions {
  healthIntervalS?: number;
  scrapeIntervalS?: number;
}

type Mode = 'off' | 'on';

export interface MonitoringOverhead {
  off_step_ms: number;
  on_step_ms: number;
  overhead_ms_per_step: number;
  overhead_fraction_of_step: number;
  /** How far apart the two runs of the same mode are (their medians, relative): the measurement's noise. */
  noise_fraction: number;
  health_interval_s: number;
  scrape_interval_s: number;
  health_checks: number;
  scrapes: number;
  runs: Array<{ mode: Mode; step_ms: number; steps: number }>;
}

export async function measureMonitoringOverhead(config: RunConfig, warmDir: string, log: (line: string) => void, options: MonitoringOptions = {}): Promise<MonitoringOverhead> {
  const intervalsS = { health: options.healthIntervalS ?? HEALTH_INTERVAL_S, scrape: options.scrapeIntervalS ?? SCRAPE_INTERVAL_S };
  const intervals: Record<Mode, number[]> = { off: [], on: [] };
  const runs: MonitoringOverhead['runs'] = [];
  let healthChecks = 0;
  let scrapes = 0;
  for (const mode of ['off', 'on', 'on', 'off'] as const) {
    log(`[bench] monitoring ${mode}: ${config.train.steps} steps through the workflow`);
    const r = await oneRun(config, warmDir, mode, intervalsS);
    intervals[mode].push(...r.intervals);
    runs.push({ mode, step_ms: median(r.intervals), steps: config.train.steps });
    healthChecks += r.healthChecks;
    scrapes += r.scrapes;
  }
  const off = median(intervals.off);
  const on = median(intervals.on);
  const same = (m: Mode) => runs.filter((r) => r.mode === m).map((r) => r.step_ms);
  const noise = Math.max(...(['off', 'on'] as const).map((m) => Math.abs(same(m)[0] - same(m)[1]) / Math.min(...same(m))));
  return {
    off_step_ms: off,
    on_step_ms: on,
    overhead_ms_per_step: on - off,
    overhead_fraction_of_step: (on - off) / off,
    noise_fraction: noise,
    health_interval_s: intervalsS.health,
    scrape_interval_s: intervalsS.scrape,
    health_checks: healthChecks,
    scrapes,
    runs,
  };
}

interface OneRun {
  intervals: number[];
  healthChecks: number;
  scrapes: number;
}

async function oneRun(config: RunConfig, warmDir: string, mode: Mode, intervalsS: { health: number; scrape: number }): Promise<OneRun> {
  const home = fs.mkdtempSync(path.join(os.tmpdir(), `relax-bench-monitoring-${mode}-`));
  const saved = process.env.RELAX_METRICS;
  // The stack's worker processes inherit this environment.
  if (mode === 'off') process.env.RELAX_METRICS = 'off';
  else delete process.env.RELAX_METRICS;
  const stack = await startEphemeralStack(home).finally(() => {
    if (saved === undefined) delete process.env.RELAX_METRICS;
    else process.env.RELAX_METRICS = saved;
  });
  const client = await RelaxClient.connect({ address: stack.temporalAddress, security: PLAINTEXT_TEMPORAL, databaseUrl: stack.databaseUrl });
  const capacity = mode === 'on' ? await startLocalCapacity({ stack, security: PLAINTEXT_TEMPORAL }) : undefined;
  let scrapes = 0;
  let scraping: NodeJS.Timeout | undefined;
  try {
    if (mode === 'off' && stack.workers().some((w) => w.metricsUrls?.length)) throw new Error('monitoring off (RELAX_METRICS=off), but a worker still serves metrics');
    if (mode === 'on') {
      await startHealthManager(client, intervalsS.health);
      const urls = stack.workers().flatMap((w) => w.metricsUrls ?? []);
      if (!urls.length) throw new Error('monitoring on, but no worker named a metrics endpoint in its ready line');
      // Every endpoint side by side, as Prometheus scrapes, and the API's run-series read.
      const scrape = async () => {
        await Promise.all([...urls.map(async (u) => (await fetch(u)).text()), client.latestRunMetrics()]);
        scrapes++;
      };
      scraping = setInterval(() => void scrape().catch(() => undefined), intervalsS.scrape * 1000);
    }
    const runId = `bench-monitoring-${mode}-${Date.now().toString(36)}`;
    const startedAt = Date.now();
    await (await client.startTraining({ ...config, run_id: runId, checkpoint: { ...config.checkpoint, init_from: warmDir, dir: path.join(home, 'checkpoints') } })).result();
    const healthChecks = mode === 'on' ? await healthChecksDuring(client, startedAt, Date.now()) : 0;
    return { intervals: await stepIntervals(stack.databaseUrl, runId), healthChecks, scrapes };
  } finally {
    if (scraping) clearInterval(scraping);
    if (mode === 'on') await client.rollout.stopHealthManager().catch(() => undefined);
    await capacity?.stop();
    await client.close();
    await stack.stop();
    fs.rmSync(home, { recursive: true, force: true });
  }
}

/** The health manager, once the capacity worker just started is seen polling its queue. */
async function startHealthManager(client: RelaxClient, intervalS: number): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    try {
      await client.rollout.startHealthManager({ interval_secs: intervalS });
      return;
    } catch (err) {
      if (!(err instanceof NoCapacityProviderError) || attempt >= 50) throw err;
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}

/** The health manager's checkHealth activities that ran within [fromMs, toMs]. */
async function healthChecksDuring(client: RelaxClient, fromMs: number, toMs: number): Promise<number> {
  const events = (await client.client.workflow.getHandle(stackServiceWorkflowId('health-manager')).fetchHistory()).events ?? [];
  const millis = (t: { seconds?: unknown; nanos?: number | null } | null | undefined) => Number(t?.seconds ?? 0) * 1000 + (t?.nanos ?? 0) / 1e6;
  const checks = new Set(events.filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'checkHealth').map((e) => Number(e.eventId)));
  const started = new Map(events.filter((e) => checks.has(Number(e.activityTaskStartedEventAttributes?.scheduledEventId))).map((e) => [Number(e.activityTaskStartedEventAttributes!.scheduledEventId), millis(e.eventTime)]));
  let count = 0;
  for (const e of events) {
    const done = e.activityTaskCompletedEventAttributes;
    const at = done && started.get(Number(done.scheduledEventId));
    if (at === undefined || at === null || at < fromMs || millis(e.eventTime) > toMs) continue;
    count++;
  }
  return count;
}

/** Intervals between consecutive train steps' applied_at (steps 2..N: one full iteration each). */
export async function stepIntervals(databaseUrl: string, runId: string): Promise<number[]> {
  const pool = new Pool({ connectionString: databaseUrl, max: 1 });
  try {
    const intervals = (await appliedStepIntervalsMs(pool, runId)).filter((ms) => Number.isFinite(ms) && ms > 0);
    if (!intervals.length) throw new Error(`run ${runId} recorded fewer than two applied train steps: run the bench with --set steps=3 or more`);
    return intervals;
  } finally {
    await pool.end();
  }
}
