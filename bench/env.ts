// `relax bench env`: RL on a multi-turn environment, in process over the engine library; prints the
// held-out success rate and the environment's own metrics (tool-use rate, turns) as curves.
//   --set task=calculator     (default) tool use: a warm start that rarely calls the calculator,
//                             then GRPO, which has to discover that calling it pays
//   --set task=guess-number   from a random policy; also gridworld, or a task module path
// Other options: steps=N, sft_steps=N (calculator).
import fs from 'node:fs';
import path from 'node:path';
import { plot } from 'asciichart';
import { parseRunConfig } from '../config/run-config';
import { loadTfjsBackend } from '../engines/backends';
import { initWeights, type PolicyWeights } from '../engines/model';
import { RolloutEngine } from '../engines/rollout';
import { loadTask } from '../envs/registry';
import { calculatorConfig, calculatorWarmStart } from '../training/warm-start';
import { evaluateGreedy } from '../rollout/evaluate';
import { runInProcess } from '../training/in-process';
import { policyModelConfig } from '../training/options';
import type { Bench } from './index';

const EXAMPLES = path.resolve(__dirname, '..', '..', 'examples');

export const envBench: Bench = async (ctx) => {
  const taskName = ctx.options.task ?? 'calculator';
  await loadTfjsBackend({ kind: 'cpu' });
  let config;
  let weights: PolicyWeights;
  const t0 = performance.now();
  if (taskName === 'calculator') {
    config = calculatorConfig({ ...(ctx.options.steps ? { steps: Number(ctx.options.steps) } : {}) });
    weights = (await calculatorWarmStart(config, Number(ctx.options.sft_steps ?? 300))).weights;
  } else {
    // The example config of a built-in task (examples/<task>.json) or of a task module (by file name).
    const example = path.join(EXAMPLES, `${path.basename(taskName).replace(/\.[cm]?js$/, '')}.json`);
    const base = fs.existsSync(example) ? JSON.parse(fs.readFileSync(example, 'utf8')) : { task: taskName, model: { context_length: 32 } };
    config = parseRunConfig({ ...base, task: taskName, train: { ...base.train, ...(ctx.options.steps ? { steps: Number(ctx.options.steps) } : {}) } });
    const task = await loadTask(config.task);
    weights = initWeights(policyModelConfig(config.model, task.tokenizer().vocabSize), config.seed);
  }
  const task = await loadTask(config.task);
  if (!task.interaction) throw new Error(`task ${JSON.stringify(taskName)} is single-turn: relax bench env is for multi-turn tasks (relax bench grpo runs add2)`);
  const warmWallS = (performance.now() - t0) / 1000;
  const engine = await RolloutEngine.create(policyModelConfig(config.model, task.tokenizer().vocabSize), { intraOpNumThreads: 1 });
  engine.setWeights(0, weights);
  const initial = await evaluateGreedy(engine, task, task.heldOut(), config.rollout.max_new_tokens);
  await engine.release();
  type Point = { step: number; success: number; metrics: Record<string, number> };
  const curve: Point[] = [{ step: 0, success: initial.accuracy, metrics: initial.metrics ?? {} }];
  const describe = (p: Point) => Object.entries(p.metrics).filter(([k]) => k !== 'success').map(([k, v]) => `${k} ${v.toFixed(2)}`).join(', ');
  ctx.log(`[bench] ${taskName}: start (${warmWallS.toFixed(0)} s to prepare): success ${(initial.accuracy * 100).toFixed(1)}%, ${describe(curve[0])}`);
  const result = await runInProcess(config, weights, {
    evalEvery: config.train.eval_every,
    onStep: (r) => {
      if (r.accuracy === undefined) return;
      const p = { step: r.step, success: r.accuracy, metrics: r.evalMetrics ?? {} };
      curve.push(p);
      ctx.log(`[bench] step ${r.step}: success ${(r.accuracy * 100).toFixed(1)}%, ${describe(p)}, train reward ${r.rewardMean.toFixed(3)}`);
    },
  });
  ctx.log('held-out success (%):');
  ctx.log(plot(curve.map((p) => p.success * 100), { height: 8, format: (x: number) => x.toFixed(0).padStart(5) }));
  for (const key of Object.keys(curve[0].metrics).filter((k) => k !== 'success' && k !== 'reward')) {
    ctx.log(`${key}:`);
    ctx.log(plot(curve.map((p) => p.metrics[key] ?? 0), { height: 6, format: (x: number) => x.toFixed(2).padStart(6) }));
  }
  const last = curve[curve.length - 1];
  return {
    bench: 'env',
    task: taskName,
    grpo_steps: config.train.steps,
    samples_per_step: config.rollout.prompts_per_step * config.algorithm.group_size,
    initial_success: initial.accuracy,
    final_success: last.success,
    initial_metrics: curve[0].metrics,
    final_metrics: last.metrics,
    grpo_wall_s: result.wallS,
    curve,
  };
};
