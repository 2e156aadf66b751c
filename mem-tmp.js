const tf = require('@tensorflow/tfjs');
const { loadTfjsBackend } = require('./dist/engines/backends');
const { loadHfModel } = require('./dist/engines/hf-checkpoint');
const { Trainer } = require('./dist/engines/trainer');
const { policyLoss } = require('./dist/training/losses');
(async () => {
  await loadTfjsBackend({ kind: 'cpu' });
  const m = await loadHfModel('.relax/models/smollm2-135m-instruct', { contextLength: 256 });
  const cfg = { ...m.config, lora: { rank: 16, alpha: 32, targets: ['q','k','v','o','gate','up','down'] } };
  const tr = Trainer.create({ model: cfg, weights: m.weights, seed: 1, optimizer: { lr: 5e-4 }, microBatchSize: 1 });
  const mem = () => { const b = tf.backend(); return `tensors ${tf.memory().numTensors} bytes ${(tf.memory().numBytes/2**20).toFixed(0)}MiB heap ${(b.wasm.HEAPU8.length/2**20).toFixed(0)}MiB`; };
  console.log('after create', mem());
  const mk = (n, i) => { const tokens = Array.from({ length: n }, (_, j) => (i * 31 + j * 7) % 49000 + 10); return { tokens, lossMask: Array.from({ length: n - 1 }, (_, j) => (j >= n-25 ? 1 : 0)), oldLogprobs: Array(n - 1).fill(-3), advantages: i % 2 ? 1 : -1 }; };
  for (const [count, n] of [[1, 30], [1, 70], [2, 70], [4, 70]]) { const t0 = Date.now(); await tr.trainStep(Array.from({length: count}, (_, i) => mk(n, i)), policyLoss({ algorithm: 'ppo' })); console.log(count, 'x', n, Date.now() - t0, 'ms', mem()); }
})().catch(e => console.log('ERR', e.message));
