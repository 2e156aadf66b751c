// The trainer thread's side of training/trainer-thread.ts: loads the best tfjs backend for the
// device, then serves one request at a time on the Trainers it holds by handle. Replies carry
// results (big arrays by transfer) or the error's name and message.
import { parentPort, workerData } from 'node:worker_threads';
import { loadTfjsBackend } from '../engines/backends';
import type { Device } from '../engines/device';
import type { PolicyWeights } from '../engines/model';
import { Trainer, type TrainerOptions, type TrainingLoss } from '../engines/trainer';
import { resolvePolicyLoss } from './losses';
import type { Algorithm, TrainerRequest } from './trainer-thread';
import { serveInOrder } from './thread-requests';

const port = parentPort;
if (!port) throw new Error('training/trainer-thread-entry.js runs as a worker thread (training/trainer-thread.ts starts it)');

const trainers = new Map<number, Trainer>();
/** Initial weights received for a trainer not created yet, by handle. */
const staged = new Map<number, PolicyWeights>();
const losses = new Map<string, Promise<TrainingLoss>>();

function lossOf(algorithm: Algorithm): Promise<TrainingLoss> {
  const key = JSON.stringify(algorithm);
  let loss = losses.get(key);
  if (!loss) {
    loss = resolvePolicyLoss(algorithm);
    losses.set(key, loss);
    loss.catch(() => losses.delete(key));
  }
  return loss;
}

function trainerOf(handle: number): Trainer {
  const trainer = trainers.get(handle);
  if (!trainer) throw new Error(`trainer ${handle} does not exist on the trainer thread (disposed, or never created)`);
  return trainer;
}

async function handle(req: TrainerRequest): Promise<unknown> {
  const a = req.args as never[];
  switch (req.op) {
    case 'stageWeights':
      staged.set(req.handle, { ...staged.get(req.handle), ...(a[0] as PolicyWeights) });
      return undefined;
    case 'create': {
      const weights = staged.get(req.handle);
      staged.delete(req.handle);
      const trainer = Trainer.create({ ...(a[0] as TrainerOptions), ...(weights ? { weights } : {}) });
      trainers.set(req.handle, trainer);
      return { step: trainer.step };
    }
    case 'trainStep': {
      const trainer = trainerOf(req.handle);
      return trainer.trainStep(a[0], await lossOf(a[1]), a[2] ?? {});
    }
    case 'logprobs':
      return trainerOf(req.handle).logprobs(a[0], a[1]);
    case 'values':
      return trainerOf(req.handle).values(a[0], a[1]);
    case 'exportWeights':
      return trainerOf(req.handle).exportWeights();
    case 'loadWeights':
      return trainerOf(req.handle).loadWeights(a[0]);
    case 'exportOptimizerState':
      return trainerOf(req.handle).exportOptimizerState();
    case 'importOptimizerState': {
      const trainer = trainerOf(req.handle);
      trainer.importOptimizerState(a[0]);
      return { step: trainer.step };
    }
    case 'setLearningRate':
      return trainerOf(req.handle).setLearningRate(a[0], a[1], a[2]);
    case 'dispose':
      trainers.get(req.handle)?.dispose();
      trainers.delete(req.handle);
      return undefined;
  }
}

// One request at a time, in arrival order: the engine is busy anyway, and a trainer's operations
// must not interleave (a train step and an export of the same weights).
serveInOrder(port, handle);

void loadTfjsBackend((workerData as { device: Device }).device).then(
  (info) => port.postMessage({ ready: { backend: info.backend } }),
  (err: Error) => {
    throw err;
  },
);
