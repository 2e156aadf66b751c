// The CLI's shared formatters: durations (workflows/duration.ts, on `ms`: the Web UI's ETA, `relax
// watch` and `relax status`) and borderless tables (cli/table.ts, on cli-table3: `relax list`,
// `relax doctor`, `relax health`), whose piped output scripts and tests grep.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { formatDuration } from '../workflows/duration';
import { plainTable } from '../cli/table';
import { formatChecks } from '../cli/doctor';

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
