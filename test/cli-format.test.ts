// The CLI's shared formatters: durations (workflows/duration.ts, on `ms`: the Web UI's ETA, `relax
// watch` and `relax status`) and borderless tables (cli/table.ts, on cli-table3: `relax list`,
// `relax doctor`, `relax health`), whose piped output scripts and tests grep; `--output json` on every
// command that prints a result for programs; the quickstart's run config (its warmup under --steps).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { formatDuration } from '../workflows/duration';
import { plainTable } from '../cli/table';
import { formatChecks } from '../cli/doctor';
import { buildProgram } from '../cli/main';
import { metricsFormat, UsageError } from '../cli/runs';
import { quickstartRunConfig } from '../cli/quickstart';
import { ADD2_GRPO } from '../config/recipes';

test('formatDuration: whole seconds, the largest unit and the next one when not zero', () => {
  const cases: Array<[number, string]> = [[-5, '0s'], [0.4, '0s'], [45, '45s'], [59.6, '1m'], [80, '1m20s'], [3599, '59m59s'], [3600, '1h'], [3900, '1h5m'], [3 * 86400 + 4 * 3600 + 5, '3d4h']];
  for (const [seconds, text] of cases) assert.equal(formatDuration(seconds), text, `${seconds} s`);
});

test('plainTable: columns as wide as their widest cell, two spaces apart, no border, colour or trailing space', () => {
  const text = plainTable([['run-1', 'completed', '3'], ['a-longer-run', '-', '12']], ['RUN', 'STATUS', 'STEP']);
  assert.deepEqual(text.split('\n'), ['RUN           STATUS     STEP', 'run-1         completed  3', 'a-longer-run  -          12']);
  assert.equal(plainTable([['x']]), 'x');
});

test('formatChecks: "ok|FAIL  <name>  <detail>" rows (scripts/gpu-check-summary.js parses them), then the fixes', () => {
  const text = formatChecks([
    { name: 'temporal server', ok: false, detail: 'connect ECONNREFUSED', fix: 'start the stack' },
    { name: 'onnx runtime', ok: true, detail: 'onnxruntime-node 1.30.0, providers cuda, cpu' },
  ]);
  assert.deepEqual(text.split('\n'), ['FAIL  temporal server  connect ECONNREFUSED', 'ok    onnx runtime     onnxruntime-node 1.30.0, providers cuda, cpu', '', '  fix temporal server: start the stack']);
});

test('--output text|json on every command that prints a result (metrics adds csv); --json stays as its alias where it was', () => {
  const program = buildProgram();
  const command = (path: string) => path.split(' ').reduce((c, name) => c.commands.find((x) => x.name() === name)!, program);
  for (const path of ['train', 'status', 'list', 'metrics', 'health', 'set', 'schedule list', 'schedule describe']) {
    const output = command(path).options.find((o) => o.long === '--output');
    assert.ok(output, `relax ${path} has --output`);
    assert.deepEqual(output.argChoices?.slice(0, 2), ['text', 'json'], `relax ${path} --output`);
    assert.equal(output.defaultValue, 'text');
  }
  for (const path of ['status', 'list', 'metrics', 'health', 'set']) assert.ok(command(path).options.some((o) => o.long === '--json'), `relax ${path} --json is kept`);
  assert.deepEqual(command('metrics').options.find((o) => o.long === '--output')?.argChoices, ['text', 'json', 'csv']);
  assert.equal(metricsFormat({ output: 'text' }), 'text');
  assert.equal(metricsFormat({ output: 'json' }), 'json');
  assert.equal(metricsFormat({ output: 'text', csv: true }), 'csv');
  assert.equal(metricsFormat({ output: 'json', json: true }), 'json');
  assert.throws(() => metricsFormat({ output: 'csv', json: true }), (e: Error) => e instanceof UsageError && /choose one output format, got csv and json/.test(e.message));
});

test('relax quickstart --steps N below the recipe\'s warmup caps the warmup at N; otherwise the recipe\'s warmup is kept', () => {
  const recipeWarmup = ADD2_GRPO.train!.warmup_steps!;
  assert.equal(recipeWarmup, 10, 'the add2 recipe warms up 10 steps');
  for (const mode of ['sync', 'async'] as const) {
    const short = quickstartRunConfig(mode, 5).train;
    assert.deepEqual([short.steps, short.warmup_steps], [5, 5], `${mode}: --steps 5 (it was refused: train.warmup_steps must be <= train.steps)`);
    const long = quickstartRunConfig(mode, 50).train;
    assert.deepEqual([long.steps, long.warmup_steps], [50, recipeWarmup]);
    assert.deepEqual([quickstartRunConfig(mode).train.steps, quickstartRunConfig(mode).train.warmup_steps], [ADD2_GRPO.train!.steps, recipeWarmup], 'no --steps: the recipe as is');
  }
  assert.equal(quickstartRunConfig('async', 1).train.warmup_steps, 1);
  assert.equal(quickstartRunConfig('async', 5).mode, 'async');
});
