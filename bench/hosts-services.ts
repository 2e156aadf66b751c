// The services host of `relax bench hosts` (bench/hosts.ts), run inside its network namespace:
// `node dist/bench/hosts-services.js <dir> <ip>` starts the embedded PostgreSQL (PGlite), a Temporal
// dev server and SeaweedFS's S3 gateway, every listener on <ip> (the host's address on the bench's
// bridge), their state under <dir>; prints one line `relax hosts services ready <json>` with the
// environment the other hosts' workers need, and stops them all on SIGTERM.
import fs from 'node:fs';
import path from 'node:path';
import { openStore } from '../store/db';
import { startEmbeddedPostgres } from '../store/embedded';
import { startObjectStoreServer } from '../workers/object-store-server';
import { startTemporalServer } from '../workers/temporal-server';

export const SERVICES_READY = 'relax hosts services ready ';

async function main(): Promise<void> {
  const [dir, ip] = process.argv.slice(2);
  if (!dir || !ip) throw new Error('usage: hosts-services.js <dir> <ip>');
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  const db = await startEmbeddedPostgres({ dataDir: path.join(dir, 'pgdata'), host: ip, port: 5432 });
  const pool = await openStore({ url: db.url, maxConnections: 1 }); // migrated before any worker connects
  await pool.end();
  // All of the namespace's addresses: the dev server's own services reach each other on 127.0.0.1
  // (bound to <ip> alone, its worker-heartbeat and deployment calls fail with "connection refused").
  const temporal = await startTemporalServer({ ip: '0.0.0.0', port: 7233, dbFilename: path.join(dir, 'temporal.db'), startTimeoutMs: 120_000 });
  const objects = await startObjectStoreServer({ dir: path.join(dir, 'seaweedfs'), ip, s3Port: 8333 });
  const env = { TEMPORAL_ADDRESS: `${ip}:7233`, DATABASE_URL: db.url, ...objects.env };
  process.stdout.write(`${SERVICES_READY}${JSON.stringify(env)}\n`);
  const stop = async () => {
    await Promise.allSettled([objects.stop(), temporal.stop(), db.stop()]);
    process.exit(0);
  };
  process.once('SIGTERM', () => void stop());
  process.once('SIGINT', () => void stop());
}

if (require.main === module) {
  main().catch((err: unknown) => {
    console.error(`hosts-services: ${(err as Error).stack ?? err}`);
    process.exit(1);
  });
}
