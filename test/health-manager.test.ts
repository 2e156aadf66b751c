// The health manager on a real `relax dev` (its worker processes, supervisor and API) while a run
// trains: every rollout worker is killed (SIGKILL); the manager notices within its interval, restarts
// them through the supervisor (never the whole stack), records the action with its reason, and a
// local webhook receiver gets the health event, then the recovery; the run goes on. `relax health`
// prints the table; GET /health/status has the actions.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { problemsOf } from '../workflows/health-manager';
import { spawnRelax, startDevStack, uniqueId, waitFor, type DevStack } from './helpers';

let stack: DevStack;
let receiver: http.Server;
let base: string;
const received: any[] = [];

before(async () => {
  receiver = http.createServer((req, res) => {
    let data = '';
    req.on('data', (c) => (data += c));
    req.on('end', () => {
      received.push(JSON.parse(data));
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', () => r()));
  base = `http://127.0.0.1:${(receiver.address() as { port: number }).port}`;
  stack = await startDevStack(['--train-workers', '1']);
});

after(async () => {
  await stack?.close();
  receiver?.close();
});

test('problemsOf: a role short of workers, an engine that does not answer, a stalled run, a low disk', () => {
  const p = problemsOf({
    at: '',
    roles: [{ role: 'rollout', slots: 2, up: 1, down: [42], hung: [] }, { role: 'train', slots: 1, up: 1, down: [], hung: [] }],
    engines: [{ engineId: 'e1', url: 'http://x:1', ok: false, problem: 'refused' }],
    runs: [{ runId: 'r', lastStepSecsAgo: 100, medianStepSecs: 2, stalled: true }],
    disk: { path: '/d', freeMb: 5, low: true },
  });
  assert.deepEqual([...p.keys()], ['role:rollout', 'engine:e1', 'run:r', 'disk']);
  assert.match(p.get('role:rollout')!.reason, /1 of 2 rollout workers up; down or starting: pid 42/);
});

async function appliedSteps(runId: string): Promise<number> {
  const { rows } = await stack.db.pool.query<{ n: string }>(`SELECT count(*) AS n FROM train_steps WHERE run_id = $1 AND status = 'applied'`, [runId]);
  return Number(rows[0].n);
}

test('killing every rollout worker: the manager notices, restarts them, records it and notifies; the run goes on', async () => {
  const runId = uniqueId('health');
  assert.equal((await stack.call('POST', '/runs', { run_id: runId, task: 'add2', model: { context_length: 16 }, algorithm: { group_size: 2 }, rollout: { prompts_per_step: 4, max_new_tokens: 4 }, train: { steps: 100_000, eval_every: 100_000 } })).status, 201);
  await waitFor('step 2', async () => ((await appliedSteps(runId)) >= 2 ? true : undefined), 120_000);
  const started = await stack.call('POST', '/health/manager', { interval_secs: 1, min_stall_secs: 600, webhooks: [{ url: `${base}/health` }] });
  assert.equal(started.status, 201, JSON.stringify(started.json));
  assert.equal((await stack.call('POST', '/health/manager', {})).status, 409, 'one manager per stack');
  const bad = await stack.call('POST', '/health/manager', { interval_secs: 0 });
  assert.deepEqual([bad.status, bad.json.error.type], [400, 'invalid_health_config']);
  assert.match(bad.json.error.message, /^interval_secs: /);
  const healthy = await waitFor('a first check', async () => {
    const s = await stack.call('GET', '/health/status');
    return s.status === 200 && s.json.last_report ? s.json : undefined;
  }, 60_000);
  assert.deepEqual(healthy.open, []);
  assert.deepEqual(healthy.last_report.roles.map((r: { role: string; up: number; slots: number }) => `${r.role} ${r.up}/${r.slots}`), ['control 1/1', 'rollout 1/1', 'train 1/1']);

  const stackFile = JSON.parse(fs.readFileSync(path.join(stack.home, 'stack.json'), 'utf8')) as { children: { workers: Record<string, number[]> } };
  const rolloutPids = stackFile.children.workers.rollout;
  assert.ok(rolloutPids.length >= 1);
  const killedAt = Date.now();
  for (const pid of rolloutPids) process.kill(pid, 'SIGKILL');

  const event = await waitFor('the health event', async () => received.find((e) => e.action === 'restart_workers' && e.target === 'rollout'), 60_000);
  assert.equal(event.event, 'health');
  assert.match(event.reason, /0 of 1 rollout workers up/);
  assert.ok(Date.parse(event.at) - killedAt < 15_000, `noticed within a few intervals (${Date.parse(event.at) - killedAt} ms)`);
  await waitFor('the recovery event', async () => received.find((e) => e.action === 'workers_recovered' && e.target === 'rollout'), 120_000);
  const status = (await stack.call('GET', '/health/status')).json;
  assert.deepEqual(status.open, []);
  const restart = status.actions.find((a: { action: string }) => a.action === 'restart_workers');
  assert.ok(restart && restart.detail, JSON.stringify(status.actions));
  assert.ok([...restart.detail.relaunched, ...restart.detail.starting].length >= 1, `it relaunched the worker or found it starting again: ${JSON.stringify(restart.detail)}`);
  assert.ok(!received.some((e) => e.target === 'train' || e.target === 'control'), 'only the rollout role was touched');

  const steps = await appliedSteps(runId);
  await waitFor('steps after the restart', async () => ((await appliedSteps(runId)) >= steps + 2 ? true : undefined), 120_000);

  const cli = spawnRelax(['health'], { DATABASE_URL: stack.db.url, TEMPORAL_ADDRESS: stack.temporalAddress });
  assert.equal(await cli.exited, 0, cli.output.join('\n'));
  assert.ok(cli.output.some((l) => /^rollout +1 +1 /.test(l)), cli.output.join('\n'));
  assert.ok(cli.output.some((l) => /restart_workers rollout: 0 of 1 rollout workers up/.test(l)), cli.output.join('\n'));

  assert.equal((await stack.call('POST', '/health/manager/stop')).status, 202);
  assert.equal((await stack.call('POST', `/runs/${runId}/stop`)).status, 202);
});
