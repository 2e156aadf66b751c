// Notification delivery (workflows/notifications.ts sends; docs/monitoring.md): one activity per
// event on the control queue, POSTing to each webhook of the run's `notify` config. A webhook named by
// `url_env` is read from this worker's environment, so its URL (a secret for Slack and Discord) is
// never in the config, the history or a message: errors name the webhook by kind and variable. A
// receiver that answers 429 or 5xx, or does not answer, is retried with backoff; any other 4xx, or a
// variable that is not set, is not (NotificationRejected, NotificationMisconfigured).
import { ApplicationFailure } from '@temporalio/activity';
import { webhookUrlFromEnv } from '../config/environment';
import { NotifyConfigSchema, type NotifyEvent, type Webhook } from '../config/notify-config';
import { metricValuesAt } from '../store/metrics';
import { registeredRun } from '../store/runs';
import type { WorkerContext } from './context';

export interface NotifyInput {
  runId: string;
  event: NotifyEvent;
  /** The step of a digest or of the end. */
  step?: number;
  /** A digest: the step of the previous one (its deltas are from there). */
  fromStep?: number;
  /** failed: the cause. */
  message?: string;
  /** milestone: the accuracy milestone passed, and the held-out accuracy that passed it. */
  milestone?: number;
  accuracy?: number;
  /** The end: the run's summary. */
  summary?: { steps: number; policyVersion: number; evalAccuracy: number | null };
}

/** The main series a digest reports, with their labels. */
const DIGEST_SERIES: Array<[string, string]> = [
  ['reward_mean', 'reward'],
  ['eval_accuracy', 'held-out accuracy'],
  ['loss', 'loss'],
  ['kl', 'kl'],
  ['entropy', 'entropy'],
  ['grad_norm', 'grad norm'],
];

const fmt = (v: number) => (Math.abs(v) >= 100 ? v.toFixed(0) : Math.abs(v) >= 1 ? v.toFixed(2) : v.toPrecision(3));
const pct = (v: number | undefined) => (v === undefined ? '?' : `${+(v * 100).toFixed(1)}%`);
const signed = (v: number) => `${v >= 0 ? '+' : ''}${fmt(v)}`;

/** The newest value of each digest series at or before `step`. */
async function valuesAt(ctx: WorkerContext, runId: string, step: number): Promise<Map<string, number>> {
  return metricValuesAt(ctx.pool, runId, step, DIGEST_SERIES.map(([n]) => n));
}

/** The digest's values and their changes since the previous digest. */
export async function digestOf(ctx: WorkerContext, runId: string, step: number, fromStep: number): Promise<{ text: string; metrics: Record<string, { value: number; delta: number | null }> }> {
  const [now, before] = await Promise.all([valuesAt(ctx, runId, step), valuesAt(ctx, runId, fromStep)]);
  const metrics: Record<string, { value: number; delta: number | null }> = {};
  const parts: string[] = [];
  for (const [name, label] of DIGEST_SERIES) {
    const v = now.get(name);
    if (v === undefined) continue;
    const b = before.get(name);
    metrics[name] = { value: v, delta: b === undefined ? null : v - b };
    parts.push(`${label} ${fmt(v)}${b === undefined ? '' : ` (${signed(v - b)})`}`);
  }
  return { text: `step ${step}: ${parts.join(', ') || 'no metrics yet'}`, metrics };
}

function textOf(input: NotifyInput, digest?: string): string {
  const run = `Relax run ${input.runId}`;
  switch (input.event) {
    case 'started':
      return `${run} started`;
    case 'failed':
      return `${run} failed: ${input.message ?? 'no cause given'}`;
    case 'digest':
      return `${run} ${digest}`;
    case 'milestone':
      return `${run} reached ${pct(input.milestone)} held-out accuracy at step ${input.step ?? '?'} (${pct(input.accuracy)})`;
    default: {
      const s = input.summary;
      const acc = s?.evalAccuracy == null ? '' : `, held-out accuracy ${(s.evalAccuracy * 100).toFixed(1)}%`;
      return `${run} ${input.event === 'finished' ? 'completed' : input.event}${s ? ` after ${s.steps} steps, policy v${s.policyVersion}${acc}` : ''}`;
    }
  }
}

/** What a webhook is called in messages: never its URL when that came from the environment. */
const nameOf = (w: Webhook, i: number) => `webhook #${i + 1} (${w.kind}, ${w.url_env ? `$${w.url_env}` : new URL(w.url!).host})`;

async function post(w: Webhook, i: number, body: unknown): Promise<void> {
  const url = w.url ?? webhookUrlFromEnv(w.url_env!);
  if (!url) throw ApplicationFailure.create({ type: 'NotificationMisconfigured', nonRetryable: true, message: `${nameOf(w, i)}: ${w.url_env} is not set on this control worker` });
  let res: Response;
  try {
    res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), redirect: 'error', signal: AbortSignal.timeout(10_000) });
  } catch (err) {
    // The cause's text may quote the URL: say only what kind of failure it was.
    throw ApplicationFailure.create({ type: 'NotificationUndelivered', message: `${nameOf(w, i)}: no answer (${(err as Error).name})` });
  }
  await res.body?.cancel().catch(() => undefined);
  if (res.ok) return;
  const retryable = res.status === 429 || res.status >= 500;
  throw ApplicationFailure.create({ type: retryable ? 'NotificationUndelivered' : 'NotificationRejected', nonRetryable: !retryable, message: `${nameOf(w, i)}: HTTP ${res.status}` });
}

async function notify(ctx: WorkerContext, input: NotifyInput): Promise<{ sent: number }> {
  const run = await registeredRun<{ notify?: unknown }>(ctx.pool, input.runId);
  if (!run?.config.notify) return { sent: 0 };
  const config = NotifyConfigSchema.parse(run.config.notify);
  if (!config.events.includes(input.event)) return { sent: 0 };
  const digest = input.event === 'digest' && input.step !== undefined ? await digestOf(ctx, input.runId, input.step, input.fromStep ?? 0) : undefined;
  const text = textOf(input, digest?.text);
  const event = {
    event: input.event,
    run_id: input.runId,
    text,
    at: new Date().toISOString(),
    ...(input.step !== undefined ? { step: input.step } : {}),
    ...(input.message ? { cause: input.message } : {}),
    ...(input.summary ? { summary: input.summary } : {}),
    ...(input.milestone !== undefined ? { milestone: input.milestone, accuracy: input.accuracy } : {}),
    ...(digest ? { metrics: digest.metrics } : {}),
  };
  return { sent: await postToWebhooks(config.webhooks, text, event) };
}

/**
 * Posts one event to every webhook, in its kind's shape (`text` for Slack and Discord, `event` for
 * json). Every webhook is tried; the first failure (if any) is thrown after, so a retry resends to
 * all (at least once). Returns how many were sent.
 */
export async function postToWebhooks(webhooks: readonly Webhook[], text: string, event: Record<string, unknown>): Promise<number> {
  const results = await Promise.allSettled(webhooks.map((w, i) => post(w, i, w.kind === 'slack' ? { text } : w.kind === 'discord' ? { content: text } : event)));
  const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed) throw failed.reason;
  return webhooks.length;
}

export function createNotifyActivities(ctx: WorkerContext) {
  return { notify: (input: NotifyInput) => notify(ctx, input) };
}

export type NotifyActivities = ReturnType<typeof createNotifyActivities>;
