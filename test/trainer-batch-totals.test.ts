// The trainer's batch totals (TrainStepOptions.batch): a zero-advantage sequence left out of the
// step but counted in the totals gives the same loss and gradient as training on it, for every
// normalization and any micro-batching; without the totals dapo divides by fewer tokens.
import assert from 'node:assert/strict';
import { before, test } from 'node:test';
import { loadTfjsBackend } from '../engines/backends';
import { seededRandom } from '../config/seeds';
import { initWeights, TINY_MODEL, type ModelConfig } from '../engines/model';
import { batchTotals } from '../engines/rl/losses';
import { Trainer, type TrainSequence } from '../engines/trainer';
import { policyLoss } from '../training/losses';

const MODEL: ModelConfig = { ...TINY_MODEL, contextLength: 16 };

before(async () => {
  await loadTfjsBackend({ kind: 'cpu' });
});

function sequences(): TrainSequence[] {
  const rand = seededRandom(5);
  return [7, 4, 6].map((responseLength, i) => {
    const tokens = Array.from({ length: 3 + responseLength }, () => Math.floor(rand() * MODEL.vocabSize));
    const lossMask = tokens.slice(1).map((_, t) => (t >= 2 ? 1 : 0));
    return { tokens, lossMask, oldLogprobs: lossMask.map(() => -2.5), advantages: [1.2, -0.7, 0][i] };
  });
}

test('batch totals: the zero-advantage sequence counted but not run gives the loss and gradient of training on all three', async () => {
  const all = sequences();
  const signal = all.slice(0, 2);
  const totals = batchTotals(all.map((s) => s.lossMask), 8);
  const weights = initWeights(MODEL, 2);
  for (const aggregation of ['dapo', 'bnpo', 'grpo', 'dr_grpo'] as const) {
    const run = async (seqs: TrainSequence[], microBatchSize: number, batch?: typeof totals) => {
      const trainer = Trainer.create({ model: MODEL, weights, optimizer: { lr: 1e-3 }, maxGradNorm: Infinity, microBatchSize });
      try {
        return await trainer.trainStep(seqs, policyLoss({ algorithm: 'ppo', aggregation, maxCompletionTokens: 8 }), batch ? { batch } : {});
      } finally {
        trainer.dispose();
      }
    };
    const reference = await run(all, 3);
    for (const microBatchSize of [1, 2]) {
      const m = await run(signal, microBatchSize, totals);
      assert.ok(Math.abs(m.loss - reference.loss) < 1e-5, `${aggregation}, micro-batch ${microBatchSize}: loss ${m.loss} vs ${reference.loss}`);
      assert.ok(Math.abs(m.gradNorm / reference.gradNorm - 1) < 1e-4, `${aggregation}, micro-batch ${microBatchSize}: grad norm ${m.gradNorm} vs ${reference.gradNorm}`);
    }
    if (aggregation === 'dapo') {
      // Without the totals, dapo divides by the signal-carrying tokens only (7 + 4 of 7 + 4 + 6): 17 / 11 times larger.
      assert.equal(totals.lossTokens, 17);
      const unnormalized = await run(signal, 2);
      assert.ok(Math.abs(unnormalized.gradNorm / reference.gradNorm - 17 / 11) < 1e-3, `${unnormalized.gradNorm / reference.gradNorm}`);
    }
  }
  await assert.rejects(
    (async () => {
      const trainer = Trainer.create({ model: MODEL, weights, optimizer: { lr: 1e-3 } });
      try {
        await trainer.trainStep(all, policyLoss({ algorithm: 'ppo' }), { batch: { sequences: 1, lossTokens: 2 } });
      } finally {
        trainer.dispose();
      }
    })(),
    /batch totals .* are smaller than one micro-batch's/,
  );
});
