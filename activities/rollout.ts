// Rollout stage activities: served by every rollout worker, on the shared rollout queue.
import { recordStageEvent, sleepWithHeartbeats, workerInfoActivity, type WorkerContext } from './context';

export interface SmokeRolloutInput {
  runId: string;
  iteration: number;
  samples: number;
  groupSize: number;
  /** Stretches the activity so tests can kill the worker while it runs. */
  delayMs: number;
  seed: number;
}

// A tiny deterministic generator (mulberry32): a retried rollout writes the same samples.
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export function createRolloutActivities(ctx: WorkerContext) {
  return {
    workerInfo: workerInfoActivity(ctx),

    /** Smoke stage: writes `samples` synthetic samples to the transfer queue (idempotent per key). */
    async smokeRollout(input: SmokeRolloutInput): Promise<{ samples: number; worker: string }> {
      await recordStageEvent(ctx, input.runId, 'activity_started');
      await sleepWithHeartbeats(input.delayMs);
      const next = rng(input.seed * 1_000_003 + input.iteration);
      const rows: unknown[][] = [];
      for (let i = 0; i < input.samples; i++) {
        const prompt = [1, 2, 3].map(() => Math.floor(next() * 100));
        const response = [Math.floor(next() * 100), 0];
        const logprobs = response.map(() => Math.log(0.05 + 0.9 * next()));
        rows.push([input.runId, input.iteration, Math.floor(i / input.groupSize), i % input.groupSize, prompt, response, response.map(() => 1), logprobs, next() < 0.5 ? 1 : 0]);
      }
      // One multi-row INSERT: the embedded database pays ~1 ms per statement.
      const values = rows.map((_, r) => `(${Array.from({ length: 9 }, (_, c) => `$${r * 9 + c + 1}`).join(', ')}, 0)`).join(', ');
      await ctx.pool.query(
        `INSERT INTO samples (run_id, iteration, group_index, sample_index, prompt_tokens, response_tokens, loss_mask, rollout_logprobs, reward, policy_version)
         VALUES ${values}
         ON CONFLICT (run_id, iteration, group_index, sample_index) DO UPDATE
           SET response_tokens = EXCLUDED.response_tokens, rollout_logprobs = EXCLUDED.rollout_logprobs,
               reward = EXCLUDED.reward, updated_at = now()`,
        rows.flat(),
      );
      await recordStageEvent(ctx, input.runId, 'activity_completed', { samples: rows.length });
      return { samples: rows.length, worker: ctx.identity };
    },
  };
}

export type RolloutActivities = ReturnType<typeof createRolloutActivities>;
