// The rollout autoscaler's config (workflows/autoscaler.ts), validated where it enters (the control
// API, the client) so the workflow module stays free of zod. Off unless started.
import { z } from 'zod';

const secs = (min: number, max: number, fallback: number) => z.number().min(min).max(max).default(fallback);

export const AutoscalerConfigSchema = z
  .object({
    /** Engines the autoscaler keeps at least / at most (local rollout workers of relax dev). */
    min_engines: z.number().int().min(1).max(64).default(1),
    max_engines: z.number().int().min(1).max(64).default(4),
    /** How often it reads the rollout queue's backlog (Temporal's task-queue statistics). */
    interval_secs: secs(0.5, 300, 5),
    scale_out: z
      .object({
        /** Scale out when the mean backlog per engine over the sustain window is at least this. */
        backlog_per_engine: z.number().gt(0).max(1000).default(1),
        sustain_secs: secs(0, 3600, 20),
        /** Engines added per decision. */
        step: z.number().int().min(1).max(16).default(1),
      })
      .strict()
      .prefault({}),
    scale_in: z
      .object({
        /** Scale in when the mean backlog per engine over the sustain window is at most this. */
        backlog_per_engine: z.number().min(0).max(1000).default(0.1),
        sustain_secs: secs(0, 3600, 60),
        step: z.number().int().min(1).max(16).default(1),
      })
      .strict()
      .prefault({}),
    /** No decision of a kind within this long after the last scaling of that kind (or of the other, for scale-in after scale-out). */
    cooldown: z
      .object({
        scale_out_secs: secs(0, 3600, 30),
        scale_in_secs: secs(0, 3600, 120),
      })
      .strict()
      .prefault({}),
  })
  .strict()
  .superRefine((c, ctx) => {
    if (c.max_engines < c.min_engines) ctx.addIssue({ code: 'custom', path: ['max_engines'], message: `must be >= min_engines (${c.min_engines}); got ${c.max_engines}` });
    if (c.scale_in.backlog_per_engine >= c.scale_out.backlog_per_engine) {
      ctx.addIssue({ code: 'custom', path: ['scale_in', 'backlog_per_engine'], message: `must be below scale_out.backlog_per_engine (${c.scale_out.backlog_per_engine}), or the autoscaler would flap; got ${c.scale_in.backlog_per_engine}` });
    }
  });

export type AutoscalerConfig = z.output<typeof AutoscalerConfigSchema>;
export type AutoscalerConfigInput = z.input<typeof AutoscalerConfigSchema>;

export class AutoscalerConfigError extends Error {}

/** The validated config; an error names each bad field. */
export function parseAutoscalerConfig(input: unknown): AutoscalerConfig {
  const r = AutoscalerConfigSchema.safeParse(input ?? {});
  if (r.success) return r.data;
  throw new AutoscalerConfigError(`invalid autoscaler config: ${r.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ')}`);
}
