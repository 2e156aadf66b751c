// Reference stage activities: log-probs under the frozen reference policy, for the KL term.
import { ApplicationFailure } from '@temporalio/activity';
import { loadCheckpoint } from '../engines/checkpoint';
import { Trainer } from '../engines/trainer';
import { getCheckpoint } from '../store/checkpoint-registry';
import { readSamples, setReferenceLogprobs } from '../store/transfer-queue';
import { recordStageEvent, spanned, withHeartbeats, workerInfoActivity, type WorkerContext } from './context';
import { runContext } from './run-context';

// The frozen reference policy (policy version 0) of each run, forward passes only.
const references = new Map<string, Trainer>();

export function createReferenceActivities(ctx: WorkerContext) {
  return {
    workerInfo: workerInfoActivity(ctx),

    /** Smoke stage: reads the iteration's samples and writes reference log-probs back. */
    async smokeReference({ runId, iteration }: { runId: string; iteration: number }): Promise<{ samples: number }> {
      await recordStageEvent(ctx, runId, 'activity_started');
      const { rowCount } = await ctx.pool.query(
        `UPDATE samples SET ref_logprobs = rollout_logprobs, updated_at = now()
          WHERE run_id = $1 AND iteration = $2`,
        [runId, iteration],
      );
      await recordStageEvent(ctx, runId, 'activity_completed', { samples: rowCount });
      return { samples: rowCount ?? 0 };
    },
  };
}

export function createReferenceTrainingActivities(ctx: WorkerContext) {
  return {
    /** Reference stage: log-probs of each response token under the frozen reference policy. */
    referenceLogprobs: ({ runId, iteration }: { runId: string; iteration: number }): Promise<{ samples: number }> => withHeartbeats(() => spanned(ctx, runId, 'reference', { iteration }, async () => {
      const run = await runContext(ctx.pool, runId);
      let reference = references.get(runId);
      if (!reference) {
        const cp = await getCheckpoint(ctx.pool, runId, 0);
        if (!cp) throw ApplicationFailure.create({ message: `run ${runId} has no policy version 0 to use as reference`, type: 'MissingPolicyVersion' });
        const { weights } = await loadCheckpoint(cp.path, { model: run.model, sha256: cp.sha256 });
        reference = Trainer.create({ model: run.model, weights, optimizer: { lr: 1 } });
        references.set(runId, reference);
      }
      // In-flight samples that have no reference log-probs yet (a retry skips what is written).
      const rows = (await readSamples(ctx.pool, runId, { iteration })).filter((r) => (r.status === 'generated' || r.status === 'scored') && r.refLogprobs === null);
      const full = await reference.logprobs(rows.map((r) => [...r.promptTokens, ...r.responseTokens]));
      const updated = await setReferenceLogprobs(
        ctx.pool,
        runId,
        rows.map((r, i) => ({ iteration: r.iteration, groupIndex: r.groupIndex, sampleIndex: r.sampleIndex, refLogprobs: Array.from(full[i].slice(r.promptTokens.length - 1)) })),
      );
      return { samples: updated };
    })),
  };
}

export type ReferenceTrainingActivities = ReturnType<typeof createReferenceTrainingActivities>;

export type ReferenceActivities = ReturnType<typeof createReferenceActivities>;
