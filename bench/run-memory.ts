// `relax bench run-memory`: many short runs, one after another, on one local stack, and each
// worker's RSS after every run (training/run-state.ts, workers/run-reaper.ts release a run's state
// once its workflow closes). The real-model variant of test/run-memory.test.ts: by default GRPO +
// LoRA on SmolLM2-135M-Instruct (config/recipes.ts realModelRecipe), one step a run.
//
// Options (--set key=value): model (a named model, .gguf file or HF directory; `tiny` for the
// test's 4.2M-parameter GPT on add2), runs (default 6), prompts (per step, default 4), group
// (default 4), max_new_tokens (default 16), mmap_threshold (bytes: the workers' glibc
// MALLOC_MMAP_THRESHOLD_, so RSS is what they hold; default: glibc's own, as `relax dev` runs).
// JSON keys: model, runs, rss_mb (role -> MB after each run), growth (role -> RSS after the last
// run / after the second), max_growth, wall_s.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { RelaxClient } from '../client';
import { relaxEnvironment } from '../config/environment';
import type { RunConfigInput } from '../config/run-config';
import { PLAINTEXT_TEMPORAL } from '../security/temporal-connection';
import { resolveModelSource } from '../engines/model-sources';
import { realModelRecipe } from '../config/recipes';
import { startEphemeralStack } from '../workers/local-stack';
import type { Bench } from './index';

const TINY: RunConfigInput = {
  model: { d_model: 256, n_layers: 4, n_heads: 4, d_ff: 1024, context_length: 16 },
  algorithm: { group_size: 4, kl_coef: 0.01 },
  rollout: { prompts_per_step: 8, max_new_tokens: 4 },
  train: { steps: 1, eval_every: 100 },
};

function rssMb(pid: number): number {
  try {
    return Number(/^VmRSS:\s+(\d+) kB/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) / 1024;
  } catch {
    return 0; // the process ended meanwhile
  }
}

/** Each role's RSS (summed over its workers) once settled: the least of five readings 500 ms apart. */
async function settledRss(pidsByRole: () => Map<string, number[]>): Promise<Record<string, number>> {
  const readings: Array<Map<string, number>> = [];
  for (let k = 0; k < 5; k++) {
    await new Promise((resolve) => setTimeout(resolve, 500));
    readings.push(new Map([...pidsByRole()].map(([role, pids]) => [role, pids.reduce((a, p) => a + rssMb(p), 0)])));
  }
  return Object.fromEntries([...readings[0].keys()].map((role) => [role, Math.round(Math.min(...readings.map((r) => r.get(role) ?? Infinity)))]));
}

export const runMemoryBench: Bench = async (ctx) => {
  const o = ctx.options;
  const num = (key: string, fallback: number) => (o[key] === undefined ? fallback : Number(o[key]));
  const runs = num('runs', 6);
  if (!Number.isInteger(runs) || runs < 3) throw new Error(`--set runs=${o.runs}: need a whole number of runs >= 3 (the check compares the last run with the second)`);
  const model = o.model ?? 'smollm2-135m-instruct';
  const stackHome = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-bench-run-memory-'));
  const input: RunConfigInput =
    model === 'tiny'
      ? TINY
      : realModelRecipe({
          modelFrom: await resolveModelSource(model, { home: relaxEnvironment().home, log: ctx.log }),
          steps: 1,
          evalEvery: 1000,
          promptsPerStep: num('prompts', 4),
          groupSize: num('group', 4),
          maxNewTokens: num('max_new_tokens', 16),
          lr: 3e-4,
          rank: 16,
        });
  // Settings of the stack's workers (they inherit this environment): release a closed run within a second.
  const saved = { check: process.env.RELAX_RUN_RELEASE_CHECK_S, mmap: process.env.MALLOC_MMAP_THRESHOLD_ };
  process.env.RELAX_RUN_RELEASE_CHECK_S = '1';
  if (o.mmap_threshold !== undefined) process.env.MALLOC_MMAP_THRESHOLD_ = String(num('mmap_threshold', 131072));
  const t0 = performance.now();
  const stack = await startEphemeralStack(stackHome);
  const rss: Array<Record<string, number>> = [];
  try {
    const client = await RelaxClient.connect(stack.temporalAddress, undefined, PLAINTEXT_TEMPORAL);
    try {
      const pidsByRole = () => {
        const byRole = new Map<string, number[]>();
        for (const w of stack.workers()) byRole.set(w.role, [...(byRole.get(w.role) ?? []), w.pid]);
        return byRole;
      };
      for (let i = 1; i <= runs; i++) {
        const handle = await client.startTraining({ ...input, run_id: `bench-run-memory-${Date.now().toString(36)}-${i}`, checkpoint: { dir: path.join(stackHome, 'checkpoints'), every: 1, keep_last: 1 } });
        await handle.result();
        await new Promise((resolve) => setTimeout(resolve, 2_500)); // the workers' release check (1 s) and the release
        rss.push(await settledRss(pidsByRole));
        ctx.log(`[bench] run ${i}/${runs}: RSS (MB) ${Object.entries(rss[rss.length - 1]).map(([r, mb]) => `${r} ${mb}`).join(', ')}`);
      }
    } finally {
      await client.close();
    }
  } finally {
    await stack.stop();
    fs.rmSync(stackHome, { recursive: true, force: true });
    for (const [name, value] of [['RELAX_RUN_RELEASE_CHECK_S', saved.check], ['MALLOC_MMAP_THRESHOLD_', saved.mmap]] as const) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
  }
  const roles = Object.keys(rss[0]);
  const growth = Object.fromEntries(roles.map((r) => [r, Number((rss[runs - 1][r] / rss[1][r]).toFixed(3))]));
  const maxGrowth = Math.max(...Object.values(growth));
  ctx.log(`[bench] RSS after the last run / after the second: ${roles.map((r) => `${r} ${growth[r]}`).join(', ')} (issue 33's bound: 1.1)`);
  return {
    model,
    runs,
    rss_mb: Object.fromEntries(roles.map((r) => [r, rss.map((x) => x[r])])),
    growth,
    max_growth: maxGrowth,
    wall_s: Number(((performance.now() - t0) / 1000).toFixed(1)),
  };
};
