// The live dashboard in Debian's Chromium (playwright-core) during a real run on `relax dev`: the
// page served by the control API lists the run, its curves (reward, held-out accuracy, loss, grad
// norm, samples/s, idle) have points and gain more while it trains, the staleness histogram and the
// stage timeline are drawn, the health panel and recent events show; a screenshot is saved
// ($RELAX_TEST_ARTIFACTS/web-ui/dashboard.png, else .scratch/web-ui; docs/monitoring.md describes it).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { Browser } from 'playwright-core';
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

test('the dashboard draws a training run live: curves with points that grow, staleness, timeline, health and events', async () => {
  const runId = uniqueId('dashboard');
  const started = await stack.call('POST', '/runs', { run_id: runId, task: 'add2', model: { context_length: 16 }, algorithm: { group_size: 4 }, rollout: { prompts_per_step: 8, max_new_tokens: 4 }, train: { steps: 100_000, eval_every: 2, lr: 3e-3 } });
  assert.equal(started.status, 201, JSON.stringify(started.json));
  assert.equal((await stack.call('POST', '/health/manager', { interval_secs: 1, min_stall_secs: 600 })).status, 201);

  const page = await browser.newPage({ viewport: { width: 1400, height: 1300 } });
  const errors: string[] = [];
  page.on('pageerror', (err) => errors.push(err.message));
  await page.goto(`${stack.api}/dashboard?run=${runId}&every=1`);
  await page.getByTestId('runs').getByText(runId).waitFor({ timeout: 30_000 });

  const counts = (): Promise<Counts> =>
    page.evaluate(() => {
      const d = (globalThis as unknown as { relaxDashboard: { charts: Record<string, { data: { datasets: Array<{ data: unknown[] }>; labels?: unknown[] } }>; updates: number } }).relaxDashboard;
      const n: Record<string, number> = { updates: d.updates, staleness_bars: d.charts.staleness.data.labels?.length ?? 0, timeline_sets: d.charts.timeline.data.datasets.length };
      for (const id of ['reward', 'accuracy', 'loss', 'grad_norm', 'samples_per_s', 'idle']) n[id] = d.charts[id].data.datasets[0].data.length;
      return n;
    });
  const first = await waitFor('curves with points', async () => {
    const c = await counts();
    return c.reward >= 3 && c.accuracy >= 2 && c.grad_norm >= 2 && c.samples_per_s >= 2 && c.idle >= 2 && c.staleness_bars >= 1 && c.timeline_sets >= 2 ? c : undefined;
  }, 180_000, 500);
  const later = await waitFor('the curves growing', async () => {
    const c = await counts();
    return c.reward >= first.reward + 2 && c.accuracy > first.accuracy && c.updates > first.updates ? c : undefined;
  }, 180_000, 500);
  const lastError = await page.evaluate(() => (globalThis as unknown as { relaxDashboard: { lastError?: string } }).relaxDashboard.lastError);
  assert.ok(later.updates > first.updates, `every refresh completes (last error: ${lastError})`);

  await page.getByTestId('health').getByText('no open problem').waitFor({ timeout: 30_000 });
  await waitFor('recent events', async () => ((await page.getByTestId('events').locator('tr').count()) >= 3 ? true : undefined), 30_000);
  assert.match((await page.getByTestId('run-status').textContent()) ?? '', /running \(RUNNING\)/);
  const file = await screenshot(page, 'dashboard');
  console.log(`# dashboard screenshot: ${file}`);
  assert.deepEqual(errors, [], 'no script error on the page');

  assert.equal((await stack.call('POST', `/runs/${runId}/stop`)).status, 202);
  await stack.call('POST', '/health/manager/stop');
});
