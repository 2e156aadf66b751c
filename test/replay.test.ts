// Histories recorded from real runs (scripts/record-histories.js) must replay against the current
// workflow code without nondeterminism: a change that would break running workflows fails here.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { before, test } from 'node:test';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils';
import { Worker, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { bundleWorkflows } from '../workers/worker';
import { FEWER_ROUND_TRIPS } from '../workflows/training-run';

// Compiled to dist/test/; the recorded JSON stays in the source tree.

const HISTORIES = path.resolve(__dirname, '..', '..', 'test', 'histories');
let workflowBundle: WorkflowBundleWithSourceMap;

before(async () => {
  workflowBundle = await bundleWorkflows();
});

const files = fs.readdirSync(HISTORIES).filter((f) => f.endsWith('.json'));

test('recorded histories exist for every workflow type', () => {
  const types = files.map((f) => JSON.parse(fs.readFileSync(path.join(HISTORIES, f), 'utf8')).events[0].workflowExecutionStartedEventAttributes.workflowType.name);
  assert.deepEqual([...new Set(types)].sort(), ['smokeWorkflow', 'trainingRun']);
});

test('training-run histories cover both sides of the fewer-round-trips patch', () => {
  const patches = (file: string) =>
    (JSON.parse(fs.readFileSync(path.join(HISTORIES, file), 'utf8')) as { events: Array<{ markerRecordedEventAttributes?: { details?: Record<string, { payloads: Array<{ data: string }> }> } }> }).events
      .flatMap((e) => e.markerRecordedEventAttributes?.details?.['patch-data']?.payloads ?? [])
      .map((p) => (JSON.parse(Buffer.from(p.data, 'base64').toString('utf8')) as { id: string }).id);
  assert.deepEqual(patches('training-run.json'), [FEWER_ROUND_TRIPS], 'recorded after the patch');
  assert.deepEqual(patches('training-run-v1-unpatched.json'), [], 'recorded before the patch: replays the old path');
});

for (const file of files) {
  test(`replays ${file} without nondeterminism`, async () => {
    const history = historyFromJSON(JSON.parse(fs.readFileSync(path.join(HISTORIES, file), 'utf8')));
    await Worker.runReplayHistory({ workflowBundle, replayName: file }, history, `replay-${file}`);
  });
}
