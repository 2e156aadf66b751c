// bench/process-cpu.ts: CPU seconds of processes from /proc, as `relax bench pipeline` reports them per role; and bench/measure.ts medianBy, how it picks the median repeat.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { test } from 'node:test';
import { medianBy } from '../bench/measure';
import { cpuMeter, groupCpuSeconds, processCpuSeconds } from '../bench/process-cpu';

const linux = fs.existsSync('/proc/self/stat');

/** Spins until this process has used `ms` more of CPU (by Node's own count, getrusage), however busy the machine is; returns what Node counted, ms. */
function spinCpu(ms: number): number {
  const start = process.cpuUsage();
  for (;;) {
    const used = process.cpuUsage(start);
    if ((used.user + used.system) / 1000 >= ms) return (used.user + used.system) / 1000;
  }
}

test("processCpuSeconds: this process's CPU grows by what Node itself counts; a process that does not exist reads as unknown", { skip: !linux && 'no /proc on this OS' }, () => {
  const before = processCpuSeconds(process.pid);
  assert.ok(before !== undefined && before > 0, `read this process's CPU time: ${before}`);
  const counted = spinCpu(300);
  const grew = ((processCpuSeconds(process.pid) as number) - before) * 1000;
  // Ticks are 10 ms; the process's other threads (GC, libuv) count in both figures.
  assert.ok(Math.abs(grew - counted) <= 40, `/proc says ${grew} ms, Node ${counted} ms`);
  assert.equal(processCpuSeconds(2 ** 22 + 12345), undefined);
});

test('cpuMeter: milliseconds per unit for each group; a group that cannot be read is left out, not reported as 0', { skip: !linux && 'no /proc on this OS' }, () => {
  const meter = cpuMeter({ self: [process.pid], gone: [2 ** 22 + 12345] });
  const counted = spinCpu(300);
  const perStep = meter.stop(10);
  assert.deepEqual(Object.keys(perStep), ['self']);
  assert.ok(Math.abs(perStep.self - counted / 10) <= 4, `${perStep.self} ms per step of 10, Node counted ${counted} ms in all`);
  const groups = groupCpuSeconds({ both: [process.pid, 2 ** 22 + 12345], none: [] });
  assert.ok((groups.both as number) > 0);
  assert.equal(groups.none, undefined);
});

test('medianBy (bench/measure.ts): the item with the median key, the upper middle one for an even count, so a repeated measurement reports one real run', () => {
  const runs = [{ id: 'a', overhead: 0.3 }, { id: 'b', overhead: 0.1 }, { id: 'c', overhead: 0.2 }];
  assert.equal(medianBy(runs, (r) => r.overhead).id, 'c');
  assert.equal(medianBy(runs.slice(0, 2), (r) => r.overhead).id, 'a');
  assert.equal(medianBy([runs[1]], (r) => r.overhead).id, 'b');
  assert.throws(() => medianBy([], () => 0), /no items/);
});
