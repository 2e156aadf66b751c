// A worker process's Prometheus metrics (docs/monitoring.md): its process and event-loop metrics,
// and every activity it runs counted and timed by role, activity type and outcome (an activity
// interceptor). Served on loopback at http://127.0.0.1:<port>/metrics (RELAX_METRICS_PORT, default a
// free port); the worker's ready line says where, and relax dev prints and records it. The Temporal
// SDK's own runtime metrics are a second endpoint (cli/main.ts installs the Runtime with them).
import http from 'node:http';
import { Context } from '@temporalio/activity';
import type { ActivityExecuteInput, ActivityInboundCallsInterceptor, Next } from '@temporalio/worker';
import { collectDefaultMetrics, Counter, Histogram, Registry } from 'prom-client';
import type { Role } from '../config/task-queues';

export interface WorkerMetrics {
  /** http://127.0.0.1:<port>/metrics */
  url: string;
  /** The activity interceptor that counts and times this worker's activities. */
  activityInbound(): ActivityInboundCallsInterceptor;
  close(): Promise<void>;
}

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
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
