// CPU time used by named groups of processes over an interval, from Linux's /proc (user + system
// time of every thread): for benchmarks that say where a step's time goes, not only how long it took.
// On another OS /proc is absent and every group reads as unknown (the bench leaves the figures out).
import fs from 'node:fs';

/** /proc reports times in USER_HZ ticks: 100 per second, fixed by the kernel's ABI. */
const USER_HZ = 100;

/** CPU seconds process `pid` has used so far (all its threads), or undefined when /proc cannot say (not Linux, or gone). */
export function processCpuSeconds(pid: number): number | undefined {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Field 2 (the command) is in parentheses and may hold spaces; fields 14 and 15 (utime, stime) follow it at fixed places.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const ticks = Number(fields[14 - 3]) + Number(fields[15 - 3]);
    return Number.isFinite(ticks) ? ticks / USER_HZ : undefined;
  } catch {
    return undefined;
  }
}

/** CPU seconds of each group (the sum over its processes), undefined for a group none of whose processes could be read. */
export function groupCpuSeconds(groups: Readonly<Record<string, readonly number[]>>): Record<string, number | undefined> {
  return Object.fromEntries(
    Object.entries(groups).map(([name, pids]) => {
      const read = pids.map(processCpuSeconds).filter((s): s is number => s !== undefined);
      return [name, read.length ? read.reduce((a, b) => a + b, 0) : undefined];
    }),
  );
}

/**
 * Starts measuring `groups` now; `stop()` gives each group's CPU milliseconds since, divided by
 * `per` (say, steps). A group is left out when it could not be read at both ends; a process that
 * exited meanwhile makes its group's figure a lower bound, so the groups are fixed at the start.
 */
export function cpuMeter(groups: Readonly<Record<string, readonly number[]>>): { stop(per?: number): Record<string, number> } {
  const before = groupCpuSeconds(groups);
  return {
    stop(per = 1) {
      const after = groupCpuSeconds(groups);
      const out: Record<string, number> = {};
      for (const [name, start] of Object.entries(before)) {
        const end = after[name];
        if (start !== undefined && end !== undefined) out[name] = ((end - start) * 1000) / per;
      }
      return out;
    },
  };
}
