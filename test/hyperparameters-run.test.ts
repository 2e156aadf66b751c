// Hyperparameters changed mid-run through the setHyperparameters Update, on real worker processes
// and the real Temporal server: an accepted update's lr and temperature show in the metrics of every
// step from the one it names on (the old values before), recorded as a run event; invalid updates
// are refused by the validator, leave no trace in the workflow history, and the run completes.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { WorkflowUpdateFailedError } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { relaxEnvironment } from '../config/environment';
import { parseRunConfig, type RunConfigInput } from '../config/run-config';
import { roleTaskQueue } from '../config/task-queues';
import { loadTfjsBackend } from '../engines/backends';
import { listEvents } from '../store/events';
import { loadOrTrainWarmStart } from '../training/warm-start';
import type { HyperparameterUpdateResult, TrainingProgress, TrainingResult } from '../workflows/definitions';
import { startWorkerStack, uniqueId, waitFor, type WorkerStack } from './helpers';

const STEPS = 8;
const OLD_LR = 1e-3;
const NEW_LR = 3e-3;
const NEW_TEMPERATURE = 0.7;
// Tiny add2 in sync mode, from a short SFT warm start (a random policy is never rewarded, so no step
// would update and record its lr). Constant lr, no warmup: the lr metric is the peak lr itself.
let RUN: RunConfigInput = {
  model: { context_length: 16 },
  algorithm: { group_size: 8 },
  rollout: { prompts_per_step: 8, max_new_tokens: 4 },
  train: { steps: STEPS, lr: OLD_LR, lr_decay: 'constant', warmup_steps: 0, eval_every: 100 },
};

let stack: WorkerStack;

before(async () => {
  stack = await startWorkerStack(['control', 'rollout', 'train'], {}, 'relax-hyperparameters-run-');
  await loadTfjsBackend({ kind: 'cpu' });
  const warm = await loadOrTrainWarmStart(parseRunConfig(RUN), { lr: 3e-3, batchSize: 64, maxSteps: 2000, evalEvery: 10, band: [0.05, 0.6] }, relaxEnvironment().warmStartCache);
  RUN = { ...RUN, checkpoint: { init_from: warm.dir } };
});

after(async () => {
  await stack?.close();
});

/** The update is refused by the validator: the error names `field`. */
async function refused(handle: { executeUpdate: (...a: never[]) => Promise<unknown> }, update: unknown, updateId: string, field: RegExp): Promise<void> {
  const err = await (handle.executeUpdate as (name: string, o: unknown) => Promise<unknown>)('setHyperparameters', { args: [update], updateId }).then(
    () => assert.fail(`update ${JSON.stringify(update)} should have been refused`),
    (e: unknown) => e,
  );
  assert.ok(err instanceof WorkflowUpdateFailedError, `a WorkflowUpdateFailedError, got ${String(err)}`);
  assert.ok(err.cause instanceof ApplicationFailure, String(err.cause));
  assert.match(err.cause.message, field);
}

test('setHyperparameters changes lr and temperature from the next step; invalid updates are refused without touching the run', { timeout: 300_000 }, async () => {
  const { client } = stack.temporal;
  const id = uniqueId('hyper');
  const handle = await client.workflow.start('trainingRun', { taskQueue: roleTaskQueue('control'), workflowId: id, args: [RUN] });
  await waitFor('step 2', async () => ((await handle.query<TrainingProgress, [object?]>('progress')).step >= 2 ? true : undefined), 120_000);

  // Invalid updates: a bound, a cross-field rule, an unknown field. Each names its field.
  await refused(handle as never, { train: { lr: -1 } }, 'bad-lr', /train\.lr: .*\(got -1\)/);
  await refused(handle as never, { algorithm: { clip_high: 0.1 } }, 'bad-clip', /algorithm\.clip_high: must be >= algorithm\.clip_low \(0\.2\)/);
  await refused(handle as never, { train: { lr: NEW_LR, micro_batch: 2 } }, 'bad-key', /train\.micro_batch: cannot change while a run trains.*train\.lr/);

  const accepted = await handle.executeUpdate<HyperparameterUpdateResult, [object]>('setHyperparameters', { args: [{ train: { lr: NEW_LR }, rollout: { temperature: NEW_TEMPERATURE } }], updateId: 'good' });
  assert.deepEqual([...accepted.changed].sort(), ['rollout.temperature', 'train.lr']);
  assert.equal(accepted.hyperparameters.train.lr, NEW_LR);
  assert.equal(accepted.hyperparameters.rollout.temperature, NEW_TEMPERATURE);
  const from = accepted.fromStep;
  console.log(`[hyperparameters-run] the update applies from step ${from}`);
  assert.ok(from >= 3 && from <= STEPS, `the update applies from a later step (${from})`);
  const progress = await handle.query<TrainingProgress, [object?]>('progress');
  assert.equal(progress.hyperparameters?.train.lr, NEW_LR, 'the progress query shows the values in force');

  const result = (await handle.result()) as TrainingResult;
  assert.equal(result.steps, STEPS, 'the run completed every step');

  // Metrics: every step trained with the old values before `from`, the new ones from `from` on.
  const { rows } = await stack.db.pool.query<{ step: number; name: string; value: number }>(
    `SELECT step, name, value FROM metrics WHERE run_id = $1 AND name IN ('lr', 'trained_samples', 'temperature', 'top_p', 'kl_coef', 'clip_low', 'clip_high', 'entropy_coef') ORDER BY step`,
    [id],
  );
  const at = (step: number, name: string) => rows.find((r) => r.step === step && r.name === name)?.value;
  // A step whose groups all got equal rewards has no learning signal: it applies no update and has no lr.
  const updated = Array.from({ length: STEPS }, (_, i) => i + 1).filter((step) => (at(step, 'trained_samples') ?? 0) > 0);
  console.log(`[hyperparameters-run] steps that updated the policy: ${updated.join(", ")}`);
  assert.ok(updated.some((s) => s < from) && updated.some((s) => s >= from), `steps before and after ${from} updated the policy: ${updated.join(', ')}`);
  for (let step = 1; step <= STEPS; step++) {
    const after = step >= from;
    if (updated.includes(step)) assert.equal(at(step, 'lr'), after ? NEW_LR : OLD_LR, `step ${step} lr`);
    assert.equal(at(step, 'temperature'), after ? NEW_TEMPERATURE : 1, `step ${step} temperature`);
    assert.equal(at(step, 'top_p'), 1, `step ${step} top_p`);
    assert.deepEqual([at(step, 'kl_coef'), at(step, 'entropy_coef'), at(step, 'clip_low'), at(step, 'clip_high')], [0, 0, 0.2, 0.28], `step ${step} algorithm values`);
  }

  // One run event for the accepted update, with what changed.
  const events = (await listEvents(stack.db.pool, id)).filter((e) => e.kind === 'hyperparameters_set');
  assert.equal(events.length, 1, 'exactly one hyperparameters_set event');
  assert.equal(events[0].detail.step, from);
  assert.deepEqual(events[0].detail.values, { 'train.lr': NEW_LR, 'rollout.temperature': NEW_TEMPERATURE });

  // The history holds the accepted update only: the refused ones were never accepted (nor written).
  const history = await handle.fetchHistory();
  const acceptedIds = (history.events ?? []).filter((e) => e.workflowExecutionUpdateAcceptedEventAttributes).map((e) => e.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest?.meta?.updateId);
  assert.deepEqual(acceptedIds, ['good']);
});
