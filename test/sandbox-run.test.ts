// The sandbox through real worker processes and the real Temporal server: a run whose reward module
// is stuck in for(;;){} fails its own samples (naming the module) while a second run on the same
// stack completes; a run whose task module blocks at its top level fails at start, non-retryably,
// naming the module, while another run completes; and the workers' allow-list, for runs started
// through the Temporal client as the Web UI would: an agent command (RELAX_ALLOW_AGENT_COMMANDS) and a
// reward module outside the allowed roots (RELAX_ALLOWED_MODULE_ROOTS) are refused at start.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { WorkflowFailedError } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import type { RunConfigInput } from '../config/run-config';
import { roleTaskQueue } from '../config/task-queues';
import type { TrainingResult } from '../workflows/training-run';
import { startWorkerStack, uniqueId, type WorkerStack } from './helpers';

const FIXTURES = path.resolve(__dirname, '../../test/fixtures/sandbox');
const HANG_REWARD = path.join(FIXTURES, 'always-hang-reward.cjs');
const LOOP_TASK = path.join(FIXTURES, 'loop-task.cjs');
const TINY: RunConfigInput = {
  model: { context_length: 16 },
  algorithm: { group_size: 2 },
  rollout: { prompts_per_step: 2, max_new_tokens: 4 },
  train: { steps: 2, eval_every: 100 },
};

let stack: WorkerStack;
let temporal: WorkerStack['temporal'];
let outside: string;

before(async () => {
  outside = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-outside-'));
  // The workers' own settings: a short load limit for user modules; the allow-list left at its defaults.
  stack = await startWorkerStack(['control', 'rollout', 'train'], { RELAX_SANDBOX_LOAD_TIMEOUT_MS: '3000', RELAX_ALLOW_AGENT_COMMANDS: '', RELAX_ALLOWED_MODULE_ROOTS: '' }, 'relax-sandbox-run-');
  temporal = stack.temporal;
});

after(async () => {
  await stack?.close();
  fs.rmSync(outside, { recursive: true, force: true });
});

function execute(config: RunConfigInput, prefix: string): Promise<TrainingResult> {
  return temporal.client.workflow.execute('trainingRun', { taskQueue: roleTaskQueue('control'), workflowId: uniqueId(prefix), args: [config] }) as Promise<TrainingResult>;
}

async function failure(run: Promise<unknown>): Promise<ApplicationFailure> {
  const err = await run.then(
    () => assert.fail('the run should have failed'),
    (e: unknown) => e,
  );
  assert.ok(err instanceof WorkflowFailedError, String(err));
  assert.ok(err.cause instanceof ApplicationFailure, String(err.cause));
  return err.cause;
}

test('a reward stuck in for(;;){} fails its own samples, naming the module; a second run on the same stack completes', async () => {
  const hungId = uniqueId('hung');
  const hung = temporal.client.workflow.execute('trainingRun', {
    taskQueue: roleTaskQueue('control'),
    workflowId: hungId,
    args: [{ ...TINY, reward: { module: HANG_REWARD, timeout_ms: 200 }, train: { ...TINY.train, failure_budget: 1 } }],
  }) as Promise<TrainingResult>;
  const normal = execute(TINY, 'normal');
  const [hungResult, normalResult] = await Promise.all([hung, normal]);
  assert.equal(normalResult.steps, 2);
  assert.equal(hungResult.steps, 2, 'within its failure budget the run goes on');
  const { rows } = await stack.db.pool.query<{ status: string; error: string | null }>('SELECT status, error FROM samples WHERE run_id = $1', [hungId]);
  assert.ok(rows.length >= 4, `${rows.length} samples`);
  for (const r of rows) {
    assert.equal(r.status, 'failed');
    assert.match(r.error ?? '', /reward: reward\.module ".*always-hang-reward\.cjs" export "default": (timed out after 200 ms \(the sandbox thread was stopped\)|lost: .*collateral)/);
  }
  assert.ok(rows.some((r) => /timed out after 200 ms \(the sandbox thread was stopped\)/.test(r.error ?? '')));
});

test('a task module that blocks at its top level fails its run at start, non-retryably, naming the module; another run completes', async () => {
  const started = Date.now();
  const [failed, ok] = await Promise.all([failure(execute({ ...TINY, task: LOOP_TASK }, 'loop-task')), execute(TINY, 'beside')]);
  assert.equal(failed.type, 'InvalidRunConfig');
  assert.equal(failed.nonRetryable, true);
  assert.match(failed.message, /task ".*loop-task\.cjs" .*timed out while loading after 3000 ms/);
  assert.equal(ok.steps, 2);
  assert.ok(Date.now() - started < 60_000);
});

test('the allow-list, through the Temporal client: an agent command and a reward module outside the allowed roots are refused at start', async () => {
  const agent = await failure(execute({ ...TINY, rollout: { ...TINY.rollout, agent: { command: [process.execPath, '-e', 'console.log("{\\"reward\\": 1}")'] } } }, 'agent'));
  assert.equal(agent.type, 'NotAllowed');
  assert.equal(agent.nonRetryable, true);
  assert.match(agent.message, /RELAX_ALLOW_AGENT_COMMANDS/);
  const file = path.join(outside, 'reward.js');
  fs.writeFileSync(file, 'module.exports = () => 1;');
  const moduleRefused = await failure(execute({ ...TINY, reward: { module: file } }, 'outside'));
  assert.equal(moduleRefused.type, 'NotAllowed');
  assert.match(moduleRefused.message, /RELAX_ALLOWED_MODULE_ROOTS/);
  assert.match(moduleRefused.message, /reward\.module ".*reward\.js" resolves to .* outside the directories/);
});
