// The tfjs backend choice: native TensorFlow where `npm run setup` built it (on Linux x86-64), the
// wasm backend when it is forced or when the native one is absent or broken; and the same model
// trains to the same numbers on both.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as tf from '@tensorflow/tfjs';
import { loadNativeBackend, loadTfjsBackend, loadWasmBackend, nativeBindingBuilt, tfjsBackendChoice } from '../engines/backends';
import { Trainer } from '../engines/trainer';
import { policyLoss } from '../training/losses';
import { spawnRelax } from './helpers';

const cpu = { kind: 'cpu' } as const;
/** Setup builds the native backend on this platform unless told not to (RELAX_NATIVE_BACKEND=0). */
const nativeExpected = process.platform === 'linux' && process.arch === 'x64' && process.env.RELAX_NATIVE_BACKEND !== '0';

test('RELAX_TFJS_BACKEND: auto by default, native or wasm when set, a clear error otherwise', () => {
  assert.equal(tfjsBackendChoice({}), 'auto');
  assert.equal(tfjsBackendChoice({ RELAX_TFJS_BACKEND: 'WASM' }), 'wasm');
  assert.equal(tfjsBackendChoice({ RELAX_TFJS_BACKEND: 'native' }), 'native');
  assert.throws(() => tfjsBackendChoice({ RELAX_TFJS_BACKEND: 'gpu' }), /RELAX_TFJS_BACKEND: expected auto, native or wasm, got "gpu"/);
});

test('setup built the native CPU backend here, and auto loads it', { skip: !nativeExpected && 'no native route on this platform' }, async () => {
  assert.ok(nativeBindingBuilt('@tensorflow/tfjs-node'), 'npm run setup should have built @tensorflow/tfjs-node (scripts/native-backend.js)');
  const info = await loadTfjsBackend(cpu, 'auto');
  assert.deepEqual(info, { backend: 'tensorflow', package: '@tensorflow/tfjs-node' });
  assert.equal(tf.getBackend(), 'tensorflow');
});

test('a missing or broken native backend falls back to wasm with the reason; native-only then fails', async () => {
  const missing = await loadNativeBackend(cpu, ['@tensorflow/tfjs-node-missing']);
  assert.ok('error' in missing && /tfjs-node-missing: binding not built/.test(missing.error), JSON.stringify(missing));
  const info = await loadTfjsBackend(cpu, 'auto', ['@tensorflow/tfjs-node-missing']);
  assert.equal(info.backend, 'wasm');
  assert.match(info.fallbackReason ?? '', /binding not built/);
  assert.equal(tf.getBackend(), 'wasm');
  await assert.rejects(loadTfjsBackend(cpu, 'native', ['@tensorflow/tfjs-node-missing']), /RELAX_TFJS_BACKEND=native but no native backend loads/);
});

test('doctor reports the backend that loaded: native by default, wasm when forced', async () => {
  const run = async (env: NodeJS.ProcessEnv) => {
    const p = spawnRelax(['doctor'], { RELAX_HOME: '/nonexistent-relax-home', TEMPORAL_ADDRESS: '127.0.0.1:1', ...env });
    await p.exited;
    return p.output.join('\n');
  };
  const forced = await run({ RELAX_TFJS_BACKEND: 'wasm' });
  assert.match(forced, /^ok\s+tfjs backend\s+wasm \(@tensorflow\/tfjs-backend-wasm\); forced by RELAX_TFJS_BACKEND=wasm/m);
  if (nativeExpected) assert.match(await run({ RELAX_TFJS_BACKEND: 'auto' }), /^ok\s+tfjs backend\s+tensorflow \(native: @tensorflow\/tfjs-node 4\.\d+\.\d+, TensorFlow 2\.\d+/m);
});

test('the same PPO steps give the same losses and weights on wasm and on native TensorFlow', { skip: !nativeExpected && 'no native route on this platform' }, async () => {
  const model = { vocabSize: 11, dModel: 16, nLayers: 2, nHeads: 2, dFF: 32, contextLength: 12 };
  const batch = Array.from({ length: 6 }, (_, i) => {
    const tokens = Array.from({ length: 5 + (i % 4) }, (_, j) => (i * 3 + j * 5) % 11);
    const n = tokens.length - 1;
    return { tokens, lossMask: Array.from({ length: n }, (_, t) => (t >= 2 ? 1 : 0)), oldLogprobs: Array(n).fill(-2.4), advantages: i % 2 ? 1 : -1 };
  });
  const run = async (load: () => Promise<unknown>) => {
    await load();
    const trainer = Trainer.create({ model, seed: 3, optimizer: { lr: 1e-2 }, microBatchSize: 4 });
    try {
      const losses = [];
      for (let s = 0; s < 3; s++) losses.push((await trainer.trainStep(batch, policyLoss({ algorithm: 'ppo' }))).loss);
      return { losses, weights: await trainer.exportWeights() };
    } finally {
      trainer.dispose();
    }
  };
  const wasm = await run(loadWasmBackend);
  const native = await run(() => loadNativeBackend(cpu));
  assert.equal(tf.getBackend(), 'tensorflow');
  wasm.losses.forEach((l, i) => assert.ok(Math.abs(l - native.losses[i]) < 1e-4, `step ${i} loss: wasm ${l}, native ${native.losses[i]}`));
  let worst = 0;
  for (const [name, w] of Object.entries(wasm.weights)) w.forEach((x, i) => (worst = Math.max(worst, Math.abs(x - native.weights[name][i]))));
  assert.ok(worst < 1e-4, `max |wasm - native| weight after 3 steps: ${worst}`);
});
