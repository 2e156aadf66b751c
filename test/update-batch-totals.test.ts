// computeUpdate passes the trainer the whole batch's totals (zero-advantage samples counted) and
// leaves those samples out of the step unless the loss gives them a gradient (KL or entropy term).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseRunConfig } from '../config/run-config';
import type { BatchTotals } from '../engines/rl/losses';
import type { TrainSequence, TrainStepMetrics } from '../engines/trainer';
import type { TrainSample } from '../training/sample-buffer';
import { computeUpdate, resolveUpdateRule, stepBatchTotals } from '../training/step';

function sample(sampleIndex: number, responseLength: number, lossMask?: number[]): TrainSample {
  return {
    iteration: 0,
    groupIndex: 0,
    sampleIndex,
    promptTokens: [1, 2, 3],
    responseTokens: Array.from({ length: responseLength }, (_, t) => 4 + t),
    lossMask: lossMask ?? Array.from({ length: responseLength }, () => 1),
    rolloutLogprobs: Array.from({ length: responseLength }, () => -1),
    refLogprobs: null,
    tokenVersions: null,
    policyVersion: 0,
    reward: sampleIndex,
  };
}

const METRICS: TrainStepMetrics = { loss: 0, gradNorm: 0, gradClipped: false, lr: 0, step: 1, sequences: 0, lossTokens: 0, entropy: 0, lossMetrics: {}, microBatches: 1, paddedTokens: 0, durationMs: 0 };

test('computeUpdate with TRL\'s names: zero-advantage samples counted in the batch totals, trained on only with a KL or entropy term; the earlier names keep their denominators', async () => {
  const samples = [sample(0, 5), sample(1, 2), sample(2, 4, [1, 1, 0, 1])];
  const advantages = [1, -1, 0];
  const expected: BatchTotals = { sequences: 3, lossTokens: 5 + 2 + 3, maxCompletionTokens: 6 };
  assert.deepEqual(stepBatchTotals(samples, 0, undefined, 6), expected);
  for (const [algorithm, trained] of [[{}, 2], [{ kl_coef: 0.1 }, 3], [{ entropy_coef: 0.01 }, 3], [{ kl_coef: 0.1, kl_mode: 'reward' }, 2]] as const) {
    const config = parseRunConfig({ algorithm: { ...algorithm, loss_aggregation: 'dapo' }, rollout: { max_new_tokens: 6 } });
    const rule = await resolveUpdateRule(config.algorithm, { maxCompletionTokens: config.rollout.max_new_tokens });
    const seen: Array<{ sequences: readonly TrainSequence[]; batch: BatchTotals | undefined }> = [];
    const metrics = await computeUpdate(async (sequences, _rule, batch) => (seen.push({ sequences, batch }), METRICS), rule, samples, advantages, 0);
    assert.equal(seen.length, 1);
    assert.equal(seen[0].sequences.length, trained, JSON.stringify(algorithm));
    assert.equal(metrics.trained_samples, trained);
    assert.deepEqual(seen[0].batch, expected, 'the totals count every sample');
  }
  // token_mean (the default): the trainer normalizes over the samples it is given, those with a signal, as before.
  const earlier = await resolveUpdateRule(parseRunConfig({ algorithm: { kl_coef: 0.1 } }).algorithm);
  const seen: Array<BatchTotals | undefined> = [];
  const metrics = await computeUpdate(async (_sequences, _rule, batch) => (seen.push(batch), METRICS), earlier, samples, advantages, 0);
  assert.deepEqual(seen, [undefined]);
  assert.equal(metrics.trained_samples, 2);
  // No signal at all: no update, whatever the loss.
  const rule = await resolveUpdateRule(parseRunConfig({ algorithm: { kl_coef: 0.1 } }).algorithm);
  assert.deepEqual(await computeUpdate(async () => assert.fail('no step without a learning signal'), rule, samples, [0, 0, 0], 0), { trained_samples: 0 });
});
