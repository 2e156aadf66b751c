// `relax bench staleness`: the staleness experiment. add2 held-out accuracy after a fixed number of
// samples, through the durable workflow in async mode, for max_staleness 0, 1, 2, 4, 8, each without
// and with an off-policy correction, all from the same warm start and seeds. The rollout side here
// is much faster than the trainer, so the rollout runs as far ahead as the bound allows and nearly
// every consumed sample is exactly max_staleness versions old (the run's staleness metrics say so).
import { PLAINTEXT_TEMPORAL } from '../security/temporal-connection';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { plot } from 'asciichart';
import { Pool } from 'pg';
import { RelaxClient } from '../client';
import { parseRunConfig, type RunConfig } from '../config/run-config';
import { loadTfjsBackend } from '../engines/backends';
import { readMetrics } from '../store/metrics';
import { ADD2_GRPO } from '../config/recipes';
import { loadOrTrainWarmStart, ADD2_SFT } from '../training/warm-start';
import { relaxEnvironment } from '../config/environment';
import { startEphemeralStack } from '../workers/local-stack';
import type { Bench } from './index';

type Correction = RunConfig['algorithm']['off_policy'];

interface Row {
  max_staleness: number;
  correction: Correction;
  seed: number;
  accuracy: number;
  mean_staleness: number;
  curve: Array<[number, number]>;
  wall_s: number;
}

function list<T>(value: string | undefined, fallback: T[], parse: (s: string) => T): T[] {
  return value ? value.split(',').map((s) => parse(s.trim())) : fallback;
}

/** Logs the accuracy table (max_staleness x correction, mean over seeds) and a plot per correction; returns the table. */
function reportAccuracy(log: (line: string) => void, rows: Row[], stalenesses: number[], corrections: Correction[], samples: number, seeds: number[]): string {
  const cell = (k: number, c: Correction) => rows.filter((x) => x.max_staleness === k && x.correction === c);
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
  const header = `| max_staleness | ${corrections.map((c) => (c === 'none' ? 'no correction' : c)).join(' | ')} |`;
  const table = [
    header,
    `|---|${corrections.map(() => '---').join('|')}|`,
    ...stalenesses.map(
      (k) =>
        `| ${k} | ${corrections
          .map((c) => {
            const rs = cell(k, c);
            return `**${(mean(rs.map((r) => r.accuracy)) * 100).toFixed(1)}%** (${rs.map((r) => (r.accuracy * 100).toFixed(1)).join(' / ')}; staleness ${mean(rs.map((r) => r.mean_staleness)).toFixed(1)})`;
          })
          .join(' | ')} |`,
    ),
  ].join('\n');
  log(`held-out accuracy after ${samples} samples: mean over seeds ${seeds.join(', ')} (each seed; measured mean staleness)`);
  log(table);
  for (const c of corrections) {
    log(`mean final accuracy (%) by max_staleness ${stalenesses.join(', ')}, ${c}:`);
    log(plot(stalenesses.map((k) => mean(cell(k, c).map((r) => r.accuracy)) * 100), { height: 8, format: (x: number) => x.toFixed(1).padStart(6) }));
  }
  return table;
}

export const stalenessBench: Bench = async (ctx) => {
  const steps = Number(ctx.options.steps ?? 100);
  const stalenesses = list(ctx.options.staleness, [0, 1, 2, 4, 8], Number);
  const corrections = list<Correction>(ctx.options.corrections, ['none', 'tis'], (s) => s as Correction);
  // Seeds of the GRPO runs (prompts and sampling); the warm start is the same for all of them.
  const seeds = list(ctx.options.seeds, [0, 1], Number);
  const base = parseRunConfig({ ...ADD2_GRPO, train: { ...ADD2_GRPO.train, steps, eval_every: Math.max(1, Math.floor(steps / 10)) } });
  await loadTfjsBackend({ kind: 'cpu' });
  const warm = await loadOrTrainWarmStart(base, ADD2_SFT, relaxEnvironment().warmStartCache, ctx.log);
  const samples = steps * base.rollout.prompts_per_step * base.algorithm.group_size;
  ctx.log(`[bench] ${stalenesses.length * corrections.length * seeds.length} runs of ${steps} steps (${samples} samples each) from the same warm start (${(warm.accuracy * 100).toFixed(1)}%)`);

  const home = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-bench-staleness-'));
  const stack = await startEphemeralStack(home);
  const pool = new Pool({ connectionString: stack.databaseUrl, max: 1 });
  const rows: Row[] = [];
  try {
    const client = await RelaxClient.connect(stack.temporalAddress, undefined, PLAINTEXT_TEMPORAL);
    try {
      for (const seed of seeds) for (const k of stalenesses) {
        for (const correction of corrections) {
          const t0 = performance.now();
          const config: RunConfig = {
            ...base,
            seed,
            mode: 'async',
            max_staleness: k,
            algorithm: { ...base.algorithm, off_policy: correction },
            run_id: `staleness-${k}-${correction}-s${seed}-${Date.now().toString(36)}`,
            checkpoint: { ...base.checkpoint, init_from: warm.dir, dir: path.join(home, 'checkpoints', `${k}-${correction}-${seed}`) },
          };
          const result = await (await client.startTraining(config)).result();
          const metrics = await readMetrics(pool, result.runId);
          const stale = metrics.staleness_mean ?? [];
          const row: Row = {
            max_staleness: k,
            correction,
            seed,
            accuracy: result.evalAccuracy ?? NaN,
            mean_staleness: stale.reduce((a, [, v]) => a + v, 0) / Math.max(1, stale.length),
            curve: result.accuracies,
            wall_s: (performance.now() - t0) / 1000,
          };
          rows.push(row);
          ctx.log(`[bench] seed ${seed}, max_staleness ${k}, ${correction}: ${(row.accuracy * 100).toFixed(1)}% (mean staleness ${row.mean_staleness.toFixed(2)}, ${row.wall_s.toFixed(0)} s)`);
        }
      }
    } finally {
      await client.close();
    }
  } finally {
    await pool.end();
    await stack.stop();
    fs.rmSync(home, { recursive: true, force: true });
  }

  const table = reportAccuracy(ctx.log, rows, stalenesses, corrections, samples, seeds);
  const out = path.join(relaxEnvironment().home, 'results', `staleness-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
  fs.mkdirSync(path.dirname(out), { recursive: true });
  const summary = { bench: 'staleness', steps, seeds, samples_per_run: samples, warm_start_accuracy: warm.accuracy, rows, table, saved_to: out };
  fs.writeFileSync(out, `${JSON.stringify(summary, null, 2)}\n`);
  return summary;
};
