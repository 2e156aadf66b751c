// The trainer off the event loop. One worker thread per process owns the tfjs backend and every
// Trainer of that process (a run's policy trainer, a run's frozen reference); the process's main
// thread holds RemoteTrainer handles whose methods are messages to it. A tfjs call blocks the thread
// that makes it (tfjs-node's kernels are synchronous), so on the main thread a forward + backward
// of a whole batch of a 135M model (seconds) would stop Temporal's heartbeats and cancellation; here
// the main thread stays free whatever the engine is doing, and micro-batches are sized for
// throughput and memory (train.micro_batch_tokens), not for the heartbeat.
//
// Losses are functions, which cannot cross threads: a train step sends the run's `algorithm`
// config, and the thread resolves the same loss from it (training/losses.ts resolvePolicyLoss, once
// per distinct config). Weights go in by copy (the caller may keep sharing its arrays) and come back
// by transfer.
//
// The thread starts on the first trainer and its threads are sized then (engines/backends.ts
// engineThreads): TensorFlow reads TF_NUM_INTRAOP_THREADS from the OS environment when it loads,
// which only the main thread can set. If the thread dies (out of memory, a native crash), every
// pending call and every handle fails with TrainerThreadExitedError; the next create starts a new one.
import path from 'node:path';
import { Worker } from 'node:worker_threads';
import type { RunConfig } from '../config/run-config';
import { engineThreads, setTensorflowEnvironment, USER_TF_INTRAOP_THREADS } from '../engines/backends';
import type { Device } from '../engines/device';
import type { ModelConfig, PolicyWeights } from '../engines/model';
import { NonFiniteUpdateError, type LrSchedule, type ScoredSequence, type TrainerOptions, type TrainSequence, type TrainStepMetrics, type TrainStepOptions } from '../engines/trainer';
import type { ThreadReply } from './thread-requests';

export type Algorithm = RunConfig['algorithm'];

/** The operations a RemoteTrainer sends, with their arguments and results (the thread's protocol). */
export interface TrainerOps {
  /** Part of a trainer's initial weights, sent before its create (see RemoteTrainer.create). */
  stageWeights: { args: [weights: PolicyWeights]; result: void };
  create: { args: [options: TrainerOptions]; result: { step: number } };
  trainStep: { args: [sequences: readonly TrainSequence[], algorithm: Algorithm, options: TrainStepOptions]; result: TrainStepMetrics };
  logprobs: { args: [sequences: ReadonlyArray<ScoredSequence>, options: { microBatchSize?: number }]; result: Float32Array[] };
  values: { args: [sequences: ReadonlyArray<ScoredSequence>, options: { microBatchSize?: number }]; result: Float32Array[] };
  exportWeights: { args: []; result: PolicyWeights };
  loadWeights: { args: [weights: PolicyWeights]; result: void };
  exportOptimizerState: { args: []; result: Uint8Array };
  importOptimizerState: { args: [bytes: Uint8Array]; result: { step: number } };
  setLearningRate: { args: [lr: number, schedule: LrSchedule, valueHeadLr?: number]; result: void };
  dispose: { args: []; result: void };
}
export type TrainerOp = keyof TrainerOps;

export interface TrainerRequest {
  id: number;
  op: TrainerOp;
  /** The trainer (from create's reply id); create allocates it. */
  handle: number;
  args: unknown[];
}

export type TrainerReply = ThreadReply;

/** The thread that held a trainer has ended: the trainer is gone; create a new one. */
export class TrainerThreadExitedError extends Error {
  override readonly name = 'TrainerThreadExitedError';
}

/** The first thread's setup: which backend it loaded and how many threads TensorFlow uses. */
export interface TrainerThreadInfo {
  backend: string;
  intraOpThreads: number;
}

class TrainerThread {
  private readonly worker: Worker;
  private nextId = 1;
  private nextHandle = 1;
  private readonly pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  exited: string | undefined;
  readonly ready: Promise<TrainerThreadInfo>;

  constructor(device: Device, model: ModelConfig) {
    // Read by TensorFlow from the OS environment when the thread creates its context (a thread's
    // own process.env is a copy that never reaches getenv); the main thread may have set it for
    // itself, so only a value the user set wins over this model's count.
    const intraOpThreads = USER_TF_INTRAOP_THREADS ?? String(engineThreads(model));
    process.env.TF_NUM_INTRAOP_THREADS = intraOpThreads;
    setTensorflowEnvironment();
    this.worker = new Worker(path.join(__dirname, 'trainer-thread-entry.js'), { workerData: { device } });
    this.worker.unref();
    let started: (info: TrainerThreadInfo) => void;
    let failed: (err: Error) => void;
    this.ready = new Promise<TrainerThreadInfo>((resolve, reject) => {
      started = resolve;
      failed = reject;
    });
    this.ready.catch(() => undefined);
    this.worker.on('message', (message: TrainerReply | { ready: { backend: string } }) => {
      if ('ready' in message) {
        started({ backend: message.ready.backend, intraOpThreads: Number(intraOpThreads) });
        return;
      }
      const call = this.pending.get(message.id);
      if (!call) return;
      this.pending.delete(message.id);
      if (this.pending.size === 0) this.worker.unref();
      if (message.ok) call.resolve(message.value);
      else call.reject(rebuiltError(message.error));
    });
    const end = (why: string) => {
      if (this.exited !== undefined) return;
      this.exited = why;
      const err = new TrainerThreadExitedError(`the trainer thread ended (${why}); its trainers are gone, and the next one starts a new thread`);
      failed(err);
      for (const call of this.pending.values()) call.reject(err);
      this.pending.clear();
      if (current === this) current = undefined;
    };
    this.worker.on('error', (err) => end(err.message));
    this.worker.on('exit', (code) => end(`exit code ${code}`));
  }

  newHandle(): number {
    return this.nextHandle++;
  }

  call<K extends TrainerOp>(handle: number, op: K, args: TrainerOps[K]['args'], transfer: ArrayBuffer[] = []): Promise<TrainerOps[K]['result']> {
    if (this.exited !== undefined) return Promise.reject(new TrainerThreadExitedError(`the trainer thread ended (${this.exited}); create a new trainer`));
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      // Referenced while a call is pending, so an awaited call keeps the process alive; idle, the thread never does.
      this.worker.ref();
      this.worker.postMessage({ id, op, handle, args } satisfies TrainerRequest, transfer);
    });
  }

  terminate(): Promise<number> {
    return this.worker.terminate();
  }
}

/** Errors keep their name across the thread; the ones callers test with instanceof are rebuilt as their class. */
function rebuiltError(e: { name: string; message: string; stack?: string }): Error {
  const err = e.name === 'NonFiniteUpdateError' ? new NonFiniteUpdateError(e.message) : new Error(e.message);
  err.name = e.name;
  if (e.stack) err.stack = e.stack;
  return err;
}

let current: TrainerThread | undefined;

/** The most bytes of weights one message copies to the thread. */
const STAGE_BYTES = 32 * 2 ** 20;

function threadFor(device: Device, model: ModelConfig): TrainerThread {
  current ??= new TrainerThread(device, model);
  return current;
}

/** The trainer thread's backend and threads, once it has started; undefined before the first trainer. */
export async function trainerThreadInfo(): Promise<TrainerThreadInfo | undefined> {
  return current?.ready;
}

/** Ends this process's trainer thread (tests, shutdown); every handle on it fails from then on. */
export async function stopTrainerThread(): Promise<void> {
  const thread = current;
  current = undefined;
  if (thread) await thread.terminate();
}

/**
 * A Trainer (engines/trainer.ts) that lives on this process's trainer thread: the same operations,
 * all asynchronous; train steps take the run's algorithm config instead of a loss object.
 */
export class RemoteTrainer {
  private stepCount: number;

  private constructor(
    readonly model: ModelConfig,
    private readonly thread: TrainerThread,
    private readonly handle: number,
    step: number,
  ) {
    this.stepCount = step;
  }

  /**
   * Creates a trainer on the thread (started for `device` on first use). The weights are copied
   * (the caller keeps its arrays), in parts of at most STAGE_BYTES: copying a message is synchronous
   * on the sending side, and half a gigabyte at once would stall this thread's event loop.
   */
  static async create(options: TrainerOptions, device: Device = { kind: 'cpu' }): Promise<RemoteTrainer> {
    const thread = threadFor(device, options.model);
    await thread.ready;
    const handle = thread.newHandle();
    const { weights, ...rest } = options;
    let part: PolicyWeights = {};
    let bytes = 0;
    const send = async () => {
      if (bytes === 0) return;
      await thread.call(handle, 'stageWeights', [part]);
      part = {};
      bytes = 0;
    };
    for (const [name, w] of Object.entries(weights ?? {})) {
      if (bytes > 0 && bytes + w.byteLength > STAGE_BYTES) await send();
      part[name] = w;
      bytes += w.byteLength;
    }
    await send();
    const { step } = await thread.call(handle, 'create', [rest]);
    return new RemoteTrainer(options.model, thread, handle, step);
  }

  /** Optimizer steps applied so far (as of the last step or import). */
  get step(): number {
    return this.stepCount;
  }

  /** Whether the thread holding this trainer has ended (the trainer is then gone). */
  get lost(): boolean {
    return this.thread.exited !== undefined;
  }

  async trainStep(sequences: readonly TrainSequence[], algorithm: Algorithm, options: TrainStepOptions = {}): Promise<TrainStepMetrics> {
    const metrics = await this.thread.call(this.handle, 'trainStep', [sequences, algorithm, options]);
    this.stepCount = metrics.step;
    return metrics;
  }

  logprobs(sequences: ReadonlyArray<ScoredSequence>, options: { microBatchSize?: number } = {}): Promise<Float32Array[]> {
    return this.thread.call(this.handle, 'logprobs', [sequences, options]);
  }

  /** The value head's V(s_t) per target (Trainer.values; PPO with a critic). */
  values(sequences: ReadonlyArray<ScoredSequence>, options: { microBatchSize?: number } = {}): Promise<Float32Array[]> {
    return this.thread.call(this.handle, 'values', [sequences, options]);
  }

  exportWeights(): Promise<PolicyWeights> {
    return this.thread.call(this.handle, 'exportWeights', []);
  }

  loadWeights(weights: PolicyWeights): Promise<void> {
    return this.thread.call(this.handle, 'loadWeights', [weights]);
  }

  exportOptimizerState(): Promise<Uint8Array> {
    return this.thread.call(this.handle, 'exportOptimizerState', []);
  }

  async importOptimizerState(bytes: Uint8Array): Promise<void> {
    this.stepCount = (await this.thread.call(this.handle, 'importOptimizerState', [bytes])).step;
  }

  setLearningRate(lr: number, schedule: LrSchedule, valueHeadLr?: number): Promise<void> {
    return this.thread.call(this.handle, 'setLearningRate', [lr, schedule, valueHeadLr]);
  }

  /** Frees the trainer's tensors on the thread (a lost trainer has none left). */
  async dispose(): Promise<void> {
    if (this.lost) return;
    await this.thread.call(this.handle, 'dispose', []).catch((err: Error) => {
      if (!(err instanceof TrainerThreadExitedError)) throw err;
    });
  }
}
