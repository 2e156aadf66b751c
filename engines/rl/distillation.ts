// On-policy distillation (OPD): the student samples, a teacher scores the student's own tokens, and
// the per-token reverse KL is the learning signal. After Agarwal et al. 2024, "On-Policy
// Distillation of Language Models: Learning from Self-Generated Mistakes" (GKD, arXiv 2306.13649),
// with the per-token reverse-KL advantage of Thinking Machines' "On-Policy Distillation" (2025) and
// the Qwen3 report (arXiv 2505.09388):
//   A_t = kl_coef * (log pi_T(y_t) - log pi_S(y_t)) + task_coef * A_task
// where log pi_S are the rollout's log-probs of the sampled tokens, log pi_T the teacher's on the
// same tokens, and A_task the sample's task-reward advantage (one number per response). Pure math:
// the train step (training/opd-step.ts) builds sequences from it.

/** The options of the OPD advantage: weights of the reverse-KL term and of the task advantage. */
export interface OpdCoefficients {
  klCoef: number;
  taskCoef: number;
}

function checkRows(student: ArrayLike<number>, teacher: ArrayLike<number>): void {
  if (student.length !== teacher.length) {
    throw new Error(`the student has ${student.length} log-probs and the teacher ${teacher.length}: both must score the same response tokens`);
  }
  for (let t = 0; t < student.length; t++) {
    if (!Number.isFinite(student[t]) || !Number.isFinite(teacher[t])) {
      throw new Error(`token ${t}: log pi_S ${student[t]}, log pi_T ${teacher[t]}: every log-prob must be a finite number`);
    }
  }
}

/** Per-token reverse KL sample, k1 of KL(pi_S || pi_T) at the sampled token: log pi_S(y_t) - log pi_T(y_t). */
export function reverseKlPerToken(student: ArrayLike<number>, teacher: ArrayLike<number>): Float64Array {
  checkRows(student, teacher);
  return Float64Array.from({ length: student.length }, (_, t) => student[t] - teacher[t]);
}

/** OPD's per-token advantages of one response: A_t = klCoef * (log pi_T - log pi_S)_t + taskCoef * taskAdvantage. */
export function opdAdvantages(student: ArrayLike<number>, teacher: ArrayLike<number>, taskAdvantage: number, coef: OpdCoefficients): Float64Array {
  if (!Number.isFinite(taskAdvantage)) throw new Error(`the task advantage is ${taskAdvantage}: it must be a finite number`);
  const kl = reverseKlPerToken(student, teacher);
  return kl.map((k) => -coef.klCoef * k + coef.taskCoef * taskAdvantage);
}

/** The mean per-token reverse KL over the tokens whose mask is > 0 (0 when none is). */
export function meanReverseKl(rows: ReadonlyArray<{ student: ArrayLike<number>; teacher: ArrayLike<number>; mask: ArrayLike<number> }>): number {
  let sum = 0;
  let n = 0;
  for (const { student, teacher, mask } of rows) {
    const kl = reverseKlPerToken(student, teacher);
    kl.forEach((k, t) => {
      if (mask[t] > 0) {
        sum += k;
        n++;
      }
    });
  }
  return n ? sum / n : 0;
}
