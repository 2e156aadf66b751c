// Operating a run through Temporal alone, on real worker processes: what the Web UI shows while it
// trains (current details, the memo's progress, search attributes, activity summaries), the
// progress query's small default answer, cancellation as a graceful stop (Postgres and the memo say
// `cancelled`, the last version verifies), and continue-as-new leaving an answerable final state.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { WorkflowFailedError, type WorkflowHandle, type WorkflowHandleWithFirstExecutionRunId } from '@temporalio/client';
import { CancelledFailure } from '@temporalio/common';
import type { RunConfigInput } from '../config/run-config';
import { roleTaskQueue } from '../config/task-queues';
import { verifyPolicyVersion } from '../training/policy-versions';
import { trainingProgressQuery, type TrainingProgress, type TrainingResult } from '../workflows/definitions';
import { RelaxClient } from '../client';
import { sharedTemporalAddress, startWorkerStack, uniqueId, waitFor, type WorkerStack } from './helpers';

let stack: WorkerStack;

const TINY: RunConfigInput = {
  model: { context_length: 16, d_model: 32, n_heads: 4, d_ff: 64 },
  algorithm: { group_size: 2 },
  rollout: { prompts_per_step: 2, max_new_tokens: 4 },
  train: { steps: 40, lr: 1e-3, eval_every: 5 },
  checkpoint: { every: 5, keep_last: 2 },
};

before(async () => {
  stack = await startWorkerStack(['control', 'rollout', 'reference', 'train'], {}, 'relax-ops-');
});

after(async () => {
  await stack?.close();
});

function start(id: string, config: RunConfigInput): Promise<WorkflowHandleWithFirstExecutionRunId> {
  return stack.temporal.client.workflow.start('trainingRun', { taskQueue: roleTaskQueue('control'), workflowId: id, args: [{ ...config, run_id: id }] });
}

async function currentDetails(handle: WorkflowHandle): Promise<string> {
  const metadata = await handle.query<{ currentDetails?: string }>('__temporal_workflow_metadata');
  return metadata.currentDetails ?? '';
}

test('a running run shows its step in current details, memo and search attributes; activities carry summaries; the query is small unless asked', async () => {
  const id = uniqueId('ops-visible');
  const handle = await start(id, TINY);
  try {
    const details = await waitFor('current details at step >= 6', async () => {
      const d = await currentDetails(handle).catch(() => '');
      const m = /step (\d+)\/40/.exec(d);
      return m && Number(m[1]) >= 6 && d.includes('held-out') ? d : undefined;
    }, 120_000);
    assert.match(details, /^running · step \d+\/40 · v\d+ · reward [\d.]+ · held-out [\d.]+% \(step \d+\) · \d+ samples\/s · ETA \d/);

    const small = await handle.query<TrainingProgress>('progress');
    assert.equal(small.rewards, undefined, 'the default answer leaves the curves out');
    assert.ok(small.step >= 6 && small.lastEvalStep !== undefined && small.etaSeconds !== undefined);
    const full = await handle.query(trainingProgressQuery, { curves: true });
    assert.ok((full.rewards?.length ?? 0) >= 6 && (full.accuracies?.length ?? 0) >= 2, 'the curves on request');

    const description = await handle.describe();
    const memo = description.memo?.progress as { status: string; step: number; totalSteps: number; lastAccuracy: number | null };
    assert.equal(memo.status, 'running');
    assert.equal(memo.totalSteps, 40);
    assert.ok(memo.step >= 5 && memo.lastAccuracy !== null, `memo progress ${JSON.stringify(memo)}`);
    const sa = description.searchAttributes;
    assert.deepEqual(sa.RelaxRunId, [id]);
    assert.deepEqual(sa.RelaxStatus, ['running']);
    assert.deepEqual(sa.RelaxTask, ['add2']);
    assert.deepEqual(sa.RelaxModel, ['tiny-gpt']);
    assert.ok(Number(sa.RelaxStep?.[0]) >= 5);
    assert.equal(typeof sa.RelaxAccuracy?.[0], 'number');

    // The workflow list filters on them (visibility is eventually consistent: wait for it).
    await waitFor('the run in a filtered list', async () => {
      for await (const w of stack.temporal.client.workflow.list({ query: `RelaxTask = "add2" AND RelaxStatus = "running" AND WorkflowId = "${id}"` })) return w.workflowId;
      return undefined;
    }, 30_000);

    const summaries: string[] = [];
    const history = await handle.fetchHistory();
    for (const e of history.events ?? []) {
      const data = e.userMetadata?.summary?.data;
      if (e.activityTaskScheduledEventAttributes && data) summaries.push(JSON.parse(Buffer.from(data).toString('utf8')) as string);
    }
    assert.ok(summaries.includes('rollout step 1 (4 samples, v0)'), summaries.slice(0, 8).join(' | '));
    assert.ok(summaries.includes('train step 1 (v0 -> v1)'));
    assert.ok(summaries.some((s) => s.startsWith('evaluate v5 (step 5')));
    assert.ok(summaries.includes('start run: validate the config, register the run'));
  } finally {
    await handle.terminate('test over').catch(() => undefined);
  }
});

test('cancelling a run from the client stops it gracefully: CANCELED, `cancelled` in Postgres and the memo, the last version verifies', async () => {
  const id = uniqueId('ops-cancel');
  // Started and cancelled through the typed client, as a program (or `relax train` / `relax cancel`) would.
  const relax = await RelaxClient.connect({ address: sharedTemporalAddress(), databaseUrl: stack.db.url });
  const handle = stack.temporal.client.workflow.getHandle(id); // outlives `relax`, closed below
  try {
    await relax.start({ ...TINY, run_id: id, train: { ...TINY.train, steps: 200 } });
    // The Web UI's Summary panel: the static summary and details the client sets when it starts a run.
    const started = await handle.describe();
    assert.equal(await started.staticSummary(), 'add2 · tiny GPT · grpo / ppo_clip · 200 steps · sync');
    assert.match((await started.staticDetails()) ?? '', /\| algorithm \| grpo \/ ppo_clip, group size 2/);
    await waitFor('step 3', async () => ((await handle.query<TrainingProgress>('progress').catch(() => undefined))?.step ?? 0) >= 3 || undefined, 120_000);
    await relax.cancel(id);
    const result = await relax.result(id);
    assert.equal(result.cancelled, true);
    assert.equal(result.steps, result.policyVersion);
  } finally {
    await relax.close();
  }
  const err = await handle.result().then(
    () => undefined,
    (e: unknown) => e,
  );
  assert.ok(err instanceof WorkflowFailedError && err.cause instanceof CancelledFailure, `ends CANCELED, got ${String(err)}`);
  const description = await handle.describe();
  assert.equal(description.status.name, 'CANCELLED');
  const summary = description.memo?.summary as { status: string; steps: number; policyVersion: number };
  assert.equal(summary.status, 'cancelled');
  assert.equal((description.memo?.progress as { status: string }).status, 'cancelled');
  assert.deepEqual(description.searchAttributes.RelaxStatus, ['cancelled']);
  const { rows } = await stack.db.pool.query<{ status: string }>('SELECT status FROM runs WHERE run_id = $1', [id]);
  assert.equal(rows[0].status, 'cancelled');
  assert.ok(summary.steps >= 3 && summary.steps < 200 && summary.policyVersion === summary.steps, JSON.stringify(summary));
  const verified = await verifyPolicyVersion(stack.db.pool, id, summary.policyVersion);
  assert.ok(verified.ok, `v${summary.policyVersion} verifies: ${JSON.stringify(verified)}`);
  // Every step the run started was finished: none is left claimed but unapplied.
  const { rows: steps } = await stack.db.pool.query<{ step: number; status: string }>('SELECT step, status FROM train_steps WHERE run_id = $1 ORDER BY step', [id]);
  assert.deepEqual(steps.map((s) => s.status), steps.map(() => 'applied'));
  assert.equal(steps.length, summary.steps);
});

test('continue-as-new: the first execution ends saying it continued, the query answers on the new one', async () => {
  const id = uniqueId('ops-can');
  const config: RunConfigInput = { ...TINY, train: { ...TINY.train, steps: 102, eval_every: 50 }, checkpoint: { every: 50, keep_last: 1 } };
  const handle = await start(id, config);
  const firstRunId = handle.firstExecutionRunId;
  const result = (await handle.result()) as TrainingResult;
  assert.equal(result.steps, 102);
  const first = stack.temporal.client.workflow.getHandle(id, firstRunId);
  const firstDescription = await first.describe();
  assert.equal(firstDescription.status.name, 'CONTINUED_AS_NEW');
  assert.equal((firstDescription.memo?.progress as { status: string }).status, 'continued');
  assert.equal((await first.query<TrainingProgress>('progress')).status, 'continued');
  const latest = await stack.temporal.client.workflow.getHandle(id).query<TrainingProgress>('progress');
  assert.equal(latest.status, 'completed');
  assert.equal(latest.step, 102);
});
