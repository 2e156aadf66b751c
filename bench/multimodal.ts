// `relax bench multimodal`: GRPO through the trainingRun workflow on the local stack for each media
// task, from its SFT warm start (below 60% held-out, cached under RELAX_HOME/warm-starts): vision
// (vision-colour), audio (audio-tone) and zoom (the multi-turn zoom tool). Prints each held-out
// accuracy curve (and the zoom tool-use rate); with --json the last line holds, per task,
// initial_accuracy, final_accuracy and steps (zoom: tool_use_rate too). `--set tasks=vision,zoom`
// picks tasks, `--set steps=N` shortens every run.
import { PLAINTEXT_TEMPORAL } from '../security/temporal-connection';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { plot } from 'asciichart';
import { Pool } from 'pg';
import { z } from 'zod';
import { RelaxClient } from '../client';
import { relaxEnvironment } from '../config/environment';
import { parseRunConfig, type RunConfigInput } from '../config/run-config';
import { loadTfjsBackend } from '../engines/backends';
import { readMetrics } from '../store/metrics';
import { MULTIMODAL_RECIPES, type MultimodalBenchTask } from '../config/recipes';
import { loadOrTrainWarmStart, sftRecipeOf } from '../training/warm-start';
import { startEphemeralStack } from '../workers/local-stack';
import type { Bench } from './index';
import { round } from './measure';

const TASKS = Object.keys(MULTIMODAL_RECIPES) as MultimodalBenchTask[];
const optionsSchema = z
  .object({
    steps: z.coerce.number().int().min(1).optional(),
    tasks: z
      .string()
      .transform((s) => s.split(',').map((x) => x.trim()))
      .pipe(z.array(z.enum(TASKS as [MultimodalBenchTask, ...MultimodalBenchTask[]])).min(1))
      .optional(),
  })
  .strict();

function parseOptions(raw: Record<string, string>): z.output<typeof optionsSchema> {
  const r = optionsSchema.safeParse(raw);
  if (r.success) return r.data;
  throw new Error(`bench multimodal --set: ${r.error.issues.map((i) => (i.code === 'unrecognized_keys' ? `unknown option ${i.keys.join(', ')} (known: steps, tasks)` : `${i.path.join('.') || 'options'}: ${i.message}`)).join('; ')} (tasks: ${TASKS.join(', ')})`);
}

interface TaskResult {
  task: string;
  warm_start_accuracy: number;
  initial_accuracy: number | null;
  final_accuracy: number | null;
  steps: number;
  wall_s: number;
  curve: Array<{ step: number; accuracy: number }>;
  tool_use_rate?: number | null;
  initial_tool_use_rate?: number | null;
  tool_use_curve?: Array<{ step: number; rate: number }>;
}

export const multimodalBench: Bench = async (ctx) => {
  const options = parseOptions(ctx.options);
  await loadTfjsBackend({ kind: 'cpu' });
  const home = relaxEnvironment().home;
  const results: Partial<Record<MultimodalBenchTask, TaskResult>> = {};
  const stackHome = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-bench-multimodal-'));
  const stack = await startEphemeralStack(stackHome);
  const pool = new Pool({ connectionString: stack.databaseUrl, max: 1 });
  try {
    const client = await RelaxClient.connect(stack.temporalAddress, undefined, PLAINTEXT_TEMPORAL);
    try {
      for (const name of options.tasks ?? TASKS) {
        const recipe = MULTIMODAL_RECIPES[name];
        const steps = options.steps ?? recipe.config.train?.steps ?? 100;
        const input: RunConfigInput = { ...recipe.config, train: { ...recipe.config.train, steps, warmup_steps: Math.min(recipe.config.train?.warmup_steps ?? 0, steps) } };
        const warm = await loadOrTrainWarmStart(parseRunConfig(input), sftRecipeOf(recipe.sft), path.join(home, 'warm-starts'), ctx.log);
        ctx.log(`[bench] ${name} (${input.task}): ${steps} GRPO steps through the workflow from a ${(warm.accuracy * 100).toFixed(1)}% warm start`);
        const runId = `bench-multimodal-${name}-${Date.now().toString(36)}`;
        const t0 = performance.now();
        const handle = await client.startTraining({ ...input, run_id: runId, checkpoint: { ...input.checkpoint, init_from: warm.dir, dir: path.join(stackHome, 'checkpoints', runId) } });
        const result = await handle.result();
        const wallS = (performance.now() - t0) / 1000;
        const curve = result.accuracies.map(([step, accuracy]) => ({ step, accuracy }));
        const r: TaskResult = { task: String(input.task), warm_start_accuracy: warm.accuracy, initial_accuracy: result.initialAccuracy ?? null, final_accuracy: result.evalAccuracy ?? null, steps: result.steps, wall_s: round(wallS), curve };
        if (name === 'zoom') {
          const toolUse = (await readMetrics(pool, runId)).eval_tool_use ?? [];
          r.tool_use_curve = toolUse.map(([step, rate]) => ({ step, rate }));
          r.initial_tool_use_rate = toolUse[0]?.[1] ?? null;
          r.tool_use_rate = toolUse[toolUse.length - 1]?.[1] ?? null;
        }
        if (curve.length > 1) ctx.log(plot(curve.map((p) => p.accuracy), { height: 8, format: (x: number) => x.toFixed(2).padStart(6) }));
        ctx.log(`[bench] ${name}: held-out accuracy ${r.initial_accuracy} -> ${r.final_accuracy} in ${r.steps} steps (${r.wall_s} s)${name === 'zoom' ? `, tool use ${r.initial_tool_use_rate} -> ${r.tool_use_rate}` : ''}`);
        results[name] = r;
      }
    } finally {
      await client.close();
    }
  } finally {
    await pool.end();
    await stack.stop();
    fs.rmSync(stackHome, { recursive: true, force: true });
  }
  const summary = { bench: 'multimodal', ...results };
  const out = path.join(home, 'results', `multimodal-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
  fs.mkdirSync(path.dirname(out), { recursive: true });
  fs.writeFileSync(out, `${JSON.stringify(summary, null, 2)}\n`);
  ctx.log(`[bench] curves saved to ${out}`);
  return summary;
};
