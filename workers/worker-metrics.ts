// A worker process's Prometheus metrics (docs/monitoring.md): its process and event-loop metrics,
// and every activity it runs counted and timed by role, activity type and outcome (an activity
// interceptor), and its engines' figures (activities/context.ts EngineFigures: generated tokens and
// tokens/s, batch sizes, weight-sync seconds; the trainer's tokens and update seconds), and the runs it holds state for. Served on loopback at http://127.0.0.1:<port>/metrics (RELAX_METRICS_PORT, default a
// free port); the worker's ready line says where, and relax dev prints and records it. The Temporal
// SDK's own runtime metrics are a second endpoint (cli/main.ts installs the Runtime with them).
import http from 'node:http';
import { Context } from '@temporalio/activity';
import type { ActivityExecuteInput, ActivityInboundCallsInterceptor, Next } from '@temporalio/worker';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { EngineFigures } from '../activities/context';
import type { Role } from '../config/task-queues';
import { runState } from '../training/run-state';

export interface WorkerMetrics {
  /** http://127.0.0.1:<port>/metrics */
  url: string;
  /** The activity interceptor that counts and times this worker's activities. */
  activityInbound(): ActivityInboundCallsInterceptor;
  /** What the activities report about the engines (generate calls, weight syncs, trainer updates). */
  figures: EngineFigures;
  close(): Promise<void>;
}

export { metricsEnabled } from '../config/environment';

/** prom-client's gauges named "..._total", which Prometheus' conventions keep for counters. */
export const TOTAL_NAMED_GAUGES = ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total'];

export async function startWorkerMetrics(opts: { role: Role; host?: string; port?: number }): Promise<WorkerMetrics> {
  const registry = new Registry();
  registry.setDefaultLabels({ role: opts.role });
  collectDefaultMetrics({ register: registry, prefix: 'relax_worker_' });
  for (const name of TOTAL_NAMED_GAUGES) registry.removeSingleMetric(`relax_worker_${name}`);
  const activities = new Counter({ name: 'relax_activities_total', help: 'activities this worker ran, by type and outcome', labelNames: ['activity', 'outcome'], registers: [registry] });
  const durations = new Histogram({
    name: 'relax_activity_duration_seconds',
    help: 'how long this worker\'s activities ran, by type',
    labelNames: ['activity'],
    buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
    registers: [registry],
  });

  new Gauge({
    name: 'relax_worker_runs_held',
    help: 'runs this worker holds state for (engines, trainers, contexts); released when the run\'s workflow closes (workers/run-reaper.ts)',
    registers: [registry],
    collect() {
      this.set(runState.held().length);
    },
  });
  const figures = engineFigures(registry);

  const server = http.createServer((req, res) => {
    if (req.method !== 'GET' || req.url !== '/metrics') {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('GET /metrics\n');
      return;
    }
    registry.metrics().then(
      (text) => res.writeHead(200, { 'content-type': registry.contentType }).end(text),
      (err: Error) => res.writeHead(500, { 'content-type': 'text/plain' }).end(`${err.message}\n`),
    );
  });
  const host = opts.host ?? '127.0.0.1';
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, host, () => resolve());
  });
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error(`the metrics server listens on ${String(address)}, not a TCP port`);
  server.unref();

  return {
    url: `http://${host.includes(':') ? `[${host}]` : host}:${address.port}/metrics`,
    activityInbound: () => ({
      async execute(input: ActivityExecuteInput, next: Next<ActivityInboundCallsInterceptor, 'execute'>) {
        const activity = Context.current().info.activityType;
        const end = durations.startTimer({ activity });
        try {
          const out = await next(input);
          activities.inc({ activity, outcome: 'completed' });
          return out;
        } catch (err) {
          activities.inc({ activity, outcome: (err as Error)?.name === 'CancelledFailure' ? 'cancelled' : 'failed' });
          throw err;
        } finally {
          end();
        }
      },
    }),
    figures,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

const SECONDS_BUCKETS = [0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
const BATCH_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096];

/** The engine figures as Prometheus series (rates come from the counters; the gauges hold the last call's). */
function engineFigures(registry: Registry): EngineFigures {
  const registers = [registry];
  const engine = ['engine'];
  const tokens = new Counter({ name: 'relax_engine_generated_tokens_total', help: 'response tokens the rollout engine generated', labelNames: engine, registers });
  const sequences = new Counter({ name: 'relax_engine_generated_sequences_total', help: 'sequences the rollout engine generated', labelNames: engine, registers });
  const generateSeconds = new Histogram({ name: 'relax_engine_generate_seconds', help: 'how long one generate call of the rollout engine took', labelNames: engine, buckets: SECONDS_BUCKETS, registers });
  const batch = new Histogram({ name: 'relax_engine_batch_sequences', help: 'sequences per generate call of the rollout engine', labelNames: engine, buckets: BATCH_BUCKETS, registers });
  const tokensPerSecond = new Gauge({ name: 'relax_engine_tokens_per_second', help: 'response tokens per second of the last generate call', labelNames: engine, registers });
  const syncSeconds = new Histogram({ name: 'relax_engine_weight_sync_seconds', help: 'how long the rollout engine took to switch to a new policy version (load, check, set)', labelNames: engine, buckets: SECONDS_BUCKETS, registers });
  const trainTokens = new Counter({ name: 'relax_trainer_tokens_total', help: 'tokens (prompt and response) the trainer trained on', registers });
  const trainSequences = new Counter({ name: 'relax_trainer_sequences_total', help: 'sequences the trainer trained on', registers });
  const updateSeconds = new Histogram({ name: 'relax_trainer_update_seconds', help: 'how long one trainer update (a step\'s forward, backward and optimizer pass) took', buckets: SECONDS_BUCKETS, registers });
  const trainBatch = new Histogram({ name: 'relax_trainer_batch_sequences', help: 'sequences per trainer update', buckets: BATCH_BUCKETS, registers });
  const trainTokensPerSecond = new Gauge({ name: 'relax_trainer_tokens_per_second', help: 'tokens per second of the last trainer update', registers });
  return {
    generated: (g) => {
      const labels = { engine: g.engine };
      tokens.inc(labels, g.tokens);
      sequences.inc(labels, g.sequences);
      generateSeconds.observe(labels, g.seconds);
      batch.observe(labels, g.sequences);
      if (g.seconds > 0) tokensPerSecond.set(labels, g.tokens / g.seconds);
    },
    synced: (s) => syncSeconds.observe({ engine: s.engine }, s.seconds),
    trained: (t) => {
      trainTokens.inc(t.tokens);
      trainSequences.inc(t.sequences);
      updateSeconds.observe(t.seconds);
      trainBatch.observe(t.sequences);
      if (t.seconds > 0) trainTokensPerSecond.set(t.tokens / t.seconds);
    },
  };
}
