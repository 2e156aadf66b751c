// `relax replay <run> --step N`: recompute a recorded train step from the data plane on CPU
// (training/replay.ts) and print each stage's verdict and the first divergence; exit 1 when one
// differs, 2 when the step cannot be replayed.
import type { Command } from 'commander';
import { loadTfjsBackend } from '../engines/backends';
import { openStore } from '../store/db';
import { replayStep, ReplayError, type ReplayReport } from '../training/replay';
import { outputOption, wantsJson } from './config-args';
import { resolveAddresses } from '../client';
import { UsageError } from './runs';
import { plainTable } from './table';

function describe(r: ReplayReport): string {
  const rows = r.stages.map((s) => [s.stage, s.status, s.maxAbsDiff === undefined ? '' : s.maxAbsDiff.toExponential(2), s.first ? `${s.first.sample ?? s.first.tensor}: recorded ${JSON.stringify(s.first.recorded)}, recomputed ${JSON.stringify(s.first.recomputed)}` : s.detail]);
  const verdict = r.firstDivergence ? `first divergence: ${r.firstDivergence.stage}${r.firstDivergence.sample ? ` at sample ${r.firstDivergence.sample}` : ''}${r.firstDivergence.tensor ? ` at ${r.firstDivergence.tensor}` : ''}` : 'every stage recomputed matches the record';
  return `step ${r.step} of ${r.runId}: version ${r.fromVersion} -> ${r.toVersion}, ${r.samples} samples, ${r.estimator} / ${r.loss}\n${plainTable(rows, ['stage', 'status', 'max |diff|', 'first difference (or what was compared)'])}\n${verdict}`;
}

export function registerReplayCommand(program: Command): void {
  program
    .command('replay <runId>')
    .description("recompute a recorded train step (prompts, rewards, advantages, the update) from the run's database and checkpoints, and report the first stage that differs")
    .requiredOption('--step <n>', 'the train step to replay')
    .option('--tolerance <x>', "largest |difference| of the update's tensors, loss and grad norm still called equal (default 0: bitwise)", '0')
    .addOption(outputOption())
    .action(async (runId: string, o: { step: string; tolerance: string; output?: string }) => {
      const step = Number(o.step);
      if (!Number.isInteger(step) || step < 1) throw new UsageError(`--step must be a train step (an integer >= 1), got ${o.step}`);
      const tolerance = Number(o.tolerance);
      if (!Number.isFinite(tolerance) || tolerance < 0) throw new UsageError(`--tolerance must be a number >= 0, got ${o.tolerance}`);
      const { databaseUrl } = resolveAddresses();
      if (!databaseUrl) throw new Error("DATABASE_URL is not set: point it at the run's database, or start `relax dev` (it serves one)");
      await loadTfjsBackend({ kind: 'cpu' });
      const pool = await openStore({ url: databaseUrl, maxConnections: 2 });
      try {
        const report = await replayStep(pool, runId, step, { tolerance });
        console.log(wantsJson(o) ? JSON.stringify(report) : describe(report));
        if (report.firstDivergence) process.exitCode = 1;
      } catch (err) {
        if (err instanceof ReplayError) throw new UsageError(err.message);
        throw err;
      } finally {
        await pool.end();
      }
    });
}
