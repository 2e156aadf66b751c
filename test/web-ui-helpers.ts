// Drives the Temporal Web UI (the one `temporal server start-dev --ui-port` serves) in a real
// headless Chromium through playwright-core: the Start Workflow form, a run's page (status badge,
// the Current Details of the User Metadata tab, the Memo tab, the timeline) and the workflow list
// with a query. Selectors by role, label, test id or text, and waits for conditions, not sleeps.
import fs from 'node:fs';
import path from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { PACKAGE_ROOT } from '../config/environment';

/** Debian's chromium (scripts/test-tools.js installs it); RELAX_CHROMIUM names another build. */
export function chromiumPath(): string {
  const p = process.env.RELAX_CHROMIUM || '/usr/bin/chromium';
  if (!fs.existsSync(p)) {
    throw new Error(`no Chromium at ${p} (RELAX_CHROMIUM): the Web UI test drives a real browser. fix: \`npm run setup -- --test-tools\` as root installs it, or \`apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium\`, or set RELAX_CHROMIUM to a Chromium binary`);
  }
  return p;
}

export async function launchChromium(): Promise<Browser> {
  return chromium.launch({ executablePath: chromiumPath(), args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'] });
}

/** Where the test's screenshots go: $RELAX_TEST_ARTIFACTS/web-ui, else .scratch/web-ui in the repository. */
export function artifactsDir(): string {
  const dir = process.env.RELAX_TEST_ARTIFACTS ? path.join(process.env.RELAX_TEST_ARTIFACTS, 'web-ui') : path.join(PACKAGE_ROOT, '.scratch', 'web-ui');
  fs.mkdirSync(dir, { recursive: true });
  return dir;
}

export async function screenshot(page: Page, name: string): Promise<string> {
  const file = path.join(artifactsDir(), `${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  return file;
}

export interface StartForm {
  workflowId: string;
  taskQueue: string;
  workflowType: string;
  /** The single JSON payload typed into the form's Input editor. */
  input: unknown;
}

/**
 * Opens the workflow list, follows its "Start Workflow" link, fills the form and waits until the
 * form says a worker polls the task queue. Call `submitStartForm` after (a screenshot in between).
 */
export async function fillStartForm(page: Page, uiUrl: string, form: StartForm): Promise<void> {
  await page.goto(`${uiUrl}/namespaces/default/workflows`);
  await page.getByRole('link', { name: 'Start Workflow' }).click();
  await page.waitForURL(/\/start-workflow/);
  await page.waitForLoadState('networkidle');
  await fillField(page, '#workflowId', form.workflowId);
  await fillField(page, '#taskQueue', form.taskQueue);
  await page.getByText('Task Queue is Active').waitFor({ timeout: 60_000 });
  await fillField(page, '#workflowType', form.workflowType);
  await page.getByRole('textbox', { name: 'Data' }).click();
  await page.keyboard.insertText(JSON.stringify(form.input));
  // Leaving the editor reformats the JSON and moves the button: blur first, then click it.
  await page.getByRole('heading', { name: 'Start Workflow' }).click();
  await page.getByRole('textbox', { name: 'Data' }).filter({ hasText: '"train"' }).waitFor();
}

/** Fills an input until it keeps the value (the form may initialise its fields from the URL after the page shows). */
async function fillField(page: Page, selector: string, value: string): Promise<void> {
  const input = page.locator(selector);
  for (let attempt = 0; ; attempt++) {
    await input.fill(value);
    await input.blur();
    await page.waitForTimeout(500);
    if ((await input.inputValue()) === value) return;
    if (attempt >= 5) throw new Error(`the Start Workflow form's ${selector} does not keep the value ${value}`);
  }
}

/** Clicks "Start Workflow" and waits for the UI's start request to succeed. */
export async function submitStartForm(page: Page, workflowId: string): Promise<void> {
  const started = page.waitForResponse((r) => r.request().method() === 'POST' && r.url().includes(`/api/v1/namespaces/default/workflows/${encodeURIComponent(workflowId)}`), { timeout: 60_000 });
  await page.getByRole('button', { name: 'Start Workflow' }).click();
  const response = await started;
  if (response.status() !== 200) throw new Error(`the Web UI's start request answered ${response.status()}: ${await response.text()}`);
}

export type RunTab = 'User Metadata' | 'Memo' | 'Timeline' | 'Search Attributes';

/** Opens (or reloads) the run's page on one tab. */
export async function openRunTab(page: Page, uiUrl: string, workflowId: string, tab: RunTab): Promise<void> {
  await page.goto(`${uiUrl}/namespaces/default/workflows/${encodeURIComponent(workflowId)}`);
  await page.getByRole('tab', { name: tab }).click();
}

/** The status badge next to the workflow id ("Running", "Completed", ...), lower case. */
export async function runStatus(page: Page): Promise<string> {
  const badge = page.locator('#content').getByText(/^(running|completed|failed|canceled|terminated|timed out|continued as new)$/i).first();
  return (await badge.innerText({ timeout: 60_000 })).trim().toLowerCase();
}

/** The User Metadata tab's "Current Details": the UI renders the markdown in an iframe. */
export async function currentDetails(page: Page): Promise<string> {
  await page.getByText('Current Details').first().waitFor({ timeout: 60_000 });
  const body = page.frameLocator('iframe[src*="render"]').locator('body');
  return (await body.innerText({ timeout: 60_000 })).trim();
}

/** The Memo tab's JSON ({fields: {...}}): the fields. */
export async function memoFields(page: Page): Promise<Record<string, unknown>> {
  const code = page.locator('#content .cm-content:visible', { hasText: '"fields"' }).first();
  const text = await code.innerText({ timeout: 60_000 });
  return (JSON.parse(text) as { fields: Record<string, unknown> }).fields;
}

/** What the details line says: "running · step 12/100 · v12 · reward 0.41 · held-out 63.0% (step 10) · ...". */
export interface DetailsReading {
  status?: string;
  step: number;
  totalSteps: number;
  heldOut?: number;
  heldOutStep?: number;
}

export function parseDetails(line: string): DetailsReading | undefined {
  // The markdown renderer may turn "/" into a fraction slash (U+2044).
  const step = /step (\d+)\s*[/\u2044]\s*(\d+)/.exec(line);
  if (!step) return undefined;
  const held = /held-out ([\d.]+)% \(step (\d+)\)/.exec(line);
  const status = /^([a-z_]+) ·/.exec(line)?.[1];
  return { status, step: Number(step[1]), totalSteps: Number(step[2]), heldOut: held ? Number(held[1]) / 100 : undefined, heldOutStep: held ? Number(held[2]) : undefined };
}

/** The workflow list with `query` typed into its manual query box; resolves once `workflowId` is listed. */
export async function listWithQuery(page: Page, uiUrl: string, query: string, workflowId: string): Promise<void> {
  await page.goto(`${uiUrl}/namespaces/default/workflows`);
  await page.getByTestId('toggle-manual-query').click();
  const box = page.getByTestId('workflow-manual-search-input');
  await box.fill(query);
  await box.press('Enter');
  await page.getByRole('link', { name: workflowId }).first().waitFor({ timeout: 60_000 });
}
