// On-policy distillation in a train step: per-token advantages from the teacher's log-probs.
// After Agarwal et al. 2024 (GKD, arXiv 2306.13649; engines/rl/distillation.ts): every sample's per-token advantage A_t = kl_coef * (log pi_T - log pi_S)_t +
// task_coef * A_task, from the rollout's log-probs (pi_S, the student that sampled) and the
// teacher's, which the reference role wrote as the sample's refLogprobs (activities/reference.ts
// serves the teacher there). A_task is the sample's advantage from the "opd" estimator (GRPO's group
// advantage of the task reward). Pure: in sync and async mode the step reads both from the samples.
import type { RunConfig, TeacherConfig } from '../config/run-config';
import { meanReverseKl, opdAdvantages } from '../engines/rl/distillation';
import type { TrainSequence } from '../engines/trainer';
import type { SequenceMedia } from '../engines/media/model-inputs';
import type { TrainSample } from './sample-buffer';

type Algorithm = RunConfig['algorithm'];

/** A sample's training sequence (its loss mask, stale tokens masked), or undefined when no loss token is left. */
export type SequenceOf<S> = (sample: S, taskAdvantage: number) => TrainSequence | undefined;

/** algorithm.teacher for a run whose advantage is "opd"; undefined otherwise. */
export function opdOf(algorithm: Algorithm): TeacherConfig | undefined {
  return algorithm.advantage === 'opd' ? algorithm.teacher : undefined;
}

/** The sample's student (rollout) and teacher (refLogprobs) log-probs, or an error naming what is missing. */
function logprobRows(s: TrainSample): { student: ArrayLike<number>; teacher: ArrayLike<number> } {
  const where = `sample ${s.iteration}/${s.groupIndex}/${s.sampleIndex}`;
  if (!s.rolloutLogprobs) throw new Error(`${where} has no rollout log-probs, which algorithm.advantage "opd" needs (log pi_S of the sampled tokens)`);
  if (!s.refLogprobs) throw new Error(`${where} has no teacher log-probs: the reference stage (algorithm.teacher) has not scored it`);
  return { student: s.rolloutLogprobs, teacher: s.refLogprobs };
}

/** A response row back to a full-sequence row, zeros on the prompt's targets. */
function fullRow(response: ArrayLike<number>, promptLength: number): Float32Array {
  const out = new Float32Array(promptLength - 1 + response.length);
  out.set(Array.from(response), promptLength - 1);
  return out;
}

/**
 * The batch's training sequences with OPD's per-token advantages, and the step's distillation
 * metrics: opd_reverse_kl (mean log pi_S - log pi_T over the trained tokens) and opd_advantage_mean.
 * `taskAdvantages` are the estimator's, one per sample in order; `sequenceOf` makes a sample's
 * sequence with its loss mask (training/step.ts trainSequences). Every sample with a loss token trains.
 */
export function opdSequences<S extends TrainSample & { sequenceMedia?: SequenceMedia }>(teacher: TeacherConfig, samples: readonly S[], taskAdvantages: readonly number[], sequenceOf: SequenceOf<S>): { sequences: TrainSequence[]; metrics: Record<string, number> } {
  const coef = { klCoef: teacher.kl_coef, taskCoef: teacher.task_coef };
  const sequences: TrainSequence[] = [];
  const rows: Array<{ student: ArrayLike<number>; teacher: ArrayLike<number>; mask: ArrayLike<number> }> = [];
  let advantageSum = 0;
  let tokens = 0;
  samples.forEach((s, i) => {
    const seq = sequenceOf(s, taskAdvantages[i]);
    if (!seq) return; // no loss token left
    const lp = logprobRows(s);
    const a = opdAdvantages(lp.student, lp.teacher, taskAdvantages[i], coef);
    const P = s.promptTokens.length;
    const mask = Array.prototype.slice.call(seq.lossMask, P - 1) as number[];
    rows.push({ ...lp, mask });
    a.forEach((v, t) => {
      if (mask[t] > 0) {
        advantageSum += v;
        tokens++;
      }
    });
    sequences.push({ ...seq, advantages: fullRow(a, P) });
  });
  return { sequences, metrics: { opd_reverse_kl: meanReverseKl(rows), opd_advantage_mean: tokens ? advantageSum / tokens : 0 } };
}
