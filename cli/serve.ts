// `relax serve --run <run_id>`: a run's policy behind the OpenAI-compatible endpoint
// (serve/openai-server.ts, docs/openai-endpoint.md). Model names:
//   "<run_id>"      the run's newest retained policy version, reloaded when a newer one is
//                   published (the registry is checked at most once per second)
//   "<run_id>@<n>"  version n, while checkpoint retention keeps its files
// One engine serves every version: weights are graph inputs, so a switch is a pointer swap (the
// weights of the last few versions asked for stay in memory). The server runs one request at a time,
// so switching versions between requests never races a generation.
import type { Pool } from 'pg';
import { runContext } from '../activities/run-context';
import { resolveAddresses } from '../client';
import { loadCheckpoint } from '../engines/checkpoint';
import { parseDevice } from '../engines/device';
import type { PolicyWeights } from '../engines/model';
import { RolloutEngine } from '../engines/rollout';
import { modelNotFound, startOpenAIServer, type OpenAIServer, type OpenAIServerOptions, type ResolvedModel } from '../serve/openai-server';
import { CheckpointPrunedError, getRetainedCheckpoint, retainedVersions } from '../store/checkpoint-registry';
import { openStore, redactUrl } from '../store/db';
import { formatVersions } from '../store/checkpoint-retention';

export interface ServeCommandOptions {
  run: string;
  port: number;
  host: string;
  /** "cpu" (default) or "cuda:N". */
  device?: string;
}

export interface RunModelResolver extends Pick<OpenAIServerOptions, 'resolveModel' | 'listModels'> {
  runId: string;
  release(): Promise<void>;
}

export interface RunModelResolverOptions {
  /** How often the registry is asked for a newer version, at most. Default 1000 ms. */
  latestCheckMs?: number;
  /** Versions whose weights stay in memory. Default 4. */
  cachedVersions?: number;
  device?: string;
}

/**
 * Model names of one run to its policy versions, on one rollout engine. Meant for one
 * startOpenAIServer (which serializes requests): the engine is switched between versions per request.
 */
export async function createRunModelResolver(pool: Pool, runId: string, options: RunModelResolverOptions = {}): Promise<RunModelResolver> {
  const run = await runContext(pool, runId);
  const tokenizer = run.task.tokenizer();
  const engine = await RolloutEngine.create(run.model, { intraOpNumThreads: 1, ...(options.device ? { device: parseDevice(options.device) } : {}) });
  const latestCheckMs = options.latestCheckMs ?? 1000;
  const cachedVersions = options.cachedVersions ?? 4;
  const weights = new Map<number, PolicyWeights>();
  let latest: { version: number | undefined; checkedAt: number } = { version: undefined, checkedAt: -Infinity };

  async function newestVersion(): Promise<number | undefined> {
    if (Date.now() - latest.checkedAt >= latestCheckMs) {
      const retained = await retainedVersions(pool, runId);
      latest = { version: retained[retained.length - 1], checkedAt: Date.now() };
    }
    return latest.version;
  }

  async function weightsOf(model: string, version: number): Promise<PolicyWeights> {
    const hit = weights.get(version);
    if (hit) {
      // Most recently used last: the first entry is the one to evict.
      weights.delete(version);
      weights.set(version, hit);
      return hit;
    }
    let checkpoint;
    try {
      checkpoint = await getRetainedCheckpoint(pool, runId, version);
    } catch (err) {
      if (err instanceof CheckpointPrunedError) throw modelNotFound(model, err.message);
      throw err;
    }
    if (!checkpoint) {
      const retained = await retainedVersions(pool, runId);
      throw modelNotFound(model, `run ${runId} has no policy version ${version}; ${retained.length ? `its retained versions are ${formatVersions(retained)}` : 'it has no retained version yet'}`);
    }
    const loaded = await loadCheckpoint(checkpoint.path, { model: run.model, sha256: checkpoint.sha256 });
    weights.set(version, loaded.weights);
    if (weights.size > cachedVersions) weights.delete(weights.keys().next().value as number);
    return loaded.weights;
  }

  async function versionOf(model: string): Promise<number> {
    if (model === runId) {
      const v = await newestVersion();
      if (v === undefined) throw modelNotFound(model, `run ${runId} has no published policy version yet (version 0 is published when the run starts); try again once it has`);
      return v;
    }
    const pinned = /^(.*)@(\d+)$/.exec(model);
    if (pinned && pinned[1] === runId && Number.isSafeInteger(Number(pinned[2]))) return Number(pinned[2]);
    throw modelNotFound(model, `this server serves run ${runId} only: ask for "${runId}" (its newest policy version) or "${runId}@<n>" (version n)`);
  }

  return {
    runId,
    async resolveModel(model: string): Promise<ResolvedModel> {
      const version = await versionOf(model);
      const w = await weightsOf(model, version);
      if (engine.policyVersion !== version) engine.setWeights(version, w);
      return { engine, tokenizer, policyVersion: version, name: `${runId}@${version}` };
    },
    async listModels(): Promise<string[]> {
      return [runId, ...(await retainedVersions(pool, runId)).map((v) => `${runId}@${v}`)];
    },
    release: () => engine.release(),
  };
}

export interface RunServer {
  server: OpenAIServer;
  resolver: RunModelResolver;
  close(): Promise<void>;
}

/** Serves one run's policy versions on the OpenAI-compatible endpoint. The pool stays the caller's. */
export async function startRunServer(pool: Pool, options: ServeCommandOptions & RunModelResolverOptions): Promise<RunServer> {
  const resolver = await createRunModelResolver(pool, options.run, options);
  let server: OpenAIServer;
  try {
    server = await startOpenAIServer({ resolveModel: resolver.resolveModel, listModels: resolver.listModels, host: options.host, port: options.port });
  } catch (err) {
    await resolver.release();
    throw err;
  }
  return {
    server,
    resolver,
    async close() {
      await server.close();
      await resolver.release();
    },
  };
}

function untilSignal(): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    const on = (signal: NodeJS.Signals) => {
      process.off('SIGINT', on);
      process.off('SIGTERM', on);
      resolve(signal);
    };
    process.on('SIGINT', on);
    process.on('SIGTERM', on);
  });
}

/**
 * `relax serve --run <id> [--port 8000] [--host 127.0.0.1]`: serves until SIGINT / SIGTERM. The
 * database comes from DATABASE_URL or a running `relax dev` (.relax/stack.json).
 */
export async function serveCommandAction(options: ServeCommandOptions): Promise<void> {
  const { databaseUrl } = resolveAddresses();
  if (!databaseUrl) throw new Error('no database to read the run from: start `relax dev` (other commands find it through .relax/stack.json) or set DATABASE_URL');
  const pool = await openStore({ url: databaseUrl, maxConnections: 2 });
  let handle: RunServer;
  try {
    handle = await startRunServer(pool, options);
  } catch (err) {
    await pool.end();
    throw new Error(`cannot serve run ${options.run} (database ${redactUrl(databaseUrl)}): ${(err as Error).message}`);
  }
  const { server } = handle;
  console.log(`serving run ${options.run} at ${server.baseURL}`);
  console.log(`  models: "${options.run}" (newest policy version), "${options.run}@<n>" (version n); GET ${server.baseURL}/models lists them`);
  console.log('  Ctrl-C stops');
  const signal = await untilSignal();
  console.log(`${signal}: stopping`);
  await handle.close();
  await pool.end();
}
