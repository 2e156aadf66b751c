// `relax bench grpo`: GRPO on add2 from the SFT warm start, in one process over the engine library.
// Shows the held-out accuracy curve and the wall time; the curve is also saved as JSON.
import fs from 'node:fs';
import path from 'node:path';
import { plot } from 'asciichart';
import { parseRunConfig, type RunConfigInput } from '../config/run-config';
import { loadTfjsBackend } from '../engines/backends';
import { runInProcess } from '../training/in-process';
import { ADD2_GRPO, ADD2_SFT } from '../training/recipes';
import { loadOrTrainWarmStart } from '../training/warm-start';
import { relaxEnvironment } from '../config/environment';
import type { Bench } from './index';

export const grpoBench: Bench = async (ctx) => {
  const overrides: RunConfigInput = ctx.options.steps ? { train: { ...ADD2_GRPO.train, steps: Number(ctx.options.steps) } } : {};
  const config = parseRunConfig({ ...ADD2_GRPO, ...overrides });
  const backend = await loadTfjsBackend({ kind: 'cpu' });
  const home = relaxEnvironment().home;
  const warm = await loadOrTrainWarmStart(config, ADD2_SFT, path.join(home, 'warm-starts'), ctx.log);

  const result = await runInProcess(config, warm.weights, {
    onStep: (r) => {
      if (r.accuracy !== undefined) {
        ctx.log(`[grpo] step ${String(r.step).padStart(4)}: reward ${r.rewardMean.toFixed(3)}, held-out accuracy ${(r.accuracy * 100).toFixed(1)}%, ${r.stepMs.toFixed(0)} ms/step`);
      }
    },
  });
  const curve = [{ step: 0, accuracy: result.initialAccuracy }, ...result.curve.filter((r) => r.accuracy !== undefined).map((r) => ({ step: r.step, accuracy: r.accuracy as number }))];
  ctx.log('');
  ctx.log('held-out greedy accuracy (%) by evaluation, GRPO from the SFT warm start:');
  ctx.log(plot(curve.map((p) => p.accuracy * 100), { height: 12, format: (x: number) => x.toFixed(0).padStart(5) }));
  const firstAbove = (threshold: number) => curve.find((p) => p.accuracy >= threshold);

  const summary = {
    task: config.task,
    backend: backend.backend,
    sft_steps: warm.sftSteps,
    sft_accuracy: warm.accuracy,
    sft_wall_s: warm.sftWallS,
    sft_cached: warm.cached,
    grpo_steps: config.train.steps,
    samples_per_step: config.rollout.prompts_per_step * config.algorithm.group_size,
    initial_accuracy: result.initialAccuracy,
    final_accuracy: result.finalAccuracy,
    best_accuracy: Math.max(...curve.map((p) => p.accuracy)),
    first_step_at_90: firstAbove(0.9)?.step ?? null,
    first_step_at_95: firstAbove(0.95)?.step ?? null,
    grpo_wall_s: result.wallS,
    curve,
  };
  const out = path.join(home, 'results', `grpo-add2-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
  fs.mkdirSync(path.dirname(out), { recursive: true });
  fs.writeFileSync(out, `${JSON.stringify({ ...summary, config, steps: result.curve }, null, 2)}\n`);
  ctx.log(`curve and per-step metrics saved to ${out}`);
  return { ...summary, saved_to: out };
};
