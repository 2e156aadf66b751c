// bench/process-cpu.ts: CPU seconds of processes from /proc, as `relax bench pipeline` reports them per role.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { test } from 'node:test';
import { cpuMeter, groupCpuSeconds, processCpuSeconds } from '../bench/process-cpu';

const linux = fs.existsSync('/proc/self/stat');

function spin(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until);
}

test("processCpuSeconds: this process's CPU grows by about the time it spins; a process that does not exist reads as unknown", { skip: !linux && 'no /proc on this OS' }, () => {
  const before = processCpuSeconds(process.pid);
  assert.ok(before !== undefined && before > 0, `read this process's CPU time: ${before}`);
  spin(300);
  const after = processCpuSeconds(process.pid) as number;
  // Ticks are 10 ms: spinning 300 ms adds at least 0.25 s (and no more than the wall time allows).
  assert.ok(after - before >= 0.25 && after - before < 5, `CPU grew by ${after - before} s over a 300 ms spin`);
  assert.equal(processCpuSeconds(2 ** 22 + 12345), undefined);
});

test('cpuMeter: milliseconds per unit for each group; a group that cannot be read is left out, not reported as 0', { skip: !linux && 'no /proc on this OS' }, () => {
  const meter = cpuMeter({ self: [process.pid], gone: [2 ** 22 + 12345] });
  spin(300);
  const perStep = meter.stop(10);
  assert.deepEqual(Object.keys(perStep), ['self']);
  assert.ok(perStep.self >= 25 && perStep.self < 500, `about 30 ms per step of 10: ${perStep.self}`);
  const groups = groupCpuSeconds({ both: [process.pid, 2 ** 22 + 12345], none: [] });
  assert.ok((groups.both as number) > 0);
  assert.equal(groups.none, undefined);
});
