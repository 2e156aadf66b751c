// The checkpoint server of a rollout worker that drives an external engine (rollout/remote-engine.ts):
// each policy version's weights file behind a random capability URL that expires, so an engine
// fetches what it was told to load and nothing else.
import { randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import http from 'node:http';
import type { CheckpointOffers } from '../rollout/remote-engine';

/**
 * Serves checkpoint weights files to engines over HTTP, each behind a random capability URL that
 * expires: an engine can fetch what it was told to load and nothing else. Listens on
 * RELAX_CHECKPOINT_HOST (default 127.0.0.1); RELAX_CHECKPOINT_URL names the base URL engines reach it
 * by when that differs (another host, a proxy).
 */
export class CheckpointServer implements CheckpointOffers {
  private readonly offers = new Map<string, { file: string; expires: number }>();

  private constructor(
    private readonly server: http.Server,
    readonly baseUrl: string,
  ) {}

  static async start(options: { host?: string; port?: number; advertisedUrl?: string } = {}): Promise<CheckpointServer> {
    let self: CheckpointServer | undefined;
    const server = http.createServer((req, res) => void self?.handle(req, res));
    server.headersTimeout = 10_000;
    server.requestTimeout = 600_000;
    const host = options.host ?? '127.0.0.1';
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(options.port ?? 0, host, () => resolve());
    });
    const address = server.address();
    if (address === null || typeof address === 'string') throw new Error(`the checkpoint server listens on ${String(address)}, not a TCP port`);
    const shownHost = host === '0.0.0.0' ? '127.0.0.1' : host.includes(':') ? `[${host}]` : host;
    self = new CheckpointServer(server, (options.advertisedUrl ?? `http://${shownHost}:${address.port}`).replace(/\/+$/, ''));
    return self;
  }

  /** A URL that serves `file` until `ttlMs` from now. */
  offer(file: string, ttlMs = 15 * 60_000): string {
    const now = Date.now();
    for (const [k, o] of this.offers) if (o.expires < now) this.offers.delete(k);
    const token = randomBytes(24).toString('hex');
    this.offers.set(token, { file, expires: now + ttlMs });
    return `${this.baseUrl}/checkpoints/${token}`;
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const token = /^\/checkpoints\/([0-9a-f]{48})$/.exec(req.url ?? '')?.[1];
    const offer = token ? this.offers.get(token) : undefined;
    if (req.method !== 'GET' || !offer || offer.expires < Date.now()) {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('no such checkpoint offer (expired, or never made)\n');
      return;
    }
    try {
      const { size } = await stat(offer.file);
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': size });
      createReadStream(offer.file).on('error', () => res.destroy()).pipe(res);
    } catch {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('the checkpoint file is gone (pruned)\n');
    }
  }

  close(): Promise<void> {
    return new Promise((resolve) => {
      this.server.closeAllConnections();
      this.server.close(() => resolve());
    });
  }
}
