// A run's policy on one rollout engine, switched between the run's published versions: the one
// model resolver. Rollout workers generate and evaluate with it and serve their agent endpoint from
// it; `relax serve` serves a run from it. Weights are graph inputs, so a version switch is a pointer
// swap; the weights of the last few versions asked for stay in memory. Model names on the
// OpenAI-compatible endpoint:
//   "<run_id>"      the run's newest retained version (the registry is checked at most every
//                   latestCheckMs), or, for a rollout worker's agent endpoint, the version its
//                   current generate activity loaded
//   "<run_id>@<n>"  version n, while checkpoint retention keeps its files
import type { Pool } from 'pg';
import { failpoint } from '../config/failpoints';
import { ortThreads } from '../engines/backends';
import { parseDevice } from '../engines/device';
import type { ModelConfig, PolicyWeights } from '../engines/model';
import type { SamplingParams } from '../engines/rollout';
import { ThreadedRolloutEngine } from '../engines/rollout-thread';
import type { Tokenizer } from '../engines/tokenizers/tokenizer';
import { CheckpointPrunedError, latestCheckpoint, MissingPolicyVersionError, retainedVersions } from '../store/checkpoint-registry';
import { formatVersions } from '../store/checkpoint-retention';
import { ModelNotFoundError, type ResolvedModel } from './resolved-model';

export interface PolicyEngineOptions {
  /**
   * A published version's weights (training/policy-versions.ts loadPolicyWeights): throws
   * MissingPolicyVersionError or CheckpointPrunedError for a version it cannot have.
   */
  loadWeights(version: number): Promise<PolicyWeights>;
  /** Versions whose weights stay in memory. Default 4. */
  cachedVersions?: number;
  /** How often the registry is asked for a newer version, at most. Default 1000 ms. */
  latestCheckMs?: number;
  /** "cpu" (default) or "cuda:N". */
  device?: string;
  /** LoRA: the frozen base weights every version shares (loaded once; versions then hold adapters only). */
  frozenWeights?: () => Promise<PolicyWeights>;
}

/** What "<run_id>" means on the endpoint: the newest retained version, or the engine's current one. */
export type RunModelMeaning = 'newest' | 'current';

export class PolicyEngine {
  private readonly weights = new Map<number, PolicyWeights>();
  private latest: { version: number | undefined; checkedAt: number } = { version: undefined, checkedAt: -Infinity };

  private constructor(
    private readonly pool: Pool,
    readonly runId: string,
    readonly tokenizer: Tokenizer,
    readonly engine: ThreadedRolloutEngine,
    private readonly options: PolicyEngineOptions,
  ) {}

  static async create(pool: Pool, run: { runId: string; model: ModelConfig; tokenizer: Tokenizer }, options: PolicyEngineOptions): Promise<PolicyEngine> {
    // ONNX Runtime threads: every core for a real model, one for a small one (ortThreads). The
    // engine runs on a thread of its own (engines/rollout-thread.ts): this worker's event loop
    // answers heartbeats and cancellation whatever the engine is computing.
    const engine = await ThreadedRolloutEngine.create(run.model, { intraOpNumThreads: ortThreads(run.model), ...(options.device ? { device: parseDevice(options.device) } : {}) });
    try {
      if (options.frozenWeights) await engine.setFrozenWeights(await options.frozenWeights());
    } catch (err) {
      await engine.release();
      throw err;
    }
    return new PolicyEngine(pool, run.runId, run.tokenizer, engine, options);
  }

  /** The version the engine holds (undefined before the first switch). */
  get policyVersion(): number | undefined {
    return this.engine.policyVersion;
  }

  /** The engine switched to `version` (most recently used weights last: the first is evicted). */
  async atVersion(version: number): Promise<ThreadedRolloutEngine> {
    if (this.engine.policyVersion === version) return this.engine;
    let w = this.weights.get(version);
    if (w) this.weights.delete(version);
    else {
      w = await this.options.loadWeights(version);
      failpoint('rollout.sync');
    }
    this.weights.set(version, w);
    if (this.weights.size > (this.options.cachedVersions ?? 4)) this.weights.delete(this.weights.keys().next().value as number);
    await this.engine.setWeights(version, w);
    return this.engine;
  }

  /** The newest retained version, asked of the registry at most every latestCheckMs. */
  async newestVersion(): Promise<number | undefined> {
    if (Date.now() - this.latest.checkedAt >= (this.options.latestCheckMs ?? 1000)) {
      const retained = await retainedVersions(this.pool, this.runId);
      this.latest = { version: retained[retained.length - 1], checkedAt: Date.now() };
    }
    return this.latest.version;
  }

  /**
   * Partial rollout (rollout.in_flight "continue"): before each decode step, at most every 20 ms,
   * look for a newer published version and switch to it; the rest of the call's tokens come from
   * it and record so.
   */
  followNewVersions(): Pick<SamplingParams, 'followUpdates' | 'beforeDecodeStep'> {
    let lastCheck = 0;
    return {
      followUpdates: true,
      beforeDecodeStep: async () => {
        if (Date.now() - lastCheck < 20) return;
        lastCheck = Date.now();
        const latest = await latestCheckpoint(this.pool, this.runId);
        if (latest && !latest.prunedAt && latest.policyVersion > (this.engine.policyVersion ?? -1)) await this.atVersion(latest.policyVersion);
      },
    };
  }

  /** Resolves an endpoint model name (see the top of this file); unknown names are ModelNotFoundError (the endpoint answers 404) naming what is served. */
  async resolveModel(model: string, runName: RunModelMeaning = 'newest'): Promise<ResolvedModel> {
    const version = await this.versionOf(model, runName);
    try {
      await this.atVersion(version);
    } catch (err) {
      if (err instanceof CheckpointPrunedError) throw new ModelNotFoundError(model, err.message);
      if (err instanceof MissingPolicyVersionError) {
        const retained = await retainedVersions(this.pool, this.runId);
        throw new ModelNotFoundError(model, `run ${this.runId} has no policy version ${version}; ${retained.length ? `its retained versions are ${formatVersions(retained)}` : 'it has no retained version yet'}`);
      }
      throw err;
    }
    return { engine: this.engine, tokenizer: this.tokenizer, policyVersion: version, name: `${this.runId}@${version}` };
  }

  async listModels(): Promise<string[]> {
    return [this.runId, ...(await retainedVersions(this.pool, this.runId)).map((v) => `${this.runId}@${v}`)];
  }

  release(): Promise<void> {
    return this.engine.release();
  }

  private async versionOf(model: string, runName: RunModelMeaning): Promise<number> {
    if (model === this.runId) {
      const v = runName === 'current' ? this.engine.policyVersion : await this.newestVersion();
      if (v === undefined) throw new ModelNotFoundError(model, `run ${this.runId} has no published policy version yet (version 0 is published when the run starts); try again once it has`);
      return v;
    }
    const pinned = /^(.*)@(\d+)$/.exec(model);
    if (pinned && pinned[1] === this.runId && Number.isSafeInteger(Number(pinned[2]))) return Number(pinned[2]);
    throw new ModelNotFoundError(model, `this server serves run ${this.runId} only: ask for "${this.runId}" (its newest policy version) or "${this.runId}@<n>" (version n)`);
  }
}
