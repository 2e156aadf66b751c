// The rollout engine off the event loop. ONNX Runtime's node binding runs a session synchronously
// on the thread that calls it (its promise only defers the call), and so does opening a session:
// on the main thread, a SmolLM2 prefill or the LoRA base's session build stops Temporal's
// heartbeats and cancellation for seconds, longer on a busy machine. A ThreadedRolloutEngine is a
// RolloutEngine (engines/rollout.ts) on a worker thread of its own: its methods are messages, its
// sessions, caches and sampling live there, and the main thread only posts prompts and receives
// samples. One thread per engine (a run's policy on a rollout worker, an engine server's model):
// release() ends it, and with it every byte the engine held.
//
// generate() calls run concurrently on the thread as they do on a local engine (they interleave
// between ONNX Runtime runs); a weight switch applies in the order it was sent. A call's
// beforeDecodeStep callback stays on the main thread (it reads the database, switches versions):
// the thread asks for it before each decode step and waits for the answer.
import path from 'node:path';
import { Worker } from 'node:worker_threads';
import { checkWeights, parameterSpec, trainableParameterSpec, type ModelConfig, type PolicyWeights } from './model';
import type { GeneratedSample, GenerationEngine, RolloutEngineOptions, SamplingParams } from './rollout';
import type { SequenceMedia } from './media/model-inputs';

/** The operations a ThreadedRolloutEngine sends, with their arguments and results (the thread's protocol). */
export interface RolloutOps {
  /** Part of the weights a setWeights or setFrozenWeights will take by the same stage id (see stage()). */
  stageWeights: { args: [stage: number, weights: PolicyWeights]; result: void };
  setWeights: { args: [version: number, stage: number]; result: void };
  setFrozenWeights: { args: [stage: number]; result: void };
  /** callback: the id the thread quotes when it asks for beforeDecodeStep (absent: the call has none). */
  generate: { args: [prompts: ReadonlyArray<readonly number[]>, params: Omit<SamplingParams, 'beforeDecodeStep'>, media: ReadonlyArray<SequenceMedia | undefined> | undefined, callback: number | undefined]; result: GeneratedSample[] };
  release: { args: []; result: void };
}
export type RolloutOp = keyof RolloutOps;

export interface RolloutRequest {
  id: number;
  op: RolloutOp;
  args: unknown[];
}

/** Main thread to engine thread: a request, or the answer to a beforeDecodeStep question. */
export type ToRolloutThread = { request: RolloutRequest } | { answer: { callback: number; question: number; error?: string } };

/** Engine thread to main thread: a reply, a question (run call `callback`'s beforeDecodeStep), or that the engine is built. */
export type FromRolloutThread =
  | { reply: { id: number; ok: true; value: unknown } | { id: number; ok: false; error: { name: string; message: string; stack?: string } } }
  | { question: { callback: number; question: number; decodeStep: number } }
  | { ready: true }
  | { failed: { name: string; message: string; stack?: string } };

/** The thread that held a rollout engine has ended: the engine is gone; create a new one. */
export class RolloutThreadExitedError extends Error {
  override readonly name = 'RolloutThreadExitedError';
}

/** The most bytes of weights one message copies to the thread (copying is synchronous on the sender). */
const STAGE_BYTES = 32 * 2 ** 20;

function rebuiltError(e: { name: string; message: string; stack?: string }): Error {
  const err = new Error(e.message);
  err.name = e.name;
  if (e.stack) err.stack = e.stack;
  return err;
}

/**
 * A RolloutEngine on its own worker thread: generate, setWeights, setFrozenWeights and release as
 * there, all asynchronous. Weights are copied to the thread (the caller keeps its arrays), in parts.
 */
export class ThreadedRolloutEngine implements GenerationEngine {
  private readonly worker: Worker;
  private nextId = 1;
  private nextCallback = 1;
  private nextStage = 1;
  private readonly pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  private readonly callbacks = new Map<number, NonNullable<SamplingParams['beforeDecodeStep']>>();
  private version: number | undefined;
  private exited: string | undefined;
  private hasFrozen = false;

  private constructor(readonly model: ModelConfig, options: RolloutEngineOptions) {
    this.worker = new Worker(path.join(__dirname, 'rollout-thread-entry.js'), { workerData: { model, options } });
    this.worker.unref();
    this.worker.on('message', (message: FromRolloutThread) => this.onMessage(message));
    const end = (why: string) => {
      if (this.exited !== undefined) return;
      this.exited = why;
      const err = new RolloutThreadExitedError(`the rollout engine's thread ended (${why}); the engine is gone: create a new one`);
      for (const call of this.pending.values()) call.reject(err);
      this.pending.clear();
      this.readyReject?.(err);
    };
    this.worker.on('error', (err) => end(err.message));
    this.worker.on('exit', (code) => end(`exit code ${code}`));
  }

  private readyResolve?: () => void;
  private readyReject?: (err: Error) => void;

  /** Starts the thread and builds the engine there (its generation graph and ONNX Runtime session). */
  static async create(model: ModelConfig, options: RolloutEngineOptions = {}): Promise<ThreadedRolloutEngine> {
    const engine = new ThreadedRolloutEngine(model, options);
    engine.worker.ref();
    try {
      await new Promise<void>((resolve, reject) => {
        engine.readyResolve = resolve;
        engine.readyReject = reject;
      });
    } catch (err) {
      await engine.worker.terminate();
      throw err;
    } finally {
      engine.readyResolve = engine.readyReject = undefined;
      if (engine.pending.size === 0) engine.worker.unref();
    }
    return engine;
  }

  private onMessage(message: FromRolloutThread): void {
    if ('ready' in message) return this.readyResolve?.();
    if ('failed' in message) return this.readyReject?.(rebuiltError(message.failed));
    if ('question' in message) {
      const { callback, question, decodeStep } = message.question;
      const fn = this.callbacks.get(callback);
      const answer = (error?: string) => this.post({ answer: { callback, question, ...(error !== undefined ? { error } : {}) } });
      void Promise.resolve()
        .then(() => fn?.(decodeStep))
        .then(
          () => answer(),
          (err: unknown) => answer(err instanceof Error ? err.message : String(err)),
        );
      return;
    }
    const { reply } = message;
    const call = this.pending.get(reply.id);
    if (!call) return;
    this.pending.delete(reply.id);
    if (this.pending.size === 0) this.worker.unref();
    if (reply.ok) call.resolve(reply.value);
    else call.reject(rebuiltError(reply.error));
  }

  private post(message: ToRolloutThread): void {
    if (this.exited === undefined) this.worker.postMessage(message);
  }

  private call<K extends RolloutOp>(op: K, args: RolloutOps[K]['args']): Promise<RolloutOps[K]['result']> {
    if (this.exited !== undefined) return Promise.reject(new RolloutThreadExitedError(`the rollout engine's thread ended (${this.exited}); create a new engine`));
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      // Referenced while a call is pending, so an awaited call keeps the process alive; idle, the thread never does.
      this.worker.ref();
      this.post({ request: { id, op, args } });
    });
  }

  /**
   * Copies `weights` to the thread in parts of at most STAGE_BYTES, under a stage id of their own
   * (two switches may be copying at once), for the setWeights/setFrozenWeights that names it.
   */
  private async stage(weights: PolicyWeights, names: readonly string[]): Promise<number> {
    const stage = this.nextStage++;
    let part: PolicyWeights = {};
    let bytes = 0;
    const send = async () => {
      if (Object.keys(part).length === 0) return;
      await this.call('stageWeights', [stage, part]);
      part = {};
      bytes = 0;
    };
    for (const name of names) {
      const w = weights[name];
      if (!w) continue;
      if (bytes > 0 && bytes + w.byteLength > STAGE_BYTES) await send();
      part[name] = w;
      bytes += w.byteLength;
    }
    await send();
    return stage;
  }

  /** The policy version generate() will use, as of the last setWeights this engine finished. */
  get policyVersion(): number | undefined {
    return this.version;
  }

  /** Whether the engine's thread has ended (the engine is then gone). */
  get lost(): boolean {
    return this.exited !== undefined;
  }

  /** Switches to `weights` as policy version `version` (checked here first, so a bad tensor is named before any copy). */
  async setWeights(version: number, weights: PolicyWeights): Promise<void> {
    if (!Number.isInteger(version) || version < 0) throw new Error(`policy version must be a non-negative integer, got ${version}`);
    const spec = this.hasFrozen ? trainableParameterSpec(this.model) : parameterSpec(this.model);
    if (this.hasFrozen) checkWeights(this.model, Object.fromEntries(spec.map((p) => [p.name, weights[p.name]]).filter(([, w]) => w !== undefined)), undefined, 'trainable');
    else checkWeights(this.model, weights);
    // Only what the engine takes: with frozen weights given, a version's adapters.
    const stage = await this.stage(weights, spec.map((p) => p.name));
    await this.call('setWeights', [version, stage]);
    this.version = version;
  }

  /** LoRA: the frozen base weights, set once, before generating (the thread rebuilds its session with them). */
  async setFrozenWeights(weights: PolicyWeights): Promise<void> {
    const stage = await this.stage(weights, parameterSpec(this.model).filter((p) => p.frozen).map((p) => p.name));
    await this.call('setFrozenWeights', [stage]);
    this.hasFrozen = true;
    this.version = undefined;
  }

  async generate(prompts: ReadonlyArray<readonly number[]>, params: SamplingParams, media?: ReadonlyArray<SequenceMedia | undefined>): Promise<GeneratedSample[]> {
    const { beforeDecodeStep, ...rest } = params;
    const callback = beforeDecodeStep ? this.nextCallback++ : undefined;
    if (callback !== undefined) this.callbacks.set(callback, beforeDecodeStep!);
    try {
      return await this.call('generate', [prompts, rest, media, callback]);
    } finally {
      if (callback !== undefined) this.callbacks.delete(callback);
    }
  }

  /** Releases the engine's sessions and ends its thread. */
  async release(): Promise<void> {
    if (this.exited === undefined) await this.call('release', []).catch(() => undefined);
    await this.worker.terminate();
  }
}
