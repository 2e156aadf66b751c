// OpenTelemetry tracing on real worker processes and the shared Temporal server, received by a local
// OTLP/HTTP receiver (JSON, POST /v1/traces): a short add2 run started by the typed client gives one
// trace from the client's StartWorkflow span through the workflow's RunWorkflow span to a RunActivity
// span for every activity (each under the workflow's StartActivity span of the same name), with each
// process's service.name, role and identity on its resource; the client's queries and describes are
// not traced, and workflow spans carry the execution's ids only. A reference worker started without the
// endpoint variables runs the run's reference log-probs and sends nothing. The client sends its spans
// when it closes, and the workers theirs when they shut down (SIGTERM). Tracing can be turned on or
// off under running runs: histories with and without it replay on both workflow bundles.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { historyFromJSON, type History } from '@temporalio/common/lib/proto-utils';
import { Worker } from '@temporalio/worker';
import { RelaxClient } from '../client';
import { bundleWorkflows } from '../workers/workflow-bundle';
import { sharedTemporalAddress, startWorkerProcess, startWorkerStack, uniqueId, waitFor, type TestProcess, type WorkerStack } from './helpers';

interface OtlpValue { stringValue?: string; intValue?: string | number; boolValue?: boolean }
interface OtlpAttribute { key: string; value: OtlpValue }
interface OtlpSpan { traceId: string; spanId: string; parentSpanId?: string; name: string; attributes: OtlpAttribute[] }
interface Span extends OtlpSpan { resource: Record<string, string | undefined> }

const requests: Array<{ path: string; contentType: string }> = [];
const spans: Span[] = [];
let receiver: http.Server;
let base: string;
let stack: WorkerStack;
let untraced: TestProcess;
let tracedHistory: History | undefined;

const flat = (attrs: OtlpAttribute[] = []): Record<string, string | undefined> =>
  Object.fromEntries(attrs.map((a) => [a.key, a.value.stringValue ?? (a.value.intValue !== undefined ? String(a.value.intValue) : undefined)]));

before(async () => {
  receiver = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      requests.push({ path: `${req.method} ${req.url}`, contentType: req.headers['content-type'] ?? '' });
      let body: { resourceSpans?: Array<{ resource?: { attributes: OtlpAttribute[] }; scopeSpans?: Array<{ spans?: OtlpSpan[] }> }> } = {};
      try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      } catch {
        // not JSON: the content-type assertion reports it
      }
      for (const rs of body.resourceSpans ?? []) {
        const resource = flat(rs.resource?.attributes);
        for (const ss of rs.scopeSpans ?? []) for (const s of ss.spans ?? []) spans.push({ ...s, resource });
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', () => r()));
  base = `http://127.0.0.1:${(receiver.address() as { port: number }).port}`;
  // Batches would leave after 10 minutes: what arrives comes from the flush at shutdown.
  stack = await startWorkerStack(['control', 'rollout', 'train'], { OTEL_EXPORTER_OTLP_ENDPOINT: base, OTEL_BSP_SCHEDULE_DELAY: '600000' });
  const off = { TEMPORAL_ADDRESS: sharedTemporalAddress(), DATABASE_URL: stack.db.url, RELAX_HOME: stack.home, OTEL_EXPORTER_OTLP_ENDPOINT: '', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: '', OTEL_BSP_SCHEDULE_DELAY: '0', RELAX_METRICS: 'off' };
  untraced = await startWorkerProcess('reference', off);
});

after(async () => {
  await untraced?.stop('SIGKILL');
  await stack?.close();
  receiver?.close();
});

test('a run traced from the client through the workflow to every activity; a worker without the endpoint sends nothing', async () => {
  for (const w of stack.workers) assert.match(w.output.join('\n'), new RegExp(`relax worker ready: .* · traces ${base}/v1/traces`));
  assert.doesNotMatch(untraced.output.join('\n'), /· traces /, 'tracing is off without the variables');
  // It also runs with RELAX_METRICS=off: no metrics endpoint of its own or of the SDK.
  assert.match(untraced.output.join('\n'), /relax worker ready: reference\//);
  assert.doesNotMatch(untraced.output.join('\n'), /· (sdk-)?metrics /, 'RELAX_METRICS=off: no endpoints');

  // The client traces too when the variables are set in its process (read at connect).
  const runId = uniqueId('traced');
  const saved = { OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: process.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_BSP_SCHEDULE_DELAY: process.env.OTEL_BSP_SCHEDULE_DELAY };
  Object.assign(process.env, { OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${base}/v1/traces`, OTEL_BSP_SCHEDULE_DELAY: '600000' });
  const client = await RelaxClient.connect({ address: sharedTemporalAddress(), databaseUrl: stack.db.url });
  for (const [k, v] of Object.entries(saved)) if (v === undefined) delete process.env[k]; else process.env[k] = v;
  try {
    const run = await client.start({ run_id: runId, task: 'add2', model: { context_length: 16 }, algorithm: { group_size: 2, kl_coef: 0.01 }, rollout: { prompts_per_step: 2, max_new_tokens: 4 }, train: { steps: 2, eval_every: 2 } });
    assert.equal((await run.result()).steps, 2);
    await run.progress(); // reads are not traced: polled by watchers, they would open a trace each
    await run.describe();
    tracedHistory = await run.workflow.fetchHistory();
  } finally {
    await client.close(); // sends the client's spans
  }
  const attr = (s: Span, key: string) => flat(s.attributes)[key];
  const start = spans.find((s) => s.name === 'StartWorkflow:trainingRun' && attr(s, 'temporalWorkflowId') === runId);
  assert.ok(start, 'RelaxClient.close() sent the client\'s span');
  assert.deepEqual(spans.filter((s) => s.resource['relax.role'] !== 'client'), [], 'the workers hold theirs until their batch is due...');
  await Promise.all(stack.workers.map((w) => w.stop('SIGTERM')));
  const trace = (name: string) => spans.filter((s) => s.traceId === start.traceId && s.name === name);
  const workflow = trace('RunWorkflow:trainingRun')[0];
  assert.ok(workflow, '...or they shut down: then they send them before they exit');
  assert.ok(['generate', 'trainStep', 'evaluate'].every((a) => trace(`RunActivity:${a}`).length), 'the RunActivity spans of generate, trainStep and evaluate');

  assert.equal(workflow.parentSpanId, start.spanId, 'the workflow continues the client\'s span');
  assert.deepEqual(spans.filter((s) => s.resource['relax.role'] === 'client').map((s) => s.name), ['StartWorkflow:trainingRun'], 'no query or describe spans');
  assert.equal(start.resource['service.name'], 'relax-client');
  assert.equal(workflow.resource['service.name'], 'relax-control');
  assert.equal(workflow.resource['relax.role'], 'control');
  assert.match(workflow.resource['service.instance.id'] ?? '', /^control\//);
  assert.equal(attr(workflow, 'workflowId'), runId);
  assert.deepEqual(workflow.attributes.map((a) => a.key).sort(), ['attempt', 'namespace', 'runId', 'taskQueue', 'workflowId', 'workflowType'], 'the execution\'s ids, not the whole WorkflowInfo');

  assert.ok(trace('RunActivity:generate').length >= 2, 'a generate per step at least');
  assert.equal(trace('RunActivity:trainStep').length, 2);
  const inTrace = spans.filter((s) => s.traceId === start.traceId);
  const byId = new Map(inTrace.map((s) => [s.spanId, s]));
  const activities = inTrace.filter((s) => s.name.startsWith('RunActivity:'));
  for (const a of activities) {
    const name = a.name.slice('RunActivity:'.length);
    const parent = byId.get(a.parentSpanId ?? '');
    assert.equal(parent?.name, `StartActivity:${name}`, `${a.name} is a child of the workflow's StartActivity span`);
    assert.equal(parent?.parentSpanId, workflow.spanId, `the StartActivity:${name} span is a child of RunWorkflow`);
    assert.equal(attr(a, 'temporalWorkflowId'), runId);
  }
  const generate = trace('RunActivity:generate')[0];
  assert.equal(generate.resource['service.name'], 'relax-rollout');
  assert.match(generate.resource['service.instance.id'] ?? '', /^rollout\/.*:cpu:/);
  assert.equal(trace('RunActivity:trainStep')[0].resource['relax.role'], 'train');

  // The reference worker (no variables) ran the KL term's log-probs: the workflow scheduled them, and
  // nothing arrived from it.
  assert.equal(trace('StartActivity:referenceLogprobs').length, 2);
  assert.equal(trace('RunActivity:referenceLogprobs').length, 0);
  await untraced.stop('SIGTERM');
  assert.deepEqual([...new Set(spans.map((s) => s.resource['relax.role']))].sort(), ['client', 'control', 'rollout', 'train']);
  assert.ok(requests.length > 0);
  for (const r of requests) {
    assert.equal(r.path, 'POST /v1/traces');
    assert.equal(r.contentType, 'application/json');
  }
});

test('tracing can be turned on or off under running runs: histories replay on the bundle with and without its interceptors', async () => {
  assert.ok(tracedHistory, 'the traced run\'s history (previous test)');
  const recorded = historyFromJSON(JSON.parse(fs.readFileSync(path.resolve(__dirname, '..', '..', 'test', 'histories', 'training-run.json'), 'utf8')));
  const [plain, traced] = [await bundleWorkflows(), await bundleWorkflows({ tracing: true })];
  await Worker.runReplayHistory({ workflowBundle: plain, replayName: 'traced-run-untraced' }, tracedHistory, 'traced-run-untraced');
  await Worker.runReplayHistory({ workflowBundle: traced, replayName: 'traced-run-traced' }, tracedHistory, 'traced-run-traced');
  await Worker.runReplayHistory({ workflowBundle: traced, replayName: 'untraced-run-traced' }, recorded, 'untraced-run-traced');
});
