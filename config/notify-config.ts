// The `notify` section of a run config: where a run's notifications go and which it sends
// (activities/notify.ts delivers them; docs/monitoring.md). A webhook's URL usually is a secret
// (Slack's and Discord's carry their token), so it is named by the environment variable that holds
// it on the control workers (`url_env`): the URL itself then never enters the config, the workflow
// history or a log. A plain `url` is for receivers without a secret.
import { z } from 'zod';
import { boundedNumber as n } from './run-bounds';

export const NOTIFY_EVENTS = ['started', 'finished', 'failed', 'cancelled', 'stopped', 'digest', 'milestone'] as const;
export type NotifyEvent = (typeof NOTIFY_EVENTS)[number];

export const WebhookSchema = z
  .object({
    /** "json": Relax's event object; "slack" / "discord": their incoming-webhook message shape. */
    kind: z.enum(['json', 'slack', 'discord']).default('json'),
    /** The environment variable holding the URL (on the control workers): for secret URLs. */
    url_env: z.string().regex(/^[A-Z_][A-Z0-9_]{0,127}$/, 'an environment variable name (A-Z, 0-9, _)').optional(),
    /** The URL itself, when it holds no secret (it is stored in the run's config and history). */
    url: z.string().max(2048).url().refine((u) => /^https?:\/\//.test(u), 'an http(s) URL').optional(),
  })
  .strict()
  .refine((w) => (w.url === undefined) !== (w.url_env === undefined), { message: 'give url_env (the variable holding a secret URL) or url, one of the two' });

export const NotifyConfigSchema = z
  .object({
    webhooks: z.array(WebhookSchema).min(1).max(8),
    /** Which events to send; default all. */
    events: z.array(z.enum(NOTIFY_EVENTS)).min(1).default([...NOTIFY_EVENTS]),
    /** A digest of the main metrics' changes every this many steps (Relax's freq=N); 0: none. */
    digest_every: n('notify.digest_every').default(0),
    /** "milestone": held-out accuracy first reaching each of these (the step-0 accuracy does not count as reaching). */
    accuracy_milestones: z.array(z.number().gt(0).max(1)).max(100).default([0.5, 0.9, 0.95, 0.99]),
    /** Throttle: digests at most this often, seconds (one that comes sooner is skipped). */
    min_interval_secs: n('notify.min_interval_secs').default(0),
  })
  .strict();

export type NotifyConfig = z.output<typeof NotifyConfigSchema>;
export type Webhook = z.output<typeof WebhookSchema>;
