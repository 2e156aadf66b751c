// Histories recorded from real runs (scripts/record-histories.js) must replay against the current
// workflow code without nondeterminism: a change that would break running workflows fails here.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { before, test } from 'node:test';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils';
import { Worker, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { bundleWorkflows } from '../workers/worker';

// Compiled to dist/test/; the recorded JSON stays in the source tree.
const HISTORIES = path.resolve(__dirname, '..', '..', 'test', 'histories');
let workflowBundle: WorkflowBundleWithSourceMap;

before(async () => {
  workflowBundle = await bundleWorkflows();
});

const files = fs.readdirSync(HISTORIES).filter((f) => f.endsWith('.json'));

test('recorded histories exist for every workflow type', () => {
  const types = files.map((f) => JSON.parse(fs.readFileSync(path.join(HISTORIES, f), 'utf8')).events[0].workflowExecutionStartedEventAttributes.workflowType.name);
  assert.deepEqual(types.sort(), ['smokeWorkflow', 'trainingRun']);
});

for (const file of files) {
  test(`replays ${file} without nondeterminism`, async () => {
    const history = historyFromJSON(JSON.parse(fs.readFileSync(path.join(HISTORIES, file), 'utf8')));
    await Worker.runReplayHistory({ workflowBundle, replayName: file }, history, `replay-${file}`);
  });
}
