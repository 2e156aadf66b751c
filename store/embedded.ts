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
  const server = new PGLiteSocketServer({ db: serializeExtendedQueries(db), port: opts.port ?? 0, host, maxConnections: 64 });
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

// Extended-protocol messages that leave a statement sequence open until the client's Sync.
const EXTENDED = new Set(['P', 'B', 'D', 'E', 'C', 'H'].map((c) => c.charCodeAt(0)));
const ENDS_SEQUENCE = new Set(['S', 'Q', 'X'].map((c) => c.charCodeAt(0)));

/**
 * PGlite is ONE Postgres session; the socket server multiplexes every client connection onto it,
 * message by message, keeping a connection exclusive only while PGlite reports an open transaction.
 * A parameterized query (Parse, Bind, Execute, then Sync) runs in an implicit transaction that
 * PGlite does not report until the Sync, so another connection's messages could land in the middle
 * of it: we saw a rollout worker's INSERT swallowed by a train worker's transaction and lost (async
 * mode, where the two run at once). This view of the database also reports "in a transaction"
 * from a connection's first extended-protocol message to its Sync, so the server keeps that
 * connection exclusive for the whole sequence.
 */
function serializeExtendedQueries(db: PGlite): PGlite {
  let openSequence = false;
  const view = {
    get waitReady() {
      return db.waitReady;
    },
    isInTransaction: () => openSequence || db.isInTransaction(),
    runExclusive: <T>(fn: () => Promise<T>) => db.runExclusive(fn),
    exec: async (query: string) => {
      if (/^\s*rollback/i.test(query)) openSequence = false;
      return db.exec(query);
    },
    execProtocolRawStream: async (message: Uint8Array, options: Parameters<PGlite['execProtocolRawStream']>[1]) => {
      const type = message[0];
      const result = await db.execProtocolRawStream(message, options);
      if (ENDS_SEQUENCE.has(type)) openSequence = false;
      else if (EXTENDED.has(type)) openSequence = true;
      return result;
    },
  };
  return view as unknown as PGlite;
}
