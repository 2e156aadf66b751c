// A data-parallel rank (training/data-parallel.ts) in a worker thread of its own: its own tfjs
// backend and Trainer, so the ranks of a simulated step run side by side, and gradients and weights
// cross between them as host arrays (on GPUs they would stay in device memory, docs/scaling.md).
// The loss is sent as a description (RankLoss), losses being functions; gradients come back by
// transfer, the reduced gradient goes in by copy.
import path from 'node:path';
import { Worker } from 'node:worker_threads';
import type { Device } from '../engines/device';
import type { PolicyWeights } from '../engines/model';
import type { TrainerOptions, TrainSequence, TrainStepOptions } from '../engines/trainer';
import type { DataParallelRank, ShardGradients } from './data-parallel';
import type { PolicyLossOptions } from './losses';
import type { ThreadReply } from './thread-requests';

/** The step's loss, as the rank's thread builds it (training/losses.ts sftLoss / policyLoss). */
export type RankLoss = { kind: 'sft' } | { kind: 'policy'; options: PolicyLossOptions };

/** The operations a rank's thread serves, with their arguments and results. */
export interface RankOps {
  create: { args: [options: TrainerOptions, loss: RankLoss]; result: void };
  gradients: { args: [sequences: readonly TrainSequence[], options: TrainStepOptions]; result: ShardGradients };
  applyGradients: { args: [gradients: PolicyWeights]; result: { gradNorm: number; lr: number; step: number } };
  exportWeights: { args: []; result: PolicyWeights };
}
export type RankOp = keyof RankOps;
export type RankRequest = { id: number; op: RankOp; args: unknown[] };
export type RankReply = ThreadReply;

/** A rank on a worker thread; `close` ends the thread. */
export class ThreadRank implements DataParallelRank {
  private nextId = 1;
  private readonly pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();

  private constructor(private readonly worker: Worker) {
    worker.on('message', (reply: RankReply) => {
      const call = this.pending.get(reply.id);
      if (!call) return;
      this.pending.delete(reply.id);
      if (reply.ok) call.resolve(reply.value);
      else call.reject(Object.assign(new Error(reply.error.message), { name: reply.error.name }));
    });
    const fail = (why: string) => {
      for (const call of this.pending.values()) call.reject(new Error(`the rank's thread ended (${why})`));
      this.pending.clear();
    };
    worker.on('error', (err) => fail(err.message));
    worker.on('exit', (code) => fail(`exit code ${code}`));
  }

  /** Starts a thread on `device`, loads its backend and creates its trainer (weights copied in). */
  static async start(options: TrainerOptions, loss: RankLoss, device: Device = { kind: 'cpu' }): Promise<ThreadRank> {
    const rank = new ThreadRank(new Worker(path.join(__dirname, 'data-parallel-rank-entry.js'), { workerData: { device } }));
    try {
      await rank.call('create', [options, loss]);
    } catch (err) {
      await rank.close();
      throw err;
    }
    return rank;
  }

  private call<K extends RankOp>(op: K, args: RankOps[K]['args']): Promise<RankOps[K]['result']> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.worker.postMessage({ id, op, args } satisfies RankRequest);
    });
  }

  gradients(sequences: readonly TrainSequence[], options: TrainStepOptions): Promise<ShardGradients> {
    return this.call('gradients', [sequences, options]);
  }

  applyGradients(gradients: PolicyWeights): Promise<{ gradNorm: number; lr: number; step: number }> {
    return this.call('applyGradients', [gradients]);
  }

  exportWeights(): Promise<PolicyWeights> {
    return this.call('exportWeights', []);
  }

  async close(): Promise<void> {
    await this.worker.terminate();
  }
}
