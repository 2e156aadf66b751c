// The live dashboard (docs/monitoring.md): GET /dashboard serves a static page (dashboard/ in the
// package: HTML and plain browser JavaScript, no build step) that polls this API's reads and draws
// with Chart.js, served from the chart.js package at /dashboard/chart.js. Reads only: no token.
import fs from 'node:fs';
import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import { PACKAGE_ROOT } from '../config/environment';

const FILES: Record<string, [string, string]> = {
  '/dashboard': [path.join(PACKAGE_ROOT, 'dashboard', 'index.html'), 'text/html; charset=utf-8'],
  '/dashboard/app.js': [path.join(PACKAGE_ROOT, 'dashboard', 'app.js'), 'text/javascript; charset=utf-8'],
  // The package exports only its module entry points: its UMD build sits beside them in dist/.
  '/dashboard/chart.js': [path.join(path.dirname(require.resolve('chart.js')), 'chart.umd.min.js'), 'text/javascript; charset=utf-8'],
};

export function registerDashboardRoutes(app: FastifyInstance): void {
  for (const [route, [file, type]] of Object.entries(FILES)) {
    app.get(route, { schema: { hide: true } }, async (_req, reply) => {
      reply.header('content-type', type).header('cache-control', 'no-cache');
      return fs.promises.readFile(file);
    });
  }
}
