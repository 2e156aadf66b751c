// Every failure type of config/failure-types.ts produced from its real cause (the activity code
// path, or asActivityFailure on the real error class): the non-retryable ones fail with
// nonRetryable true and their stable type, the retryable ones without. And the failure budget's edge
// cases through the real workflow: a run whose samples ALL fail within train.failure_budget skips
// every step and completes (sync and async); over the budget it fails, naming the budget.
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { WorkflowFailedError } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { MockActivityEnvironment } from '@temporalio/testing';
import { validateUpdate } from '../workflows/hyperparameter-updates';
import type { RunState } from '../workflows/training-run';
import type { TrainingProgress } from '../workflows/definitions';
import { asActivityFailure, NON_RETRYABLE_FAILURE_TYPES, RETRYABLE_FAILURE_TYPES, type WorkerContext } from '../activities/context';
import { createControlActivities } from '../activities/control';
import { createEvaluateActivities } from '../activities/evaluate';
import { createTrainActivities } from '../activities/train';
import { parseRunConfig, type RunConfig, type RunConfigInput } from '../config/run-config';
import { roleTaskQueue, type Role } from '../config/task-queues';
import { publishCheckpoint } from '../engines/checkpoint';
import { initWeights } from '../engines/model';
import { NonFiniteUpdateError } from '../engines/trainer';
import { checkAgentCommandAllowed, checkModuleAllowed } from '../envs/module-policy';
import { loadUserExport } from '../envs/user-modules';
import { listEvents } from '../store/events';
import { TrainStepConflictError } from '../store/transfer-queue';
import { loadRunContext } from '../training/run-context';
import { loadPolicyWeights, prunePolicyVersions, publishPolicyVersion } from '../training/policy-versions';
import type { TrainingResult } from '../workflows/training-run';
import { startWorkerStack, uniqueId, type TestDatabase, type WorkerStack } from './helpers';

let stack: WorkerStack;
let db: TestDatabase;
let home: string;
let temporal: WorkerStack['temporal'];

const FAILING_REWARD = path.resolve(__dirname, '../../test/fixtures/always-failing-reward.cjs');
const TINY: RunConfigInput = {
  model: { context_length: 16 },
  algorithm: { group_size: 2 },
  rollout: { prompts_per_step: 2, max_new_tokens: 4 },
  train: { steps: 2, eval_every: 100 },
};

before(async () => {
  stack = await startWorkerStack(['control', 'rollout', 'train'], {}, 'relax-failures-');
  ({ db, home, temporal } = stack);
});

after(() => stack?.close());

const workerCtx = (role: Role): WorkerContext => ({ pool: db.pool, role, device: 'cpu', identity: `test-${role}`, instanceQueue: `test-${role}-instance` });
const activityEnv = new MockActivityEnvironment();
const control = () => createControlActivities(workerCtx('control'));
const train = () => createTrainActivities(workerCtx('train'));
const evaluate = () => createEvaluateActivities(workerCtx('rollout'));

/** What `fn` throws (or rejects with). */
async function thrown(fn: () => unknown): Promise<unknown> {
  try {
    await fn();
  } catch (err) {
    return err;
  }
  return assert.fail('expected it to throw');
}

/** A registered run (control.startRun, train.initPolicy: version 0 published) of `config`. */
async function startedRun(config: RunConfigInput): Promise<string> {
  const workflowId = uniqueId('wf');
  const started: RunConfig = await activityEnv.run(control().startRun, { input: { ...config, checkpoint: { dir: path.join(home, workflowId), ...config.checkpoint } }, workflowId });
  await activityEnv.run(train().initPolicy, { runId: started.run_id as string });
  return started.run_id as string;
}

// Each type, and how its real cause is produced.
const NON_RETRYABLE: Record<(typeof NON_RETRYABLE_FAILURE_TYPES)[number], () => Promise<unknown>> = {
  InvalidRunConfig: () => thrown(() => activityEnv.run(control().startRun, { input: { train: { lr: -1 } }, workflowId: uniqueId('wf') })),
  UnknownRun: () => thrown(() => activityEnv.run(train().initPolicy, { runId: 'no-such-run' })),
  UnknownTask: async () => {
    const runId = uniqueId('task');
    await db.pool.query(`INSERT INTO runs (run_id, workflow_id, kind, config) VALUES ($1, $1, 'training', $2)`, [runId, JSON.stringify({ task: './no/such/task.js' })]);
    return thrown(() => activityEnv.run(train().initPolicy, { runId }));
  },
  InvalidUserModule: async () => asActivityFailure(await thrown(() => loadUserExport('reward', './no/such/reward.js', 'default'))),
  NotAllowed: async () => asActivityFailure(await thrown(() => checkModuleAllowed('reward.module', '/etc/reward.js', '/etc/reward.js', {}, home))),
  PrunedPolicyVersion: async () => {
    const runId = await startedRun(TINY);
    const run = await loadRunContext(db.pool, runId);
    const weights = await loadPolicyWeights(db.pool, run, 0);
    for (const v of [1, 2, 3]) await publishPolicyVersion(db.pool, run, v, v, weights);
    await prunePolicyVersions(db.pool, { runId, checkpointRoot: run.checkpointRoot, latest: 3, every: 1, keepLast: 1, protect: 1 });
    return asActivityFailure(await thrown(() => loadPolicyWeights(db.pool, run, 1)));
  },
  CheckpointConflict: async () => {
    const model = { vocabSize: 8, dModel: 8, nLayers: 1, nHeads: 2, dFF: 16, contextLength: 8 };
    const root = path.join(home, 'conflict');
    await publishCheckpoint(root, 1, model, initWeights(model, 1));
    return asActivityFailure(await thrown(() => publishCheckpoint(root, 1, model, initWeights(model, 2))));
  },
  TrainStepConflict: async () => asActivityFailure(new TrainStepConflictError('train step 3 of run r was already applied (policy version 3); it cannot be skipped')),
  ResourceLimit: async () => asActivityFailure(await thrown(() => initWeights({ vocabSize: 2, dModel: 2 ** 21, nLayers: 1, nHeads: 1, dFF: 2, contextLength: 2 }, 1))),
  InvalidInitCheckpoint: async () => {
    const workflowId = uniqueId('wf');
    const started: RunConfig = await activityEnv.run(control().startRun, { input: { ...TINY, checkpoint: { dir: path.join(home, workflowId), init_from: path.join(home, 'no-such-checkpoint') } }, workflowId });
    return thrown(() => activityEnv.run(train().initPolicy, { runId: started.run_id as string }));
  },
  DuplicateRunId: async () => {
    const runId = uniqueId('dup');
    await activityEnv.run(control().startRun, { input: { ...TINY, run_id: runId }, workflowId: uniqueId('wf') });
    return thrown(() => activityEnv.run(control().startRun, { input: { ...TINY, run_id: runId }, workflowId: uniqueId('wf') }));
  },
  NonFiniteUpdate: async () => asActivityFailure(new NonFiniteUpdateError('the loss is NaN')),
  FailureBudgetExceeded: async () => {
    const err = await thrown(() => runWorkflow({ ...TINY, reward: { module: FAILING_REWARD }, train: { ...TINY.train, failure_budget: 0.5 } }));
    assert.ok(err instanceof WorkflowFailedError, String(err));
    assert.match((err.cause as Error).message, /the reward failed on 4 of 4 samples, over train\.failure_budget \(0\.5\)/);
    return err.cause;
  },
  // The setHyperparameters Update's validator (workflows/hyperparameter-updates.ts), as the workflow runs it.
  InvalidHyperparameters: async () => thrown(async () => validateUpdate(await updatableRun('running'), { train: { lr: -1 } })),
  RunNotStarted: async () => thrown(async () => validateUpdate(undefined, { train: { lr: 1e-3 } })),
  RunFinished: async () => thrown(async () => validateUpdate(await updatableRun('completed'), { train: { lr: 1e-3 } })),
  InvalidEvaluation: async () => {
    const runId = await startedRun(TINY);
    const failure = await thrown(() => activityEnv.run(evaluate().evaluateSamples, { run_id: runId, version: 7 }));
    assert.match((failure as Error).message, /has no policy version 7; its retained versions are 0/);
    return failure;
  },
};

/** The part of a workflow's run state the Update's validator reads. */
async function updatableRun(status: TrainingProgress['status']): Promise<RunState> {
  return { config: parseRunConfig(TINY), progress: { status, step: 1, totalSteps: 2, policyVersion: 1, rewards: [], accuracies: [] } } as unknown as RunState;
}

test('the failure types: one list of non-retryable and one of retryable types, no type in both', () => {
  assert.deepEqual(Object.keys(NON_RETRYABLE).sort(), [...NON_RETRYABLE_FAILURE_TYPES].sort(), 'every non-retryable type is produced below');
  for (const t of RETRYABLE_FAILURE_TYPES) assert.ok(!(NON_RETRYABLE_FAILURE_TYPES as readonly string[]).includes(t), t);
});

for (const [type, produce] of Object.entries(NON_RETRYABLE)) {
  test(`${type}: produced from its real cause, non-retryable, with its type and a short message`, async () => {
    const failure = await produce();
    assert.ok(failure instanceof ApplicationFailure, `an ApplicationFailure, got ${String(failure)}`);
    assert.equal(failure.type, type);
    assert.equal(failure.nonRetryable, true);
    assert.ok(failure.message.length > 0 && failure.message.length <= 2000, failure.message);
  });
}

test('NotAllowed names the setting that decides it, for modules and agent commands', () => {
  const modules = asActivityFailure(checkThrows(() => checkModuleAllowed('env.module', '/opt/x.js', '/opt/x.js', {}, home))) as ApplicationFailure;
  assert.match(modules.message, /RELAX_ALLOWED_MODULE_ROOTS/);
  const agents = asActivityFailure(checkThrows(() => checkAgentCommandAllowed(['bash', '-c', 'true'], {}))) as ApplicationFailure;
  assert.equal(agents.type, 'NotAllowed');
  assert.equal(agents.nonRetryable, true);
  assert.match(agents.message, /RELAX_ALLOW_AGENT_COMMANDS/);
});

function checkThrows(fn: () => void): unknown {
  try {
    fn();
  } catch (err) {
    return err;
  }
  return assert.fail('expected a throw');
}

test('ResourceLimit says what to change; an error carried as another one\'s cause maps the same way', async () => {
  const range = await thrown(() => initWeights({ vocabSize: 2, dModel: 2 ** 21, nLayers: 1, nHeads: 1, dFF: 2, contextLength: 2 }, 1));
  const failure = asActivityFailure(new Error('loading the trainer failed', { cause: range })) as ApplicationFailure;
  assert.equal(failure.type, 'ResourceLimit');
  assert.match(failure.message, /train\.micro_batch.*RELAX_MAX_RUN_MEMORY_GB.*Invalid typed array length/);
  const plain = new Error('a socket closed');
  assert.equal(asActivityFailure(plain), plain, 'anything else is left as it is (retried)');
});

test('retryable: a version not published yet (MissingPolicyVersion) and samples not ready (NoSamples)', async () => {
  const runId = await startedRun(TINY);
  const run = await loadRunContext(db.pool, runId);
  const missing = asActivityFailure(await thrown(() => loadPolicyWeights(db.pool, run, 9))) as ApplicationFailure;
  const noSamples = (await thrown(() => activityEnv.run(train().trainStep, { runId, step: 1, fromVersion: 0 }))) as ApplicationFailure;
  for (const [failure, type] of [[missing, 'MissingPolicyVersion'], [noSamples, 'NoSamples']] as const) {
    assert.ok(failure instanceof ApplicationFailure);
    assert.equal(failure.type, type);
    assert.equal(failure.nonRetryable, false);
    assert.ok((RETRYABLE_FAILURE_TYPES as readonly string[]).includes(type));
  }
});

async function runWorkflow(config: RunConfigInput): Promise<TrainingResult> {
  return (await temporal.client.workflow.execute('trainingRun', { taskQueue: roleTaskQueue('control'), workflowId: uniqueId('budget'), args: [config] })) as TrainingResult;
}

for (const mode of ['sync', 'async'] as const) {
  test(`${mode}: every sample failed, failure_budget 1: each step is skipped and recorded, the run completes`, async () => {
    const config: RunConfigInput = { ...TINY, mode, ...(mode === 'async' ? { max_staleness: 1 } : {}), reward: { module: FAILING_REWARD }, train: { ...TINY.train, failure_budget: 1 } };
    const result = await runWorkflow(config);
    assert.equal(result.steps, 2);
    assert.equal(result.skippedSteps, 2, 'the summary counts the skipped steps');
    assert.equal(result.policyVersion, 0, 'nothing was published');
    assert.equal(result.stopped, false);
    const skips = (await listEvents(db.pool, result.runId)).filter((e) => e.kind === 'step_skipped');
    assert.deepEqual(skips.map((e) => e.detail.step).sort(), [1, 2]);
    for (const e of skips) assert.match(String(e.detail.reason), /every one of the 4 samples of iteration \d failed \(train\.failure_budget 1 allows it\)/);
    const { rows } = await db.pool.query<{ step: number; value: number }>(`SELECT step, value FROM metrics WHERE run_id = $1 AND name = 'skipped_all_failed' ORDER BY step`, [result.runId]);
    assert.deepEqual(rows.map((r) => [r.step, r.value]), [[1, 1], [2, 1]], 'a metrics row per skipped step');
    const { rows: finished } = await db.pool.query<{ status: string }>('SELECT status FROM runs WHERE run_id = $1', [result.runId]);
    assert.equal(finished[0].status, 'completed');
  });
}

test('the train worker checks that the run fits its own memory (RELAX_MAX_RUN_MEMORY_GB) before allocating: ResourceLimit', async () => {
  const runId = await startedRun(TINY); // its context is now cached in this process, parsed under the default limit
  const saved = process.env.RELAX_MAX_RUN_MEMORY_GB;
  process.env.RELAX_MAX_RUN_MEMORY_GB = '0.001';
  try {
    const failure = (await thrown(() => activityEnv.run(train().initPolicy, { runId }))) as ApplicationFailure;
    assert.ok(failure instanceof ApplicationFailure);
    assert.equal(failure.type, 'ResourceLimit');
    assert.equal(failure.nonRetryable, true);
    assert.match(failure.message, /^train\.micro_batch: the tiny GPT has ~.* parameters; its trainer needs ~.*this worker allows at most 1\.0 MB \(RELAX_MAX_RUN_MEMORY_GB=0\.001\)/);
  } finally {
    if (saved === undefined) delete process.env.RELAX_MAX_RUN_MEMORY_GB;
    else process.env.RELAX_MAX_RUN_MEMORY_GB = saved;
  }
});
