const path = require('path');
const D = path.join(__dirname, 'dist');
const { parseRunConfig } = require(D + '/config/run-config.js');
const { AUDIO_GRPO } = require(D + '/config/recipes.js');
const { loadOrTrainWarmStart } = require(D + '/training/warm-start.js');
const { loadTfjsBackend } = require(D + '/engines/backends.js');
(async () => {
  await loadTfjsBackend({ kind: 'cpu' });
  const lr = Number(process.argv[2]);
  const t = Date.now();
  const w = await loadOrTrainWarmStart(parseRunConfig(AUDIO_GRPO), { lr, batchSize: 64, maxSteps: 3000, evalEvery: 5, band: [0.45, 0.6], target: 0.53 }, '/tmp/exp/audio-cache-' + lr, (l) => console.log(l));
  console.log(JSON.stringify({ lr, steps: w.sftSteps, acc: w.accuracy, s: (Date.now() - t) / 1000 }));
})();
