// The live dashboard (docs/monitoring.md): GET /dashboard serves a static page (dashboard/ in the
// package: HTML and plain browser JavaScript, no build step) that polls this API's reads and draws
// with Chart.js, served from the chart.js package at /dashboard/chart.js. Two reads of its own:
// GET /dashboard/health (the health manager's view, 200 with started: false on a stack that never
// started one, so the page polls without 404s) and GET /dashboard/runs/{id}/checkpoints (the newest
// published versions, for its event list). Reads only: no token.
import fs from 'node:fs';
import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { RelaxClient } from '../client';
import { UnknownOperationError } from '../client/scaling';
import { PACKAGE_ROOT } from '../config/environment';

const FILES: Record<string, [string, string]> = {
  '/dashboard': [path.join(PACKAGE_ROOT, 'dashboard', 'index.html'), 'text/html; charset=utf-8'],
  '/dashboard/app.js': [path.join(PACKAGE_ROOT, 'dashboard', 'app.js'), 'text/javascript; charset=utf-8'],
  // The package exports only its module entry points: its UMD build sits beside them in dist/.
  '/dashboard/chart.js': [path.join(path.dirname(require.resolve('chart.js')), 'chart.umd.min.js'), 'text/javascript; charset=utf-8'],
};

/** What the health panel shows: the health manager's status, or why there is none (never started). */
export type DashboardHealth = { started: false; message: string } | ({ started: true; last_report: unknown } & Record<string, unknown>);

/** The health manager's status as GET /health/status answers it, or `started: false` where it has never run (that route's 404). */
export async function dashboardHealth(client: Pick<RelaxClient, 'rollout'>): Promise<DashboardHealth> {
  try {
    const { lastReport, ...status } = await client.rollout.healthManager();
    return { started: true, ...status, last_report: lastReport ?? null };
  } catch (err) {
    if (err instanceof UnknownOperationError) return { started: false, message: err.message };
    throw err;
  }
}

export function registerDashboardRoutes(base: FastifyInstance, client: RelaxClient): void {
  for (const [route, [file, type]] of Object.entries(FILES)) {
    base.get(route, { schema: { hide: true } }, async (_req, reply) => {
      reply.header('content-type', type).header('cache-control', 'no-cache');
      return fs.promises.readFile(file);
    });
  }
  const app = base.withTypeProvider<ZodTypeProvider>();
  app.get('/dashboard/health', {
    schema: { tags: ['monitoring'], summary: "the dashboard's health panel: GET /health/status's body with started: true, or started: false (200) where the health manager never ran" },
  }, async () => dashboardHealth(client));
  app.get('/dashboard/runs/:run_id/checkpoints', {
    schema: {
      tags: ['monitoring'],
      summary: "a run's newest published policy versions (the dashboard's checkpoint events), oldest first",
      params: z.object({ run_id: z.string().min(1).max(200) }),
      querystring: z.object({ limit: z.coerce.number().int().min(1).max(500).default(20) }),
    },
  }, async (req) => ({ run_id: req.params.run_id, checkpoints: (await client.checkpoints(req.params.run_id)).slice(-req.query.limit) }));
}
