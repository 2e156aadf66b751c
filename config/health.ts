// The health manager's config (workflows/health-manager.ts), validated where it enters (the control
// API, the client) so the workflow module stays free of zod.
import { z } from 'zod';
import { WebhookSchema } from './notify-config';

export const HealthConfigSchema = z
  .object({
    /** How often it checks. */
    interval_secs: z.number().min(0.5).max(3600).default(15),
    /** A run is stalled when no step came within this many times its median step time (and at least min_stall_secs). */
    stall_factor: z.number().min(1).max(1000).default(5),
    min_stall_secs: z.number().min(1).max(86_400).default(60),
    /** Warn when the checkpoint directory's file system has less free space than this. */
    min_free_disk_mb: z.number().min(0).max(1e9).default(1024),
    /** Restart the local workers of a role that has no poller (through the supervisor; never the whole stack). */
    restart_workers: z.boolean().default(true),
    /** A worker that runs but does not poll its queue for this long is killed (the supervisor starts it again). */
    hung_after_secs: z.number().min(5).max(86_400).default(60),
    /** Where health actions are sent (config/notify-config.ts webhooks; secret URLs by url_env). */
    webhooks: z.array(WebhookSchema).max(8).default([]),
  })
  .strict();

export type HealthConfig = z.output<typeof HealthConfigSchema>;
export type HealthConfigInput = z.input<typeof HealthConfigSchema>;

export class HealthConfigError extends Error {
  override readonly name = 'HealthConfigError';
}

export function parseHealthConfig(input: unknown): HealthConfig {
  const r = HealthConfigSchema.safeParse(input ?? {});
  if (r.success) return r.data;
  const issue = r.error.issues[0];
  throw new HealthConfigError(`${issue.path.join('.') || 'health config'}: ${issue.message}`);
}
