// Train stage activities. The trainer holds weights and optimizer state in memory, so its stateful
// activities run on the worker's own instance queue; `workerInfo` on the shared queue picks one.
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { ApplicationFailure } from '@temporalio/activity';
import { checkpointDir, loadCheckpoint, publishCheckpoint } from '../engines/checkpoint';
import { initWeights } from '../engines/model';
import { NonFiniteUpdateError, Trainer, trainSequenceFromSample } from '../engines/trainer';
import { getCheckpoint, registerCheckpoint } from '../store/checkpoint-registry';
import { getTrainStep, markStepApplied, pruneConsumed, selectTrainBatch, type SampleRow } from '../store/transfer-queue';
import { policyLossFor } from '../training/grpo';
import { recordStageEvent, withHeartbeats, workerInfoActivity, type WorkerContext } from './context';
import { runContext, type RunContext } from './run-context';

export interface PolicyVersionInfo {
  policyVersion: number;
  sha256: string;
  path: string;
}

export interface TrainStepResult extends PolicyVersionInfo {
  step: number;
  samples: number;
  metrics: Record<string, number>;
  /** True when the step had been applied before (a retry): nothing was trained again. */
  alreadyApplied: boolean;
  worker: string;
}

function optimizerStatePath(run: RunContext, version: number): string {
  return path.join(run.checkpointRoot, 'optimizer', `v${String(version).padStart(8, '0')}.safetensors`);
}

async function writeAtomically(file: string, bytes: Uint8Array): Promise<void> {
  await mkdir(path.dirname(file), { recursive: true });
  const tmp = `${file}.tmp-${process.pid}`;
  await writeFile(tmp, bytes);
  await rename(tmp, file);
}

// The trainer of each run this process serves, with the policy version its weights are at. Its
// optimizer state lives only here; a new instance rebuilds both from the last published version.
const trainers = new Map<string, { trainer: Trainer; version: number }>();

async function trainerAt(ctx: WorkerContext, run: RunContext, version: number): Promise<Trainer> {
  const held = trainers.get(run.runId);
  if (held && held.version === version) return held.trainer;
  held?.trainer.dispose();
  trainers.delete(run.runId);
  const checkpoint = await getCheckpoint(ctx.pool, run.runId, version);
  if (!checkpoint) throw ApplicationFailure.create({ message: `policy version ${version} of run ${run.runId} is not published`, type: 'MissingPolicyVersion', nonRetryable: true });
  const { weights } = await loadCheckpoint(checkpoint.path, { model: run.model, sha256: checkpoint.sha256 });
  const c = run.config;
  const trainer = Trainer.create({
    model: run.model,
    weights,
    optimizer: { lr: c.train.lr, weightDecay: c.train.weight_decay },
    schedule: { kind: c.train.lr_decay, warmupSteps: c.train.warmup_steps, totalSteps: c.train.steps },
    maxGradNorm: c.train.grad_clip,
    microBatchSize: c.train.micro_batch,
  });
  const optimizerState = await readFile(optimizerStatePath(run, version)).catch(() => undefined);
  if (optimizerState) trainer.importOptimizerState(new Uint8Array(optimizerState));
  else if (version > 0) console.warn(`[train] run ${run.runId}: no optimizer state for version ${version}; continuing with fresh AdamW moments`);
  trainers.set(run.runId, { trainer, version });
  return trainer;
}

/** Training sequences of the recorded sample set; groups without a learning signal are left out. */
function trainSequences(samples: SampleRow[]) {
  return samples
    .filter((s) => s.advantage !== null && s.advantage !== 0)
    .map((s) =>
      trainSequenceFromSample(s.promptTokens, { tokens: s.responseTokens, logprobs: s.rolloutLogprobs ?? [] }, {
        advantage: s.advantage as number,
        ...(s.refLogprobs ? { refLogprobs: [...new Array(s.promptTokens.length - 1).fill(0), ...s.refLogprobs] } : {}),
      }),
    );
}

export function createTrainActivities(ctx: WorkerContext) {
  return {
    workerInfo: workerInfoActivity(ctx),

    /** Smoke stage: consumes the iteration's scored samples and records one metric. */
    async smokeTrain({ runId, iteration, step }: { runId: string; iteration: number; step: number }): Promise<{ samples: number; meanAdvantage: number }> {
      await recordStageEvent(ctx, runId, 'activity_started');
      // Retried attempts re-select the same rows: consumption is keyed by (run, step).
      await ctx.pool.query(
        `UPDATE samples SET consumed_by_step = $3, status = 'consumed', updated_at = now()
          WHERE run_id = $1 AND iteration = $2 AND status = 'scored'`,
        [runId, iteration, step],
      );
      const { rows } = await ctx.pool.query<{ n: string; mean: number | null }>(
        'SELECT count(*) AS n, avg(advantage) AS mean FROM samples WHERE run_id = $1 AND consumed_by_step = $2',
        [runId, step],
      );
      const samples = Number(rows[0].n);
      const meanAdvantage = Number(rows[0].mean ?? 0);
      await ctx.pool.query(
        `INSERT INTO metrics (run_id, step, name, value) VALUES ($1, $2, 'smoke/mean_advantage', $3)
         ON CONFLICT (run_id, step, name) DO UPDATE SET value = EXCLUDED.value`,
        [runId, step, meanAdvantage],
      );
      await recordStageEvent(ctx, runId, 'activity_completed', { samples });
      return { samples, meanAdvantage };
    },
  };
}

export function createTrainingRunActivities(ctx: WorkerContext) {
  return {
    /**
     * Publishes policy version 0 of a run: the checkpoint named by checkpoint.init_from, else a
     * seeded random initialization. Idempotent: a registered version 0 is returned as it is.
     */
    async initPolicy({ runId }: { runId: string }): Promise<PolicyVersionInfo> {
      const run = await runContext(ctx.pool, runId);
      const existing = await getCheckpoint(ctx.pool, runId, 0);
      if (existing) return { policyVersion: 0, sha256: existing.sha256, path: existing.path };
      let weights;
      if (run.config.checkpoint.init_from) {
        try {
          weights = (await loadCheckpoint(run.config.checkpoint.init_from, { model: run.model })).weights;
        } catch (err) {
          throw ApplicationFailure.create({ message: `checkpoint.init_from: ${(err as Error).message}`, type: 'InvalidInitCheckpoint', nonRetryable: true });
        }
      } else {
        weights = initWeights(run.model, run.config.seed);
      }
      const info = await publishCheckpoint(run.checkpointRoot, 0, run.model, weights);
      await registerCheckpoint(ctx.pool, { runId, policyVersion: 0, path: info.dir, sha256: info.sha256, step: 0 });
      return { policyVersion: 0, sha256: info.sha256, path: info.dir };
    },

    /**
     * Train stage, on this trainer's instance queue: step `step` takes the policy from `fromVersion`
     * to fromVersion + 1, exactly once. The sample set is chosen and recorded before the update
     * (a retry reuses it); a step already applied is not trained again; an update that was published
     * but not yet recorded (the worker died in between) is adopted instead of repeated.
     */
    async trainStep({ runId, step, fromVersion }: { runId: string; step: number; fromVersion: number }): Promise<TrainStepResult> {
      const run = await runContext(ctx.pool, runId);
      await recordStageEvent(ctx, runId, 'activity_started', { step, fromVersion });
      const version = fromVersion + 1;
      const recorded = await getTrainStep(ctx.pool, runId, step);
      if (recorded?.status === 'applied') {
        const cp = await getCheckpoint(ctx.pool, runId, recorded.policyVersion as number);
        return { step, policyVersion: recorded.policyVersion as number, sha256: cp?.sha256 ?? '', path: cp?.path ?? '', samples: recorded.sampleCount, metrics: recorded.metrics ?? {}, alreadyApplied: true, worker: ctx.identity };
      }
      const G = run.config.algorithm.group_size;
      const batch = await selectTrainBatch(ctx.pool, runId, step, { size: run.config.rollout.prompts_per_step * G });
      if (!batch) throw ApplicationFailure.create({ message: `no scored samples are ready for step ${step} of run ${runId}`, type: 'NoSamples' });

      const published = await getCheckpoint(ctx.pool, runId, version);
      let metrics: Record<string, number>;
      if (published) {
        // The update ran and was published by an attempt that died before recording it: adopt it.
        trainers.get(runId)?.trainer.dispose();
        trainers.delete(runId);
        metrics = { adopted: 1 };
      } else {
        const trainer = await trainerAt(ctx, run, fromVersion);
        const sequences = trainSequences(batch.samples);
        try {
          const m = sequences.length ? await withHeartbeats(() => trainer.trainStep(sequences, policyLossFor(run.config.algorithm))) : undefined;
          metrics = m
            ? { loss: m.loss, grad_norm: m.gradNorm, lr: m.lr, entropy: m.entropy, clip_fraction: m.clipFraction ?? 0, ratio_mean: m.ratioMean ?? 1, trained_samples: sequences.length, duration_ms: m.durationMs, ...(m.kl !== undefined ? { kl: m.kl } : {}) }
            : { trained_samples: 0 };
        } catch (err) {
          // Whatever state the failed step left in memory, the next attempt rebuilds from fromVersion.
          trainers.get(runId)?.trainer.dispose();
          trainers.delete(runId);
          if (err instanceof NonFiniteUpdateError) {
            throw ApplicationFailure.create({ message: `step ${step}: ${err.message}; nothing was applied or published`, type: 'NonFiniteUpdate', nonRetryable: true });
          }
          throw err;
        }
        // Optimizer state first, then the weights: a published version always has its moments.
        await writeAtomically(optimizerStatePath(run, version), await trainer.exportOptimizerState());
        const info = await trainer.publish(run.checkpointRoot, version);
        await registerCheckpoint(ctx.pool, { runId, policyVersion: version, path: info.dir, sha256: info.sha256, step });
        trainers.set(runId, { trainer, version });
      }
      const cp = await getCheckpoint(ctx.pool, runId, version);
      await markStepApplied(ctx.pool, runId, step, { policyVersion: version, metrics });
      await pruneConsumed(ctx.pool, runId, { keepLastSteps: run.config.train.keep_consumed_steps });
      return { step, policyVersion: version, sha256: cp?.sha256 ?? '', path: cp?.path ?? checkpointDir(run.checkpointRoot, version), samples: batch.samples.length, metrics, alreadyApplied: false, worker: ctx.identity };
    },
  };
}

export type TrainingRunActivities = ReturnType<typeof createTrainingRunActivities>;

export type TrainActivities = ReturnType<typeof createTrainActivities>;
