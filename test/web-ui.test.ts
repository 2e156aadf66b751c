// A run started the way a new user would: from the Temporal Web UI's Start Workflow form, in a real
// headless Chromium, with only the documented minimal config, against a real dev server (with its UI)
// and real worker processes for every role. The test reads the run back from the page alone (the
// Current Details line, the Memo, the status badge, the timeline's activity summaries, the workflow
// list filtered by search attributes), checks the step advances and the held-out accuracy rises,
// and saves screenshots that docs/web-ui.md describes.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import { roleTaskQueue } from '../config/task-queues';
import { freePort } from '../workers/ports';
import { startTemporalServer, type TemporalServer } from '../workers/temporal-server';
import { startWorkerStack, temporalClient, uniqueId, waitFor, type WorkerStack } from './helpers';
import { currentDetails, fillStartForm, launchChromium, listWithQuery, memoFields, openRunTab, parseDetails, runStatus, screenshot, submitStartForm, type DetailsReading } from './web-ui-helpers';

/** The documented minimal config (docs/web-ui.md): the add2 recipe, with its SFT warm start, for a CI-sized number of steps. */
const STEPS = 20;
const MINIMAL_CONFIG = { recipe: 'add2', train: { steps: STEPS } };
const workflowId = uniqueId('webui-add2');

let server: TemporalServer;
let stack: WorkerStack;
let client: Awaited<ReturnType<typeof temporalClient>>;
let browser: Browser;
let page: Page;
let uiUrl: string;

before(async () => {
  browser = await launchChromium();
  server = await startTemporalServer({ port: await freePort(), uiPort: await freePort(), startTimeoutMs: 120_000 });
  uiUrl = server.uiUrl!;
  stack = await startWorkerStack(['control', 'rollout', 'reference', 'train'], { TEMPORAL_ADDRESS: server.address }, 'relax-webui-');
  // The SFT warm start comes from the pass's cache (scripts/test.js sets RELAX_WARM_START_CACHE for
  // the workers): test/warm-start-run.test.ts, which runs before this file, trained it.
  client = await temporalClient(server.address);
  page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  page.setDefaultTimeout(60_000);
});

after(async () => {
  await browser?.close();
  await client?.close();
  await stack?.close();
  await server?.stop();
});

/**
 * Reloads the run page's User Metadata tab until its Current Details line parses and `accept` takes
 * it (with the status badge). With `orCompleted`, a Completed badge ends the wait too (reading
 * undefined): a CI-sized run can finish between two reloads, and a closed run has no details line.
 */
async function readDetails(workflowId: string, what: string, accept: (r: DetailsReading, badge: string) => boolean, timeoutMs: number, orCompleted = false): Promise<{ reading?: DetailsReading; line: string }> {
  let last = '(nothing yet)';
  try {
    return await waitFor(what, async () => {
      await openRunTab(page, uiUrl, workflowId, 'User Metadata');
      if (orCompleted && (await runStatus(page).catch(() => 'unknown')) === 'completed') return { reading: undefined, line: '' };
      const line = await currentDetails(page).catch(() => '');
      if (line) last = line;
      const reading = parseDetails(line);
      const status = await runStatus(page).catch(() => 'unknown');
      if (['failed', 'canceled', 'terminated', 'timed out'].includes(status)) throw new Error(`the run page says ${status} (details: ${last})`);
      return reading && accept(reading, status) ? { reading, line } : undefined;
    }, timeoutMs, 5_000);
  } catch (err) {
    throw new Error(`${(err as Error).message}; the page's Current Details last said: ${last}`);
  }
}

/** Runs one stage; on failure saves the page as failure-<stage>.png before rethrowing. */
async function stage(name: string, body: () => Promise<void>): Promise<void> {
  try {
    await body();
  } catch (err) {
    await screenshot(page, `failure-${name}`).catch(() => undefined);
    throw err;
  }
}

// Shared by the stages below, in order (node:test runs a file's tests one after another).
let started = false;
let initial: number | undefined;
const noteInitial = (r: DetailsReading) => {
  if (r.heldOutStep === 0 && r.heldOut !== undefined) initial = r.heldOut;
};

test('the Web UI Start Workflow form starts trainingRun with the minimal config', () =>
  stage('start', async () => {
    // (a) The Start Workflow form, filled.
    await fillStartForm(page, uiUrl, { workflowId, taskQueue: roleTaskQueue('control'), workflowType: 'trainingRun', input: MINIMAL_CONFIG });
    await screenshot(page, 'a-start-form');
    await submitStartForm(page, workflowId);
    const described = await client.client.workflow.getHandle(workflowId).describe();
    assert.equal(described.type, 'trainingRun', 'the form started the training workflow');
    assert.equal(described.taskQueue, roleTaskQueue('control'));
    started = true;
  }));

test('while it trains, the run page shows the step advancing and the initial held-out accuracy', () =>
  stage('mid-run', async () => {
    assert.ok(started, 'the form did not start the run (see the test before)');
    // (b) The Current Details line counts steps, and the count advances. The readings until the
    // first evaluation after step 0 carry the initial policy's held-out accuracy ("(step 0)").
    const first = await readDetails(workflowId, 'the run page to show a step >= 1 (after the SFT warm start)', (r) => (noteInitial(r), r.step >= 1 && r.step < STEPS), 540_000);
    assert.equal(first.reading!.totalSteps, STEPS, `details line: ${first.line}`);
    assert.equal(first.reading!.status, 'running', `details line: ${first.line}`);
    assert.match(first.line, / v\d+ /, 'the details line names the policy version');
    await openRunTab(page, uiUrl, workflowId, 'Memo');
    const memo = await memoFields(page);
    const progress = memo.progress as { status: string; step: number; lastAccuracy: number | null; lastEvalStep: number | null } | undefined;
    assert.ok(progress, `the memo has a progress key while the run trains: ${JSON.stringify(memo)}`);
    assert.match(progress.status, /^(running|completed)$/);
    if (progress.lastEvalStep === 0 && typeof progress.lastAccuracy === 'number') initial ??= progress.lastAccuracy;
    const firstStep = first.reading!.step;
    const later = await readDetails(workflowId, `the step to advance past ${firstStep}`, (r) => (noteInitial(r), r.step > firstStep), 300_000, true);
    await screenshot(page, 'b-run-page-mid-run');
    if (!later.reading) {
      // The run completed between two reloads: the page's memo says how far it went.
      await openRunTab(page, uiUrl, workflowId, 'Memo');
      const done = (await memoFields(page)).progress as { step: number } | undefined;
      assert.ok(done && done.step > firstStep, `the step advanced past ${firstStep}: the memo says ${JSON.stringify(done)}`);
    }
    assert.ok(initial !== undefined, `the page showed the initial held-out accuracy (step 0) while the run trained; details seen: ${first.line} / ${later.line}`);
  }));

test('at the end the page says completed, the accuracy rose, the timeline and the filtered list show the run', () =>
  stage('end', async () => {
    assert.ok(initial !== undefined, 'the stage before did not read the initial accuracy');
    // (c) Badge Completed, and the memo (what the page shows of a closed workflow; the current
    // details line is a live query, shown while the run is open) says where it ended. Wait through
    // the client: a page reloaded every few seconds takes the CPU the workers need on 2 cores.
    await client.client.workflow.getHandle(workflowId).result();
    await openRunTab(page, uiUrl, workflowId, 'Memo');
    await waitFor('the Completed badge', async () => ((await runStatus(page)) === 'completed' ? true : (await page.reload(), undefined)), 60_000, 2_000);
    await screenshot(page, 'c-run-page-completed');
    const memo = await memoFields(page);
    const progress = memo.progress as { status: string; step: number; lastAccuracy: number; lastEvalStep: number };
    const summary = memo.summary as { status: string; steps: number; evalAccuracy: number; initialAccuracy: number };
    assert.equal(progress.status, 'completed');
    assert.equal(progress.step, STEPS);
    assert.equal(progress.lastEvalStep, STEPS, 'the final evaluation is at the last step');
    assert.equal(summary.status, 'completed');
    assert.equal(summary.steps, STEPS);
    assert.ok(Math.abs(summary.initialAccuracy - initial) < 0.0006, `the memo's initial accuracy ${summary.initialAccuracy} is the one the page showed at step 0 (${initial})`);
    assert.ok(progress.lastAccuracy > initial, `held-out accuracy rose: ${initial} at step 0 -> ${progress.lastAccuracy} at step ${STEPS}`);
    await screenshot(page, 'c2-run-page-memo');

    // The timeline names the activities by what they did.
    await openRunTab(page, uiUrl, workflowId, 'Timeline');
    await page.getByText(/rollout step \d+ \(\d+ samples/).first().waitFor();
    await page.getByText(/train step \d+/).first().waitFor();
    await screenshot(page, 'e-timeline-summaries');

    // (d) The workflow list, filtered by the run's search attributes.
    await listWithQuery(page, uiUrl, `RelaxTask="add2" AND RelaxStatus="completed" AND RelaxStep=${STEPS}`, workflowId);
    await screenshot(page, 'd-list-filtered');
    await listWithQuery(page, uiUrl, `RelaxRunId="${workflowId}" AND RelaxAccuracy > ${initial}`, workflowId);
  }));
