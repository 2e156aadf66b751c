// Every run's TensorBoard event files, written by the worker process that records the metrics
// (docs/monitoring.md#tensorboard): the train step's scalars (activities/train.ts recordStep, and the
// skipped steps), the held-out evaluation's (activities/rollout.ts evaluate). One writer
// (telemetry/tensorboard.ts) per run and process, opened at the run's first recorded step here, in
// <RELAX_HOME>/runs/<runId>/tensorboard (config/environment.ts tensorboardDir), and kept in a
// runState slot: the run's release closes its file; a later step, or a restarted worker, opens a new
// one (TensorBoard merges a directory). The run's first writer writes its config as text at step 0.
// TensorBoard is a view: a failure to write is logged once, stops this run's files in this process
// until the run is released, and never fails the step.
import fs from 'node:fs';
import { tensorboardDir } from '../config/environment';
import type { RunConfig } from '../config/run-config';
import { componentLog } from '../telemetry/log';
import { TensorboardWriter } from '../telemetry/tensorboard';
import { runState } from '../training/run-state';

const tbLog = componentLog('tensorboard');

/** The run's writer in this process; null: off (RELAX_TENSORBOARD_DIR=off) or failed once. Released with the run. */
const writers = runState.slot<TensorboardWriter | null>('tensorboard.writer', (writer) => writer?.close());

/** What the hook needs of a run (activities' RunContext has it). */
export interface TensorboardRun {
  runId: string;
  config: RunConfig;
}

/** The run's config as the text summary shows it (Markdown: a JSON code block). */
export function configText(config: RunConfig): string {
  return `\`\`\`json\n${JSON.stringify(config, null, 2)}\n\`\`\``;
}

const hasEventFile = (dir: string): boolean => fs.existsSync(dir) && fs.readdirSync(dir).some((f) => f.startsWith('events.out.tfevents.'));

/** A new writer in the run's directory (undefined when off); the run's first file starts with its config. */
function openRunWriter(run: TensorboardRun): TensorboardWriter | null {
  const dir = tensorboardDir(run.runId);
  if (!dir) return null;
  const first = !hasEventFile(dir);
  const writer = TensorboardWriter.open(dir);
  if (first) writer.text('config', 0, configText(run.config));
  return writer;
}

/** Writes the step's metrics as scalars to the run's event file; never throws (a failure is logged). */
export function tensorboardScalars(run: TensorboardRun, step: number, metrics: Record<string, number>): void {
  let writer = writers.get(run.runId);
  if (writer === null) return;
  try {
    writer ??= writers.set(run.runId, openRunWriter(run));
    writer?.scalars(step, metrics);
  } catch (err) {
    tbLog.warn({ run: run.runId, err }, `TensorBoard files of run ${run.runId} stop here in this process (the run goes on): ${(err as Error).message}`);
    try {
      writer?.close();
    } catch {
      // already reported above
    }
    writers.set(run.runId, null);
  }
}
