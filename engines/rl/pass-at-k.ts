// Sampled-evaluation metrics over k completions per prompt: pass@k with the unbiased estimator of
// Chen et al. 2021, "Evaluating Large Language Models Trained on Code" (arXiv 2107.03374, eq. 1),
// pass@k = 1 - C(n-c, k) / C(n, k), computed as the stable product 1 - prod_{i=n-c+1..n} (1 - k/i);
// maj@k (majority vote: the most frequent answer among the samples is scored; also called
// self-consistency, Wang et al. 2022, arXiv 2203.11171); mean@k (the mean reward of the samples).
// Pure functions; a dataset's score is the mean of its prompts' scores.

/** A bad argument to one of these metrics (names the argument and the rule). */
export class PassAtKError extends Error {
  override readonly name = 'PassAtKError';
}

function checkCounts(n: number, c: number, k: number): void {
  if (!Number.isInteger(n) || n < 1) throw new PassAtKError(`n (samples per prompt) must be an integer >= 1, got ${n}`);
  if (!Number.isInteger(c) || c < 0 || c > n) throw new PassAtKError(`c (correct samples) must be an integer in [0, n=${n}], got ${c}`);
  if (!Number.isInteger(k) || k < 1 || k > n) throw new PassAtKError(`k must be an integer in [1, n=${n}] (draw at least k samples per prompt), got ${k}`);
}

/**
 * The unbiased estimate of pass@k from n samples of which c are correct: the probability that a
 * k-subset drawn without replacement from the n holds at least one correct sample.
 */
export function passAtK(n: number, c: number, k: number): number {
  checkCounts(n, c, k);
  if (n - c < k) return 1;
  let allWrong = 1;
  for (let i = n - c + 1; i <= n; i++) allWrong *= 1 - k / i;
  return 1 - allWrong;
}

/** The most frequent answer (ties: the one that appears first); undefined for no answers. */
export function majorityAnswer(answers: readonly string[]): string | undefined {
  const counts = new Map<string, number>();
  for (const a of answers) counts.set(a, (counts.get(a) ?? 0) + 1);
  let best: string | undefined;
  // A Map iterates in insertion order: the first answer to appear wins a tie.
  for (const [a, n] of counts) if (best === undefined || n > (counts.get(best) as number)) best = a;
  return best;
}

/**
 * maj@k of one prompt: 1 when the majority answer of its k samples is correct, else 0. `correct[i]`
 * says whether sample i (whose answer is `answers[i]`) was correct; the majority answer counts as
 * correct when its first sample was.
 */
export function majAtK(answers: readonly string[], correct: readonly boolean[]): number {
  if (answers.length === 0) throw new PassAtKError('answers must hold at least one sample');
  if (answers.length !== correct.length) throw new PassAtKError(`answers (${answers.length}) and correct (${correct.length}) must have one entry per sample`);
  const majority = majorityAnswer(answers);
  return correct[answers.indexOf(majority as string)] ? 1 : 0;
}

/** mean@k of one prompt: the mean reward of its k samples. */
export function meanAtK(rewards: readonly number[]): number {
  if (rewards.length === 0) throw new PassAtKError('rewards must hold at least one sample');
  return rewards.reduce((s, r) => s + r, 0) / rewards.length;
}
