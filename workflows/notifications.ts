// A run's notifications (config `notify`, docs/monitoring.md): each is one activity on the control
// queue (activities/notify.ts), durable and retried with backoff, so a crash loses none. Never in
// the run's way: digests go out while training goes on, and a notification that cannot be delivered
// is logged, never a failure of the run. The run waits for what it sent before it ends or continues
// as new. Only for configs with `notify`.
import { ActivityFailure, ContinueAsNew, isCancellation, log, proxyActivities } from '@temporalio/workflow';
import type { NotifyActivities, NotifyInput } from '../activities/notify';
import type { NotifyEvent } from '../config/notify-config';
import type { RunConfig } from '../config/run-config';
import { roleTaskQueue } from '../config/task-queues';
import { onOwnQueue } from './task-queue';

/** The milestones a new best accuracy passed: above the previous best, at or below the new one. */
export function milestonesCrossed(milestones: readonly number[], previousBest: number, best: number): number[] {
  return milestones.filter((m) => m > previousBest && m <= best).sort((a, b) => a - b);
}

const notifyActivities = (summary: string) =>
  proxyActivities<NotifyActivities>(onOwnQueue({
    taskQueue: roleTaskQueue('control'),
    startToCloseTimeout: '30 seconds',
    retry: { initialInterval: '2 seconds', backoffCoefficient: 2, maximumInterval: '1 minute', maximumAttempts: 8, nonRetryableErrorTypes: ['NotificationRejected', 'NotificationMisconfigured'] },
    summary,
  }));

export class Notifier {
  private readonly pending: Array<Promise<void>> = [];
  private lastDigest: { step: number; at: number };

  constructor(
    private readonly runId: string,
    private readonly config: NonNullable<RunConfig['notify']>,
    fromStep: number,
  ) {
    this.lastDigest = { step: fromStep, at: -Infinity };
  }

  /** Sends one event (if the config asks for it); resolves when it was delivered or given up on. */
  send(event: NotifyEvent, detail: Omit<NotifyInput, 'runId' | 'event'> = {}): Promise<void> {
    if (!this.config.events.includes(event)) return Promise.resolve();
    const sent = notifyActivities(`notify ${event}`)
      .notify({ runId: this.runId, event, ...detail })
      .then(
        () => undefined,
        (err: Error) => log.warn(`notification ${event} of run ${this.runId} not delivered: ${err.message}`),
      );
    this.pending.push(sent);
    return sent;
  }

  /** After a step: a digest every digest_every steps, at most every min_interval_secs. */
  afterStep(step: number): void {
    const every = this.config.digest_every;
    if (!every || step % every !== 0 || step <= this.lastDigest.step) return;
    if (Date.now() - this.lastDigest.at < this.config.min_interval_secs * 1000) return;
    void this.send('digest', { step, fromStep: this.lastDigest.step });
    this.lastDigest = { step, at: Date.now() };
  }

  /** A new best held-out accuracy: one "milestone" event naming the highest milestone it passed. */
  afterAccuracy(step: number, previousBest: number, best: number): void {
    const crossed = milestonesCrossed(this.config.accuracy_milestones ?? [], previousBest, best);
    if (!crossed.length) return;
    void this.send('milestone', { step, milestone: crossed[crossed.length - 1], accuracy: best });
  }

  /** Waits for every notification sent so far. */
  async settle(): Promise<void> {
    await Promise.all(this.pending.splice(0));
  }
}

/** The run's notifier, or undefined when its config has no `notify` . */
export function notifierFor(runId: string, config: RunConfig, fromStep: number): Notifier | undefined {
  if (!config.notify) return undefined;
  return new Notifier(runId, config.notify, fromStep);
}

/** A failure's cause in words: through activity failures to what the activity said. */
function causeOf(err: unknown): string {
  let e = err as Error | undefined;
  for (let i = 0; i < 4 && e instanceof ActivityFailure && e.cause; i++) e = e.cause;
  return e?.message ?? String(err);
}

/** Runs the run's loop; a failure (not a cancellation or continue-as-new) is notified, then rethrown. */
export async function notifyingFailure<T>(notifier: Notifier | undefined, body: () => Promise<T>): Promise<T> {
  try {
    return await body();
  } catch (err) {
    if (notifier && !(err instanceof ContinueAsNew) && !isCancellation(err)) await notifier.send('failed', { message: causeOf(err) });
    throw err;
  }
}
