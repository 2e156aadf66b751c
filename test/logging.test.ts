// The logger (telemetry/log.ts) and what `relax dev` does with its processes' lines (cli/dev-logs.ts):
// RELAX_LOG_LEVEL parsing, the Temporal SDK's lines at WARN with repeats collapsed, a JSON log line as a
// terminal line, which lines relax dev echoes and which log file each goes to. No processes, no stack.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import pino from 'pino';
import { logLevel, sdkLogLevel } from '../config/environment';
import { componentLog, defaultLevel, log, repeatFilter, temporalLogger, terseLine } from '../telemetry/log';
import { consoleLine, logFileName, openDevLogs } from '../cli/dev-logs';

test('RELAX_LOG_LEVEL: info by default, any case, an error naming the variable; the SDK stays at WARN unless asked for debug', () => {
  assert.equal(logLevel({}), 'info');
  assert.equal(logLevel({ RELAX_LOG_LEVEL: 'DEBUG' }), 'debug');
  assert.throws(() => logLevel({ RELAX_LOG_LEVEL: 'loud' }), /RELAX_LOG_LEVEL must be one of trace, debug, info, warn, error, fatal, silent, got "loud"/);
  assert.equal(sdkLogLevel({}), 'WARN');
  assert.equal(sdkLogLevel({ RELAX_LOG_LEVEL: 'info' }), 'WARN');
  assert.equal(sdkLogLevel({ RELAX_LOG_LEVEL: 'debug' }), 'DEBUG');
  assert.equal(sdkLogLevel({ RELAX_SDK_LOG_LEVEL: 'info' }), 'INFO');
  assert.throws(() => sdkLogLevel({ RELAX_SDK_LOG_LEVEL: 'chatty' }), /RELAX_SDK_LOG_LEVEL must be one of/);
});

test('the process level reaches component loggers made before it was set; one logger per component', () => {
  const early = componentLog('early');
  assert.equal(componentLog('early'), early);
  const before = log.level;
  try {
    defaultLevel('warn');
    const expected = logLevel(process.env, 'warn'); // warn unless the runner sets RELAX_LOG_LEVEL
    assert.deepEqual([log.level, early.level], [expected, expected]);
  } finally {
    log.level = before;
    early.level = before;
  }
});

test("the Temporal SDK's lines: below the level dropped, an identical warning written once a window with the count of those dropped", () => {
  const lines: Array<Record<string, unknown>> = [];
  const target = pino({ level: 'trace', base: null, timestamp: false, formatters: { level: (label) => ({ level: label }) } }, { write: (l: string) => lines.push(JSON.parse(l)) });
  const sdk = temporalLogger('WARN', target, 50);
  sdk.info('Worker state changed');
  sdk.warn('No workflows registered, not polling for workflow tasks', { sdkComponent: 'worker' });
  for (let i = 0; i < 5; i++) sdk.warn('Failed to poll', { sdkComponent: 'worker', error: new Error('unavailable') });
  sdk.error('Failed to poll', { sdkComponent: 'worker' });
  assert.deepEqual(lines.map((l) => [l.level, l.msg]), [['warn', 'Failed to poll'], ['error', 'Failed to poll']], 'INFO and the expected warning dropped; four repeats collapsed; another level is another line');
  assert.equal((lines[0].err as { message: string }).message, 'unavailable', "the SDK's error becomes err");
  assert.equal(lines[0].sdkComponent, 'worker');
  const seen = repeatFilter(50);
  assert.deepEqual([seen('a', 0), seen('a', 10), seen('a', 20), seen('b', 20), seen('a', 60)], [
    { write: true, suppressed: 0 },
    { write: false, suppressed: 0 },
    { write: false, suppressed: 0 },
    { write: true, suppressed: 0 },
    { write: true, suppressed: 2 },
  ]);
});

test('a JSON log line as one terminal line: time, level, where, run, message, error, other fields', () => {
  const line = JSON.stringify({ level: 'warn', time: '2026-01-02T03:04:05.678Z', pid: 1, role: 'train', component: 'train', worker: 'train/x', run: 'r1', msg: 'skipping step 3', step: 3, err: { message: 'NaN loss' } });
  assert.equal(terseLine(line), '03:04:05 WARN  [train train] run r1: skipping step 3: NaN loss (step=3)');
  assert.equal(terseLine('not json'), 'not json');
});

test('relax dev echoes workers\' warnings and errors and crash output by default, never the Temporal server; every line goes to its process\'s log file', async () => {
  const warn = `[rollout#0] ${JSON.stringify({ level: 'warn', time: '2026-01-02T03:04:05.000Z', msg: 'engine slow' })}`;
  const info = `[rollout#0] ${JSON.stringify({ level: 'info', time: '2026-01-02T03:04:05.000Z', msg: 'released run r1' })}`;
  assert.equal(consoleLine(warn, 'default'), '[rollout#0] 03:04:05 WARN  engine slow');
  assert.equal(consoleLine(info, 'default'), undefined);
  assert.equal(consoleLine('[temporal] time=... level=INFO msg="started"', 'default'), undefined);
  assert.equal(consoleLine('[train#0] relax worker ready: train/abc polling relax-train', 'default'), undefined, 'the summary lists the workers');
  assert.equal(consoleLine('[train#0] TypeError: x is not a function', 'default'), '[train#0] TypeError: x is not a function');
  assert.equal(consoleLine('[train#0]     at main (/app/dist/cli/main.js:10:3)', 'default'), '[train#0]     at main (/app/dist/cli/main.js:10:3)');
  assert.equal(consoleLine('[train#0] I0000 00:00:1796601059.093036 port.cc:153] oneDNN custom operations are on.', 'default'), undefined, "tfjs' notices stay in the file");
  assert.equal(consoleLine(info, 'verbose'), info);
  assert.equal(consoleLine(warn, 'quiet'), undefined);
  assert.deepEqual([logFileName('rollout#0'), logFileName('temporal'), logFileName('relax'), logFileName(undefined)], ['rollout-0.log', 'temporal.log', 'relax-dev.log', 'relax-dev.log']);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-dev-logs-'));
  try {
    const logs = openDevLogs(path.join(dir, 'logs'));
    logs.write(info);
    logs.write('[relax] [rollout#0] (pid 1) exited (code 1)');
    await logs.close();
    assert.equal(fs.readFileSync(path.join(dir, 'logs', 'rollout-0.log'), 'utf8'), `${info.slice('[rollout#0] '.length)}\n`);
    assert.match(fs.readFileSync(path.join(dir, 'logs', 'relax-dev.log'), 'utf8'), /\(pid 1\) exited/);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
