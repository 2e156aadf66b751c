// Train stage activities. The trainer holds weights and optimizer state in memory, so its stateful
// activities run on the worker's own instance queue; `workerInfo` on the shared queue picks one.
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { ApplicationFailure } from '@temporalio/activity';
import { loadCheckpoint, optimizerStatePath, publishCheckpoint } from '../engines/checkpoint';
import { initWeights } from '../engines/model';
import { NonFiniteUpdateError, Trainer, trainSequenceFromSample } from '../engines/trainer';
import { getCheckpoint, pruneCheckpoints, registerCheckpoint, resolveInitFrom } from '../store/checkpoint-registry';
import { recordMetrics } from '../store/metrics';
import { previousSpanEnd, recordSpan } from '../store/spans';
import { getTrainStep, markStepApplied, markStepSkipped, pruneConsumed, recordStepAdvantages, selectTrainBatch, type SampleRow } from '../store/transfer-queue';
import { staleTokenMask } from '../engines/rl/losses';
import { batchAdvantages, policyLossFor, type BatchSample } from '../training/grpo';
import { checkpointToLoad, recordStageEvent, withHeartbeats, workerInfoActivity, type WorkerContext } from './context';
import { runContext, type RunContext } from './run-context';

export interface PolicyVersionInfo {
  policyVersion: number;
  sha256: string;
  path: string;
}

export interface TrainStepInput {
  runId: string;
  step: number;
  /** The policy version the update starts from; it publishes fromVersion + 1. */
  fromVersion: number;
  /** The rollout's statistics for this step, recorded with the step's own metrics. */
  rolloutMetrics?: Record<string, number>;
  /** The rollout iteration this step trains on (default step - 1: sync mode). */
  iteration?: number;
  /** Refuse samples generated more than this many versions before fromVersion (async mode's bound). */
  maxStaleness?: number;
}

export interface TrainStepResult extends PolicyVersionInfo {
  step: number;
  samples: number;
  metrics: Record<string, number>;
  /** True when the step had been applied before (a retry): nothing was trained again. */
  alreadyApplied: boolean;
  /** Set when the update was not finite and train.on_non_finite is "skip": no version was published. */
  skipped?: string;
  worker: string;
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
  const checkpoint = await checkpointToLoad(ctx, run.runId, version);
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
  const optimizerState = await readFile(optimizerStatePath(run.checkpointRoot, version)).catch(() => undefined);
  if (optimizerState) trainer.importOptimizerState(new Uint8Array(optimizerState));
  else if (version > 0) console.warn(`[train] run ${run.runId}: no optimizer state for version ${version}; continuing with fresh AdamW moments`);
  trainers.set(run.runId, { trainer, version });
  return trainer;
}

/**
 * How many policy versions behind the trainer each consumed sample was: fromVersion - the version
 * that generated it. Mean, max and a histogram (staleness_hist_<d>: samples d versions old).
 */
export function stalenessMetrics(samples: ReadonlyArray<Pick<SampleRow, 'policyVersion'>>, fromVersion: number): Record<string, number> {
  if (!samples.length) return {};
  const out: Record<string, number> = {};
  let sum = 0;
  let max = 0;
  for (const s of samples) {
    const d = fromVersion - s.policyVersion;
    sum += d;
    max = Math.max(max, d);
    out[`staleness_hist_${d}`] = (out[`staleness_hist_${d}`] ?? 0) + 1;
  }
  return { staleness_mean: sum / samples.length, staleness_max: max, ...out };
}

function batchSample(s: SampleRow): BatchSample {
  if (s.reward === null) throw new Error(`sample ${s.iteration}/${s.groupIndex}/${s.sampleIndex} was selected for training without a reward`);
  return { groupKey: `${s.iteration}/${s.groupIndex}`, reward: s.reward, rolloutLogprobs: s.rolloutLogprobs, refLogprobs: s.refLogprobs };
}

/**
 * Training sequences of the recorded sample set; samples without a learning signal (advantage 0) are
 * left out. Each sample's own loss mask applies, and with algorithm.max_token_staleness tokens
 * generated too many versions before `fromVersion` are masked out too.
 */
function trainSequences(samples: SampleRow[], advantages: number[], fromVersion: number, maxTokenStaleness: number | undefined) {
  return samples
    .map((s, i) => ({ s, advantage: advantages[i] }))
    .filter(({ advantage }) => advantage !== 0)
    .map(({ s, advantage }) => {
      let lossMask: ArrayLike<number> = s.lossMask;
      if (maxTokenStaleness !== undefined) {
        const fresh = staleTokenMask(s.tokenVersions ?? s.responseTokens.map(() => s.policyVersion), fromVersion, maxTokenStaleness);
        lossMask = Float32Array.from(s.lossMask, (m, t) => m * fresh[t]);
      }
      return trainSequenceFromSample(s.promptTokens, { tokens: s.responseTokens, logprobs: s.rolloutLogprobs ?? [] }, {
        advantage,
        lossMask,
        ...(s.refLogprobs ? { refLogprobs: [...new Array(s.promptTokens.length - 1).fill(0), ...s.refLogprobs] } : {}),
      });
    })
    .filter((seq) => Array.prototype.some.call(seq.lossMask, (m: number) => m > 0));
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
          // A checkpoint directory, or <run_id>@<version> / <run_id>@latest from the registry.
          const source = await resolveInitFrom(ctx.pool, run.config.checkpoint.init_from);
          weights = (await loadCheckpoint(source.path, { model: run.model, sha256: source.sha256 })).weights;
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
    async trainStep({ runId, step, fromVersion, rolloutMetrics, iteration = step - 1, maxStaleness }: TrainStepInput): Promise<TrainStepResult> {
      const run = await runContext(ctx.pool, runId);
      const version = fromVersion + 1;
      const startedAt = new Date();
      const [recorded, previousEnd] = await Promise.all([
        getTrainStep(ctx.pool, runId, step),
        previousSpanEnd(ctx.pool, runId, 'train', startedAt),
        recordStageEvent(ctx, runId, 'activity_started', { step, fromVersion }),
      ]);
      // How long the trainer waited for this step's data since its previous step ended.
      // Samples per second through the pipeline: this step's batch over the time since the previous step ended.
      const timing = (samples?: number) => ({
        train_busy_ms: Date.now() - startedAt.getTime(),
        ...(previousEnd ? { train_wait_ms: startedAt.getTime() - previousEnd.getTime() } : {}),
        ...(previousEnd && samples ? { samples_per_s: samples / Math.max(0.001, (Date.now() - previousEnd.getTime()) / 1000) } : {}),
      });
      const span = (policyVersion: number, detail: Record<string, unknown> = {}) =>
        recordSpan(ctx.pool, { runId, role: ctx.role, stage: 'train', worker: ctx.identity, step, iteration, policyVersion, startedAt, endedAt: new Date(), detail });
      if (recorded?.status === 'skipped') {
        return { step, policyVersion: fromVersion, sha256: '', path: '', samples: recorded.sampleCount, metrics: recorded.metrics ?? { skipped_non_finite: 1 }, alreadyApplied: true, skipped: recorded.skipReason ?? 'skipped', worker: ctx.identity };
      }
      if (recorded?.status === 'applied') {
        const cp = await getCheckpoint(ctx.pool, runId, recorded.policyVersion as number);
        return { step, policyVersion: recorded.policyVersion as number, sha256: cp?.sha256 ?? '', path: cp?.path ?? '', samples: recorded.sampleCount, metrics: recorded.metrics ?? {}, alreadyApplied: true, worker: ctx.identity };
      }
      const c = run.config;
      // Whether an earlier attempt already published this step's version (read alongside the selection).
      const [batch, publishedBefore] = await Promise.all([
        selectTrainBatch(ctx.pool, runId, step, {
          size: c.rollout.prompts_per_step * c.algorithm.group_size,
          iteration,
          requireRefLogprobs: c.algorithm.kl_coef > 0,
          ...(maxStaleness !== undefined ? { maxStaleness, currentPolicyVersion: fromVersion } : {}),
        }),
        getCheckpoint(ctx.pool, runId, version),
      ]);
      if (!batch) {
        const bound = maxStaleness === undefined ? '' : ` generated by policy version ${Math.max(0, fromVersion - maxStaleness)} or later (max_staleness ${maxStaleness})`;
        throw ApplicationFailure.create({ message: `no scored samples of iteration ${iteration}${bound} are ready for step ${step} of run ${runId}`, type: 'NoSamples' });
      }
      const staleness = stalenessMetrics(batch.samples, fromVersion);
      // Advantages from the batch itself (group baselines, REINFORCE++'s batch normalization, KL
      // shaping): a pure function of the recorded set, so a retried step computes the same ones.
      const advantages = batchAdvantages(c.algorithm, batch.samples.map(batchSample));
      const advantagesWritten = recordStepAdvantages(ctx.pool, runId, step, batch.samples.map((s, i) => ({ iteration: s.iteration, groupIndex: s.groupIndex, sampleIndex: s.sampleIndex, advantage: advantages[i] })));

      let published = publishedBefore;
      let metrics: Record<string, number>;
      if (published) {
        // The update ran and was published by an attempt that died before recording it: adopt it.
        trainers.get(runId)?.trainer.dispose();
        trainers.delete(runId);
        metrics = { adopted: 1 };
      } else {
        const trainer = await trainerAt(ctx, run, fromVersion);
        const sequences = trainSequences(batch.samples, advantages, fromVersion, c.algorithm.max_token_staleness);
        try {
          const m = sequences.length ? await withHeartbeats(() => trainer.trainStep(sequences, policyLossFor(c.algorithm))) : undefined;
          metrics = m
            ? {
                loss: m.loss,
                grad_norm: m.gradNorm,
                lr: m.lr,
                entropy: m.entropy,
                clip_fraction: m.clipFraction ?? 0,
                ratio_mean: m.ratioMean ?? 1,
                trained_samples: sequences.length,
                duration_ms: m.durationMs,
                ...(m.kl !== undefined ? { kl: m.kl } : {}),
                ...(m.lossMetrics.logprobMismatch !== undefined ? { logprob_mismatch: m.lossMetrics.logprobMismatch } : {}),
                ...(m.lossMetrics.importanceWeightMean !== undefined ? { importance_weight_mean: m.lossMetrics.importanceWeightMean } : {}),
                ...(m.lossMetrics.importanceTruncatedFraction !== undefined ? { importance_truncated_fraction: m.lossMetrics.importanceTruncatedFraction } : {}),
              }
            : { trained_samples: 0 };
        } catch (err) {
          // Whatever state the failed step left in memory, the next attempt rebuilds from fromVersion.
          trainers.get(runId)?.trainer.dispose();
          trainers.delete(runId);
          await advantagesWritten.catch(() => undefined);
          if (err instanceof NonFiniteUpdateError) {
            if (c.train.on_non_finite === 'skip') {
              // The sample set stays consumed (recorded), no version is published, the run goes on.
              const reason = `step ${step}: ${err.message}`;
              console.warn(`[train] run ${runId}: skipping ${reason} (train.on_non_finite = "skip")`);
              await markStepSkipped(ctx.pool, runId, step, reason);
              await recordMetrics(ctx.pool, runId, step, { ...rolloutMetrics, ...staleness, ...timing(), skipped_non_finite: 1 });
              await span(fromVersion, { skipped: true });
              return { step, policyVersion: fromVersion, sha256: '', path: '', samples: batch.samples.length, metrics: { skipped_non_finite: 1 }, alreadyApplied: false, skipped: reason, worker: ctx.identity };
            }
            throw ApplicationFailure.create({
              message: `step ${step}: ${err.message}; nothing was applied or published. Set train.on_non_finite to "skip" to drop such updates and go on`,
              type: 'NonFiniteUpdate',
              nonRetryable: true,
            });
          }
          throw err;
        }
        // Optimizer state first, then the weights: a published version always has its moments.
        await writeAtomically(optimizerStatePath(run.checkpointRoot, version), await trainer.exportOptimizerState());
        const info = await trainer.publish(run.checkpointRoot, version);
        published = await registerCheckpoint(ctx.pool, { runId, policyVersion: version, path: info.dir, sha256: info.sha256, step });
        trainers.set(runId, { trainer, version });
      }
      await advantagesWritten;
      await markStepApplied(ctx.pool, runId, step, { policyVersion: version, metrics });
      await Promise.all([
        recordMetrics(ctx.pool, runId, step, { ...rolloutMetrics, ...metrics, ...staleness, ...timing(batch.samples.length) }),
        pruneConsumed(ctx.pool, runId, { keepLastSteps: c.train.keep_consumed_steps }),
        // Every version is published for weight sync; retention keeps version 0, the versions a
        // rollout engine may still be asked for, and every checkpoint.every-th (keep_last of them).
        pruneCheckpoints(ctx.pool, { runId, checkpointRoot: run.checkpointRoot, latest: version, every: c.checkpoint.every, keepLast: c.checkpoint.keep_last, protect: c.max_staleness + 1 }),
      ]);
      await span(version);
      return { step, policyVersion: version, sha256: published.sha256, path: published.path, samples: batch.samples.length, metrics, alreadyApplied: false, worker: ctx.identity };
    },
  };
}

export type TrainingRunActivities = ReturnType<typeof createTrainingRunActivities>;

export type TrainActivities = ReturnType<typeof createTrainActivities>;
