// The embedded default database: PGlite (Postgres compiled to WASM) served over the Postgres wire
// protocol, so workers use exactly the same `pg` code path as against a real PostgreSQL server. It
// requires a password (SCRAM-SHA-256, as PostgreSQL's default): generated once per data directory and
// kept in a 0600 file there, or given. The authentication exchange is done here, in front of
// @electric-sql/pglite-socket's per-connection handler, which then sees the startup message only
// after the client proved it knows the password (pglite-socket itself accepts any user and password).
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { createHash, createHmac, pbkdf2Sync, randomBytes, timingSafeEqual } from 'node:crypto';
import { PGlite } from '@electric-sql/pglite';
import { PGLiteSocketHandler, PGLiteSocketServer } from '@electric-sql/pglite-socket';

export interface EmbeddedPostgres {
  /** postgres://postgres:<password>@host:port/postgres: redact it (store/db.ts redactUrl) before printing. */
  url: string;
  port: number;
  /** Where the password is kept (data directory databases only). */
  passwordFile?: string;
  stop(): Promise<void>;
}

/** The file in the data directory that holds its password (mode 0600). */
export const PASSWORD_FILE = 'relax-db-password';
const MAX_CONNECTIONS = 64;
const AUTH_TIMEOUT_MS = 10_000;

const umaskedRoots = new Set<string>();

/** This process's file-creation mask (reading it means setting it: put back at once). */
export function currentUmask(): number {
  const mask = process.umask(0);
  process.umask(mask);
  return mask;
}

/**
 * PGlite's file system (emscripten's NODEFS) chmods every file it writes to 0666 itself, past the
 * process's umask (measured: 970 of 971 files of a new database). Under `dataDir`, a chmod keeps
 * only the bits the umask allows (RELAX_UMASK, default 077: files 0600), as Postgres itself creates
 * them. Installed once per directory; other paths are chmodded as asked.
 */
function chmodsUnderUmask(dataDir: string): void {
  const root = path.resolve(dataDir);
  if (umaskedRoots.size === 0) {
    const chmodSync = fs.chmodSync;
    fs.chmodSync = (file: fs.PathLike, mode: fs.Mode) => {
      if (typeof mode !== 'number') return chmodSync(file, mode);
      const full = path.resolve(String(file));
      const under = [...umaskedRoots].some((r) => full === r || full.startsWith(r + path.sep));
      if (!under) return chmodSync(file, mode);
      return chmodSync(file, mode & ~currentUmask());
    };
  }
  umaskedRoots.add(root);
}

/**
 * Starts PGlite in this process. `dataDir` persists the database across restarts; omit it for an
 * in-memory database (tests). `port` 0 picks a free port. `password`: the one clients must give;
 * default: the data directory's password file (created on first start), or a random one in memory.
 */
export async function startEmbeddedPostgres(opts: { dataDir?: string; port?: number; host?: string; password?: string } = {}): Promise<EmbeddedPostgres> {
  if (opts.dataDir) chmodsUnderUmask(opts.dataDir);
  const db = new PGlite(opts.dataDir);
  await db.waitReady;
  const passwordFile = opts.dataDir && opts.password === undefined ? path.join(opts.dataDir, PASSWORD_FILE) : undefined;
  const password = opts.password ?? (passwordFile ? readOrCreatePassword(passwordFile) : randomBytes(24).toString('base64url'));
  if (!password) throw new Error('startEmbeddedPostgres: the password must not be empty');
  const verifier = scramVerifier(password);
  const host = opts.host ?? '127.0.0.1';

  // The socket server is used for its query queue only (one PGlite session shared by every
  // connection); connections are accepted and authenticated below, then handed to its handler.
  const queue = (new PGLiteSocketServer({ db: serializeExtendedQueries(db), port: 0, host }) as unknown as { queryQueue?: unknown }).queryQueue;
  if (!queue) throw new Error('@electric-sql/pglite-socket changed: PGLiteSocketServer has no queryQueue (store/embedded.ts expects version 0.2.17)');
  const handlers = new Set<PGLiteSocketHandler>();
  const pending = new Set<net.Socket>();
  let stopped = false;

  const server = net.createServer((socket) => {
    if (handlers.size + pending.size >= MAX_CONNECTIONS) {
      socket.end(errorResponse('53300', `sorry, too many clients already (${MAX_CONNECTIONS})`));
      return;
    }
    pending.add(socket);
    authenticate(socket, verifier).then(
      (buffered) => {
        pending.delete(socket);
        if (!buffered) return; // refused (the ErrorResponse is on its way) or gone
        if (stopped) return void socket.destroy();
        const handler = new PGLiteSocketHandler({ queryQueue: queue as never, closeOnDetach: true });
        handlers.add(handler);
        const forget = () => handlers.delete(handler);
        handler.addEventListener('close', forget);
        handler.addEventListener('error', forget);
        // The handler reads the startup message (and anything after it) as if it had just arrived.
        socket.unshift(buffered);
        void handler.attach(socket).then(() => socket.resume());
      },
      () => {
        pending.delete(socket);
        socket.destroy();
      },
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, host, () => resolve());
  });
  const port = (server.address() as net.AddressInfo).port;
  return {
    url: `postgres://postgres:${encodeURIComponent(password)}@${host}:${port}/postgres?sslmode=disable`,
    port,
    ...(passwordFile ? { passwordFile } : {}),
    async stop() {
      if (stopped) return;
      stopped = true;
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const socket of pending) socket.destroy();
      await Promise.all([...handlers].map((h) => h.detach(true).catch(() => undefined)));
      handlers.clear();
      await closed;
      await db.close();
    },
  };
}

/** The data directory's password, created (random, mode 0600) on first use. */
function readOrCreatePassword(file: string): string {
  try {
    const password = fs.readFileSync(file, 'utf8').trim();
    if ((fs.statSync(file).mode & 0o077) !== 0) fs.chmodSync(file, 0o600);
    if (!password) throw new Error(`${file} is empty: delete it (a new password is generated on the next start) or write the password into it`);
    return password;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  const password = randomBytes(24).toString('base64url');
  fs.writeFileSync(file, `${password}\n`, { mode: 0o600, flag: 'wx' });
  return password;
}

interface ScramVerifier {
  salt: Buffer;
  iterations: number;
  storedKey: Buffer;
  serverKey: Buffer;
}

const hmac = (key: Buffer, text: string) => createHmac('sha256', key).update(text).digest();

/** What PostgreSQL keeps in pg_authid for a SCRAM-SHA-256 password (RFC 5802, RFC 7677). */
function scramVerifier(password: string): ScramVerifier {
  const salt = randomBytes(16);
  const iterations = 4096;
  const salted = pbkdf2Sync(password.normalize('NFKC'), salt, iterations, 32, 'sha256');
  return { salt, iterations, storedKey: createHash('sha256').update(hmac(salted, 'Client Key')).digest(), serverKey: hmac(salted, 'Server Key') };
}

const SSL_REQUEST = 80877103;
const GSSENC_REQUEST = 80877104;
const CANCEL_REQUEST = 80877102;
const PROTOCOL_3 = 196608;

/**
 * The startup and SCRAM-SHA-256 exchange of one connection (PostgreSQL's protocol, section
 * "SASL Authentication"). Resolves with the bytes the PGlite handler is to read (the startup message,
 * to which PGlite answers AuthenticationOk and the session parameters), or undefined when the client
 * went away or was refused (an ErrorResponse has then been sent).
 */
function authenticate(socket: net.Socket, v: ScramVerifier): Promise<Buffer | undefined> {
  return new Promise((resolve) => {
    let buffer = Buffer.alloc(0);
    let startup: Buffer | undefined;
    let user = '';
    let step: 'startup' | 'initial' | 'final' = 'startup';
    const exchange = { clientFirstBare: '', serverFirst: '', nonce: '', gs2Header: '' };
    const timer = setTimeout(() => drop(), AUTH_TIMEOUT_MS);
    const done = (result: Buffer | undefined) => {
      clearTimeout(timer);
      socket.pause();
      socket.removeListener('data', onData);
      socket.removeListener('error', onEnd);
      socket.removeListener('close', onEnd);
      resolve(result);
    };
    const drop = () => {
      done(undefined);
      socket.destroy();
    };
    const refuse = (code: string, message: string) => {
      done(undefined);
      // Keep reading (and discarding) so the socket closes when the client hangs up.
      socket.resume();
      socket.end(errorResponse(code, message));
      setTimeout(() => socket.destroy(), 2_000).unref();
    };
    const onEnd = () => drop();
    const onData = (chunk: Buffer) => {
      buffer = Buffer.concat([buffer, chunk]);
      for (;;) {
        if (step === 'startup') {
          if (buffer.length < 8) return;
          const length = buffer.readInt32BE(0);
          const code = buffer.readInt32BE(4);
          if (length === 8 && (code === SSL_REQUEST || code === GSSENC_REQUEST)) {
            socket.write('N');
            buffer = buffer.subarray(8);
            continue;
          }
          if (code === CANCEL_REQUEST) return drop(); // nothing to cancel: PGlite has no backend processes
          if (code !== PROTOCOL_3 || length < 8 || length > 10_000) return refuse('08P01', 'unsupported frontend protocol or invalid startup packet');
          if (buffer.length < length) return;
          startup = Buffer.from(buffer.subarray(0, length));
          buffer = buffer.subarray(length);
          user = startupParameters(startup).user ?? '';
          if (!user) return refuse('28000', 'no PostgreSQL user name specified in startup packet');
          socket.write(authMessage(10, Buffer.from('SCRAM-SHA-256\0\0')));
          step = 'initial';
          continue;
        }
        if (buffer.length < 5) return;
        const length = buffer.readInt32BE(1);
        if (buffer.length < 1 + length) return;
        const type = String.fromCharCode(buffer[0]);
        const body = buffer.subarray(5, 1 + length);
        buffer = buffer.subarray(1 + length);
        if (type !== 'p') return refuse('08P01', `expected a SASL response message, got "${type}"`);
        if (step === 'initial') {
          const first = parseClientFirst(body, user);
          if ('refused' in first) return refuse(...first.refused);
          exchange.gs2Header = first.gs2Header;
          exchange.clientFirstBare = first.clientFirstBare;
          exchange.nonce = first.clientNonce + randomBytes(18).toString('base64');
          exchange.serverFirst = `r=${exchange.nonce},s=${v.salt.toString('base64')},i=${v.iterations}`;
          socket.write(authMessage(11, Buffer.from(exchange.serverFirst)));
          step = 'final';
          continue;
        }
        const signature = verifyClientFinal(body, v, exchange);
        if (signature === undefined) return refuse('28P01', `password authentication failed for user "${user}"`);
        socket.write(authMessage(12, Buffer.from(`v=${signature}`)));
        return done(Buffer.concat([startup!, buffer]));
      }
    };
    socket.on('data', onData);
    socket.on('error', onEnd);
    socket.on('close', onEnd);
  });
}

/** A SASLInitialResponse body: its mechanism must be SCRAM-SHA-256; the client-first-message's GS2 header, bare part and nonce, or the refusal (SQLSTATE, message). */
function parseClientFirst(body: Buffer, user: string): { refused: [string, string] } | { gs2Header: string; clientFirstBare: string; clientNonce: string } {
  const nul = body.indexOf(0);
  const mechanism = body.subarray(0, nul).toString();
  if (mechanism !== 'SCRAM-SHA-256') return { refused: ['28000', `password authentication failed for user "${user}": SASL mechanism ${mechanism} is not offered (SCRAM-SHA-256 is)`] };
  const clientFirst = body.subarray(nul + 5).toString();
  const m = /^([ny]),([^,]*),(.*)$/.exec(clientFirst);
  const clientNonce = m && /(?:^|,)r=([^,]+)/.exec(m[3])?.[1];
  if (!m || !clientNonce) return { refused: ['08P01', 'malformed SCRAM client-first-message'] };
  return { gs2Header: `${m[1]},${m[2]},`, clientFirstBare: m[3], clientNonce };
}

/** Checks a SCRAM client-final-message against the exchange so far: the server signature (base64) to send when its proof is valid, else undefined. */
function verifyClientFinal(body: Buffer, v: ScramVerifier, exchange: { clientFirstBare: string; serverFirst: string; nonce: string; gs2Header: string }): string | undefined {
  const clientFinal = body.toString();
  const proofAt = clientFinal.lastIndexOf(',p=');
  const withoutProof = clientFinal.slice(0, proofAt);
  const attrs = Object.fromEntries(withoutProof.split(',').map((kv) => [kv.slice(0, 1), kv.slice(2)]));
  const proof = Buffer.from(clientFinal.slice(proofAt + 3), 'base64');
  const authMessageText = `${exchange.clientFirstBare},${exchange.serverFirst},${withoutProof}`;
  const clientKey = xor(proof, hmac(v.storedKey, authMessageText));
  const valid =
    proofAt > 0 &&
    attrs.r === exchange.nonce &&
    attrs.c === Buffer.from(exchange.gs2Header).toString('base64') &&
    proof.length === 32 &&
    timingSafeEqual(createHash('sha256').update(clientKey).digest(), v.storedKey);
  return valid ? hmac(v.serverKey, authMessageText).toString('base64') : undefined;
}

function startupParameters(message: Buffer): Record<string, string> {
  const parts = message.subarray(8).toString('utf8').split('\0');
  const out: Record<string, string> = {};
  for (let i = 0; i + 1 < parts.length && parts[i]; i += 2) out[parts[i]] = parts[i + 1];
  return out;
}

function xor(a: Buffer, b: Buffer): Buffer {
  const out = Buffer.alloc(b.length);
  for (let i = 0; i < b.length; i++) out[i] = (a[i] ?? 0) ^ b[i];
  return out;
}

/** An Authentication* message ('R'): the subtype, then its data. */
function authMessage(subtype: number, data: Buffer): Buffer {
  const out = Buffer.alloc(9 + data.length);
  out.write('R', 0);
  out.writeInt32BE(8 + data.length, 1);
  out.writeInt32BE(subtype, 5);
  data.copy(out, 9);
  return out;
}

/** A FATAL ErrorResponse ('E'), as PostgreSQL sends it before closing the connection. */
function errorResponse(code: string, message: string): Buffer {
  const fields = Buffer.from(`SFATAL\0VFATAL\0C${code}\0M${message}\0\0`);
  const out = Buffer.alloc(5 + fields.length);
  out.write('E', 0);
  out.writeInt32BE(4 + fields.length, 1);
  fields.copy(out, 5);
  return out;
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
