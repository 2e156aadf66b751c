// `relax api` (the control API on its own, over a running Temporal and database) and the control
// services `relax dev` runs next to its stack: the local capacity provider (scale-out starts rollout
// workers under the supervisor, scale-in drains them) and the control API, whose POST /runs runs
// `relax train`'s preflight with this machine's probes (cli/preflight.ts). docs/control-api.md.
import type { Command } from 'commander';
import { startControlApi, type ControlApi } from '../api/server';
import { resolveApiToken } from '../api/token';
import { RelaxClient, resolveAddresses } from '../client';
import { PLAINTEXT_TEMPORAL } from '../security/temporal-connection';
import { relaxEnvironment } from '../config/environment';
import { startLocalCapacity, type LocalCapacity } from '../workers/local-capacity';
import type { LocalStack } from '../workers/local-stack';
import { localPreflightProbes } from './preflight';
import { NO_PREFLIGHT_HELP } from './config-args';

export const DEFAULT_API_PORT = 7380;

export interface StackControl {
  api?: ControlApi;
  /** Where the API's bearer token comes from (a file or variable), for relax dev's summary. */
  tokenSource?: string;
  capacity: LocalCapacity;
  stop(): Promise<void>;
}

/** Starts the capacity provider and (unless port is null) the control API of a local stack. */
export async function startStackControl(stack: LocalStack, home: string, api: { host: string; port: number | null; version: string }): Promise<StackControl> {
  const capacity = await startLocalCapacity({ stack, security: PLAINTEXT_TEMPORAL });
  let client: RelaxClient | undefined;
  let server: ControlApi | undefined;
  let tokenSource: string | undefined;
  try {
    if (api.port !== null) {
      const token = resolveApiToken(home);
      client = await RelaxClient.connect({ address: stack.temporalAddress, security: PLAINTEXT_TEMPORAL, databaseUrl: stack.databaseUrl });
      server = await startControlApi({ client, token: token.token, host: api.host, port: api.port, version: api.version, preflight: localPreflightProbes(home) });
      tokenSource = token.source;
    }
  } catch (err) {
    await client?.close();
    await capacity.stop();
    throw err;
  }
  return {
    ...(server ? { api: server, tokenSource } : {}),
    capacity,
    async stop() {
      await server?.close().catch(() => undefined);
      await client?.close().catch(() => undefined);
      await capacity.stop();
    },
  };
}

export function registerApiCommand(program: Command, version: string): void {
  program
    .command('api')
    .description('serve the control API (runs, rollout capacity) over a running Temporal and database; `relax dev` runs one itself')
    .option('--host <host>', 'listen address (loopback by default: put TLS and a proxy in front to expose it)', '127.0.0.1')
    .option('--port <port>', 'listen port', String(DEFAULT_API_PORT))
    .option('--no-preflight', `POST /runs: ${NO_PREFLIGHT_HELP}`)
    .action(async (o: { host: string; port: string; preflight: boolean }) => {
      const port = Number(o.port);
      if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`--port must be an integer in 0..65535, got "${o.port}"`);
      const addresses = resolveAddresses();
      const home = relaxEnvironment().home;
      const token = resolveApiToken(home);
      const client = await RelaxClient.connect({ address: addresses.temporalAddress, namespace: addresses.namespace, ...(addresses.databaseUrl ? { databaseUrl: addresses.databaseUrl } : {}) });
      const server = await startControlApi({ client, token: token.token, host: o.host, port, version, ...(o.preflight ? { preflight: localPreflightProbes(home) } : {}) });
      console.log(`relax api listening on ${server.url} (Temporal ${addresses.temporalAddress}); mutations need the bearer token in ${token.source}`);
      console.log('rollout scaling needs a capacity provider (relax dev); without one, scale requests answer 503');
      await new Promise<void>((resolve) => {
        const stop = () => resolve();
        process.once('SIGINT', stop);
        process.once('SIGTERM', stop);
      });
      await server.close();
      await client.close();
    });
}
