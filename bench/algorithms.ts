// `relax bench algorithms`: each RL algorithm Relax offers by name (docs/algorithms.md) on add2, from
// the SAME SFT warm start (the quickstart's, config/recipes.ts ADD2_SFT_INIT through the shared
// warm-start cache) for the SAME number of steps and trained samples, in one process over the
// engine library (training/in-process.ts: the sync RL core the workflow's activities call; it runs
// every algorithm here, PPO's critic and DAPO's rollout side included). The recipe is ADD2_GRPO's;
// each algorithm changes only what its paper prescribes (ALGORITHMS below). Prints the held-out
// greedy accuracy before and after each, the wall time, and the samples to 95%. Options
// (`--set key=value`): steps (default 150: GRPO reaches about 94%, OPD passes 95%), prompts
// (prompts per step, default the recipe's 128), eval_every (default 10), algorithms (a comma list,
// default all).
import fs from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import { ADD2_GRPO } from '../config/recipes';
import { relaxEnvironment } from '../config/environment';
import { parseRunConfig, type RunConfig, type RunConfigInput } from '../config/run-config';
import { loadTfjsBackend } from '../engines/backends';
import type { PolicyWeights } from '../engines/model';
import { advantageEstimatorNames } from '../training/advantages';
import { runInProcess, type InProcessResult } from '../training/in-process';
import { ADD2_SFT, ADD2_TEACHER_SFT, loadOrTrainWarmStart } from '../training/warm-start';
import type { Bench, BenchContext } from './index';
import { round } from './measure';

type AlgorithmInput = NonNullable<RunConfigInput['algorithm']>;

export interface AlgorithmSpec {
  name: string;
  /** What it is and what its paper prescribes here, one line. */
  describe: string;
  /** The recipe's algorithm section merged with these (the rest of the recipe unchanged but for `rollout`). */
  algorithm: AlgorithmInput;
  rollout?: NonNullable<RunConfigInput['rollout']>;
  /** Why it cannot run in this build (it then has no numbers), or undefined. */
  unavailable?: () => string | undefined;
  /** It distills from a teacher: algorithm.teacher.from is the bench's 99% add2 teacher. */
  teacher?: boolean;
  /** One sample per prompt (group_size 1) over prompts x group_size prompts: the same samples per step. */
  onePerPrompt?: boolean;
}

/** The algorithms, by the names the table uses: each paper's settings over ADD2_GRPO (clip 0.2 / 0.28, entropy 0.01, token-mean loss). */
export const ALGORITHMS: readonly AlgorithmSpec[] = [
  { name: 'grpo', describe: 'GRPO (Shao et al. 2024): group-normalized advantages, PPO-clip; the recipe itself, the baseline', algorithm: {} },
  { name: 'dr_grpo', describe: 'Dr. GRPO (Liu et al. 2025): advantages not divided by the std, loss over a constant length (loss_aggregation dr_grpo)', algorithm: { advantage: 'dr_grpo', loss_aggregation: 'dr_grpo' } },
  { name: 'rloo', describe: 'RLOO (Ahmadian et al. 2024): leave-one-out baseline', algorithm: { advantage: 'rloo' } },
  { name: 'gspo', describe: 'GSPO (Zheng et al. 2025): sequence-level ratio and clip, clip range 3e-4 / 4e-4, per-sequence mean', algorithm: { policy_loss: 'gspo', clip_low: 3e-4, clip_high: 4e-4, loss_aggregation: 'grpo' } },
  { name: 'cispo', describe: 'CISPO (MiniMax-M1): clipped IS weight, every token keeps its gradient; no lower bound, token mean', algorithm: { policy_loss: 'cispo' } },
  { name: 'sapo', describe: 'SAPO (Qwen 2025): soft gate, tau_pos 1, tau_neg 1.05, per-sequence mean', algorithm: { policy_loss: 'sapo', loss_aggregation: 'grpo' } },
  {
    name: 'dapo',
    describe: 'DAPO (Yu et al. 2025): dynamic sampling (4 extra rounds at most), overlong shaping (L_cache 1 beyond the 4 tokens add2 needs) and filtering, token-level loss, clip-higher',
    algorithm: { loss_aggregation: 'dapo', dapo: { dynamic_sampling: { max_extra_rounds: 4 }, overlong_penalty: { cache_tokens: 1, factor: 1 }, overlong_filter: true } },
    // The paper's L_max is the expected length plus L_cache (16k + 4k): add2's longest answer is 4 tokens (3 digits, eos).
    rollout: { max_new_tokens: 5 },
  },
  { name: 'ppo_critic', describe: 'PPO with a critic (Schulman et al. 2017): GAE (gamma 1, lambda 0.95), clipped value loss (vf_coef 0.5, eps_v 0.2), whitened advantages; a fresh value head on the warm start', algorithm: { advantage: 'gae', critic: {} } },
  { name: 'grpo+mis', describe: 'GRPO with MIS (verl rollout_rs token): tokens whose pi_trainer / pi_rollout leaves [0.5, 2] masked', algorithm: { rollout_correction: { mask: 'token' } } },
  { name: 'grpo+opsm', describe: 'GRPO with OPSM (DeepSeek-V3.2): negative-advantage sequences drifted past delta 1e-4 masked', algorithm: { rollout_correction: { opsm_delta: 1e-4 } } },
  {
    name: 'opd',
    describe: 'on-policy distillation: per-token reverse KL to the 99% add2 teacher (ADD2_TEACHER_SFT) as the advantage (kl_coef 1, task_coef 0); no group needed, so the same samples per step go to 8x the prompts, one each',
    // The recipe's 128 prompts x 8 samples as 1024 prompts x 1: the teacher scores every token, so
    // a second sample of a prompt adds less than a new prompt (measured over 40 steps: 85.4% with
    // 128 x 8, 90.0% with 1024 x 1).
    algorithm: { advantage: 'opd' },
    onePerPrompt: true,
    teacher: true,
    unavailable: () => (advantageEstimatorNames().includes('opd') ? undefined : 'algorithm.advantage "opd" is not registered in this build (on-policy distillation has not landed): skipped'),
  },
];

const optionsSchema = z
  .object({
    steps: z.coerce.number().int().min(1).default(150),
    prompts: z.coerce.number().int().min(1).optional(),
    eval_every: z.coerce.number().int().min(1).default(10),
    algorithms: z
      .string()
      .transform((s) => s.split(',').map((x) => x.trim()).filter(Boolean))
      .optional(),
  })
  .strict();
export type AlgorithmsBenchOptions = z.output<typeof optionsSchema>;

export function parseAlgorithmsOptions(raw: Record<string, string>): AlgorithmsBenchOptions {
  const r = optionsSchema.safeParse(raw);
  if (!r.success) {
    const problems = r.error.issues.map((i) => (i.code === 'unrecognized_keys' ? `unknown option ${i.keys.join(', ')} (known: steps, prompts, eval_every, algorithms)` : `${i.path.join('.') || 'options'}: ${i.message}`));
    throw new Error(`bench algorithms --set: ${problems.join('; ')}`);
  }
  const unknown = (r.data.algorithms ?? []).filter((a) => !ALGORITHMS.some((s) => s.name === a));
  if (unknown.length) throw new Error(`bench algorithms --set algorithms: unknown ${unknown.join(', ')} (known: ${ALGORITHMS.map((s) => s.name).join(', ')})`);
  return r.data;
}

/** The recipe with the bench's size (steps, prompts, evaluations): what every algorithm shares. */
export function baseConfig(options: AlgorithmsBenchOptions): RunConfigInput {
  const train = { ...ADD2_GRPO.train, steps: options.steps, warmup_steps: Math.min(ADD2_GRPO.train?.warmup_steps ?? 0, options.steps), eval_every: options.eval_every };
  return { ...ADD2_GRPO, train, rollout: { ...ADD2_GRPO.rollout, ...(options.prompts ? { prompts_per_step: options.prompts } : {}) } };
}

/** One algorithm's run config: the base with its algorithm (and rollout) settings merged in. */
export function algorithmConfig(base: RunConfigInput, spec: AlgorithmSpec, teacherDir?: string): RunConfig {
  const teacher = spec.teacher && teacherDir ? { teacher: { from: teacherDir } } : {};
  const shared = parseRunConfig(base);
  const spread = spec.onePerPrompt ? { algorithm: { group_size: 1 }, rollout: { prompts_per_step: shared.rollout.prompts_per_step * shared.algorithm.group_size } } : { algorithm: {}, rollout: {} };
  return parseRunConfig({ ...base, algorithm: { ...base.algorithm, ...spec.algorithm, ...spread.algorithm, ...teacher }, rollout: { ...base.rollout, ...spec.rollout, ...spread.rollout } });
}

interface Row {
  result: InProcessResult;
  samplesPerStep: number;
  curve: Array<{ step: number; samples: number; accuracy: number }>;
}

/** Trained samples (prompts x group size per step) at the first evaluation at or above `threshold`, or null. */
function samplesTo(curve: Row['curve'], threshold: number): number | null {
  return curve.find((p) => p.accuracy >= threshold)?.samples ?? null;
}

const pct = (x: number) => `${(x * 100).toFixed(1)}%`;

function tableOf(rows: Map<string, Row>, initial: number): string {
  const lines = ['| algorithm | held-out accuracy | change (points) | best | samples to 95% | wall s |', '|---|---|---|---|---|---|'];
  for (const [name, r] of rows) {
    const gain = (r.result.finalAccuracy - initial) * 100;
    const best = Math.max(...r.curve.map((p) => p.accuracy));
    const to95 = samplesTo(r.curve, 0.95);
    lines.push(`| ${name} | ${pct(initial)} -> **${pct(r.result.finalAccuracy)}** | ${gain >= 0 ? '+' : ''}${gain.toFixed(1)} | ${pct(best)} | ${to95 === null ? '-' : to95.toLocaleString('en-US')} | ${r.result.wallS.toFixed(1)} |`);
  }
  return lines.join('\n');
}

async function runOne(ctx: BenchContext, spec: AlgorithmSpec, base: RunConfigInput, weights: PolicyWeights, teacherDir?: string): Promise<Row> {
  const config = algorithmConfig(base, spec, teacherDir);
  const samplesPerStep = config.rollout.prompts_per_step * config.algorithm.group_size;
  ctx.log(`[algorithms] ${spec.name}: ${spec.describe}`);
  const result = await runInProcess(config, weights, {
    onStep: (r) => {
      if (r.accuracy !== undefined) ctx.log(`[algorithms ${spec.name}] step ${String(r.step).padStart(4)}: reward ${r.rewardMean.toFixed(3)}, held-out ${pct(r.accuracy)}, ${r.stepMs.toFixed(0)} ms/step`);
    },
  });
  const evaluated = result.curve.filter((r) => r.accuracy !== undefined);
  const curve = [{ step: 0, samples: 0, accuracy: result.initialAccuracy }, ...evaluated.map((r) => ({ step: r.step, samples: r.step * samplesPerStep, accuracy: r.accuracy as number }))];
  return { result, samplesPerStep, curve };
}

/** What the algorithms start from: the warm start's weights, and for OPD the teacher's checkpoint directory (made on first use). */
export interface BenchStart {
  weights: PolicyWeights;
  accuracy?: number;
  teacher?: () => Promise<string>;
}

/** Why `spec` cannot run here, or undefined. */
function skipReason(spec: AlgorithmSpec, start: BenchStart): string | undefined {
  return spec.unavailable?.() ?? (spec.teacher && !start.teacher ? `"${spec.name}" needs a teacher and none was given: skipped` : undefined);
}

/** The bench over given warm-start weights (the test passes its own; the CLI the quickstart's warm start). */
export async function runAlgorithmsBench(ctx: BenchContext, warm: BenchStart): Promise<Record<string, unknown>> {
  const options = parseAlgorithmsOptions(ctx.options);
  const base = baseConfig(options);
  const chosen = ALGORITHMS.filter((s) => !options.algorithms || options.algorithms.includes(s.name));
  const rows = new Map<string, Row>();
  const skipped: Record<string, string> = {};
  for (const spec of chosen) {
    const reason = skipReason(spec, warm);
    if (reason) {
      skipped[spec.name] = reason;
      ctx.log(`[algorithms] ${spec.name}: ${reason}`);
      continue;
    }
    rows.set(spec.name, await runOne(ctx, spec, base, warm.weights, spec.teacher ? await warm.teacher!() : undefined));
  }
  if (rows.size === 0) throw new Error(`bench algorithms: nothing ran (${Object.entries(skipped).map(([k, v]) => `${k}: ${v}`).join('; ')})`);
  const initial = [...rows.values()][0].result.initialAccuracy;
  const by = <T>(f: (r: Row) => T) => Object.fromEntries([...rows].map(([k, r]) => [k, f(r)]));
  const table = tableOf(rows, initial);
  ctx.log(`held-out greedy accuracy on add2 after ${options.steps} steps (${[...rows.values()][0].samplesPerStep * options.steps} samples) from the same warm start:`);
  ctx.log(table);
  return {
    task: 'add2',
    steps: options.steps,
    samples_per_step: by((r) => r.samplesPerStep),
    samples: by((r) => r.samplesPerStep * options.steps),
    warm_start_accuracy: warm.accuracy ?? initial,
    initial_accuracy: initial,
    initial_accuracy_by_algorithm: by((r) => r.result.initialAccuracy),
    final_accuracy_by_algorithm: by((r) => r.result.finalAccuracy),
    gain_points_by_algorithm: by((r) => round((r.result.finalAccuracy - r.result.initialAccuracy) * 100)),
    raised_20_points_by_algorithm: by((r) => r.result.finalAccuracy - r.result.initialAccuracy >= 0.2),
    best_accuracy_by_algorithm: by((r) => Math.max(...r.curve.map((p) => p.accuracy))),
    samples_to_95_by_algorithm: by((r) => samplesTo(r.curve, 0.95)),
    wall_s_by_algorithm: by((r) => round(r.result.wallS)),
    curve_by_algorithm: by((r) => r.curve),
    skipped_by_algorithm: skipped,
    table,
  };
}

export const algorithmsBench: Bench = async (ctx) => {
  parseAlgorithmsOptions(ctx.options); // a bad option fails before the warm start trains
  const backend = await loadTfjsBackend({ kind: 'cpu' });
  const recipe = parseRunConfig(ADD2_GRPO);
  const warm = await loadOrTrainWarmStart(recipe, ADD2_SFT, relaxEnvironment().warmStartCache, ctx.log);
  // OPD's teacher: the same SFT run on to >= 99% (about 6 minutes on 2 cores the first time; cached after).
  const teacher = async () => (await loadOrTrainWarmStart(recipe, ADD2_TEACHER_SFT, relaxEnvironment().warmStartCache, ctx.log)).dir;
  const summary = { ...(await runAlgorithmsBench(ctx, { ...warm, teacher })), backend: backend.backend, warm_start_dir: warm.dir, sft_steps: warm.sftSteps };
  const out = path.join(relaxEnvironment().home, 'results', `algorithms-add2-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
  fs.mkdirSync(path.dirname(out), { recursive: true });
  fs.writeFileSync(out, `${JSON.stringify(summary, null, 2)}\n`);
  ctx.log(`curves saved to ${out}`);
  return { ...summary, saved_to: out };
};
