// The embedded default database: PGlite (Postgres compiled to WASM) served over the Postgres wire
// protocol, so workers use exactly the same `pg` code path as against a real PostgreSQL server.
import { PGlite } from '@electric-sql/pglite';
import { PGLiteSocketServer } from '@electric-sql/pglite-socket';

export interface EmbeddedPostgres {
  url: string;
  port: number;
  stop(): Promise<void>;
}

/**
 * Starts PGlite in this process. `dataDir` persists the database across restarts; omit it for an
 * in-memory database (tests). `port` 0 picks a free port.
 */
export async function startEmbeddedPostgres(opts: { dataDir?: string; port?: number; host?: string } = {}): Promise<EmbeddedPostgres> {
  const db = new PGlite(opts.dataDir);
  await db.waitReady;
  const host = opts.host ?? '127.0.0.1';
  const server = new PGLiteSocketServer({ db, port: opts.port ?? 0, host, maxConnections: 64 });
  await server.start();
  const port = Number(server.getServerConn().split(':').pop());
  let stopped = false;
  return {
    url: `postgres://postgres:postgres@${host}:${port}/postgres?sslmode=disable`,
    port,
    async stop() {
      if (stopped) return;
      stopped = true;
      await server.stop();
      await db.close();
    },
  };
}
