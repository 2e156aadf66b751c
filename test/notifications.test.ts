// Notifications on real worker processes and the shared Temporal server, received by local HTTP
// servers: a run with a 3-step digest interval sends started, digests at steps 3 and 6 with the main
// metrics' changes, and finished, to a JSON webhook named by an environment variable and to a
// Slack-shaped one; a run whose reward always fails sends "failed" naming the cause; the secret
// webhook URL appears in no log and no workflow history; a receiver that answers 503 at first gets
// the notification on a retry. Bad notify configs are refused naming the field.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { roleTaskQueue } from '../config/task-queues';
import { parseRunConfig, RunConfigError } from '../config/run-config';
import { loadTfjsBackend } from '../engines/backends';
import { loadOrTrainWarmStart, ADD2_SFT } from '../training/warm-start';
import { ADD2_GRPO } from '../config/recipes';
import { relaxEnvironment } from '../config/environment';
import { milestonesCrossed } from '../workflows/notifications';
import { startWorkerStack, uniqueId, waitFor, type WorkerStack } from './helpers';

const SECRET = randomBytes(16).toString('hex');
type Received = { path: string; body: any };
const received: Received[] = [];
let failFirst = 0;
let receiver: http.Server;
let base: string;
let stack: WorkerStack;

before(async () => {
  receiver = http.createServer((req, res) => {
    let data = '';
    req.on('data', (c) => (data += c));
    req.on('end', () => {
      if (req.url?.startsWith('/flaky') && failFirst-- > 0) return void res.writeHead(503).end();
      received.push({ path: req.url ?? '', body: JSON.parse(data) });
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', () => r()));
  base = `http://127.0.0.1:${(receiver.address() as { port: number }).port}`;
  // The secret URL reaches the control worker through its environment only.
  stack = await startWorkerStack(['control', 'rollout', 'train'], { RELAX_TEST_HOOK_URL: `${base}/hook/${SECRET}` });
});

after(async () => {
  await stack?.close();
  receiver?.close();
});

const TINY = { task: 'add2', model: { context_length: 16 }, algorithm: { group_size: 2 }, rollout: { prompts_per_step: 2, max_new_tokens: 4 } };
const of = (runId: string, p: string) => received.filter((r) => r.path.startsWith(p) && (r.body.run_id === runId || String(r.body.text ?? '').includes(runId)));

test('bad notify configs are refused naming the field', () => {
  for (const [notify, pattern] of [
    [{ webhooks: [] }, /notify\.webhooks/],
    [{ webhooks: [{ url_env: 'lower-case' }] }, /notify\.webhooks\.0\.url_env/],
    [{ webhooks: [{ url: 'http://x', url_env: 'X' }] }, /url_env .* or url, one of the two/],
    [{ webhooks: [{ url: 'ftp://x' }] }, /http\(s\) URL/],
    [{ webhooks: [{ url: 'http://x' }], events: ['nope'] }, /notify\.events/],
  ] as const) {
    assert.throws(() => parseRunConfig({ ...TINY, notify }), (err: unknown) => err instanceof RunConfigError && pattern.test(err.message));
  }
});

test('a run with a 3-step digest sends started, digests at 3 and 6 with deltas, and finished; the secret URL is in no history or log', async () => {
  const runId = uniqueId('notified');
  const notify = { webhooks: [{ url_env: 'RELAX_TEST_HOOK_URL' }, { kind: 'slack', url: `${base}/slack` }], digest_every: 3 };
  const result = (await stack.temporal.client.workflow.execute('trainingRun', { taskQueue: roleTaskQueue('control'), workflowId: runId, args: [{ ...TINY, run_id: runId, train: { steps: 6, eval_every: 3 }, notify }] })) as { steps: number };
  assert.equal(result.steps, 6);
  const events = of(runId, `/hook/${SECRET}`).map((r) => r.body);
  assert.deepEqual(events.map((e) => `${e.event}${e.step !== undefined ? `@${e.step}` : ''}`), ['started', 'digest@3', 'digest@6', 'finished@6']);
  const [, d3, d6, done] = events;
  assert.equal(typeof d3.metrics.reward_mean.value, 'number');
  assert.equal(d3.metrics.reward_mean.delta, null, 'the first digest has nothing to compare with... ');
  assert.equal(typeof d6.metrics.reward_mean.delta, 'number', '...the second one has the change since the first');
  assert.match(d6.text, /step 6: reward [\d.]+ \([+-][\d.e-]+\)/);
  assert.deepEqual([done.summary.steps, done.summary.policyVersion], [6, 6]);
  const slack = of(runId, '/slack').map((r) => r.body);
  assert.equal(slack.length, 4);
  assert.deepEqual(Object.keys(slack[0]), ['text'], "Slack's incoming-webhook shape");
  assert.match(slack[3].text, new RegExp(`Relax run ${runId} completed after 6 steps, policy v6`));

  // The secret: in no workflow history and no worker output.
  // Payloads are bytes in a history: decoded to text here, so the search sees what is stored.
  const bytes = (v: unknown): string | undefined =>
    v instanceof Uint8Array ? Buffer.from(v).toString('utf8') : (v as { type?: string; data?: unknown })?.type === 'Buffer' && Array.isArray((v as { data: number[] }).data) ? Buffer.from((v as { data: number[] }).data).toString('utf8') : undefined;
  const history = JSON.stringify(await stack.temporal.client.workflow.getHandle(runId).fetchHistory(), (k, v) => bytes(v) ?? (k === 'data' && typeof v === 'string' ? Buffer.from(v, 'base64').toString('utf8') : v));
  assert.ok(history.includes('RELAX_TEST_HOOK_URL'), `the history names the variable: ${history.slice(0, 3000)}`);
  assert.ok(!history.includes(SECRET), 'the history never holds the secret URL');
  for (const w of stack.workers) assert.ok(!w.output.join('\n').includes(SECRET), 'no worker printed it');
});

test('a failing run sends "failed" naming the cause; a receiver that answers 503 gets it on a retry', async () => {
  const runId = uniqueId('notified-fail');
  failFirst = 2;
  const notify = { webhooks: [{ url: `${base}/flaky` }], events: ['failed'] };
  const reward = { module: path.resolve(__dirname, '../../test/fixtures/always-failing-reward.cjs') };
  await assert.rejects(stack.temporal.client.workflow.execute('trainingRun', { taskQueue: roleTaskQueue('control'), workflowId: runId, args: [{ ...TINY, run_id: runId, train: { steps: 3, failure_budget: 0 }, reward, notify }] }));
  const failed = await waitFor('the failed notification', async () => of(runId, '/flaky')[0]?.body, 30_000);
  assert.equal(failed.event, 'failed');
  assert.match(failed.cause, /failure_budget|failed/);
  assert.match(failed.text, new RegExp(`Relax run ${runId} failed: `));
  assert.equal(of(runId, '/flaky').length, 1, 'only the events asked for');
  assert.ok(failFirst < 0, 'the first two deliveries were refused with 503 and retried');
});

test('milestonesCrossed: the milestones above the previous best and at or below the new one', () => {
  assert.deepEqual(milestonesCrossed([0.5, 0.9, 0.95], 0.4, 0.92), [0.5, 0.9]);
  assert.deepEqual(milestonesCrossed([0.9, 0.5], 0.5, 0.9), [0.9], 'reached exactly counts; the previous best itself does not');
  assert.deepEqual(milestonesCrossed([0.5], 0.6, 0.7), [], 'already passed before');
});

test('held-out accuracy passing its milestones sends one "milestone" event per new best that passed one, and only then', async () => {
  // The quickstart's warm start (about 56% held-out) and model: a few GRPO steps move held-out accuracy up.
  const base2 = { ...ADD2_GRPO, rollout: { ...ADD2_GRPO.rollout, prompts_per_step: 32 } };
  await loadTfjsBackend({ kind: 'cpu' });
  const warm = await loadOrTrainWarmStart(parseRunConfig(base2), ADD2_SFT, relaxEnvironment().warmStartCache);
  const runId = uniqueId('notified-milestone');
  const grid = Array.from({ length: 50 }, (_, i) => (i + 1) / 50);
  const notify = { webhooks: [{ url: `${base}/milestones` }], events: ['milestone'], accuracy_milestones: grid };
  const config = { ...base2, run_id: runId, train: { steps: 4, eval_every: 1, warmup_steps: 0 }, checkpoint: { init_from: warm.dir }, notify };
  const result = (await stack.temporal.client.workflow.execute('trainingRun', { taskQueue: roleTaskQueue('control'), workflowId: runId, args: [config] })) as { accuracies: Array<[number, number]> };
  // What the run's own accuracy curve says it should have sent: each new best past a grid point.
  const expected: string[] = [];
  let best = result.accuracies[0][1];
  for (const [step, accuracy] of result.accuracies.slice(1)) {
    const crossed = milestonesCrossed(grid, best, accuracy);
    if (crossed.length) expected.push(`${step}:${crossed[crossed.length - 1]}:${accuracy}`);
    best = Math.max(best, accuracy);
  }
  assert.ok(expected.length > 0, `held-out accuracy rose past a milestone: ${JSON.stringify(result.accuracies)}`);
  const got = of(runId, '/milestones').map((r) => r.body);
  assert.deepEqual(got.map((e) => `${e.step}:${e.milestone}:${e.accuracy}`).sort(), expected.sort());
  assert.ok(got.every((e) => e.event === 'milestone'));
  assert.match(got[0].text, new RegExp(`Relax run ${runId} reached [\\d.]+% held-out accuracy at step \\d+ \\([\\d.]+%\\)`));
});
