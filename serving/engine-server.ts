// `relax serve --engine`: an external rollout engine (docs/control-api.md "External engines"). It
// starts holding no model; a Relax stack that registered its URL tells it which policy version of
// which run to load (POST /v1/relax/load_version: a checkpoint URL, its sha256, the run's config),
// and then generates for it on the OpenAI-compatible endpoint (serving/openai-server.ts), with
// vLLM's token-level extensions (token-id prompts, stop_token_ids, return_tokens_as_token_ids).
// GET /v1/models lists "<run_id>" and "<run_id>@<version>" of each run it holds, each with the
// version and the sha256 of the bytes it loaded, so the stack can confirm what it serves.
//
// The load call takes the bearer token; the checkpoint is fetched over http(s) without redirects,
// bounded in size and time, and refused unless its bytes hash to the sha256 given. Full-weight
// checkpoints only: a LoRA run's versions hold adapters, which this engine does not merge.
import { createHash } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { bearerMatches } from '../security/bearer-token';
import { ortThreads } from '../engines/backends';
import { decodeCheckpointWeights } from '../engines/checkpoint';
import { parseDevice } from '../engines/device';
import { modelConfigDifference, type ModelConfig } from '../engines/model';
import { ThreadedRolloutEngine } from '../engines/rollout-thread';
import type { Tokenizer } from '../engines/tokenizers/tokenizer';
import { LOAD_VERSION_PATH } from '../rollout/engine-probe';
import { modelNotFound, OpenAIError, startOpenAIServer, type OpenAIServer, type OpenAIServerOptions } from './openai-server';

export { LOAD_VERSION_PATH } from '../rollout/engine-probe';

export const loadVersionRequestSchema = z.object({
  /** The run id: the model name it is then served under. */
  model: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/, 'a run id (letters, digits, ., _, -)'),
  policy_version: z.number().int().min(0),
  /** Where the weights file is (served by the registering stack); http or https. */
  checkpoint_url: z.string().url().max(4096).refine((u) => /^https?:\/\//.test(u), 'an http:// or https:// URL'),
  sha256: z.string().regex(/^[0-9a-f]{64}$/, '64 lowercase hex digits'),
  /** The run's config (the runs table's), for its model and tokenizer. */
  run_config: z.record(z.string(), z.unknown()),
});
export type LoadVersionRequest = z.infer<typeof loadVersionRequestSchema>;

/** What a model name of this engine is: the run's policy, its tokenizer, and what it loaded. */
export interface EnginePolicy {
  model: ModelConfig;
  tokenizer: Tokenizer;
}

export interface EngineServerOptions {
  /** The token the load call must carry (`Authorization: Bearer ...`). */
  token: string;
  /** A run config to its model and tokenizer (training/policy-model.ts loadRunPolicy, wired by the CLI). */
  resolvePolicy(runConfig: Record<string, unknown>): Promise<EnginePolicy>;
  host?: string;
  port?: number;
  /** "cpu" (default) or "cuda:N". */
  device?: string;
  /** The largest checkpoint fetched, bytes. Default 8 GiB. */
  maxCheckpointBytes?: number;
  /** How long a checkpoint download may take. Default 300 s. */
  fetchTimeoutMs?: number;
  /** The OpenAI server's limits. */
  openai?: Pick<OpenAIServerOptions, 'http' | 'sessionLimits'>;
}

interface HeldRun {
  configKey: string;
  policy: EnginePolicy;
  engine: ThreadedRolloutEngine;
  version: number;
  sha256: string;
}

const DEFAULT_MAX_CHECKPOINT_BYTES = 8 * 1024 ** 3;

/** The URL without its query (a capability token may be there): what errors and logs may name. */
function withoutQuery(url: string): string {
  const u = new URL(url);
  return `${u.origin}${u.pathname}`;
}

async function download(url: string, maxBytes: number, timeoutMs: number): Promise<Uint8Array> {
  const shown = withoutQuery(url);
  let res: Response;
  try {
    res = await fetch(url, { redirect: 'error', signal: AbortSignal.timeout(timeoutMs) });
  } catch (err) {
    throw new OpenAIError(502, `fetching the checkpoint ${shown} failed: ${(err as Error).message}`, 'checkpoint_url', 'checkpoint_unreachable');
  }
  if (!res.ok || !res.body) throw new OpenAIError(502, `fetching the checkpoint ${shown} answered HTTP ${res.status}`, 'checkpoint_url', 'checkpoint_unreachable');
  const declared = Number(res.headers.get('content-length') ?? NaN);
  if (declared > maxBytes) throw new OpenAIError(413, `the checkpoint ${shown} is ${declared} bytes, over this engine's limit of ${maxBytes} (--max-checkpoint-mb)`, 'checkpoint_url', 'checkpoint_too_large');
  const chunks: Uint8Array[] = [];
  let total = 0;
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    total += chunk.byteLength;
    if (total > maxBytes) throw new OpenAIError(413, `the checkpoint ${shown} is over this engine's limit of ${maxBytes} bytes (--max-checkpoint-mb)`, 'checkpoint_url', 'checkpoint_too_large');
    chunks.push(chunk);
  }
  return new Uint8Array(Buffer.concat(chunks));
}

export interface EngineServer {
  server: OpenAIServer;
  /** run id -> the version and sha256 it holds */
  held(): Record<string, { policyVersion: number; sha256: string }>;
  close(): Promise<void>;
}

/** The run a model name ("<run_id>" or "<run_id>@<version>") asks for, and its run id; a 404 when the engine holds no such run or another version. */
function heldRun(runs: Map<string, HeldRun>, name: string): [HeldRun, string] {
  const pinned = /^(.*)@(\d+)$/.exec(name);
  const runId = pinned ? pinned[1] : name;
  const held = runs.get(runId);
  const holding = [...runs.entries()].map(([id, r]) => `${id}@${r.version}`).join(', ') || 'nothing yet';
  if (!held) throw modelNotFound(name, `this engine holds ${holding}; a Relax stack tells it what to load (${LOAD_VERSION_PATH})`);
  if (pinned && Number(pinned[2]) !== held.version) throw modelNotFound(name, `this engine holds version ${held.version} of run ${runId}, not ${pinned[2]}`);
  return [held, runId];
}

/** Downloads the checkpoint a load request names, checks its sha256 and decodes its weights (each failure an OpenAIError). */
async function fetchCheckpoint(req: LoadVersionRequest, maxBytes: number, timeoutMs: number): Promise<{ sha256: string; decoded: ReturnType<typeof decodeCheckpointWeights> }> {
  const bytes = await download(req.checkpoint_url, maxBytes, timeoutMs);
  const sha256 = createHash('sha256').update(bytes).digest('hex');
  if (sha256 !== req.sha256) {
    throw new OpenAIError(422, `the checkpoint from ${withoutQuery(req.checkpoint_url)} hashes to ${sha256}, not the sha256 ${req.sha256} it was sent with: nothing loaded`, 'sha256', 'sha256_mismatch');
  }
  let decoded: ReturnType<typeof decodeCheckpointWeights>;
  try {
    decoded = decodeCheckpointWeights(bytes, `checkpoint of ${req.model}@${req.policy_version}`);
  } catch (err) {
    throw new OpenAIError(422, (err as Error).message, 'checkpoint_url', 'invalid_checkpoint');
  }
  return { sha256, decoded };
}

/** Starts an engine that holds nothing until a stack tells it what to load. */
export async function startEngineServer(options: EngineServerOptions): Promise<EngineServer> {
  const runs = new Map<string, HeldRun>();
  const maxBytes = options.maxCheckpointBytes ?? DEFAULT_MAX_CHECKPOINT_BYTES;
  const device = options.device ? parseDevice(options.device) : undefined;

  const runOf = (name: string): [HeldRun, string] => heldRun(runs, name);

  async function load(req: LoadVersionRequest): Promise<{ model: string; policy_version: number; sha256: string }> {
    const current = runs.get(req.model);
    if (current && current.version === req.policy_version && current.sha256 === req.sha256) return { model: req.model, policy_version: current.version, sha256: current.sha256 };
    const configKey = JSON.stringify(req.run_config);
    let policy = current?.configKey === configKey ? current.policy : undefined;
    if (!policy) {
      try {
        policy = await options.resolvePolicy(req.run_config);
      } catch (err) {
        throw new OpenAIError(400, `run_config: ${(err as Error).message}`, 'run_config', 'invalid_run_config');
      }
      if (policy.model.lora) throw new OpenAIError(400, `run ${req.model} trains LoRA adapters; this engine loads full-weight checkpoints only`, 'run_config', 'lora_not_supported');
    }
    const { sha256, decoded } = await fetchCheckpoint(req, maxBytes, options.fetchTimeoutMs ?? 300_000);
    const mismatch = modelConfigDifference(decoded.model, policy.model);
    if (mismatch) throw new OpenAIError(422, `the checkpoint of ${req.model}@${req.policy_version} does not fit the run's model: ${mismatch}`, 'checkpoint_url', 'invalid_checkpoint');
    let engine = current?.configKey === configKey ? current.engine : undefined;
    if (!engine) {
      engine = await ThreadedRolloutEngine.create(policy.model, { intraOpNumThreads: ortThreads(policy.model), ...(device ? { device } : {}) });
      await current?.engine.release();
    }
    await engine.setWeights(req.policy_version, decoded.weights);
    runs.set(req.model, { configKey, policy, engine, version: req.policy_version, sha256 });
    return { model: req.model, policy_version: req.policy_version, sha256 };
  }

  const server = await startOpenAIServer({
    host: options.host,
    port: options.port,
    ...options.openai,
    ownedBy: 'relax-engine',
    resolveModel: async (name) => {
      const [held, runId] = runOf(name);
      return { engine: held.engine, tokenizer: held.policy.tokenizer, policyVersion: held.version, name: `${runId}@${held.version}` };
    },
    listModels: async () => [...runs.entries()].flatMap(([id, r]) => [id, `${id}@${r.version}`]),
    // Ready to be told what to load from the start; says what it holds.
    readiness: async () => ({ ready: true, held: Object.fromEntries([...runs.entries()].map(([id, r]) => [id, r.version])) }),
    modelInfo: (id) => {
      const held = runs.get(/^(.*)@\d+$/.exec(id)?.[1] ?? id);
      return held ? { relax_policy_version: held.version, relax_sha256: held.sha256 } : undefined;
    },
    routes: (app: FastifyInstance, serially) => {
      app.post(LOAD_VERSION_PATH, async (request) => {
        if (!bearerMatches(request.headers.authorization, options.token)) {
          throw new OpenAIError(401, `${LOAD_VERSION_PATH} needs the engine's token: send "Authorization: Bearer <RELAX_ENGINE_TOKEN>"`, null, 'invalid_api_key', 'authentication_error');
        }
        const parsed = loadVersionRequestSchema.safeParse(request.body);
        if (!parsed.success) {
          const issue = parsed.error.issues[0];
          const param = issue.path.join('.') || 'body';
          throw new OpenAIError(400, `${param}: ${issue.message}`, param, 'invalid_load_request');
        }
        // In the generation queue: a request never sees the weights change under it.
        return serially(() => load(parsed.data));
      });
    },
  });
  return {
    server,
    held: () => Object.fromEntries([...runs.entries()].map(([id, r]) => [id, { policyVersion: r.version, sha256: r.sha256 }])),
    async close() {
      await server.close();
      for (const r of runs.values()) await r.engine.release();
    },
  };
}
