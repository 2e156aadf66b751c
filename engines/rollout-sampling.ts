// The rollout engine's per-token arithmetic, apart from ONNX Runtime: sampling parameter checks,
// log-softmax of one row of logits, the argmax, and the sampler (temperature, top-k, top-p) that
// engines/rollout.ts applies to the last position's logits of every row at each step.
import type { SamplingParams } from './rollout';

/** Refuses sampling params out of range, naming the field. */
export function checkSamplingParams(p: SamplingParams, vocabSize: number): void {
  const fail = (field: string, why: string) => {
    throw new Error(`sampling params: ${field} ${why}`);
  };
  if (!Number.isInteger(p.maxNewTokens) || p.maxNewTokens < 1) fail('maxNewTokens', `must be an integer >= 1, got ${p.maxNewTokens}`);
  if (p.temperature !== undefined && !(p.temperature >= 0 && Number.isFinite(p.temperature))) fail('temperature', `must be a finite number >= 0, got ${p.temperature}`);
  if (p.topP !== undefined && !(p.topP > 0 && p.topP <= 1)) fail('topP', `must be in (0, 1], got ${p.topP}`);
  if (p.topK !== undefined && !(Number.isInteger(p.topK) && p.topK >= 0)) fail('topK', `must be an integer >= 0, got ${p.topK}`);
  for (const t of p.stopTokens ?? []) {
    if (!Number.isInteger(t) || t < 0 || t >= vocabSize) fail('stopTokens', `contains ${t}, not a token id of this ${vocabSize}-token vocabulary`);
  }
  if (p.seed !== undefined && !Number.isInteger(p.seed)) fail('seed', `must be an integer, got ${p.seed}`);
}

/** log-softmax of one row of logits, in float64. */
export function logSoftmax(logits: Float32Array, offset: number, V: number, temperature = 1): Float64Array {
  const out = new Float64Array(V);
  let max = -Infinity;
  for (let v = 0; v < V; v++) max = Math.max(max, logits[offset + v] / temperature);
  let sum = 0;
  for (let v = 0; v < V; v++) sum += Math.exp(logits[offset + v] / temperature - max);
  const logSum = Math.log(sum) + max;
  for (let v = 0; v < V; v++) out[v] = logits[offset + v] / temperature - logSum;
  return out;
}

/** The index of the largest logit of one row (the first on ties). */
export function argmax(logits: Float32Array, offset: number, V: number): number {
  let best = 0;
  for (let v = 1; v < V; v++) if (logits[offset + v] > logits[offset + best]) best = v;
  return best;
}

/**
 * Draws a token from softmax(logits / temperature) restricted to the top-k tokens, then to the
 * nucleus (smallest most-likely prefix whose renormalized mass reaches topP); returns it with its
 * log-probability under that restricted distribution. topK 0 / topP 1 disable the restrictions.
 */
export function sampleToken(logits: Float32Array, offset: number, V: number, temperature: number, topK: number, topP: number, rand: () => number, logSoftmaxAtTemperature?: Float64Array): { token: number; logq: number } {
  const logq = logSoftmaxAtTemperature ?? logSoftmax(logits, offset, V, temperature);
  if (topK === 0 && topP >= 1) {
    // No truncation: draw from the whole distribution in one pass (large vocabularies).
    let u = rand();
    for (let v = 0; v < V; v++) {
      u -= Math.exp(logq[v]);
      if (u < 0) return { token: v, logq: logq[v] };
    }
    let last = V - 1;
    while (last > 0 && !(logq[last] > -Infinity)) last--;
    return { token: last, logq: logq[last] };
  }
  let order = Array.from({ length: V }, (_, v) => v);
  if (topK > 0 || topP < 1) {
    order.sort((a, b) => logq[b] - logq[a] || a - b);
    if (topK > 0) order = order.slice(0, topK);
    if (topP < 1) {
      // Nucleus over the top-k survivors, renormalized (top-k first, then top-p, as HF does).
      const survivors = order.reduce((m, v) => m + Math.exp(logq[v]), 0);
      let mass = 0;
      let keep = 0;
      while (keep < order.length && mass < topP * survivors) mass += Math.exp(logq[order[keep++]]);
      order = order.slice(0, Math.max(1, keep));
    }
  }
  let total = 0;
  for (const v of order) total += Math.exp(logq[v]);
  let u = rand() * total;
  let token = order[order.length - 1];
  for (const v of order) {
    u -= Math.exp(logq[v]);
    if (u < 0) {
      token = v;
      break;
    }
  }
  return { token, logq: logq[token] - Math.log(total) };
}

/**
 * Draws a token from softmax(logits) given exps = exp(logits - max) and their sum (temperature 1,
 * no truncation): one running subtraction, no exponentials. Returns it with its log-probability.
 */
export function drawFromExps(exps: Float32Array, offset: number, V: number, sum: number, logits: Float32Array, logNormalizer: number, rand: () => number): { token: number; logq: number } {
  let u = rand() * sum;
  let token = -1;
  for (let v = 0; v < V; v++) {
    u -= exps[offset + v];
    if (u < 0) {
      token = v;
      break;
    }
  }
  // Rounding left u >= 0 past the end: the last token with any mass.
  if (token < 0) for (token = V - 1; token > 0 && !(exps[offset + token] > 0); token--);
  return { token, logq: logits[offset + token] - logNormalizer };
}
