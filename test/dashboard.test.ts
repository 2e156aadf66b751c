// The live dashboard in Debian's Chromium (playwright-core) during a real run on `relax dev`: the
// page served by the control API lists the run, its curves (reward, held-out accuracy, loss, grad
// norm, samples/s, idle) have points and gain more while it trains, the staleness histogram and the
// stage timeline are drawn, the health panel shows and the event list leads with steps and
// evaluations (activity starts only behind its toggle); a screenshot is saved
// ($RELAX_TEST_ARTIFACTS/web-ui/dashboard.png, else .scratch/web-ui; docs/monitoring.md describes it).
// Before that, on the same stack with no health manager: a run that fails at its first activity
// shows "failed" with its reason, a run with a single evaluation draws that point, and the page's
// polling gets no 404 (no health manager, no favicon).
import assert from 'node:assert/strict';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import { startDevStack, uniqueId, waitFor, type DevStack } from './helpers';
import { launchChromium, screenshot } from './web-ui-helpers';

let stack: DevStack;
let browser: Browser;

before(async () => {
  browser = await launchChromium();
  stack = await startDevStack(['--train-workers', '1']);
});

after(async () => {
  await browser?.close();
  await stack?.close();
});

type Counts = Record<string, number>;
type Dashboard = { charts: Record<string, ChartLike>; updates: number; feedRows?: string[]; lastError?: string };
type ChartLike = { data: { datasets: Array<{ data: unknown[] }>; labels?: unknown[] }; chartArea: { left: number; top: number; right: number; bottom: number }; currentDevicePixelRatio: number; ctx: { getImageData(x: number, y: number, w: number, h: number): { data: Uint8ClampedArray } } };

/** A page on the dashboard that records every 4xx/5xx answer it gets (the polling must not log any) and every script error. */
async function openDashboard(query: string, bad: string[], errors: string[]): Promise<Page> {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1300 } });
  page.on('pageerror', (err) => errors.push(err.message));
  page.on('response', (r) => {
    if (r.status() >= 400) bad.push(`${r.status()} ${r.url()}`);
  });
  await page.goto(`${stack.api}/dashboard?${query}&every=1`);
  return page;
}

/** Pixels of the chart's first colour (#3366cc) drawn inside its plot area: 0 when the plot is blank. */
function plotPixels(page: Page, id: string): Promise<{ points: number; pixels: number }> {
  return page.evaluate((chartId) => {
    const c = (globalThis as unknown as { relaxDashboard: Dashboard }).relaxDashboard.charts[chartId];
    const a = c.chartArea;
    const r = c.currentDevicePixelRatio;
    const img = c.ctx.getImageData(a.left * r, a.top * r, (a.right - a.left) * r, (a.bottom - a.top) * r).data;
    let pixels = 0;
    for (let i = 0; i < img.length; i += 4) if (Math.abs(img[i] - 0x33) < 24 && Math.abs(img[i + 1] - 0x66) < 24 && Math.abs(img[i + 2] - 0xcc) < 24 && img[i + 3] > 128) pixels++;
    return { points: c.data.datasets[0].data.length, pixels };
  }, id);
}

/** POSTs a run and waits until Temporal closes it; returns its GET /runs/{id} body. */
async function runToEnd(config: Record<string, unknown>): Promise<{ workflowStatus: string }> {
  const started = await stack.call('POST', '/runs', config);
  assert.equal(started.status, 201, JSON.stringify(started.json));
  return waitFor(`${String(config.run_id)} to close`, async () => {
    const r = await stack.call('GET', `/runs/${String(config.run_id)}`);
    return r.json.workflowStatus && r.json.workflowStatus !== 'RUNNING' ? r.json : undefined;
  }, 120_000, 500);
}

test('with no health manager: a failed run shows "failed" and its reason, a single evaluation is drawn, and polling gets no 404', async () => {
  const failedId = uniqueId('dashboard-failed');
  const oneEvalId = uniqueId('dashboard-one-eval');
  // A checkpoint.init_from that does not exist passes the API's preflight (it checks what the config
  // names on the starting machine: task, modules, files, model) and fails the run at the train
  // worker's initPolicy (InvalidInitCheckpoint); its RelaxStatus stays "starting".
  const t0 = Date.now();
  const missing = path.join(os.tmpdir(), `${failedId}-no-such-checkpoint`);
  assert.equal((await runToEnd({ run_id: failedId, task: 'add2', model: { context_length: 16 }, checkpoint: { init_from: missing } })).workflowStatus, 'FAILED');
  // Two steps, eval_every past the end: one held-out point, at the last step.
  assert.equal((await runToEnd({ run_id: oneEvalId, task: 'add2', model: { context_length: 16 }, algorithm: { group_size: 4 }, rollout: { prompts_per_step: 8, max_new_tokens: 4 }, train: { steps: 2, eval_every: 1000 } })).workflowStatus, 'COMPLETED');
  const bad: string[] = [];
  const errors: string[] = [];

  const failed = await openDashboard(`run=${failedId}`, bad, errors);
  await failed.getByTestId('run-status').getByText('failed (FAILED)').waitFor({ timeout: 30_000 });
  assert.match((await failed.getByTestId('run-failure').textContent()) ?? '', /no-such-checkpoint/);
  assert.match((await failed.getByTestId('runs').locator('a', { hasText: failedId }).textContent()) ?? '', /failed · step/, 'the run list says failed too, not "starting"');
  await failed.getByTestId('events').locator('tr').first().getByText('run_failed').waitFor({ timeout: 10_000 });
  await failed.getByTestId('health').getByText('no health manager on this stack').waitFor({ timeout: 10_000 });
  await failed.close();

  const one = await openDashboard(`run=${oneEvalId}`, bad, errors);
  const drawn = await waitFor('the single held-out point', async () => {
    const p = await plotPixels(one, 'accuracy');
    return p.points === 1 && p.pixels > 0 ? p : undefined;
  }, 30_000, 250).catch(async (err: Error) => {
    throw new Error(`${err.message}: the accuracy chart has ${JSON.stringify(await plotPixels(one, 'accuracy'))} (one point must be drawn as a dot)`);
  });
  assert.ok(drawn.pixels >= 5, `the point is visible: ${drawn.pixels} pixels`);
  await waitFor('two more refreshes', async () => ((await one.evaluate(() => (globalThis as unknown as { relaxDashboard: Dashboard }).relaxDashboard.updates)) >= 3 ? true : undefined), 30_000, 250);
  await one.close();
  console.log(`# both runs and their pages checked in ${Date.now() - t0} ms`);
  assert.deepEqual(bad, [], 'no request of the page answered 4xx/5xx (GET /dashboard/health answers 200 without a health manager)');
  assert.deepEqual(errors, [], 'no script error on the page');
});

test('the dashboard draws a training run live: curves with points that grow, staleness, timeline, health and events', async () => {
  const runId = uniqueId('dashboard');
  const started = await stack.call('POST', '/runs', { run_id: runId, task: 'add2', model: { context_length: 16 }, algorithm: { group_size: 4 }, rollout: { prompts_per_step: 8, max_new_tokens: 4 }, train: { steps: 100_000, eval_every: 2, lr: 3e-3 } });
  assert.equal(started.status, 201, JSON.stringify(started.json));
  assert.equal((await stack.call('POST', '/health/manager', { interval_secs: 1, min_stall_secs: 600 })).status, 201);

  const bad: string[] = [];
  const errors: string[] = [];
  const page = await openDashboard(`run=${runId}`, bad, errors);
  await page.getByTestId('runs').getByText(runId).waitFor({ timeout: 30_000 });

  const counts = (): Promise<Counts> =>
    page.evaluate(() => {
      const d = (globalThis as unknown as { relaxDashboard: Dashboard }).relaxDashboard;
      const n: Record<string, number> = { updates: d.updates, staleness_bars: d.charts.staleness.data.labels?.length ?? 0, timeline_sets: d.charts.timeline.data.datasets.length };
      for (const id of ['reward', 'accuracy', 'loss', 'grad_norm', 'samples_per_s', 'idle']) n[id] = d.charts[id].data.datasets[0].data.length;
      return n;
    });
  // On timeout, say what the page had (and its last refresh error).
  const seen = async (what: string, accept: (c: Counts) => boolean): Promise<Counts> => {
    let last: Counts = {};
    return waitFor(what, async () => ((last = await counts()), accept(last) ? last : undefined), 180_000, 500).catch(async (err: Error) => {
      const lastError = await page.evaluate(() => (globalThis as unknown as { relaxDashboard: Dashboard }).relaxDashboard.lastError);
      throw new Error(`${err.message}: the page had ${JSON.stringify(last)} (last refresh error: ${lastError ?? 'none'})`);
    });
  };
  const first = await seen('curves with points', (c) => c.reward >= 3 && c.accuracy >= 2 && c.grad_norm >= 2 && c.samples_per_s >= 2 && c.idle >= 2 && c.staleness_bars >= 1 && c.timeline_sets >= 2);
  const later = await seen('the curves growing', (c) => c.reward >= first.reward + 2 && c.accuracy > first.accuracy && c.updates > first.updates);
  const lastError = await page.evaluate(() => (globalThis as unknown as { relaxDashboard: Dashboard }).relaxDashboard.lastError);
  assert.ok(later.updates > first.updates, `every refresh completes (last error: ${lastError})`);

  await page.getByTestId('health').getByText('no open problem').waitFor({ timeout: 30_000 });
  await waitFor('recent events', async () => ((await page.getByTestId('events').locator('tr').count()) >= 3 ? true : undefined), 30_000);
  const feedRows = () => page.evaluate(() => (globalThis as unknown as { relaxDashboard: Dashboard }).relaxDashboard.feedRows ?? []);
  const top = await waitFor('a step or an evaluation at the top of the events', async () => {
    const rows = await feedRows();
    return rows.slice(0, 3).some((k) => k === 'step_completed' || k === 'eval') ? rows : undefined;
  }, 30_000, 250);
  assert.ok(!top.includes('activity_started'), `activity starts hide behind the toggle: ${top.join(', ')}`);
  assert.ok(top.includes('checkpoint_published'), `published versions are listed: ${top.join(', ')}`);
  await page.getByTestId('events-all').check();
  assert.ok((await feedRows()).includes('activity_started'), 'the toggle shows the activity starts');
  await page.getByTestId('events-all').uncheck();
  assert.match((await page.getByTestId('run-status').textContent()) ?? '', /running \(RUNNING\)/);
  const file = await screenshot(page, 'dashboard');
  console.log(`# dashboard screenshot: ${file}`);
  assert.deepEqual(errors, [], 'no script error on the page');
  assert.deepEqual(bad, [], 'no request of the page answered 4xx/5xx');

  assert.equal((await stack.call('POST', `/runs/${runId}/stop`)).status, 202);
  await stack.call('POST', '/health/manager/stop');
});
