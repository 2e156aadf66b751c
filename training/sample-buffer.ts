// The sample buffer between rollout and training, behind one interface with two implementations:
// the transfer queue in Postgres (the workflow's activities: durable, shared by every worker) and an
// in-memory buffer (the in-process loop). Both keep the same rules: samples are keyed (iteration,
// group, index) and a rewrite of a key replaces it; a step's sample set is claimed once, in key
// order, from scored samples only, within the staleness bound; a claimed set is returned again to a
// retry; numbers come back as the transfer queue's real (float32) columns give them back.
import type { Pool } from 'pg';
import { insertSamples, selectTrainBatch, type NewSample, type SampleRow } from '../store/transfer-queue';

/** What the train step reads of a sample. */
export type TrainSample = Pick<
  SampleRow,
  'iteration' | 'groupIndex' | 'sampleIndex' | 'promptTokens' | 'responseTokens' | 'lossMask' | 'rolloutLogprobs' | 'refLogprobs' | 'tokenVersions' | 'policyVersion' | 'reward'
> & Partial<Pick<SampleRow, 'media'>>;

export interface ClaimRequest {
  /** At most this many samples. */
  size: number;
  /** Only samples of this rollout iteration (a step trains one whole iteration). */
  iteration?: number;
  /** Only samples whose reference log-probs are written (the KL term needs them). */
  requireRefLogprobs: boolean;
  /** The policy version the step starts from; with maxStaleness, older samples are refused. */
  fromVersion: number;
  maxStaleness?: number;
}

export interface SampleBuffer {
  /** Adds samples; a key written again is replaced unless a step already claimed it. */
  put(samples: readonly NewSample[]): Promise<void>;
  /**
   * The sample set of train step `step`, ordered by (iteration, group, index) and decided once: a
   * retry gets the same set whatever the request now says; undefined (nothing recorded) when none is ready.
   */
  claim(step: number, request: ClaimRequest): Promise<TrainSample[] | undefined>;
}

/**
 * The transfer queue in Postgres (store/transfer-queue.ts) as a run's sample buffer. `engine`: the
 * rollout engine writing through it (its worker identity), recorded with each sample.
 */
export function transferQueueBuffer(pool: Pool, runId: string, options: { engine?: string } = {}): SampleBuffer {
  return {
    async put(samples) {
      await insertSamples(pool, runId, samples, options.engine ? { engine: options.engine } : {});
    },
    async claim(step, r) {
      const batch = await selectTrainBatch(pool, runId, step, {
        size: r.size,
        requireRefLogprobs: r.requireRefLogprobs,
        ...(r.iteration !== undefined ? { iteration: r.iteration } : {}),
        ...(r.maxStaleness !== undefined ? { maxStaleness: r.maxStaleness, currentPolicyVersion: r.fromVersion } : {}),
      });
      return batch?.samples;
    },
  };
}

/**
 * A number as a `real` column gives it back: rounded to float32, then printed the way Postgres
 * prints a float4 (the shortest decimal that reads back as the same float32) and parsed as a double.
 */
function asStoredReal(x: number): number {
  const f = Math.fround(x);
  if (!Number.isFinite(f)) return f;
  // A normal float32's shortest form of k <= 6 digits, parsed, equals its 6-digit rounding parsed
  // (that decimal padded with zeros: 6-digit steps are far wider than a float32's ulp), so the search
  // starts at 6 digits; subnormals (coarser ulps) start at 1.
  for (let digits = Math.abs(f) >= 1.1754943508222875e-38 ? 6 : 1; digits < 9; digits++) {
    const shortest = Number(f.toPrecision(digits));
    if (Math.fround(shortest) === f) return shortest;
  }
  return Number(f.toPrecision(9));
}

const asStoredReals = (xs: ArrayLike<number> | null | undefined): number[] | null => (xs == null ? null : Array.from(xs, asStoredReal));

function keyOf(s: { iteration: number; groupIndex: number; sampleIndex: number }): string {
  return `${s.iteration}/${s.groupIndex}/${s.sampleIndex}`;
}

/** The in-process loop's buffer: the transfer queue's rules in a Map. */
export class InMemorySampleBuffer implements SampleBuffer {
  private readonly samples = new Map<string, TrainSample & { status: string }>();
  private readonly claims = new Map<number, TrainSample[]>();
  private readonly claimed = new Set<string>();

  async put(samples: readonly NewSample[]): Promise<void> {
    for (const s of samples) {
      const key = keyOf(s);
      if (this.claimed.has(key)) continue;
      this.samples.set(key, {
        iteration: s.iteration,
        groupIndex: s.groupIndex,
        sampleIndex: s.sampleIndex,
        promptTokens: Array.from(s.promptTokens),
        responseTokens: Array.from(s.responseTokens),
        lossMask: Array.from(s.lossMask),
        rolloutLogprobs: asStoredReals(s.rolloutLogprobs),
        refLogprobs: asStoredReals(s.refLogprobs),
        tokenVersions: s.tokenVersions == null ? null : Array.from(s.tokenVersions),
        policyVersion: s.policyVersion,
        reward: s.reward == null ? null : asStoredReal(s.reward),
        ...(s.media ? { media: [...s.media] } : {}),
        status: s.status ?? 'generated',
      });
    }
  }

  async claim(step: number, r: ClaimRequest): Promise<TrainSample[] | undefined> {
    const before = this.claims.get(step);
    if (before) return before;
    const ready = [...this.samples.entries()]
      .filter(([, s]) => s.status === 'scored')
      .filter(([, s]) => r.iteration === undefined || s.iteration === r.iteration)
      .filter(([, s]) => !r.requireRefLogprobs || s.refLogprobs !== null)
      .filter(([, s]) => r.maxStaleness === undefined || s.policyVersion >= r.fromVersion - r.maxStaleness)
      .sort(([, a], [, b]) => a.iteration - b.iteration || a.groupIndex - b.groupIndex || a.sampleIndex - b.sampleIndex)
      .slice(0, r.size);
    if (!ready.length) return undefined;
    const samples = ready.map(([key, { status: _status, ...s }]) => {
      this.samples.delete(key);
      this.claimed.add(key);
      return s;
    });
    this.claims.set(step, samples);
    // Like the transfer queue's pruneConsumed: only recent steps' sets are kept for retries.
    for (const old of this.claims.keys()) if (old < step - 2) this.claims.delete(old);
    return samples;
  }
}
