// The rollout engine: batched generation with ONNX Runtime from the policy graphs that
// engines/model-onnx.ts builds out of the shared model definition. One KV-cache graph runs the
// prompts (prefill, an empty past) and then adds one token per step (decode). Weights that change
// with the version are graph inputs, so switching to a new policy version is a pointer swap before
// the next generate() (no session rebuild); a LoRA base (setFrozenWeights) is built into the session
// as initializers, which ONNX Runtime prepacks once for its matmuls.
//
// A group's samples share their prompt: generate() prefills each distinct prompt once and copies its
// cache rows and last-position logits to every sample of it, so the samples draw exactly what they
// would after prefilling the prompt each (test/rollout.test.ts asserts it). The prefix all of a
// batch's text prompts share (a chat template's system prompt) is prefilled once too (sharePrefix),
// each prompt's own tokens attending to it. The cache is a buffer per layer that the graph reads in
// place and the engine appends each run's new keys and values to (engines/rollout-cache.ts).
//
// Log-probs: every sample carries `logprobs`, the log-probability of each generated token under the
// policy itself (softmax of the logits at temperature 1, no top-p/top-k truncation). That is what the
// trainer computes (Trainer.logprobs) and what RL ratios and KL need. Temperature, top-p and top-k
// only shape exploration; the log-probs of the distribution actually sampled from are returned
// separately as `samplingLogprobs` for anyone who wants to correct for that.
//
// Media: a prompt may come with images and audio clips (SequenceMedia, processed for the model's
// encoders), its tokens holding each medium as a run of placeholder tokens. A batch with media runs
// a prefill graph that also takes the media inputs, one per combination of kinds, built on first
// use; the encoders' embeddings then sit in the key/value cache, so decoding is the same as for text.
//
// Over 400 lines because the engine is one stateful object (its sessions, the frozen base built into
// them, the version's feeds) whose generate loop (shared-prompt prefill, decode, sampling, dropping
// finished rows) works on that state; the sampler, the cache and the media feeds live in
// engines/rollout-sampling.ts, engines/rollout-cache.ts and engines/rollout-media.ts.
import * as ort from 'onnxruntime-node';
import { onnxRuntimeInfo, ortThreads } from './backends';
import { loadCheckpoint, type CheckpointInfo } from './checkpoint';
import type { Device } from './device';
import { mixSeed, seededRandom } from '../config/seeds';
import { attentionBias, attentionDims, checkWeights, parameterSpec, parseModelConfig, ropeTables, trainableParameterSpec, type ModelConfig, type PolicyWeights } from './model';
import { transpose2d } from './hf-checkpoint';
import { buildGenerationModel, GRAPH_NAMES, TIED_HEAD, tiedHead, type GraphMedia } from './model-onnx';
import { batchMediaInputs, placeholderIds, type SequenceMedia } from './media/model-inputs';
import { concatRows, KvCache, selectRows } from './rollout-cache';
import { checkPromptMedia, mediaFeeds } from './rollout-media';
import { argmax, checkSamplingParams, drawFromExps, sampleToken } from './rollout-sampling';

// The sampler, re-exported for the callers that import it from here.
export { sampleToken } from './rollout-sampling';

export interface SamplingParams {
  /** Stop after this many new tokens (finish reason 'length'). */
  maxNewTokens: number;
  /** Softmax temperature for sampling; 0 means greedy. Default 1. */
  temperature?: number;
  /** Nucleus sampling: keep the smallest set of most likely tokens whose mass reaches topP. Default 1 (off). */
  topP?: number;
  /** Keep only the topK most likely tokens. Default 0 (off). */
  topK?: number;
  /** Tokens that end a sample (included in its tokens; finish reason 'stop'). */
  stopTokens?: number[];
  /** Seeds the sampler; sample i of a call draws from its own stream, independent of batching. Default 0. */
  seed?: number;
  /** Always pick the most likely token (evaluation). Same as temperature 0. */
  greedy?: boolean;
  /**
   * Partial rollout: when setWeights switches the engine to a new version while this call runs, the
   * following decode steps (and prompt chunks) use it, and each token records the version that
   * generated it (tokenVersions). The key/value cache of earlier tokens is kept as the old version
   * computed it (not re-prefilled). Default false: every token of a call comes from the version the
   * call started with.
   */
  followUpdates?: boolean;
  /** Awaited before each decode step (e.g. to check for and load a newly published version). */
  beforeDecodeStep?: (decodeStep: number) => void | Promise<void>;
}

export type FinishReason = 'stop' | 'length';

export interface GeneratedSample {
  /** Generated tokens (the prompt excluded), including the stop token if one ended the sample. */
  tokens: number[];
  /** log pi(token | prefix) under the policy at temperature 1, one per generated token. */
  logprobs: number[];
  /** log q(token | prefix) under the distribution actually sampled from (0 when greedy). */
  samplingLogprobs: number[];
  finishReason: FinishReason;
  /** The oldest policy version that generated a token of this sample (all of them, unless followUpdates). */
  policyVersion: number;
  /** With followUpdates: the version that generated each token. */
  tokenVersions?: number[];
}

export interface RolloutEngineOptions {
  /** Picks the execution providers for this device (CUDA when onnxruntime-node supports it here). Default cpu. */
  device?: Device;
  /** ONNX Runtime execution providers, best first; overrides `device`. */
  executionProviders?: string[];
  /**
   * Threads per session for one operator; default ortThreads(model) (engines/backends.ts: one for
   * small models such as the add2 policy, whose matmuls are too small to repay thread hand-offs;
   * else every core, RELAX_ORT_THREADS to override).
   */
  intraOpNumThreads?: number;
  /** Prompts per prefill/decode batch; longer prompt lists are generated in chunks. Default 64. */
  maxBatchSize?: number;
  /** Prefill each distinct prompt of a batch once and share its cache among its samples. Default true. */
  sharePrompts?: boolean;
  /**
   * Prefill the prefix all of a batch's text prompts share (a chat template's system prompt) once,
   * and give each prompt only its own tokens on top of that cache. Default true.
   */
  sharePrefix?: boolean;
}

interface LoadedPolicy {
  version: number;
  /** The version's weights the text session takes as inputs (with frozen weights: the adapters). */
  feeds: Record<string, ort.Tensor>;
}

interface Row {
  /** Index into the caller's prompt list. */
  sample: number;
  promptLength: number;
  /** Pad slots in the batch's cache, after the batch's shared prefix (if any). */
  padding: number;
  generated: number[];
  logprobs: number[];
  samplingLogprobs: number[];
  /** The policy version that generated each token. */
  versions: number[];
  rand: () => number;
}

/** Prompt tokens (rows x padded width) one prefill run computes at most, unless one prompt is longer. */
const PREFILL_TOKENS = 256;

/** The generation graph's outputs the sampler reads (the rest are the cache's). */
const LOGIT_OUTPUTS = [GRAPH_NAMES.logits, GRAPH_NAMES.expLogits, GRAPH_NAMES.logitMax, GRAPH_NAMES.expSum];

/** A batch's prompts share their prefix's cache only from this many tokens on (below, an extra run costs more than it saves). */
const MIN_SHARED_PREFIX = 8;

/** The length of the prefix all `prompts` share, leaving each at least one token of its own (whose logits start its sample). */
export function sharedPrefixLength(prompts: ReadonlyArray<readonly number[]>): number {
  if (prompts.length < 2) return 0;
  const limit = Math.min(...prompts.map((p) => p.length)) - 1;
  let n = 0;
  while (n < limit && prompts.every((p) => p[n] === prompts[0][n])) n++;
  return n;
}

/**
 * What rollout code needs of an engine: its model, the version it holds, and generate. RolloutEngine
 * is the local one; rollout/remote-engine.ts drives an external OpenAI-compatible server.
 */
export type GenerationEngine = Pick<RolloutEngine, 'model' | 'policyVersion' | 'generate'>;

export class RolloutEngine {
  private policy: LoadedPolicy | undefined;
  /** LoRA: the frozen base weights every version shares (setFrozenWeights), as feeds of the media prefill graphs. */
  private frozen: Record<string, ort.Tensor> = {};
  /** Prefill sessions with media inputs, by combination of kinds ('images', 'audio', 'images+audio'), opened on first use. */
  private readonly mediaPrefill = new Map<string, Promise<ort.InferenceSession>>();
  /** The media placeholder token ids (never sampled). */
  private readonly placeholders: number[];

  private constructor(
    readonly model: ModelConfig,
    /** The KV-cache graph, prefill and decode; rebuilt with the frozen weights inside by setFrozenWeights. */
    private text: Promise<ort.InferenceSession>,
    private readonly maxBatchSize: number,
    private readonly sharePrompts: boolean,
    private readonly sharePrefix: boolean,
    private readonly sessionOptions: ort.InferenceSession.SessionOptions,
  ) {
    this.placeholders = Object.values(placeholderIds(model));
  }

  /** Builds the generation graph for `model` and opens an ONNX Runtime session for it. */
  static async create(model: ModelConfig, options: RolloutEngineOptions = {}): Promise<RolloutEngine> {
    parseModelConfig(model);
    const executionProviders = options.executionProviders ?? (options.device ? (await onnxRuntimeInfo(options.device)).executionProviders : ['cpu']);
    const sessionOptions: ort.InferenceSession.SessionOptions = {
      executionProviders,
      graphOptimizationLevel: 'all',
      logSeverityLevel: 3,
      intraOpNumThreads: options.intraOpNumThreads ?? ortThreads(model),
    };
    const text = await ort.InferenceSession.create(buildGenerationModel(model, true), sessionOptions);
    return new RolloutEngine(model, Promise.resolve(text), options.maxBatchSize ?? 64, options.sharePrompts ?? true, options.sharePrefix ?? true, sessionOptions);
  }

  /** The prefill session that takes `media`'s kinds as inputs (built and opened once per combination). */
  private mediaPrefillSession(media: GraphMedia): Promise<ort.InferenceSession> {
    const key = [media.images ? 'images' : '', media.audio ? 'audio' : ''].filter(Boolean).join('+');
    let session = this.mediaPrefill.get(key);
    if (!session) {
      session = ort.InferenceSession.create(buildGenerationModel(this.model, false, media), this.sessionOptions);
      // A failed build is not cached: the next batch with these media tries again.
      session.catch(() => this.mediaPrefill.delete(key));
      this.mediaPrefill.set(key, session);
    }
    return session;
  }

  /** The policy version generate() will use, or undefined before any weights are loaded. */
  get policyVersion(): number | undefined {
    return this.policy?.version;
  }

  /**
   * Switches to `weights` as policy version `version` (in-process weight sync). The engine keeps
   * references to the arrays: do not modify them afterwards. Generations already running finish
   * with the version they started with.
   */
  setWeights(version: number, weights: PolicyWeights): void {
    if (!Number.isInteger(version) || version < 0) throw new Error(`policy version must be a non-negative integer, got ${version}`);
    const frozenGiven = Object.keys(this.frozen).length > 0;
    if (frozenGiven) {
      const trainable = trainableParameterSpec(this.model);
      checkWeights(this.model, Object.fromEntries(trainable.map((p) => [p.name, weights[p.name]]).filter(([, w]) => w !== undefined)), undefined, 'trainable');
    } else checkWeights(this.model, weights);
    const feeds: Record<string, ort.Tensor> = {};
    for (const p of frozenGiven ? trainableParameterSpec(this.model) : parameterSpec(this.model)) feeds[p.name] = new ort.Tensor('float32', weights[p.name], p.shape);
    if (tiedHead(this.model) && !this.frozen[TIED_HEAD]) feeds[TIED_HEAD] = this.transposedEmbedding(weights['tok_emb.weight']);
    this.policy = { version, feeds };
  }

  /**
   * LoRA: the frozen base weights, set once; every setWeights() then needs only a version's
   * adapters. The generation session is rebuilt with them as initializers (a second or two for
   * SmolLM2-135M), so call it before generating, not while a generate() runs. (The engine keeps
   * references to the arrays.)
   */
  setFrozenWeights(weights: PolicyWeights): void {
    const frozen = parameterSpec(this.model).filter((p) => p.frozen);
    if (frozen.length === 0) throw new Error('setFrozenWeights: this model has no frozen weights (it has no LoRA adapters); pass every weight to setWeights');
    const feeds: Record<string, ort.Tensor> = {};
    for (const p of frozen) {
      const w = weights[p.name];
      if (!w) throw new Error(`setFrozenWeights: missing tensor "${p.name}" (expected shape [${p.shape}])`);
      if (w.length !== p.shape.reduce((a, b) => a * b, 1)) throw new Error(`setFrozenWeights: tensor "${p.name}" has ${w.length} values, expected shape [${p.shape}]`);
      feeds[p.name] = new ort.Tensor('float32', w, p.shape);
    }
    if (tiedHead(this.model) && feeds['tok_emb.weight']) feeds[TIED_HEAD] = this.transposedEmbedding(weights['tok_emb.weight']);
    this.frozen = feeds;
    this.policy = undefined;
    const constants = Object.fromEntries(Object.entries(feeds).map(([name, t]) => [name, t.data as Float32Array]));
    const previous = this.text;
    this.text = ort.InferenceSession.create(buildGenerationModel(this.model, true, {}, constants), this.sessionOptions);
    // A failed build surfaces at the next generate(), not as an unhandled rejection here.
    this.text.catch(() => undefined);
    previous.then((session) => session.release()).catch(() => undefined);
  }

  /** The token embedding [V, D] as the tied unembedding [D, V] the graph takes. */
  private transposedEmbedding(embedding: Float32Array): ort.Tensor {
    const V = this.model.vocabSize;
    const D = this.model.dModel;
    return new ort.Tensor('float32', transpose2d(embedding, V, D), [D, V]);
  }

  /** The rotary tables of a llama model for `positions` [B, T], as graph feeds; none for the GPT layout. */
  private ropeFeeds(positions: Int32Array, B: number, T: number): Record<string, ort.Tensor> {
    if (this.model.architecture !== 'llama') return {};
    const { cos, sin } = ropeTables(this.model, positions, B, T);
    const Dh = cos.length / (B * T);
    return { [GRAPH_NAMES.ropeCos]: new ort.Tensor('float32', cos, [B, 1, T, Dh]), [GRAPH_NAMES.ropeSin]: new ort.Tensor('float32', sin, [B, 1, T, Dh]) };
  }

  /** Loads a published checkpoint (verifying hash and shapes) and switches to its version. */
  async loadCheckpoint(dir: string, options: { sha256?: string } = {}): Promise<CheckpointInfo> {
    const { info, weights } = await loadCheckpoint(dir, { model: this.model, sha256: options.sha256 });
    this.setWeights(info.policyVersion, weights);
    return info;
  }

  /**
   * Generates one sample per prompt (token ids), in prompt order. `media[i]`, when given, holds
   * prompts[i]'s processed images and clips (engines/media/model-inputs.ts), each already expanded
   * in the prompt's tokens to its run of placeholder tokens (expandMediaTokens).
   */
  async generate(prompts: ReadonlyArray<readonly number[]>, params: SamplingParams, media?: ReadonlyArray<SequenceMedia | undefined>): Promise<GeneratedSample[]> {
    const policy = this.policy;
    if (!policy) throw new Error('rollout engine has no policy weights: call setWeights() or loadCheckpoint() first');
    checkSamplingParams(params, this.model.vocabSize);
    const C = this.model.contextLength;
    prompts.forEach((p, i) => {
      if (p.length === 0) throw new Error(`prompt ${i} is empty: generation needs at least one token (e.g. BOS)`);
      if (p.length >= C) throw new Error(`prompt ${i} has ${p.length} tokens, but the model's context is ${C} tokens and generation needs room for at least one new token (prompt length must be <= ${C - 1})`);
      const bad = p.find((t) => !Number.isInteger(t) || t < 0 || t >= this.model.vocabSize);
      if (bad !== undefined) throw new Error(`prompt ${i} contains token ${bad}, outside the vocabulary [0, ${this.model.vocabSize})`);
    });
    if (media) checkPromptMedia(this.model, prompts, media);
    const results: GeneratedSample[] = [];
    for (let start = 0; start < prompts.length; start += this.maxBatchSize) {
      const chunk = prompts.slice(start, start + this.maxBatchSize);
      const chunkMedia = media?.slice(start, start + this.maxBatchSize);
      results.push(...(await this.generateBatch(params.followUpdates ? (this.policy as LoadedPolicy) : policy, chunk, chunkMedia, start, params)));
    }
    return results;
  }

  /** Empty key/value caches for `batch` rows: the text graph's inputs for a prefill. */
  private emptyPast(batch: number): Record<string, ort.Tensor> {
    const { Hkv, Dh } = attentionDims(this.model);
    const feeds: Record<string, ort.Tensor> = {};
    for (let l = 0; l < this.model.nLayers; l++) {
      feeds[GRAPH_NAMES.pastKey(l)] = new ort.Tensor('float32', new Float32Array(0), [batch, Hkv, Dh, 0]);
      feeds[GRAPH_NAMES.pastValue(l)] = new ort.Tensor('float32', new Float32Array(0), [batch, Hkv, 0, Dh]);
    }
    return feeds;
  }

  // Over 80 lines because it is the batched decode loop (prefill, then per token: sample, stop checks,
  // feeds for the next step) over buffers it shares across steps; not yet split (issue 33).
  private async generateBatch(policy: LoadedPolicy, prompts: ReadonlyArray<readonly number[]>, media: ReadonlyArray<SequenceMedia | undefined> | undefined, firstIndex: number, params: SamplingParams): Promise<GeneratedSample[]> {
    const V = this.model.vocabSize;
    const C = this.model.contextLength;
    const greedy = params.greedy === true || params.temperature === 0;
    const temperature = params.temperature ?? 1;
    const topK = params.topK ?? 0;
    const topP = params.topP ?? 1;
    // Temperature 1 without truncation or masked tokens samples straight from exp_logits.
    const plainSampling = !greedy && temperature === 1 && topK === 0 && topP >= 1 && this.placeholders.length === 0;
    const stop = new Set(params.stopTokens ?? []);
    const seed = params.seed ?? 0;
    const width = Math.max(...prompts.map((p) => p.length));
    const done: Array<GeneratedSample | undefined> = new Array(prompts.length);
    let rows: Row[] = prompts.map((p, i) => ({
      sample: i,
      promptLength: p.length,
      padding: width - p.length,
      generated: [],
      logprobs: [],
      samplingLogprobs: [],
      versions: [],
      rand: seededRandom(mixSeed(seed, `sample:${firstIndex + i}`)),
    }));

    // Prefill: each distinct prompt once (a prompt with media is its own), its own tokens (after the
    // shared prefix) left-padded to a common width; pad slots are masked out as keys. source[b] is the
    // prefill row that row b continues.
    const firstOf = new Map<string, number>();
    const prefillRows: Row[] = [];
    const source = rows.map((r) => {
      const key = this.sharePrompts && !media?.[r.sample] ? prompts[r.sample].join(',') : undefined;
      const seen = key === undefined ? undefined : firstOf.get(key);
      if (seen !== undefined) return seen;
      if (key !== undefined) firstOf.set(key, prefillRows.length);
      prefillRows.push(r);
      return prefillRows.length - 1;
    });
    const P = prefillRows.length;
    // The prefix every distinct prompt shares (text batches only) is prefilled once, in a run of its
    // own; the cache then holds [shared prefix | row's padding | row's own tokens], `width` slots in all.
    const prefix = this.sharePrefix && !media?.some((m) => m !== undefined) ? sharedPrefixLength(prefillRows.map((r) => prompts[r.sample])) : 0;
    const shared = prefix >= MIN_SHARED_PREFIX ? prefix : 0;
    // The tokens after `shared` of `part`'s prompts (all of them with no shared prefix).
    const prefillFeeds = (part: Row[]): Record<string, ort.Tensor> => {
      const n = part.length;
      const T = width - shared;
      const tokens = new Int32Array(n * T);
      const positions = new Int32Array(n * T);
      part.forEach((r, b) => {
        const own = prompts[r.sample].slice(shared);
        own.forEach((t, j) => (tokens[b * T + r.padding + j] = t));
        for (let s = r.padding; s < T; s++) positions[b * T + s] = shared + s - r.padding;
      });
      return {
        [GRAPH_NAMES.tokens]: new ort.Tensor('int32', tokens, [n, T]),
        [GRAPH_NAMES.positions]: new ort.Tensor('int32', positions, [n, T]),
        ...this.ropeFeeds(positions, n, T),
        [GRAPH_NAMES.attentionBias]: new ort.Tensor('float32', attentionBias(n, T, shared, (b, s) => s >= shared && s < shared + part[b].padding), [n, 1, T, width]),
      };
    };
    // With media: the embedding index is over the padded rows (each row's media start after its padding).
    const batchMedia = media && batchMediaInputs(this.model, prefillRows.map((r) => ({ tokens: prompts[r.sample], media: media[r.sample], offset: r.padding })), width);
    const text = await this.text;
    const { Hkv, Dh } = attentionDims(this.model);
    // The cache holds every row (a group's samples each get their prompt's prefill), with room for
    // the first new tokens; it grows by doubling after that.
    const cache = new KvCache(this.model.nLayers, rows.length, Hkv, Dh, width + Math.min(Math.max(params.maxNewTokens - 1, 0), 64));
    const members: number[][] = prefillRows.map(() => []);
    source.forEach((u, b) => members[u].push(b));
    let out: Record<string, ort.Tensor>;
    if (batchMedia) {
      out = await (await this.mediaPrefillSession({ images: batchMedia.images !== undefined, audio: batchMedia.audio !== undefined })).run({ ...this.frozen, ...policy.feeds, ...prefillFeeds(prefillRows), ...mediaFeeds(batchMedia, P, width) });
      cache.write(out, width, members);
    } else {
      // The shared prefix's cache, computed once (one row): every row's first slots, and the past
      // of each prefill run below.
      let past = (n: number) => this.emptyPast(n);
      if (shared > 0) {
        const positions = Int32Array.from({ length: shared }, (_, s) => s);
        const prefixOut = await text.run({
          ...policy.feeds,
          ...this.emptyPast(1),
          [GRAPH_NAMES.tokens]: new ort.Tensor('int32', Int32Array.from(prompts[0].slice(0, shared)), [1, shared]),
          [GRAPH_NAMES.positions]: new ort.Tensor('int32', positions, [1, shared]),
          ...this.ropeFeeds(positions, 1, shared),
          [GRAPH_NAMES.attentionBias]: new ort.Tensor('float32', attentionBias(1, shared, 0), [1, 1, shared, shared]),
        });
        cache.write(prefixOut, shared, [rows.map((_, b) => b)], 0);
        past = (n: number) => {
          const feeds: Record<string, ort.Tensor> = {};
          const repeat = new Array<number>(n).fill(0);
          for (let l = 0; l < this.model.nLayers; l++) {
            feeds[GRAPH_NAMES.pastKey(l)] = selectRows(prefixOut[GRAPH_NAMES.presentKey(l)], repeat);
            feeds[GRAPH_NAMES.pastValue(l)] = selectRows(prefixOut[GRAPH_NAMES.presentValue(l)], repeat);
          }
          return feeds;
        };
      }
      // ONNX Runtime's run is synchronous on this thread: prompts are prefilled a few rows per run
      // (about PREFILL_TOKENS tokens), so a worker's event loop gets a turn between runs instead of
      // waiting out the whole batch's prefill (seconds for 64 prompts of a 135M model).
      const perRun = Math.max(1, Math.floor(PREFILL_TOKENS / (width - shared)));
      const parts: Array<Record<string, ort.Tensor>> = [];
      for (let start = 0; start < P; start += perRun) {
        const part = prefillRows.slice(start, start + perRun);
        const partOut = await text.run({ ...policy.feeds, ...prefillFeeds(part), ...past(part.length) });
        cache.write(partOut, width - shared, members.slice(start, start + perRun), shared);
        parts.push(partOut);
      }
      out = Object.fromEntries(LOGIT_OUTPUTS.map((name) => [name, parts.length === 1 ? parts[0][name] : concatRows(parts.map((o) => o[name]))]));
    }
    cache.advance(width);
    if (P < rows.length) out = Object.fromEntries(LOGIT_OUTPUTS.map((name) => [name, selectRows(out[name], source)]));
    // The version whose weights computed `out` (changes mid-call only with followUpdates).
    let current = policy;
    let decodeStep = 0;

    for (;;) {
      // Pick the next token of every row from the last position's logits.
      const logits = out[GRAPH_NAMES.logits].data as Float32Array;
      const exps = out[GRAPH_NAMES.expLogits].data as Float32Array;
      const maxes = out[GRAPH_NAMES.logitMax].data as Float32Array;
      const sums = out[GRAPH_NAMES.expSum].data as Float32Array;
      const keep: number[] = [];
      rows.forEach((r, b) => {
        const offset = b * V;
        // log pi(v) = logit(v) - max - log(sum of exp(logit - max)), max and sum from the graph.
        const sum = sums[b];
        const logNormalizer = maxes[b] + Math.log(sum);
        let token: number;
        let logq = 0;
        if (plainSampling) ({ token, logq } = drawFromExps(exps, offset, V, sum, logits, logNormalizer, r.rand));
        else {
          // Media placeholders are never generated (they would stand for media nobody gave): they
          // are masked out of what is sampled from; `logprobs` stay the policy's own, unmasked.
          for (const id of this.placeholders) logits[offset + id] = -Infinity;
          if (greedy) token = argmax(logits, offset, V);
          else ({ token, logq } = sampleToken(logits, offset, V, temperature, topK, topP, r.rand));
        }
        r.generated.push(token);
        r.logprobs.push(logits[offset + token] - logNormalizer);
        r.samplingLogprobs.push(logq);
        r.versions.push(current.version);
        let finish: FinishReason | undefined;
        if (stop.has(token)) finish = 'stop';
        else if (r.generated.length >= params.maxNewTokens || r.promptLength + r.generated.length >= C) finish = 'length';
        if (finish) {
          done[r.sample] = {
            tokens: r.generated,
            logprobs: r.logprobs,
            samplingLogprobs: r.samplingLogprobs,
            finishReason: finish,
            policyVersion: Math.min(...r.versions),
            ...(params.followUpdates ? { tokenVersions: r.versions } : {}),
          };
        } else keep.push(b);
      });
      if (keep.length === 0) break;

      // Drop finished rows from the batch and its cache, then decode one step for the rest.
      await params.beforeDecodeStep?.(++decodeStep);
      if (params.followUpdates && this.policy) current = this.policy;
      cache.keepRows(keep);
      cache.reserve(1);
      const feeds: Record<string, ort.Tensor> = { ...current.feeds, ...cache.feeds() };
      rows = keep.map((b) => rows[b]);
      const n = rows.length;
      feeds[GRAPH_NAMES.tokens] = new ort.Tensor('int32', Int32Array.from(rows, (r) => r.generated[r.generated.length - 1]), [n, 1]);
      const decodePositions = Int32Array.from(rows, (r) => r.promptLength + r.generated.length - 1);
      feeds[GRAPH_NAMES.positions] = new ort.Tensor('int32', decodePositions, [n, 1]);
      Object.assign(feeds, this.ropeFeeds(decodePositions, n, 1));
      // Masked keys: the cache's unused slots and each row's padding.
      const filled = cache.length;
      const slots = cache.slots;
      feeds[GRAPH_NAMES.attentionBias] = new ort.Tensor('float32', attentionBias(n, 1, slots, (b, s) => (s >= filled && s < slots) || (s >= shared && s < shared + rows[b].padding)), [n, 1, 1, slots + 1]);
      out = await text.run(feeds);
      cache.write(out, 1, rows.map((_, b) => [b]));
      cache.advance(1);
    }
    return done.map((s, i) => {
      if (!s) throw new Error(`internal error: prompt ${firstIndex + i} finished without a result`);
      return s;
    });
  }

  async release(): Promise<void> {
    const sessions = await Promise.allSettled([this.text, ...this.mediaPrefill.values()]);
    this.mediaPrefill.clear();
    await Promise.all(sessions.map((s) => (s.status === 'fulfilled' ? s.value.release() : undefined)));
  }
}
