// Every Relax process reaches the data plane the same way: `pg` over the Postgres wire protocol,
// whether the server is a real PostgreSQL or the embedded PGlite served by `relax dev`.
import { Pool } from 'pg';
import { migrate } from './migrations';

export interface StoreOptions {
  /** postgres://user:pass@host:port/db */
  url: string;
  /** Connections this process may hold; keep small: the embedded server runs one query at a time. */
  maxConnections?: number;
}

export function createPool({ url, maxConnections = 4 }: StoreOptions): Pool {
  const pool = new Pool({ connectionString: url, max: maxConnections, connectionTimeoutMillis: 10_000 });
  // An idle client that loses its server (database restarted) must not crash the process.
  pool.on('error', (err) => console.error(`[relax] database connection lost: ${err.message}`));
  return pool;
}

/** Opens a pool and brings the schema up to date. */
export async function openStore(options: StoreOptions): Promise<Pool> {
  const pool = createPool(options);
  try {
    await migrate(pool);
  } catch (err) {
    await pool.end().catch(() => undefined);
    throw new Error(`cannot prepare the database at ${redactUrl(options.url)}: ${(err as Error).message}`);
  }
  return pool;
}

/** The URL with its password hidden, for logs and error messages. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return '<unparseable DATABASE_URL>';
  }
}
