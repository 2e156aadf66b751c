// Histories recorded from real runs (scripts/record-histories.js) must replay against the current
// workflow code without nondeterminism: a change that would break running workflows fails here.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { before, test } from 'node:test';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils';
import { Worker, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { bundleWorkflows } from '../workers/worker';
import { COLOCATED_STEPS, FEWER_ROUND_TRIPS, OVERLAPPED_EVALUATION, OVERLAPPED_INITIAL_EVALUATION } from '../workflows/training-run';

// Compiled to dist/test/; the recorded JSON stays in the source tree.

const HISTORIES = path.resolve(__dirname, '..', '..', 'test', 'histories');
let workflowBundle: WorkflowBundleWithSourceMap;

before(async () => {
  workflowBundle = await bundleWorkflows();
});

const files = fs.readdirSync(HISTORIES).filter((f) => f.endsWith('.json'));

const startedType = (file: string): string =>
  JSON.parse(fs.readFileSync(path.join(HISTORIES, file), 'utf8')).events[0].workflowExecutionStartedEventAttributes.workflowType.name;

test('recorded histories exist for every workflow type, and only for workflow types that exist', () => {
  assert.deepEqual([...new Set(files.map(startedType))].sort(), ['trainingRun']);
});

test('training-run histories: two from before the overlapped-evaluation patch, two with it, one colocated, and two (one colocated) with the overlapped-initial-evaluation patch; each carries its markers', () => {
  const patches = (file: string) =>
    (JSON.parse(fs.readFileSync(path.join(HISTORIES, file), 'utf8')) as { events: Array<{ markerRecordedEventAttributes?: { details?: Record<string, { payloads: Array<{ data: string }> }> } }> }).events
      .flatMap((e) => e.markerRecordedEventAttributes?.details?.['patch-data']?.payloads ?? [])
      .map((p) => (JSON.parse(Buffer.from(p.data, 'base64').toString('utf8')) as { id: string }).id);
  const runs = files.filter((f) => startedType(f) === 'trainingRun');
  assert.deepEqual(
    runs.sort(),
    ['training-run-async-overlapped-eval.json', 'training-run-async.json', 'training-run-colocated-overlapped-start.json', 'training-run-colocated.json', 'training-run-overlapped-eval.json', 'training-run-overlapped-start.json', 'training-run.json'],
    'a sync and an async run, before and after the patch, a colocated one, and a sync and a colocated one with the overlapped initial evaluation',
  );
  for (const file of ['training-run-colocated.json', 'training-run-colocated-overlapped-start.json']) assert.ok(patches(file).includes(COLOCATED_STEPS), `${file}: the colocated run took the colocated-steps path`);
  assert.ok(!patches('training-run-colocated.json').includes(OVERLAPPED_INITIAL_EVALUATION), 'training-run-colocated.json: recorded before the overlapped-initial-evaluation patch');
  for (const file of ['training-run-overlapped-start.json', 'training-run-colocated-overlapped-start.json']) assert.ok(patches(file).includes(OVERLAPPED_INITIAL_EVALUATION), `${file}: recorded with the overlapped-initial-evaluation patch`);
  for (const file of ['training-run.json', 'training-run-async.json']) assert.deepEqual(patches(file), [FEWER_ROUND_TRIPS], `${file}: recorded before the overlapped-evaluation patch`);
  for (const file of ['training-run-overlapped-eval.json', 'training-run-async-overlapped-eval.json']) assert.deepEqual([...new Set(patches(file))], [FEWER_ROUND_TRIPS, OVERLAPPED_EVALUATION], `${file}: recorded with the overlapped-evaluation patch`);
  // Each file is the mode its name says (the workflow's first input is the run config).
  const mode = (file: string) =>
    (JSON.parse(Buffer.from(JSON.parse(fs.readFileSync(path.join(HISTORIES, file), 'utf8')).events[0].workflowExecutionStartedEventAttributes.input.payloads[0].data, 'base64').toString('utf8')) as { mode?: string }).mode ?? 'sync';
  assert.equal(mode('training-run.json'), 'sync');
  assert.equal(mode('training-run-async.json'), 'async');
  assert.equal(mode('training-run-overlapped-eval.json'), 'sync');
  assert.equal(mode('training-run-async-overlapped-eval.json'), 'async');
  assert.equal(mode('training-run-overlapped-start.json'), 'sync');
});

for (const file of files) {
  test(`replays ${file} without nondeterminism`, async () => {
    const history = historyFromJSON(JSON.parse(fs.readFileSync(path.join(HISTORIES, file), 'utf8')));
    await Worker.runReplayHistory({ workflowBundle, replayName: file }, history, `replay-${file}`);
  });
}
