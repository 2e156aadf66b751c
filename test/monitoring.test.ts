// Monitoring on a real `relax dev` (its API, worker processes, the test's database): GET /metrics is
// valid Prometheus exposition (`promtool check metrics`, Debian's prometheus package) and carries a
// training run's reward and accuracy as gauges labelled by run, moving while it trains; /health and
// /ready on the API and on `relax serve`; every worker's own and Temporal SDK endpoints pass promtool; `relax metrics <run>` as a table, --csv and --json.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { metricsCsv } from '../cli/runs';
import { freePort } from '../workers/ports';
import { metricsEnabled } from '../workers/worker-metrics';
import { spawnRelax, startDevStack, uniqueId, waitFor, type DevStack } from './helpers';

let stack: DevStack;

before(async () => {
  stack = await startDevStack(['--train-workers', '1']);
});

after(async () => {
  await stack?.close();
});

/** `promtool check metrics` on an exposition: its exit status and what it printed. */
function promtool(exposition: string): { status: number | null; out: string } {
  const r = spawnSync('promtool', ['check', 'metrics'], { input: exposition, encoding: 'utf8' });
  if (r.error) throw new Error(`promtool is not installed (${r.error.message}): fix: \`npm run setup -- --test-tools\` as root installs it, or \`apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus\``);
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
}

async function scrape(url: string): Promise<string> {
  const res = await fetch(url);
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
  return res.text();
}

const gauge = (text: string, name: string, runId: string): number | undefined => {
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`) && l.includes(`run="${runId}"`));
  return line === undefined ? undefined : Number(line.split(' ').at(-1));
};

test('GET /metrics passes promtool and has a training run\'s reward and accuracy as gauges that move while it trains; /health and /ready answer', async () => {
  assert.deepEqual((await stack.call('GET', '/health')).json, { status: 'ok' });
  const ready = await stack.call('GET', '/ready');
  assert.equal(ready.status, 200);
  assert.deepEqual(ready.json, { status: 'ready', checks: { temporal: 'ok', database: 'ok' } });

  const runId = uniqueId('monitored');
  const started = await stack.call('POST', '/runs', { run_id: runId, task: 'add2', model: { context_length: 16 }, algorithm: { group_size: 2 }, rollout: { prompts_per_step: 4, max_new_tokens: 4 }, train: { steps: 100_000, eval_every: 2 } });
  assert.equal(started.status, 201, JSON.stringify(started.json));
  const first = await waitFor('the run\'s reward and accuracy gauges', async () => {
    const text = await scrape(`${stack.api}/metrics`);
    return gauge(text, 'relax_run_reward', runId) !== undefined && gauge(text, 'relax_run_accuracy', runId) !== undefined ? text : undefined;
  }, 120_000, 500);
  const check = promtool(first);
  assert.equal(check.status, 0, `promtool check metrics:\n${check.out}`);
  const reward = gauge(first, 'relax_run_reward', runId)!;
  const accuracy = gauge(first, 'relax_run_accuracy', runId)!;
  assert.ok(reward >= 0 && reward <= 1 && accuracy >= 0 && accuracy <= 1, `${reward} ${accuracy}`);
  assert.match(first, /^relax_api_process_cpu_seconds_total \d/m, 'the API process\'s own metrics');
  assert.match(first, new RegExp(`^relax_run_series\\{run="${runId}",series="staleness_mean"\\} `, 'm'), 'every series, by name');
  const stepAt = gauge(first, 'relax_run_step', runId)!;
  const later = await waitFor('the step gauge moving', async () => {
    const text = await scrape(`${stack.api}/metrics`);
    return gauge(text, 'relax_run_step', runId)! >= stepAt + 2 ? text : undefined;
  }, 120_000, 500);
  assert.equal(promtool(later).status, 0);
  for (const g of ['relax_run_samples_per_second', 'relax_run_trainer_wait_seconds']) assert.ok(gauge(later, g, runId)! >= 0, `${g} for the run`);

  // Every worker's endpoints (its own and the Temporal SDK's), as relax dev recorded them: promtool
  // passes on each; the rollout worker counted and timed its generate activities.
  const recorded = JSON.parse(fs.readFileSync(path.join(stack.home, 'stack.json'), 'utf8')) as { metrics: Array<{ role: string; urls: string[] }> };
  assert.deepEqual(recorded.metrics.map((m) => m.role).sort(), ['control', 'rollout', 'train']);
  for (const m of recorded.metrics) {
    assert.equal(m.urls.length, 2, JSON.stringify(m));
    for (const url of m.urls) {
      const text = await (await fetch(url)).text();
      const c = promtool(text);
      assert.equal(c.status, 0, `promtool check metrics ${url} (${m.role}):\n${c.out}`);
    }
  }
  // The Temporal server's own endpoint, on a port relax dev chose and recorded: it parses (its
  // names are the server's own and do not follow promtool's lint conventions: no parse error allowed).
  const temporalMetricsUrl = (recorded as { temporalMetricsUrl?: string }).temporalMetricsUrl;
  assert.match(temporalMetricsUrl ?? '', /^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
  const server = await (await fetch(temporalMetricsUrl!)).text();
  assert.match(server, /^# TYPE \w+ (counter|gauge|histogram)$/m);
  assert.doesNotMatch(promtool(server).out, /pars(e|ing) error/i);
  const rollout = await (await fetch(recorded.metrics.find((m) => m.role === 'rollout')!.urls[0])).text();
  assert.match(rollout, /^relax_activities_total\{activity="generate",outcome="completed",role="rollout"\} [1-9]/m);
  assert.match(rollout, /^relax_activity_duration_seconds_count\{(?=[^}]*activity="generate")(?=[^}]*role="rollout")[^}]*\} [1-9]/m);
  assert.match(rollout, /^relax_worker_process_resident_memory_bytes\{role="rollout"\} /m);
  // The engine figures: generated tokens and tokens/s, batch sizes, weight syncs; the trainer's.
  assert.match(rollout, /^relax_engine_generated_tokens_total\{(?=[^}]*engine="local")(?=[^}]*role="rollout")[^}]*\} [1-9]/m);
  assert.match(rollout, /^relax_engine_tokens_per_second\{[^}]*engine="local"[^}]*\} [1-9]/m);
  assert.match(rollout, /^relax_engine_batch_sequences_count\{[^}]*engine="local"[^}]*\} [1-9]/m);
  assert.match(rollout, /^relax_engine_weight_sync_seconds_count\{[^}]*engine="local"[^}]*\} [1-9]/m, 'a weight sync per new version');
  const train = await (await fetch(recorded.metrics.find((m) => m.role === 'train')!.urls[0])).text();
  assert.match(train, /^relax_trainer_tokens_total\{role="train"\} [1-9]/m);
  assert.match(train, /^relax_trainer_update_seconds_count\{role="train"\} [1-9]/m);
  const sdk = await (await fetch(recorded.metrics.find((m) => m.role === 'rollout')!.urls[1])).text();
  assert.match(sdk, /^temporal_/m, 'the Temporal SDK\'s own metrics');
  assert.equal((await stack.call('POST', `/runs/${runId}/stop`)).status, 202);

  // relax metrics: the newest values, every step as CSV, every series as JSON.
  const env = { DATABASE_URL: stack.db.url, TEMPORAL_ADDRESS: stack.temporalAddress };
  const table = spawnRelax(['metrics', runId], env);
  assert.equal(await table.exited, 0, table.output.join('\n'));
  assert.ok(table.output.some((l) => /^reward_mean +[\d.e-]+ +step \d+ \(\d+ points\)$/.test(l)), table.output.join('\n'));
  const csv = spawnRelax(['metrics', runId, '--csv', '--names', 'reward_mean,eval_accuracy'], env);
  assert.equal(await csv.exited, 0, csv.output.join('\n'));
  assert.equal(csv.output[0], 'step,eval_accuracy,reward_mean');
  assert.ok(csv.output.length >= 3 && csv.output.slice(1).every((l) => /^\d+,[\d.e-]*,[\d.e-]*$/.test(l)), csv.output.join('\n'));
  const json = spawnRelax(['metrics', runId, '--json'], env);
  assert.equal(await json.exited, 0);
  const series = JSON.parse(json.output.join('')) as Record<string, Array<[number, number]>>;
  assert.ok(series.reward_mean.length >= 2 && series.staleness_mean.length >= 2);
  const none = spawnRelax(['metrics', 'no-such-run'], env);
  assert.equal(await none.exited, 1);
  assert.match(none.output.join('\n'), /run no-such-run has no metrics in this database/);

  // relax serve: liveness, and readiness once the run has a version to serve.
  const port = await freePort();
  const serve = spawnRelax(['serve', '--run', runId, '--port', String(port)], env);
  try {
    await serve.waitForLine(/^serving run /, 60_000);
    assert.deepEqual(await (await fetch(`http://127.0.0.1:${port}/health`)).json(), { status: 'ok' });
    const r = await fetch(`http://127.0.0.1:${port}/ready`);
    assert.equal(r.status, 200);
    assert.equal(((await r.json()) as { run: string }).run, runId);
  } finally {
    await serve.stop('SIGTERM');
  }
});

test('metricsCsv: one row per step, empty cells where a series has no value, names quoted when they must be', () => {
  assert.equal(metricsCsv({ a: [[1, 0.5], [2, 0.25]], 'b,c': [[2, 3]] }, ['a', 'b,c']), 'step,a,"b,c"\n1,0.5,\n2,0.25,3');
});

test('RELAX_METRICS: on by default, "off" turns a worker\'s metrics off, anything else is refused naming the variable', () => {
  assert.equal(metricsEnabled({}), true);
  assert.equal(metricsEnabled({ RELAX_METRICS: 'on' }), true);
  assert.equal(metricsEnabled({ RELAX_METRICS: 'OFF' }), false);
  assert.throws(() => metricsEnabled({ RELAX_METRICS: 'no' }), /RELAX_METRICS must be "on" or "off", got "no"/);
});
