// Timing helpers for benchmarks. These machines are shared and noisy, so a measurement repeats a
// call until both a minimum count and a minimum wall time are reached and reports the MEDIAN call:
// one call slowed by a neighbour's burst does not move it.
import { PerformanceObserver, type PerformanceEntry } from 'node:perf_hooks';

export interface Timing {
  /** Median wall time of one call, ms. */
  medianMs: number;
  /** Timed calls (the warmup calls excluded). */
  calls: number;
  /** Each timed call, ms, in order. */
  timesMs: number[];
}

export interface TimingOptions {
  /** Untimed calls first (JIT, allocator, session warmup). Default 1. */
  warmup?: number;
  /** At least this many timed calls. Default 3. */
  minCalls?: number;
  /** Keep calling until this much timed wall time has passed. Default 0. */
  minMs?: number;
  /** Never more than this many timed calls. Default 1000. */
  maxCalls?: number;
}

export function median(values: readonly number[]): number {
  if (values.length === 0) throw new Error('median of no values');
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

/** The item whose `key` is the median, so every figure reported with it comes from one real measurement (for an even count, the upper of the two middle ones). */
export function medianBy<T>(items: readonly T[], key: (item: T) => number): T {
  if (items.length === 0) throw new Error('medianBy of no items');
  return items.map((item) => ({ item, k: key(item) })).sort((a, b) => a.k - b.k)[items.length >> 1].item;
}

/** Times `fn` (awaited; a sync function works too) per the options. */
export async function timeCalls(fn: () => unknown, options: TimingOptions = {}): Promise<Timing> {
  const { warmup = 1, minCalls = 3, minMs = 0, maxCalls = 1000 } = options;
  for (let i = 0; i < warmup; i++) await fn();
  const times: number[] = [];
  let spent = 0;
  while (times.length < maxCalls && (times.length < minCalls || spent < minMs)) {
    const t0 = performance.now();
    await fn();
    const dt = performance.now() - t0;
    times.push(dt);
    spent += dt;
  }
  return { medianMs: median(times), calls: times.length, timesMs: times };
}

/**
 * Starts counting V8 garbage-collection pauses; stop() returns the share of the wall time since
 * start that the main thread spent paused in GC.
 */
export function gcPauseMeter(): { stop: () => number } {
  let pausedMs = 0;
  const add = (entries: PerformanceEntry[]) => entries.forEach((e) => (pausedMs += e.duration));
  const observer = new PerformanceObserver((list) => add(list.getEntries()));
  observer.observe({ entryTypes: ['gc'] });
  const started = performance.now();
  return {
    stop: () => {
      add(observer.takeRecords());
      observer.disconnect();
      return pausedMs / (performance.now() - started);
    },
  };
}

/** Peak resident set size of this process so far, MB (maxRSS is reported in KiB). */
export function peakRssMb(): number {
  return process.resourceUsage().maxRSS / 1024;
}

/** Rounds to `digits` significant digits, for readable JSON. */
export function round(value: number, digits = 3): number {
  if (!Number.isFinite(value) || value === 0) return value;
  return Number(value.toPrecision(digits));
}
