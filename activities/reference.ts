// Reference stage activity: log-probs of each in-flight sample's response under the frozen reference
// policy (policy version 0 of the run), for the KL term, or, with algorithm.teacher, under on-policy
// distillation's teacher instead (training/teacher-model.ts): the "opd" advantage and any KL term
// then read the teacher's log-probs. Served on the shared reference queue; errors a retry cannot fix
// leave as non-retryable failures (activities/context.ts asActivityFailure). A LoRA student's
// reference is its base model (version 0's adapters are zero; withBaseWeights completes them), and a
// LoRA teacher checkpoint of the same base completes with the same base weights.
import { parseDevice } from '../engines/device';
import type { ModelConfig, PolicyWeights } from '../engines/model';
import { readSamples, setReferenceLogprobs } from '../store/transfer-queue';
import { referenceTrainerOptions } from '../training/options';
import { withBaseWeights } from '../training/policy-model';
import { loadPolicyWeights } from '../training/policy-versions';
import { loadTeacher } from '../training/teacher-model';
import { runState } from '../training/run-state';
import { RemoteTrainer } from '../training/trainer-thread';
import type { RunContext } from '../training/run-context';
import { attachReferenceLogprobs } from '../training/step';
import { assertAttemptCurrent, failuresMapped, runContext, spanned, withHeartbeats, workerInfoActivity, type WorkerContext } from './context';

// The frozen reference policy of each run, forward passes only, on this process's trainer thread.
const references = runState.slot<RemoteTrainer>('reference.model', (reference) => reference.dispose());

/** What the reference role serves for the run: algorithm.teacher when set, else policy version 0 (with a LoRA run's base weights). */
async function referenceModel(ctx: WorkerContext, run: RunContext): Promise<{ model: ModelConfig; weights: PolicyWeights }> {
  const teacher = run.config.algorithm.teacher;
  if (teacher) return loadTeacher(ctx.pool, teacher.from, run.policy);
  return { model: run.model, weights: await withBaseWeights(run.policy, await loadPolicyWeights(ctx.pool, run, 0)) };
}

/** The run's reference policy (or teacher) on this process's trainer thread, made once per run. */
export async function referenceOf(ctx: WorkerContext, run: RunContext): Promise<RemoteTrainer> {
  let reference = references.get(run.runId);
  if (reference?.lost) {
    references.delete(run.runId);
    reference = undefined;
  }
  if (!reference) {
    const { model, weights } = await failuresMapped(() => referenceModel(ctx, run));
    reference = await RemoteTrainer.create(referenceTrainerOptions(model, weights, run.config.train.share_prompts), parseDevice(ctx.device));
    references.set(run.runId, reference);
  }
  return reference;
}

async function referenceLogprobsActivity(ctx: WorkerContext, { runId, iteration }: { runId: string; iteration: number }): Promise<{ samples: number }> {
  const run = await runContext(ctx, runId);
  const reference = await referenceOf(ctx, run);
  // The iteration's in-flight samples that have no reference log-probs yet (a retry skips what is written).
  const set = await attachReferenceLogprobs(reference, await readSamples(ctx.pool, runId, { iteration }), run.media);
  assertAttemptCurrent(); // an attempt Temporal gave up on writes nothing
  const updated = await setReferenceLogprobs(ctx.pool, runId, set.map((r) => ({ iteration: r.iteration, groupIndex: r.groupIndex, sampleIndex: r.sampleIndex, refLogprobs: r.refLogprobs })));
  return { samples: updated };
}

export function createReferenceActivities(ctx: WorkerContext) {
  return {
    workerInfo: workerInfoActivity(ctx),
    referenceLogprobs: (input: { runId: string; iteration: number }) =>
      failuresMapped(() => withHeartbeats(() => spanned(ctx, input.runId, 'reference', { iteration: input.iteration }, () => referenceLogprobsActivity(ctx, input)))),
  };
}

export type ReferenceActivities = ReturnType<typeof createReferenceActivities>;
