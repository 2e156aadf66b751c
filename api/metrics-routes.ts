// Monitoring routes of the control API (docs/monitoring.md):
//   GET /metrics  Prometheus exposition (prom-client): this process's own metrics, and each running
//                 (or recently ended) run's training series from Postgres as gauges labelled by run
//   GET /ready    readiness: Temporal and the database answer (503 naming the one that does not)
//   POST /health/manager, /health/manager/stop, GET /health/status: the health manager
// (GET /health, liveness, is in server.ts.) Reads: no token, like every read of this API.
import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { collectDefaultMetrics, Gauge, Registry } from 'prom-client';
import { z } from 'zod';
import type { RelaxClient } from '../client';

/** The main series as gauges of their own (name -> [series in the metrics table, help, scale to the gauge's unit]). */
export const RUN_GAUGES: Record<string, [string, string, number?]> = {
  relax_run_reward: ['reward_mean', 'mean reward of the step\'s rollout samples'],
  relax_run_accuracy: ['eval_accuracy', 'held-out greedy accuracy at the last evaluation (0..1)'],
  relax_run_loss: ['loss', 'policy loss of the last train step'],
  relax_run_kl: ['kl', 'KL to the reference policy at the last train step'],
  relax_run_entropy: ['entropy', 'policy entropy at the last train step'],
  relax_run_grad_norm: ['grad_norm', 'gradient norm of the last train step (before clipping)'],
  relax_run_staleness: ['staleness_mean', 'mean policy-version age of the last step\'s samples'],
  relax_run_rollout_busy_seconds: ['rollout_busy_ms', 'wall time of the last step\'s rollout, seconds', 1e-3],
  relax_run_rollout_wait_seconds: ['rollout_wait_ms', 'time the last step waited for rollout (async mode), seconds', 1e-3],
  relax_run_trainer_wait_seconds: ['train_wait_ms', 'time the trainer waited for the last step\'s data since its previous step ended (trainer idle), seconds', 1e-3],
  relax_run_samples_per_second: ['samples_per_s', 'samples per second through the pipeline at the last step'],
};

/** A series name as a Prometheus label value is fine as it is; metric names need [a-zA-Z_:][a-zA-Z0-9_:]*. */
const SERIES_LABEL = 'series';

export function registerMetricsRoutes(base: FastifyInstance, client: RelaxClient): void {
  const app = base.withTypeProvider<ZodTypeProvider>();
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'relax_api_' });
  // prom-client names these gauges "..._total", which Prometheus' conventions keep for counters
  // (promtool check metrics says so): the rest of its default metrics stay.
  for (const name of ['active_handles_total', 'active_requests_total', 'active_resources_total']) registry.removeSingleMetric(`relax_api_nodejs_${name}`);
  // One read of Postgres per scrape, shared by every gauge's collect.
  let snapshot: Promise<Awaited<ReturnType<RelaxClient['latestRunMetrics']>>> | undefined;
  const latest = () => (snapshot ??= client.latestRunMetrics().finally(() => setImmediate(() => (snapshot = undefined))));

  const step = new Gauge({
    name: 'relax_run_step',
    help: 'the newest step with metrics, per run',
    labelNames: ['run', 'status'],
    registers: [registry],
    async collect() {
      this.reset();
      const newest = new Map<string, { step: number; status: string }>();
      for (const m of await latest()) if ((newest.get(m.runId)?.step ?? -1) < m.step) newest.set(m.runId, { step: m.step, status: m.status });
      for (const [run, v] of newest) this.set({ run, status: v.status }, v.step);
    },
  });
  void step;
  for (const [name, [series, help, scale = 1]] of Object.entries(RUN_GAUGES)) {
    new Gauge({
      name,
      help: `${help}, per run (metrics series "${series}")`,
      labelNames: ['run'],
      registers: [registry],
      async collect() {
        this.reset();
        for (const m of await latest()) if (m.name === series) this.set({ run: m.runId }, m.value * scale);
      },
    });
  }
  new Gauge({
    name: 'relax_run_series',
    help: 'the newest value of every metrics series of each run (the named relax_run_* gauges are some of them)',
    labelNames: ['run', SERIES_LABEL],
    registers: [registry],
    async collect() {
      this.reset();
      for (const m of await latest()) if (Number.isFinite(m.value)) this.set({ run: m.runId, [SERIES_LABEL]: m.name }, m.value);
    },
  });

  app.get('/metrics', { schema: { tags: ['monitoring'], summary: 'Prometheus metrics: this process, and each live run\'s training series as gauges' } }, async (_req, reply) => {
    reply.header('content-type', registry.contentType);
    return registry.metrics();
  });

  const SECURED = [{ bearer: [] }];
  app.post('/health/manager', {
    schema: {
      tags: ['monitoring'],
      summary: 'start the health manager',
      description: 'Body: {interval_secs, stall_factor, min_stall_secs, min_free_disk_mb, restart_workers, hung_after_secs, webhooks: [{kind, url_env | url}]} (docs/monitoring.md); 409 if it runs.',
      body: z.record(z.string(), z.unknown()),
      security: SECURED,
    },
  }, async (req, reply) => reply.code(201).send(await client.rollout.startHealthManager(req.body)));
  app.post('/health/manager/stop', { schema: { tags: ['monitoring'], summary: 'stop the health manager', security: SECURED } }, async (_req, reply) => {
    await client.rollout.stopHealthManager();
    return reply.code(202).send({ requested: 'stop' });
  });
  app.get('/health/status', { schema: { tags: ['monitoring'], summary: "the health manager's last check, open problems and recorded actions" } }, async () => {
    const { lastReport, ...status } = await client.rollout.healthManager();
    return { ...status, last_report: lastReport ?? null };
  });

  app.get('/ready', { schema: { tags: ['monitoring'], summary: 'readiness: Temporal and the database answer' } }, async (_req, reply) => {
    const checks = await client.readiness();
    const ready = Object.values(checks).every((c) => c === 'ok');
    return reply.code(ready ? 200 : 503).send({ status: ready ? 'ready' : 'not_ready', checks });
  });
}
