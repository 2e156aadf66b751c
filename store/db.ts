// Every Relax process reaches the data plane the same way: `pg` over the Postgres wire protocol,
// whether the server is a real PostgreSQL or the embedded PGlite served by `relax dev`; and the few
// statements about the server itself (is it up, its version, a scratch database for a benchmark).
import { Pool } from 'pg';
import { migrate } from './migrations';
import type { Queryable } from './transfer-queue';
import { componentLog } from '../telemetry/log';

export interface StoreOptions {
  /** postgres://user:pass@host:port/db */
  url: string;
  /** Connections this process may hold; keep small: the embedded server runs one query at a time. */
  maxConnections?: number;
}

/**
 * The server-side bounds on every session of a pool (startup parameters): a statement that runs
 * longer than an activity may (10 min), a wait for a row, table or advisory lock of 2 min, and a
 * transaction left open and idle for 10 min (its locks released) end in an error the activity's
 * retry handles. PostgreSQL applies them; the embedded PGlite, one process serving one statement at
 * a time, ignores them.
 */
export const SESSION_BOUNDS = { statement_timeout: 600_000, lock_timeout: 120_000, idle_in_transaction_session_timeout: 600_000 } as const;

export function createPool({ url, maxConnections = 4 }: StoreOptions): Pool {
  const pool = new Pool({ connectionString: url, max: maxConnections, connectionTimeoutMillis: 10_000, ...SESSION_BOUNDS });
  // An idle client that loses its server (database restarted) must not crash the process.
  pool.on('error', (err) => componentLog('store').error({ err }, 'database connection lost'));
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

/** Throws unless the database answers. */
export async function ping(db: Queryable): Promise<void> {
  await db.query('SELECT 1');
}

/** The server's version string (`SELECT version()`: e.g. "PostgreSQL 16.4 on x86_64-pc-linux-gnu, ..."). */
export async function serverVersion(db: Queryable): Promise<string> {
  const { rows } = await db.query<{ v: string }>('SELECT version() AS v');
  return rows[0].v;
}

/** Creates a database on the server `db` is connected to; `name` must be a plain identifier (it is not quoted). */
export async function createDatabase(db: Queryable, name: string): Promise<void> {
  await db.query(`CREATE DATABASE ${name}`);
}

/** Drops a database if it exists, closing its connections (PostgreSQL 13+); `name` as in createDatabase. */
export async function dropDatabase(db: Queryable, name: string): Promise<void> {
  await db.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
}
