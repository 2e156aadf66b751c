// The thread side of training/data-parallel-thread.ts: loads the tfjs backend for its device, holds
// one Trainer and serves one request at a time (a rank's operations never interleave).
import { parentPort, workerData } from 'node:worker_threads';
import { loadTfjsBackend } from '../engines/backends';
import type { Device } from '../engines/device';
import type { PolicyWeights } from '../engines/model';
import { Trainer, type TrainerOptions, type TrainingLoss, type TrainSequence, type TrainStepOptions } from '../engines/trainer';
import { policyLoss, sftLoss } from './losses';
import type { RankLoss, RankRequest } from './data-parallel-thread';
import { serveInOrder } from './thread-requests';

const port = parentPort;
if (!port) throw new Error('training/data-parallel-rank-entry.js runs as a worker thread (training/data-parallel-thread.ts starts it)');

const backend = loadTfjsBackend((workerData as { device: Device }).device);
backend.catch(() => undefined); // reported by create, which awaits it
let held: { trainer: Trainer; loss: TrainingLoss } | undefined;

function rank(): { trainer: Trainer; loss: TrainingLoss } {
  if (!held) throw new Error('the rank has no trainer: create it first');
  return held;
}

async function handle(req: RankRequest): Promise<unknown> {
  const a = req.args as never[];
  switch (req.op) {
    case 'create': {
      await backend;
      const loss = a[1] as RankLoss;
      held = { trainer: Trainer.create(a[0] as TrainerOptions), loss: loss.kind === 'sft' ? sftLoss() : policyLoss(loss.options) };
      return undefined;
    }
    case 'gradients':
      return rank().trainer.gradients(a[0] as readonly TrainSequence[], rank().loss, a[1] as TrainStepOptions);
    case 'applyGradients':
      return rank().trainer.applyGradients(a[0] as PolicyWeights, rank().loss.name);
    case 'exportWeights':
      return rank().trainer.exportWeights();
  }
}

serveInOrder(port, handle);
