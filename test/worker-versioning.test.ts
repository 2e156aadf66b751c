// Temporal Worker Versioning with two builds of the control worker (workers/deployment.ts): a run
// started on build A keeps every workflow task on build A after build B has become the
// deployment's current version, and completes there, while a run started after that runs wholly
// on build B. Read from the runs' histories (each workflow task records the build that completed it).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { RunConfigInput } from '../config/run-config';
import { roleTaskQueue } from '../config/task-queues';
import { startWorkerProcess, startWorkerStack, uniqueId, waitFor, type TestProcess, type WorkerStack } from './helpers';

const RUN: RunConfigInput = {
  model: { context_length: 16 },
  algorithm: { group_size: 4 },
  rollout: { prompts_per_step: 4, max_new_tokens: 4 },
  train: { steps: 6, eval_every: 100 },
};
// The default deployment: the suites share one Temporal server and one control task queue, and a
// task queue follows the deployment that last made a version of it current. Under another name,
// this test's build B would stay the queue's current version after it (no worker polls it), and
// the next suite's control worker, promoting build wf-... of "relax" that is already that
// deployment's current version, would change nothing: its runs would wait for build B.
const DEPLOYMENT = 'relax';
let stack: WorkerStack;
let buildB: TestProcess | undefined;

before(async () => {
  // The train and rollout workers are unversioned; only the control worker (the workflows) has builds.
  stack = await startWorkerStack(['train', 'rollout'], {}, 'relax-versioning-');
});

after(async () => {
  await buildB?.stop('SIGKILL');
  await stack?.close();
});

/** The build ids that completed the workflow tasks of an execution, in order. */
async function taskBuilds(workflowId: string): Promise<string[]> {
  const history = await stack.temporal.client.workflow.getHandle(workflowId).fetchHistory();
  return (history.events ?? []).flatMap((e) => {
    const done = e.workflowTaskCompletedEventAttributes;
    return done ? [done.deploymentVersion?.buildId ?? '(unversioned)'] : [];
  });
}

test('a run started on build A finishes on build A after build B becomes current; a new run runs on build B', async () => {
  const env = { TEMPORAL_ADDRESS: process.env.TEMPORAL_ADDRESS as string, DATABASE_URL: stack.db.url, RELAX_HOME: stack.home };
  const buildA = await startWorkerProcess('control', { ...env, RELAX_BUILD_ID: 'build-a' } as typeof env);
  stack.workers.push(buildA);
  assert.match(buildA.output.join('\n'), new RegExp(`as build build-a of deployment ${DEPLOYMENT}`));
  const client = stack.temporal.client;
  const first = await client.workflow.start('trainingRun', { taskQueue: roleTaskQueue('control'), workflowId: uniqueId('versioned-a'), args: [RUN] });
  await waitFor('the first run to train a step on build A', async () => {
    const p = (await first.query('progress')) as { step: number };
    return p.step >= 1 ? true : undefined;
  }, 120_000);
  // Paused, so it is still open (and has steps left) when build B becomes current.
  await first.signal('pause');

  buildB = await startWorkerProcess('control', { ...env, RELAX_BUILD_ID: 'build-b' } as typeof env);
  const second = await client.workflow.start('trainingRun', { taskQueue: roleTaskQueue('control'), workflowId: uniqueId('versioned-b'), args: [RUN] });
  const b = (await second.result()) as { steps: number };
  assert.equal((await first.describe()).status.name, 'RUNNING');
  await first.signal('resume');
  const a = (await first.result()) as { steps: number };
  assert.equal(a.steps, RUN.train!.steps);
  assert.equal(b.steps, RUN.train!.steps);

  const buildsA = await taskBuilds(first.workflowId);
  const buildsB = await taskBuilds(second.workflowId);
  assert.ok(buildsA.length > 5 && buildsB.length > 5, `workflow tasks recorded: ${buildsA.length}, ${buildsB.length}`);
  assert.deepEqual([...new Set(buildsA)], ['build-a'], `the first run's workflow tasks: ${buildsA.join(' ')}`);
  assert.deepEqual([...new Set(buildsB)], ['build-b'], `the second run's workflow tasks: ${buildsB.join(' ')}`);
  // Pinned: the first execution says so (its versioning info names build A and the PINNED behaviour).
  const info = (await first.describe()).raw.workflowExecutionInfo?.versioningInfo;
  assert.equal(info?.deploymentVersion?.buildId, 'build-a');
  assert.equal(info?.deploymentVersion?.deploymentName, DEPLOYMENT);
  assert.equal(String(info?.behavior), '1', `versioning behaviour ${String(info?.behavior)} (1 = PINNED)`);
});
