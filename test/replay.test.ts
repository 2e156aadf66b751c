// Histories recorded from real runs of the current workflow code (scripts/record-histories.js) must
// replay against it without nondeterminism. A change to workflow code is a new worker build
// (docs/architecture.md "What running executions are promised"): re-record them with it.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { before, test } from 'node:test';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils';
import { Worker, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { bundleWorkflows } from '../workers/workflow-bundle';

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

test('training-run histories: one sync, one async and one colocated run, all of the current code (no patch markers)', () => {
  const history = (file: string) => JSON.parse(fs.readFileSync(path.join(HISTORIES, file), 'utf8')) as {
    events: Array<{ markerRecordedEventAttributes?: { markerName?: string }; workflowExecutionStartedEventAttributes?: { input: { payloads: Array<{ data: string }> } } }>;
  };
  assert.deepEqual(files.filter((f) => startedType(f) === 'trainingRun').sort(), ['training-run-async.json', 'training-run-colocated.json', 'training-run.json']);
  for (const file of files) {
    const markers = history(file).events.filter((e) => e.markerRecordedEventAttributes).map((e) => e.markerRecordedEventAttributes?.markerName);
    assert.deepEqual(markers, [], `${file}: recorded by code with patches (${markers.join(', ')}): re-record it (scripts/record-histories.js)`);
  }
  // Each file is the mode and placement its name says (the workflow's first input is the run config).
  const config = (file: string) =>
    JSON.parse(Buffer.from(history(file).events[0].workflowExecutionStartedEventAttributes!.input.payloads[0].data, 'base64').toString('utf8')) as { mode?: string; placement?: string };
  assert.equal(config('training-run.json').mode ?? 'sync', 'sync');
  assert.equal(config('training-run-async.json').mode, 'async');
  assert.equal(config('training-run-colocated.json').placement, 'colocated');
});

for (const file of files) {
  test(`replays ${file} without nondeterminism`, async () => {
    const history = historyFromJSON(JSON.parse(fs.readFileSync(path.join(HISTORIES, file), 'utf8')));
    await Worker.runReplayHistory({ workflowBundle, replayName: file }, history, `replay-${file}`);
  });
}
