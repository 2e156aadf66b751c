// `relax bench grpo`: GRPO on add2 from the SFT warm start, in one process over the engine library.
// Shows the held-out accuracy curve, the wall time to 90% and 95% held-out accuracy, and saves the
// curve as JSON. `--set backend=wasm|native` picks the trainer's tfjs backend; `--set
// backends=wasm,native` runs the same seeds on each, one after the other in this process, and prints
// the ratio of their times to 95%. `--set steps=N` shortens the run; `--set seed=N` runs the recipe
// with another seed (its own warm start and sampling): the step at which a run first reaches 95%
// moves with the seed and the kernels' rounding (docs/results.md).
import fs from 'node:fs';
import path from 'node:path';
import { plot } from 'asciichart';
import { z } from 'zod';
import { parseRunConfig, type RunConfigInput } from '../config/run-config';
import { loadTfjsBackend, type TfjsBackendChoice } from '../engines/backends';
import { runInProcess, type InProcessResult } from '../training/in-process';
import { ADD2_GRPO } from '../config/recipes';
import { loadOrTrainWarmStart, ADD2_SFT } from '../training/warm-start';
import { relaxEnvironment } from '../config/environment';
import type { Bench } from './index';
import { median, round } from './measure';

const backendName = z.enum(['wasm', 'native']);
const optionsSchema = z
  .object({
    steps: z.coerce.number().int().min(1).optional(),
    seed: z.coerce.number().int().min(0).optional(),
    backend: backendName.optional(),
    backends: z
      .string()
      .transform((s) => s.split(',').map((x) => x.trim()))
      .pipe(z.array(backendName).min(1))
      .optional(),
  })
  .strict()
  .refine((o) => !(o.backend && o.backends), { message: 'give backend or backends, not both' });

function parseOptions(raw: Record<string, string>): z.output<typeof optionsSchema> {
  const r = optionsSchema.safeParse(raw);
  if (r.success) return r.data;
  const problems = r.error.issues.map((i) =>
    i.code === 'unrecognized_keys' ? `unknown option ${i.keys.join(', ')} (known: steps, seed, backend, backends)` : `${i.path.join('.') || 'options'}: ${i.message}`,
  );
  throw new Error(`bench grpo --set: ${problems.join('; ')} (backend and backends take wasm and native)`);
}

interface BackendRun {
  /** The tfjs backend that trained: 'tensorflow' (native) or 'wasm'. */
  tfjs: string;
  result: InProcessResult;
  curve: Array<{ step: number; accuracy: number; elapsed_s: number }>;
}

const firstAt = (curve: BackendRun['curve'], threshold: number) => curve.find((q) => q.accuracy >= threshold);
/** Wall seconds (since the run started) at the first evaluation at or above `threshold`, or null. */
const timeTo = (curve: BackendRun['curve'], threshold: number) => {
  const p = firstAt(curve, threshold);
  return p ? round(p.elapsed_s) : null;
};
const firstStepAt = (curve: BackendRun['curve'], threshold: number) => firstAt(curve, threshold)?.step ?? null;

export const grpoBench: Bench = async (ctx) => {
  const options = parseOptions(ctx.options);
  const overrides: RunConfigInput = options.steps ? { train: { ...ADD2_GRPO.train, steps: options.steps, warmup_steps: Math.min(ADD2_GRPO.train?.warmup_steps ?? 0, options.steps) } } : {};
  const config = parseRunConfig({ ...ADD2_GRPO, ...overrides, ...(options.seed !== undefined ? { seed: options.seed } : {}) });
  const choices: TfjsBackendChoice[] = options.backends ?? [options.backend ?? 'auto'];
  const home = relaxEnvironment().home;
  // One warm start for every backend (cached on disk after the first run), so the runs differ only in the trainer.
  await loadTfjsBackend({ kind: 'cpu' }, choices[0]);
  const warm = await loadOrTrainWarmStart(config, ADD2_SFT, path.join(home, 'warm-starts'), ctx.log);

  const runs = new Map<string, BackendRun>();
  for (const choice of choices) {
    const backend = await loadTfjsBackend({ kind: 'cpu' }, choice);
    const label = choice === 'auto' ? (backend.backend === 'wasm' ? 'wasm' : 'native') : choice;
    ctx.log(`[grpo] ${label}: tfjs backend ${backend.backend} (${backend.package})`);
    const result = await runInProcess(config, warm.weights, {
      onStep: (r) => {
        if (r.accuracy !== undefined) {
          ctx.log(`[grpo ${label}] step ${String(r.step).padStart(4)}: reward ${r.rewardMean.toFixed(3)}, held-out accuracy ${(r.accuracy * 100).toFixed(1)}%, ${r.stepMs.toFixed(0)} ms/step, ${r.elapsedS.toFixed(1)} s`);
        }
      },
    });
    const curve = [{ step: 0, accuracy: result.initialAccuracy, elapsed_s: 0 }, ...result.curve.filter((r) => r.accuracy !== undefined).map((r) => ({ step: r.step, accuracy: r.accuracy as number, elapsed_s: round(r.elapsedS) }))];
    runs.set(label, { tfjs: backend.backend, result, curve });
    ctx.log('');
    ctx.log(`held-out greedy accuracy (%) by evaluation, GRPO from the SFT warm start (${label}):`);
    ctx.log(plot(curve.map((p) => p.accuracy * 100), { height: 12, format: (x: number) => x.toFixed(0).padStart(5) }));
  }

  const byBackend = <T>(f: (r: BackendRun) => T) => Object.fromEntries([...runs].map(([k, r]) => [k, f(r)]));
  const [first] = runs.values();
  const summary: Record<string, unknown> = {
    task: config.task,
    seed: config.seed,
    backend: first.tfjs,
    sft_steps: warm.sftSteps,
    sft_accuracy: warm.accuracy,
    sft_wall_s: warm.sftWallS,
    sft_cached: warm.cached,
    grpo_steps: config.train.steps,
    samples_per_step: config.rollout.prompts_per_step * config.algorithm.group_size,
    initial_accuracy: first.result.initialAccuracy,
    final_accuracy: first.result.finalAccuracy,
    best_accuracy: Math.max(...first.curve.map((p) => p.accuracy)),
    first_step_at_90: firstStepAt(first.curve, 0.9),
    first_step_at_95: firstStepAt(first.curve, 0.95),
    time_to_90_s: timeTo(first.curve, 0.9),
    time_to_95_s: timeTo(first.curve, 0.95),
    grpo_wall_s: round(first.result.wallS),
    curve: first.curve,
  };
  if (options.backends) {
    Object.assign(summary, {
      tfjs_backend_by_backend: byBackend((r) => r.tfjs),
      time_to_90_s_by_backend: byBackend((r) => timeTo(r.curve, 0.9)),
      time_to_95_s_by_backend: byBackend((r) => timeTo(r.curve, 0.95)),
      first_step_at_95_by_backend: byBackend((r) => firstStepAt(r.curve, 0.95)),
      final_accuracy_by_backend: byBackend((r) => r.result.finalAccuracy),
      grpo_wall_s_by_backend: byBackend((r) => round(r.result.wallS)),
      median_train_ms_by_backend: byBackend((r) => round(median(r.result.curve.map((s) => s.metrics.duration_ms ?? 0)))),
      median_step_ms_by_backend: byBackend((r) => round(median(r.result.curve.map((s) => s.stepMs)))),
      curve_by_backend: byBackend((r) => r.curve),
    });
    const t = summary.time_to_95_s_by_backend as Record<string, number | null>;
    if (t.native != null && t.wasm != null) {
      summary.time_to_95_native_over_wasm = round(t.native / t.wasm);
      ctx.log(`time to 95% held-out accuracy: native ${t.native} s, wasm ${t.wasm} s: native/wasm = ${(t.native / t.wasm).toFixed(2)}`);
    }
    const fa = summary.final_accuracy_by_backend as Record<string, number>;
    ctx.log(`final accuracy: ${Object.entries(fa).map(([k, v]) => `${k} ${(v * 100).toFixed(1)}%`).join(', ')}`);
  }
  const out = path.join(home, 'results', `grpo-add2-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
  fs.mkdirSync(path.dirname(out), { recursive: true });
  fs.writeFileSync(out, `${JSON.stringify({ ...summary, config, steps: byBackend((r) => r.result.curve) }, null, 2)}\n`);
  ctx.log(`curve and per-step metrics saved to ${out}`);
  return { ...summary, saved_to: out };
};

