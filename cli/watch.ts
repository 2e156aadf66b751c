// Follows a training run until it ends: a bar (step, reward, held-out accuracy, ETA) on a TTY, one
// progress line per step or evaluation otherwise, and the run's curves as terminal plots.
import { SingleBar } from 'cli-progress';
import { plot } from 'asciichart';
import type { WorkflowHandle } from '@temporalio/client';
import type { TrainingProgress, TrainingResult } from '../workflows/definitions';
import { RunFailedError } from '../client';
import { formatDuration } from '../workflows/duration';

export { formatDuration };

/** The newest held-out evaluation: lastEvalStep/lastAccuracy, or (older workflows) the last point of the curve. */
function lastEval(p: TrainingProgress): [number, number] | undefined {
  if (p.lastAccuracy !== undefined && p.lastEvalStep !== undefined) return [p.lastEvalStep, p.lastAccuracy];
  return p.accuracies?.[p.accuracies.length - 1];
}

/** Estimates seconds left from the pace this watcher has seen, when the workflow gives no ETA. */
class Pace {
  private first?: { step: number; at: number };
  eta(p: TrainingProgress, now = Date.now()): number | undefined {
    if (p.etaSeconds !== undefined && Number.isFinite(p.etaSeconds)) return p.etaSeconds;
    if (!this.first || p.step < this.first.step) this.first = { step: p.step, at: now };
    const done = p.step - this.first.step;
    if (done <= 0 || p.totalSteps <= 0) return undefined;
    return ((now - this.first.at) / 1000 / done) * Math.max(0, p.totalSteps - p.step);
  }
}

/** "step 12/100 · v12 · reward 0.410 · held-out 63.0% (step 10) · 95 samples/s · ETA 1m20s · running" */
export function progressLine(p: TrainingProgress, etaSeconds?: number): string {
  const parts = [`step ${p.step}/${p.totalSteps || '?'}`, `v${p.policyVersion}`];
  if (p.lastReward !== undefined) parts.push(`reward ${p.lastReward.toFixed(3)}`);
  const e = lastEval(p);
  if (e) parts.push(`held-out ${(e[1] * 100).toFixed(1)}% (step ${e[0]})`);
  if (p.samplesPerSecond !== undefined) parts.push(`${p.samplesPerSecond.toFixed(0)} samples/s`);
  if (etaSeconds !== undefined && p.step < p.totalSteps) parts.push(`ETA ${formatDuration(etaSeconds)}`);
  parts.push(p.status);
  return parts.join(' · ');
}

/**
 * The progress bar's line. Its ETA is the `remaining` token, with units ("1m20s"): cli-progress fills
 * its own `{eta}` token (bare seconds of its own estimate) over a payload field of that name.
 */
export const BAR_FORMAT = 'train [{bar}] step {value}/{total} | reward {reward} | held-out {accuracy} | v{version} | {sps} samples/s | ETA {remaining} | {status}';

/** The bar's tokens for one progress snapshot; `etaSeconds` from the workflow or this watcher's pace. */
export function barPayload(p: TrainingProgress, etaSeconds: number | undefined): Record<string, string | number> {
  const e = lastEval(p);
  return {
    reward: p.lastReward === undefined ? '-' : p.lastReward.toFixed(3),
    accuracy: e === undefined ? '-' : `${(e[1] * 100).toFixed(1)}%`,
    version: p.policyVersion,
    sps: p.samplesPerSecond === undefined ? '-' : p.samplesPerSecond.toFixed(0),
    remaining: etaSeconds === undefined ? '-' : p.step >= p.totalSteps ? '0s' : formatDuration(etaSeconds),
    status: p.status,
  };
}

export interface WatchOptions {
  /** Draw a progress bar (a TTY); otherwise `lines` gets one line per new step, evaluation or status. */
  bar: boolean;
  pollMs?: number;
  /** Where the progress lines go when there is no bar (none: silent). */
  lines?: (line: string) => void;
  /** Called once per new held-out evaluation (both modes). */
  onEval?: (line: string) => void;
  /** The outcome (default: the workflow's result); RelaxClient.result also returns cancelled runs. */
  result?: () => Promise<TrainingResult>;
  /** On Ctrl-C: print how to re-attach to this run and exit 130 (the run goes on). */
  detachOnInterrupt?: boolean;
}

/** The line printed when a follower detaches from a run that goes on. */
export function detachedMessage(runId: string): string {
  return `[relax] detached: run ${runId} continues; re-attach with \`relax watch ${runId}\`, stop it with \`relax stop ${runId}\``;
}

/**
 * Follows the run until it ends and returns its result; a failed run throws RunFailedError (its
 * message is the workflow's cause chain). The bar's last frame is drawn at the final step.
 */
export async function watchRun(handle: WorkflowHandle, opts: WatchOptions): Promise<TrainingResult> {
  const pace = new Pace();
  let lastEvalStep = -1;
  let lastLine = '';
  let bar: SingleBar | undefined;
  let last: TrainingProgress | undefined;
  let done = false;
  const result = (opts.result ? opts.result() : (handle.result() as Promise<TrainingResult>)).finally(() => (done = true));
  result.catch(() => undefined);
  const onInterrupt = () => {
    bar?.stop();
    process.stderr.write(`\n${detachedMessage(handle.workflowId)}\n`);
    process.exit(130);
  };
  if (opts.detachOnInterrupt) process.once('SIGINT', onInterrupt);
  const payload = (p: TrainingProgress) => barPayload(p, pace.eta(p));
  const show = (p: TrainingProgress) => {
    last = p;
    const e = lastEval(p);
    if (e && e[0] !== lastEvalStep) {
      lastEvalStep = e[0];
      opts.onEval?.(`[train] step ${p.step}/${p.totalSteps}: reward ${p.lastReward?.toFixed(3) ?? '-'}, held-out accuracy ${(e[1] * 100).toFixed(1)}%, policy v${p.policyVersion}`);
    }
    if (opts.bar) {
      if (!bar && p.totalSteps > 0) {
        bar = new SingleBar({ format: BAR_FORMAT, hideCursor: true, clearOnComplete: false });
        bar.start(p.totalSteps, p.step, payload(p));
      } else bar?.update(p.step, payload(p));
    } else if (opts.lines) {
      const line = progressLine(p, pace.eta(p));
      const key = `${p.step} ${p.status} ${lastEvalStep}`;
      if (key !== lastLine) opts.lines(`[train] ${line}`);
      lastLine = key;
    }
  };
  while (!done) {
    const p = await handle.query<TrainingProgress>('progress').catch(() => undefined);
    if (p) show(p);
    await Promise.race([result.catch(() => undefined), new Promise((r) => setTimeout(r, opts.pollMs ?? 1_000))]);
  }
  try {
    const final = await result;
    // The last frame: the final step, whatever the last poll saw.
    const p: TrainingProgress = { ...(last ?? { totalSteps: final.steps, samplesPerSecond: undefined }), status: final.cancelled ? 'cancelled' : final.stopped ? 'stopped' : 'completed', step: final.steps, policyVersion: final.policyVersion, totalSteps: Math.max(last?.totalSteps ?? 0, final.steps) };
    if (final.evalAccuracy !== undefined) Object.assign(p, { lastAccuracy: final.evalAccuracy, lastEvalStep: final.accuracies[final.accuracies.length - 1]?.[0] ?? final.steps });
    if (opts.bar && !bar && p.totalSteps > 0) show({ ...p, step: 0 });
    show(p);
    return final;
  } catch (err) {
    throw err instanceof RunFailedError ? err : new RunFailedError(handle.workflowId, err);
  } finally {
    bar?.stop();
    process.off('SIGINT', onInterrupt);
  }
}

export function renderCurves(result: TrainingResult): string {
  const lines: string[] = [];
  if (result.accuracies.length > 1) {
    lines.push('held-out greedy accuracy (%) at each evaluation:');
    lines.push(plot(result.accuracies.map(([, a]) => a * 100), { height: 10, format: (x: number) => x.toFixed(0).padStart(5) }));
  }
  if (result.rewards.length > 1) {
    lines.push('mean rollout reward per step:');
    lines.push(plot(result.rewards.map(([, r]) => r), { height: 8, format: (x: number) => x.toFixed(2).padStart(5) }));
  }
  return lines.join('\n');
}
