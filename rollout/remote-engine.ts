// An external OpenAI-compatible engine as a rollout engine (docs/control-api.md "External engines"):
// a rollout worker started with RELAX_ENGINE_URL generates through it. Before it generates for a
// policy version it tells the engine to load that version (the version-load call of
// `relax serve --engine`: a checkpoint URL this process serves, serving/checkpoint-server.ts, with
// the registry's sha256) and confirms it through GET /v1/models/<run> (the version and the sha256
// the engine says it holds). An engine that cannot confirm is never used stale:
// EngineUnconfirmedError, and the worker marks it failed and stops taking work (activities/rollout.ts).
//
// Generation goes through POST /v1/completions with vLLM's token-level extensions: the prompt as
// token ids, stop_token_ids, include_stop_str_in_output and return_tokens_as_token_ids, so tokens
// and their log-probs come back exactly. The log-probs are the engine's (a Relax engine reports the
// policy's at temperature 1; the sampling distribution's are not sent, so samplingLogprobs repeats
// them). Text prompts only: media and followUpdates (partial rollout) need a local engine.
import { WEIGHTS_FILE } from '../engines/checkpoint';
import { joinLocation, localFile } from '../engines/storage/locations';
import type { ModelConfig } from '../engines/model';
import type { GeneratedSample, GenerationEngine, SamplingParams } from '../engines/rollout';
import type { SequenceMedia } from '../engines/media/model-inputs';
import { requireRetainedCheckpoint } from '../store/checkpoint-registry';
import type { Queryable } from '../store/transfer-queue';
import { LOAD_VERSION_PATH, probeEngine } from './engine-probe';

export { probeEngine } from './engine-probe';

/** The engine could not load, or could not confirm it holds, the version asked for: it must get no work. */
export class EngineUnconfirmedError extends Error {
  override readonly name = 'EngineUnconfirmedError';
}

/** A generation request the engine refused or could not serve (retryable: another worker may serve it). */
export class RemoteEngineError extends Error {
  override readonly name = 'RemoteEngineError';
}

/** Where checkpoint files are offered to the engine (serving/checkpoint-server.ts CheckpointServer). */
export interface CheckpointOffers {
  /** A URL that serves `file` until `ttlMs` from now. */
  offer(file: string, ttlMs?: number): string;
}

export interface RemoteEngineOptions {
  /** The engine's base URL (http://host:port, without /v1). */
  url: string;
  /** Its bearer token for the version-load call (RELAX_ENGINE_TOKEN). */
  token?: string;
  checkpoints: CheckpointOffers;
  /** Per HTTP call. Default 120 s. */
  timeoutMs?: number;
  /**
   * While a call is in flight the engine is probed (GET /v1/models) this often; a probe that fails
   * (no answer within probeTimeoutMs, or an error) ends the call at once: an engine that accepted a
   * request and froze costs about probeEveryMs + probeTimeoutMs, not timeoutMs. Default 10 s.
   */
  probeEveryMs?: number;
  /** Default 10 s. */
  probeTimeoutMs?: number;
}

interface CompletionChoice {
  index: number;
  finish_reason: 'stop' | 'length';
  logprobs: { tokens: string[]; token_logprobs: number[] } | null;
}

const describe = (err: unknown) => (err as Error)?.message ?? String(err);

/** A short reason from an engine's error answer (OpenAI's {error: {message}} or the text). */
async function answerReason(res: Response): Promise<string> {
  const text = await res.text().catch(() => '');
  try {
    const message = (JSON.parse(text) as { error?: { message?: string } }).error?.message;
    if (message) return `HTTP ${res.status}: ${message.slice(0, 400)}`;
  } catch {
    // not JSON
  }
  return `HTTP ${res.status}${text ? `: ${text.slice(0, 200)}` : ''}`;
}

/**
 * One run's policy on an external engine: the version it was told to load and confirmed. The engine
 * holds one version of a run, so callers at different versions take turns: generate calls at the
 * confirmed version run side by side, and a switch to another waits until they have finished (and
 * they wait for it), so a version is never switched under a request or between a load and its confirm.
 */
export class RemoteRolloutEngine implements GenerationEngine {
  private confirmed: number | undefined;
  /** Calls running at `confirmed`, a switch in progress, and the switches waiting for the calls to end. */
  private active = 0;
  private switching: Promise<void> | undefined;
  private drained: Array<() => void> = [];

  constructor(
    private readonly db: Queryable,
    readonly runId: string,
    readonly model: ModelConfig,
    private readonly runConfig: unknown,
    private readonly options: RemoteEngineOptions,
  ) {}

  get policyVersion(): number | undefined {
    return this.confirmed;
  }

  get url(): string {
    return this.options.url;
  }

  /** One HTTP call, ended by its timeout or by a failed liveness probe of the engine (options.probeEveryMs). */
  private async call(pathname: string, init: RequestInit = {}): Promise<Response> {
    const frozen = new AbortController();
    const probing = setInterval(() => {
      void probeEngine(this.options.url, this.options.probeTimeoutMs ?? 10_000).then((down) => {
        if (down) frozen.abort(new RemoteEngineError(`engine ${this.options.url} stopped answering its probe while ${pathname} was in flight (${down})`));
      });
    }, this.options.probeEveryMs ?? 10_000);
    try {
      return await fetch(`${this.options.url}${pathname}`, { ...init, redirect: 'error', signal: AbortSignal.any([AbortSignal.timeout(this.options.timeoutMs ?? 120_000), frozen.signal]) });
    } finally {
      clearInterval(probing);
    }
  }

  /**
   * Tells the engine to load `version` and confirms it holds it (version and sha256). Throws
   * EngineUnconfirmedError when either fails; the registry's own errors (a version not published
   * yet, or pruned) pass through as they are.
   */
  async atVersion(version: number): Promise<this> {
    await this.hold(version);
    this.release();
    return this;
  }

  /** This engine at `version`: each generate call has the engine load it first if it holds another (taking turns as above). */
  at(version: number): GenerationEngine {
    return {
      model: this.model,
      policyVersion: version,
      generate: async (prompts, params, media) => {
        await this.hold(version);
        try {
          return await this.generateAt(version, prompts, params, media);
        } finally {
          this.release();
        }
      },
    };
  }

  /** Waits until the engine holds `version` (switching it when no call at another version runs) and counts this caller as running at it. */
  private async hold(version: number): Promise<void> {
    for (;;) {
      while (this.switching) await this.switching.catch(() => undefined);
      if (this.confirmed === version) {
        this.active++;
        return;
      }
      const change = (async () => {
        while (this.active > 0) await new Promise<void>((resolve) => this.drained.push(resolve));
        await this.load(version);
      })();
      this.switching = change;
      try {
        await change;
      } finally {
        if (this.switching === change) this.switching = undefined;
      }
    }
  }

  private release(): void {
    this.active--;
    if (this.active === 0) for (const resolve of this.drained.splice(0)) resolve();
  }

  private async load(version: number): Promise<void> {
    if (this.confirmed === version) return;
    const checkpoint = await requireRetainedCheckpoint(this.db, this.runId, version);
    const name = `${this.runId}@${version}`;
    const unconfirmed = (why: string) => new EngineUnconfirmedError(`engine ${this.options.url} cannot confirm ${name}: ${why}`);
    this.confirmed = undefined;
    // In object storage the weights are offered from this worker's cache (the engine needs no store access).
    const weightsFile = await localFile(joinLocation(checkpoint.path, WEIGHTS_FILE));
    let res: Response;
    try {
      res = await this.call(LOAD_VERSION_PATH, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...(this.options.token ? { authorization: `Bearer ${this.options.token}` } : {}) },
        body: JSON.stringify({ model: this.runId, policy_version: version, checkpoint_url: this.options.checkpoints.offer(weightsFile), sha256: checkpoint.sha256, run_config: this.runConfig }),
      });
    } catch (err) {
      throw unconfirmed(`the version-load call failed: ${describe(err)}`);
    }
    if (!res.ok) {
      const reason = await answerReason(res);
      // Retention pruned the version while the engine fetched it (it marks the registry before it
      // deletes the files): the registry's CheckpointPrunedError, not the engine's fault.
      await requireRetainedCheckpoint(this.db, this.runId, version);
      throw unconfirmed(`the version-load call ${LOAD_VERSION_PATH} answered ${reason}`);
    }
    await res.body?.cancel().catch(() => undefined);
    let held: { relax_policy_version?: unknown; relax_sha256?: unknown };
    try {
      const check = await this.call(`/v1/models/${encodeURIComponent(this.runId)}`);
      if (!check.ok) throw new Error(`answered ${await answerReason(check)}`);
      held = (await check.json()) as typeof held;
    } catch (err) {
      throw unconfirmed(`GET /v1/models/${this.runId} ${describe(err)}`);
    }
    if (held.relax_policy_version !== version || held.relax_sha256 !== checkpoint.sha256) {
      throw unconfirmed(`it says it holds version ${String(held.relax_policy_version)} with sha256 ${String(held.relax_sha256)}, not version ${version} with sha256 ${checkpoint.sha256}`);
    }
    this.confirmed = version;
  }

  /** Generates at the confirmed version (at(version).generate names the version it needs). */
  async generate(prompts: ReadonlyArray<readonly number[]>, params: SamplingParams, media?: ReadonlyArray<SequenceMedia | undefined>): Promise<GeneratedSample[]> {
    const version = this.confirmed;
    if (version === undefined) throw new EngineUnconfirmedError(`engine ${this.options.url} holds no confirmed version of run ${this.runId}`);
    return this.at(version).generate(prompts, params, media);
  }

  /** Through POST /v1/completions, the engine holding `version`; consecutive equal prompts go as one request with n. */
  private async generateAt(version: number, prompts: ReadonlyArray<readonly number[]>, params: SamplingParams, media?: ReadonlyArray<SequenceMedia | undefined>): Promise<GeneratedSample[]> {
    if (media?.some((m) => m !== undefined)) throw new RemoteEngineError('an external engine takes text prompts only: a task with images or audio needs local rollout workers');
    if (params.followUpdates) throw new RemoteEngineError('rollout.in_flight "continue" (partial rollout) needs local rollout workers: an external engine switches versions between requests only');
    const out: GeneratedSample[] = [];
    for (let i = 0; i < prompts.length; ) {
      let n = 1;
      while (i + n < prompts.length && sameTokens(prompts[i + n], prompts[i])) n++;
      out.push(...(await this.complete(prompts[i], n, (params.seed ?? 0) + i, params, version)));
      i += n;
    }
    return out;
  }

  private async complete(prompt: readonly number[], n: number, seed: number, params: SamplingParams, version: number): Promise<GeneratedSample[]> {
    const name = `${this.runId}@${version}`;
    const room = this.model.contextLength - prompt.length;
    const body = {
      model: name,
      prompt,
      n,
      seed,
      max_tokens: Math.max(1, Math.min(params.maxNewTokens, room)),
      temperature: params.greedy ? 0 : (params.temperature ?? 1),
      top_p: params.topP ?? 1,
      top_k: params.topK ?? 0,
      stop_token_ids: params.stopTokens ?? [],
      include_stop_str_in_output: true,
      logprobs: 0,
      return_tokens_as_token_ids: true,
    };
    let res: Response;
    try {
      res = await this.call('/v1/completions', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    } catch (err) {
      // Down (not a slow answer): it cannot serve the version it confirmed, so it must get no more work.
      const down = await probeEngine(this.options.url);
      if (down) {
        this.confirmed = undefined;
        throw new EngineUnconfirmedError(`engine ${this.options.url} no longer answers (${down}) while serving ${name}`);
      }
      throw new RemoteEngineError(`engine ${this.options.url}: POST /v1/completions failed: ${describe(err)}`);
    }
    if (res.status === 404) {
      // The engine no longer holds the version it confirmed (restarted, or told to load another).
      this.confirmed = undefined;
      throw new EngineUnconfirmedError(`engine ${this.options.url} no longer serves ${name}: ${await answerReason(res)}`);
    }
    if (!res.ok) throw new RemoteEngineError(`engine ${this.options.url}: POST /v1/completions answered ${await answerReason(res)}`);
    const answer = (await res.json()) as { model?: string; choices?: CompletionChoice[] };
    if (answer.model !== name) {
      this.confirmed = undefined;
      throw new EngineUnconfirmedError(`engine ${this.options.url} answered as ${String(answer.model)}, not ${name}`);
    }
    const choices = [...(answer.choices ?? [])].sort((a, b) => a.index - b.index);
    if (choices.length !== n) throw new RemoteEngineError(`engine ${this.options.url} returned ${choices.length} choices for n = ${n}`);
    return choices.map((c) => {
      if (!c.logprobs) throw new RemoteEngineError(`engine ${this.options.url} returned no logprobs (it must honour logprobs and return_tokens_as_token_ids)`);
      const tokens = c.logprobs.tokens.map((t) => {
        const id = /^token_id:(\d+)$/.exec(t)?.[1];
        if (id === undefined) throw new RemoteEngineError(`engine ${this.options.url} returned the token ${JSON.stringify(t)}, not "token_id:<id>" (it must honour return_tokens_as_token_ids)`);
        return Number(id);
      });
      const logprobs = c.logprobs.token_logprobs.map(Number);
      return { tokens, logprobs, samplingLogprobs: logprobs, finishReason: c.finish_reason === 'stop' ? 'stop' : 'length', policyVersion: version };
    });
  }
}

function sameTokens(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((t, i) => t === b[i]);
}
