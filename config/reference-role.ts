// Whether a run's iterations need the reference role's log-probs: for the KL term (algorithm.kl_coef
// > 0, which may change mid-run) or for on-policy distillation's teacher (algorithm.teacher, served on
// the reference role in place of the reference policy). Plain data, no zod: the workflow bundle imports it.

/** True when the reference stage runs: a KL term is on, or a teacher is configured. */
export function referenceLogprobsNeeded(algorithm: { teacher?: unknown }, klCoef: number): boolean {
  return klCoef > 0 || algorithm.teacher !== undefined;
}
