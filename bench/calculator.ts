// `relax bench calculator`: tool-use RL. A warm start that rarely calls the calculator, then GRPO
// on the calculator environment; prints the held-out final-answer accuracy and tool-use rate curves.
import { plot } from 'asciichart';
import { loadTfjsBackend } from '../engines/backends';
import { calculatorConfig, calculatorWarmStart } from '../training/calculator-recipe';
import { runLocalGrpo } from '../training/local-run';
import type { Bench } from './index';

export const calculatorBench: Bench = async (ctx) => {
  const steps = Number(ctx.options.steps ?? 100);
  const sftSteps = Number(ctx.options.sft_steps ?? 300);
  const config = calculatorConfig({ steps });
  await loadTfjsBackend({ kind: 'cpu' });
  const t0 = performance.now();
  const warm = await calculatorWarmStart(config, sftSteps);
  const sftWallS = (performance.now() - t0) / 1000;
  ctx.log(`[bench] warm start (${sftSteps} SFT steps, ${sftWallS.toFixed(0)} s): accuracy ${(warm.accuracy * 100).toFixed(1)}%, tool use ${(warm.toolUse * 100).toFixed(1)}%`);
  const curve: Array<{ step: number; accuracy: number; tool_use: number; reward: number }> = [{ step: 0, accuracy: warm.accuracy, tool_use: warm.toolUse, reward: NaN }];
  const result = await runLocalGrpo(config, warm.weights, {
    evalEvery: config.train.eval_every,
    onStep: (r) => {
      if (r.accuracy === undefined) return;
      curve.push({ step: r.step, accuracy: r.accuracy, tool_use: r.evalMetrics?.tool_use ?? 0, reward: r.rewardMean });
      ctx.log(`[bench] step ${r.step}: accuracy ${(r.accuracy * 100).toFixed(1)}%, tool use ${((r.evalMetrics?.tool_use ?? 0) * 100).toFixed(1)}%, train reward ${r.rewardMean.toFixed(3)}`);
    },
  });
  ctx.log('held-out final-answer accuracy (%):');
  ctx.log(plot(curve.map((p) => p.accuracy * 100), { height: 8, format: (x: number) => x.toFixed(0).padStart(5) }));
  ctx.log('tool-use rate (%):');
  ctx.log(plot(curve.map((p) => p.tool_use * 100), { height: 8, format: (x: number) => x.toFixed(0).padStart(5) }));
  const last = curve[curve.length - 1];
  return {
    bench: 'calculator',
    sft_steps: sftSteps,
    grpo_steps: steps,
    samples_per_step: config.rollout.prompts_per_step * config.algorithm.group_size,
    initial_accuracy: warm.accuracy,
    initial_tool_use: warm.toolUse,
    final_accuracy: last.accuracy,
    final_tool_use: last.tool_use,
    grpo_wall_s: result.wallS,
    curve,
  };
};
