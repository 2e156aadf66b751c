// `relax serve --run <run_id>`: a run's policy behind the OpenAI-compatible endpoint
// (rollout/openai-server.ts, docs/openai-endpoint.md): "<run_id>" is the run's newest retained
// version, "<run_id>@<n>" version n (rollout/policy-engine.ts resolves them). The server runs one
// request at a time, so switching versions between requests never races a generation.
import type { Pool } from 'pg';
import { loadRunContext } from '../training/run-context';
import { resolveAddresses } from '../client';
import { startOpenAIServer, type OpenAIServer } from '../rollout/openai-server';
import { PolicyEngine, type PolicyEngineOptions } from '../rollout/policy-engine';
import { openStore, redactUrl } from '../store/db';
import { loadPolicyWeights } from '../training/policy-versions';

export interface ServeCommandOptions {
  run: string;
  port: number;
  host: string;
  /** "cpu" (default) or "cuda:N". */
  device?: string;
}

export interface RunServer {
  server: OpenAIServer;
  policy: PolicyEngine;
  close(): Promise<void>;
}

/** Serves one run's policy versions on the OpenAI-compatible endpoint. The pool stays the caller's. */
export async function startRunServer(pool: Pool, options: ServeCommandOptions & Omit<PolicyEngineOptions, 'loadWeights'>): Promise<RunServer> {
  const run = await loadRunContext(pool, options.run);
  const policy = await PolicyEngine.create(pool, { runId: run.runId, model: run.model, tokenizer: run.task.tokenizer() }, { ...options, loadWeights: (v) => loadPolicyWeights(pool, run, v) });
  let server: OpenAIServer;
  try {
    server = await startOpenAIServer({ resolveModel: (m) => policy.resolveModel(m), listModels: () => policy.listModels(), host: options.host, port: options.port });
  } catch (err) {
    await policy.release();
    throw err;
  }
  return {
    server,
    policy,
    async close() {
      await server.close();
      await policy.release();
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
