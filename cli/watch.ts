// Shows a training run's progress (a bar with step, reward and held-out accuracy) until it ends,
// and renders its curves as terminal plots.
import { SingleBar } from 'cli-progress';
import { plot } from 'asciichart';
import type { WorkflowHandle } from '@temporalio/client';
import type { TrainingProgress, TrainingResult } from '../workflows/training-run';

export async function watchRun(handle: WorkflowHandle, opts: { bar: boolean; pollMs?: number; onEval?: (line: string) => void }): Promise<TrainingResult> {
  let lastEvalStep = -1;
  const bar = opts.bar
    ? new SingleBar({
        format: 'train [{bar}] step {value}/{total} | reward {reward} | held-out acc {accuracy} | v{version} | {sps} samples/s | {status}',
        hideCursor: true,
        clearOnComplete: false,
      })
    : undefined;
  let started = false;
  const result = handle.result() as Promise<TrainingResult>;
  let done = false;
  void result.then(
    () => (done = true),
    () => (done = true),
  );
  while (!done) {
    const p = await handle.query<TrainingProgress>('progress').catch(() => undefined);
    const lastEval = p?.accuracies[p.accuracies.length - 1];
    if (p && !bar && opts.onEval && lastEval && lastEval[0] !== lastEvalStep) {
      lastEvalStep = lastEval[0];
      opts.onEval(`[train] step ${p.step}/${p.totalSteps}: reward ${p.lastReward?.toFixed(3) ?? '-'}, held-out accuracy ${(lastEval[1] * 100).toFixed(1)}%, policy v${p.policyVersion}`);
    }
    if (p && bar) {
      const payload = {
        reward: p.lastReward === undefined ? '-' : p.lastReward.toFixed(3),
        accuracy: p.lastAccuracy === undefined ? '-' : `${(p.lastAccuracy * 100).toFixed(1)}%`,
        version: p.policyVersion,
        sps: p.samplesPerSecond === undefined ? '-' : p.samplesPerSecond.toFixed(0),
        status: p.status,
      };
      if (!started && p.totalSteps > 0) {
        bar.start(p.totalSteps, p.step, payload);
        started = true;
      } else if (started) {
        bar.update(p.step, payload);
      }
    }
    await Promise.race([result.catch(() => undefined), new Promise((r) => setTimeout(r, opts.pollMs ?? 1_000))]);
  }
  const final = await result.finally(() => started && bar?.stop());
  return final;
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
