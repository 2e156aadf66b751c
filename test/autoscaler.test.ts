// The rollout autoscaler: its decision rule (thresholds over sustain windows, bounds, cooldowns) on
// hand-made observations, and on a real `relax dev` whose rollout workers run one activity at a
// time (RELAX_ROLLOUT_MAX_CONCURRENT=1): a run with a slow reward builds a backlog on the rollout
// queue, the autoscaler scales out, and once the run ends and the backlog empties it scales back in,
// every decision recorded with its reason and no two scalings of a kind closer than their cooldown.
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { parseAutoscalerConfig } from '../config/autoscaler';
import { decideScaling, windowMean, type AutoscalerDecision } from '../workflows/autoscaler';
import { startDevStack, uniqueId, waitFor, type DevStack } from './helpers';

const SLOW_REWARD = path.resolve(__dirname, '../../test/fixtures/slow-reward.cjs');

test('the decision: sustained backlog scales out, a sustained empty queue scales in, within bounds and cooldowns', () => {
  const config = parseAutoscalerConfig({ min_engines: 1, max_engines: 3, scale_out: { backlog_per_engine: 1, sustain_secs: 10 }, scale_in: { backlog_per_engine: 0.1, sustain_secs: 20 }, cooldown: { scale_out_secs: 30, scale_in_secs: 60 } });
  const series = (values: number[], stepS = 5) => values.map((v, i) => ({ atMs: i * stepS * 1000, backlogPerEngine: v }));
  const now = (n: number, stepS = 5) => (n - 1) * stepS * 1000;
  assert.equal(windowMean(series([4, 4]), now(2), 10), undefined, 'a window not yet covered decides nothing');
  assert.equal(windowMean(series([0, 2, 4]), now(3), 10), 2);
  assert.equal(decideScaling(config, series([2, 2, 2]), 1, now(3), {}).action, 'scale_out');
  assert.deepEqual(decideScaling(config, series([2, 2, 2]), 1, now(3), {}).target, 2);
  assert.match(decideScaling(config, series([2, 0, 0]), 1, now(3), {}).reason, /within thresholds/, 'a spike is not sustained');
  assert.match(decideScaling(config, series([2, 2, 2]), 3, now(3), {}).reason, /at max_engines 3/);
  assert.match(decideScaling(config, series([2, 2, 2]), 1, now(3), { scaleOutAtMs: now(3) - 5000 }).reason, /scale-out cooldown \(5\.00s of 30s\)/);
  assert.equal(decideScaling(config, series([0, 0, 0, 0, 0]), 3, now(5), {}).action, 'scale_in');
  assert.equal(decideScaling(config, series([0, 0, 0, 0, 0]), 3, now(5), {}).target, 2);
  assert.match(decideScaling(config, series([0, 0, 0, 0, 0]), 3, now(5), { scaleOutAtMs: now(5) - 10_000 }).reason, /scale-in cooldown/, 'no scale-in right after a scale-out');
  assert.match(decideScaling(config, series([0, 0, 0, 0, 0]), 1, now(5), {}).reason, /at min_engines 1/);
  assert.deepEqual(decideScaling(config, series([0]), 0, 0, {}), { action: 'scale_out', engines: 0, target: 1, reason: '0 engines, below min_engines 1' });
  assert.throws(() => parseAutoscalerConfig({ min_engines: 3, max_engines: 2 }), /max_engines: must be >= min_engines \(3\)/);
  assert.throws(() => parseAutoscalerConfig({ scale_in: { backlog_per_engine: 2 } }), /scale_in\.backlog_per_engine: must be below scale_out\.backlog_per_engine/);
});

let stack: DevStack;
const call = (method: string, url: string, body?: unknown) => stack.call(method, url, body);

before(async () => {
  stack = await startDevStack([], { RELAX_ROLLOUT_MAX_CONCURRENT: '1' });
});

after(async () => {
  await stack?.close();
});

test('a backlog from a slow reward scales rollout out; an empty queue scales it back in, within the cooldowns', async () => {
  assert.equal((await call('GET', '/autoscaler/status')).status, 404, 'never started');
  const bad = await call('POST', '/autoscaler', { min_engines: 2, max_engines: 1 });
  assert.equal(bad.status, 400);
  assert.match(bad.json.error.message, /max_engines/);
  const cooldown = { scale_out_secs: 4, scale_in_secs: 4 };
  const started = await call('POST', '/autoscaler', { min_engines: 1, max_engines: 3, interval_secs: 1, scale_out: { backlog_per_engine: 1, sustain_secs: 2 }, scale_in: { backlog_per_engine: 0.1, sustain_secs: 8 }, cooldown });
  assert.equal(started.status, 201, JSON.stringify(started.json));
  assert.equal((await call('POST', '/autoscaler', {})).status, 409, 'one autoscaler at a time');

  // Twelve rollout slices of 3 s each per step on one engine that runs one at a time: a backlog of
  // 11. With three engines an iteration still starts with a backlog of 3 per engine for 3 s (then 2,
  // then 1), so a wanted scale-out is held at max_engines whatever the decision cadence of a slow
  // host; it takes four rounds (12 s), the last with an empty queue: the scale-in window (8 s) is
  // longer, so the autoscaler holds while the run trains.
  const runId = uniqueId('autoscale');
  const run = await call('POST', '/runs', {
    run_id: runId,
    task: 'add2',
    model: { context_length: 16 },
    algorithm: { group_size: 2 },
    rollout: { prompts_per_step: 12, max_new_tokens: 4, parallelism: 12 },
    reward: { module: SLOW_REWARD, timeout_ms: 20_000 },
    train: { steps: 4, eval_every: 1000 },
  });
  assert.equal(run.status, 201, JSON.stringify(run.json));
  const engines = async () => ((await call('GET', '/rollout/engines')).json.engines as unknown[]).length;
  await waitFor('a scale-out to 3 engines', async () => ((await engines()) === 3 ? true : undefined), 180_000, 500);

  await waitFor(`run ${runId} to finish`, async () => {
    const r = await call('GET', `/runs/${runId}`);
    return r.json.workflowStatus === 'RUNNING' ? undefined : r.json;
  }, 300_000, 1000);
  // The engines drop to 1 as the last scale-in removes one; its decision is recorded when the operation returns.
  await waitFor('a recorded scale-in back to 1 engine', async () => {
    const decisions = (await call('GET', '/autoscaler/history')).json.decisions as AutoscalerDecision[];
    return decisions.some((d) => d.action === 'scale_in' && d.target === 1 && d.outcome) && (await engines()) === 1 ? true : undefined;
  }, 120_000, 500);

  const history = (await call('GET', '/autoscaler/history')).json.decisions as AutoscalerDecision[];
  const shown = JSON.stringify(history.map((d) => `${d.at} ${d.action} ${d.engines}->${d.target ?? ''} ${d.reason} ${d.outcome ?? ''}`), null, 1);
  const scalings = history.filter((d) => d.action !== 'hold');
  const outs = scalings.filter((d) => d.action === 'scale_out');
  const ins = scalings.filter((d) => d.action === 'scale_in');
  assert.deepEqual([outs[0].engines, outs[0].target], [1, 2], `the first decision scales out by one step: ${shown}`);
  assert.deepEqual([ins[ins.length - 1].engines, ins[ins.length - 1].target], [2, 1], `the last scales in to min_engines: ${shown}`);
  for (const d of scalings) {
    assert.match(d.reason, d.action === 'scale_out' ? /mean backlog [\d.]+ per engine over 2s >= 1$/ : /mean backlog [\d.]+ per engine over 8s <= 0\.1$/);
    assert.match(d.outcome ?? '', d.action === 'scale_out' ? /^ACTIVE/ : /^COMPLETED/, `the operation ended well: ${shown}`);
  }
  // Cooldowns: scalings of a kind, and a scale-in after any scaling, at least the cooldown apart.
  const t = (d: AutoscalerDecision) => Date.parse(d.at);
  for (let i = 1; i < scalings.length; i++) {
    const d = scalings[i];
    const sameKind = scalings.slice(0, i).filter((p) => p.action === d.action).pop();
    if (sameKind) assert.ok(t(d) - t(sameKind) >= cooldown.scale_out_secs * 1000, `${d.action}s at least the cooldown apart: ${shown}`);
    if (d.action === 'scale_in') assert.ok(t(d) - t(scalings[i - 1]) >= cooldown.scale_in_secs * 1000, `a scale-in at least the cooldown after the previous scaling: ${shown}`);
  }
  assert.ok(history.some((d) => d.action === 'hold' && /but (at max_engines 3|in the scale-out cooldown)/.test(d.reason)), `a wanted scale-out that was held is recorded with why: ${shown}`);

  const status = (await call('GET', '/autoscaler/status')).json;
  assert.equal(status.execution, 'RUNNING');
  assert.equal(typeof status.lastObservation.backlog, 'number');
  assert.equal((await call('POST', '/autoscaler/stop')).status, 202);
  await waitFor('the autoscaler to stop', async () => ((await call('GET', '/autoscaler/status')).json.execution === 'COMPLETED' ? true : undefined), 30_000, 250);
});
