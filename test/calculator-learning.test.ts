// Tool-use RL, the fast version CI runs (`relax bench calculator` is the full one): from a warm
// start that calls the calculator on about half of the held-out prompts, a few GRPO steps on the
// calculator environment raise both the tool-use rate and the final-answer accuracy.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { loadTfjsBackend } from '../engines/backends';
import { calculatorConfig, calculatorWarmStart } from '../training/warm-start';
import { runInProcess } from '../training/in-process';

test('GRPO on the calculator environment raises tool use and final-answer accuracy', async (t) => {
  await loadTfjsBackend({ kind: 'cpu' });
  const config = calculatorConfig({ steps: 10, promptsPerStep: 32 });
  const warm = await calculatorWarmStart(config, 150);
  const result = await runInProcess(config, warm.weights, { evalEvery: 10 });
  const last = result.curve[result.curve.length - 1];
  const toolUse = last.evalMetrics?.tool_use ?? 0;
  t.diagnostic(`accuracy ${warm.accuracy} -> ${result.finalAccuracy}, tool use ${warm.toolUse} -> ${toolUse}`);
  assert.ok(toolUse >= warm.toolUse + 0.2, `tool use rose by at least 0.2: ${warm.toolUse} -> ${toolUse}`);
  assert.ok(result.finalAccuracy >= warm.accuracy + 0.2, `accuracy rose by at least 0.2: ${warm.accuracy} -> ${result.finalAccuracy}`);
});
