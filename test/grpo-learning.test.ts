// GRPO really learns: from an SFT warm start, a short GRPO run on add2 raises held-out greedy
// accuracy clearly. (The full run to >= 95% is `relax bench grpo`; this is its fast CI version.)
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { parseRunConfig } from '../config/run-config';
import { loadTfjsBackend } from '../engines/backends';
import { runLocalGrpo } from '../training/local-run';
import { ADD2_GRPO } from '../training/recipes';
import { loadOrTrainWarmStart } from '../training/warm-start';

test('GRPO from an SFT warm start raises add2 held-out accuracy', async (t) => {
  await loadTfjsBackend({ kind: 'cpu' });
  const cache = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-warm-'));
  try {
    const config = parseRunConfig({
      ...ADD2_GRPO,
      rollout: { ...ADD2_GRPO.rollout, prompts_per_step: 64 },
      train: { ...ADD2_GRPO.train, steps: 60 },
    });
    const warm = await loadOrTrainWarmStart(config, { lr: 3e-3, batchSize: 64, maxSteps: 2000, evalEvery: 10, band: [0.2, 0.6] }, cache);
    assert.ok(warm.accuracy >= 0.2 && warm.accuracy <= 0.6, `warm start accuracy ${warm.accuracy} outside [0.2, 0.6]`);

    // The cache returns the identical checkpoint the second time.
    const again = await loadOrTrainWarmStart(config, { lr: 3e-3, batchSize: 64, maxSteps: 2000, evalEvery: 10, band: [0.2, 0.6] }, cache);
    assert.equal(again.cached, true);
    for (const [name, w] of Object.entries(warm.weights)) assert.deepEqual(again.weights[name], w, `cached ${name}`);

    const result = await runLocalGrpo(config, warm.weights, { evalEvery: 20 });
    assert.equal(result.initialAccuracy, warm.accuracy, 'the run starts from the warm start');
    const rewards = result.curve.map((r) => r.rewardMean);
    const firstTen = rewards.slice(0, 10).reduce((a, b) => a + b, 0) / 10;
    const lastTen = rewards.slice(-10).reduce((a, b) => a + b, 0) / 10;
    t.diagnostic(`held-out accuracy ${result.initialAccuracy} -> ${result.finalAccuracy} in ${result.curve.length} GRPO steps; mean reward ${firstTen.toFixed(3)} -> ${lastTen.toFixed(3)}`);
    assert.ok(result.finalAccuracy >= result.initialAccuracy + 0.1, `held-out accuracy ${result.initialAccuracy} -> ${result.finalAccuracy}: expected a rise of at least 10 points`);
    assert.ok(lastTen > firstTen + 0.05, `mean reward of the first ten steps ${firstTen.toFixed(3)} vs last ten ${lastTen.toFixed(3)}`);
  } finally {
    fs.rmSync(cache, { recursive: true, force: true });
  }
});
