// Train throughput on every tfjs backend that loads in this process (the engines bench's side-by-
// side figure): wasm always, native TensorFlow where `npm run setup` built it. Each backend gets
// its own trainer from the same seed and the same batch; the backends take turns over a few rounds
// so a burst of load from a neighbour lands on all of them, and each backend's median is compared
// with its own square-matmul roofline.
import * as tf from '@tensorflow/tfjs';
import { loadNativeBackend, loadWasmBackend } from '../engines/backends';
import type { Device } from '../engines/device';
import type { Trainer, TrainSequence } from '../engines/trainer';
import { seededRandom } from '../config/seeds';
import { policyLoss } from '../training/losses';
import { median, timeCalls } from './measure';

export interface BackendTrain {
  package: string;
  tokensPerS: number;
  stepMs: number;
  steps: number;
  rooflineGflops: Record<string, number>;
  /** tokens/s x FLOPs per token / the backend's best roofline GFLOP/s. */
  fractionOfRoofline: number;
}

const ROUNDS = 3;

/** An n x n matrix of uniform values in [-0.5, 0.5) from `seed` (the rooflines' operands). */
export function randomMatrix(n: number, seed: number): Float32Array {
  const rand = seededRandom(seed);
  return Float32Array.from({ length: n * n }, () => rand() - 0.5);
}

/** tf.matMul's GFLOP/s on the current tfjs backend (2 n^3 FLOPs per call); dataSync forces the result, as training's reads do. */
export async function tfjsMatmulGflops(n: number, minMs: number, minCalls = 5): Promise<number> {
  const a = tf.tensor2d(randomMatrix(n, 1), [n, n]);
  const b = tf.tensor2d(randomMatrix(n, 2), [n, n]);
  try {
    const timing = await timeCalls(
      () => {
        const c = tf.matMul(a, b);
        c.dataSync();
        c.dispose();
      },
      { minCalls, minMs },
    );
    return (2 * n ** 3) / (timing.medianMs * 1e6);
  } finally {
    tf.dispose([a, b]);
  }
}

/** The tfjs backends that load here, by tfjs name ('wasm', 'tensorflow'), with their packages. */
async function loadableBackends(device: Device): Promise<Array<{ name: string; package: string }>> {
  const found = [await loadWasmBackend()];
  const native = await loadNativeBackend(device);
  if ('backend' in native) found.push(native);
  return found.map((b) => ({ name: b.backend, package: b.package }));
}

/**
 * PPO train steps on `batch` on each loadable backend; `current` (the backend the caller uses)
 * is current again on return.
 */
export async function trainOnEveryBackend(
  device: Device,
  current: string,
  batch: TrainSequence[],
  createTrainer: () => Trainer,
  options: { minMs: number; rooflineSizes: number[]; flopsPerToken: number; log: (line: string) => void },
): Promise<Record<string, BackendTrain>> {
  const loss = policyLoss({ algorithm: 'ppo' });
  const tokens = batch.reduce((n, s) => n + s.tokens.length, 0);
  const backends = await loadableBackends(device);
  const runs = [];
  try {
    for (const b of backends) {
      await tf.setBackend(b.name);
      const rooflineGflops: Record<string, number> = {};
      for (const n of options.rooflineSizes) rooflineGflops[n] = await tfjsMatmulGflops(n, options.minMs / 2);
      const trainer = createTrainer();
      await trainer.trainStep(batch, loss); // warmup: kernels, allocations
      runs.push({ ...b, trainer, rooflineGflops, timesMs: [] as number[] });
    }
    for (let round = 0; round < ROUNDS; round++) {
      for (const r of runs) {
        await tf.setBackend(r.name);
        const timing = await timeCalls(() => r.trainer.trainStep(batch, loss), { warmup: 0, minCalls: 1, minMs: options.minMs / ROUNDS });
        r.timesMs.push(...timing.timesMs);
      }
    }
    const out: Record<string, BackendTrain> = {};
    for (const r of runs) {
      const stepMs = median(r.timesMs);
      const tokensPerS = tokens / (stepMs / 1000);
      const peak = Math.max(...Object.values(r.rooflineGflops));
      out[r.name] = { package: r.package, tokensPerS, stepMs, steps: r.timesMs.length, rooflineGflops: r.rooflineGflops, fractionOfRoofline: (tokensPerS * options.flopsPerToken) / 1e9 / peak };
      options.log(`train on tfjs ${r.name} (${r.package}): ${tokensPerS.toFixed(0)} tokens/s, ${stepMs.toFixed(1)} ms/step (median of ${r.timesMs.length}); matmul roofline ${Object.entries(r.rooflineGflops).map(([n, g]) => `${n}: ${g.toFixed(1)}`).join(', ')} GFLOP/s`);
    }
    return out;
  } finally {
    for (const r of runs) {
      await tf.setBackend(r.name);
      r.trainer.dispose();
    }
    await tf.setBackend(current);
  }
}
