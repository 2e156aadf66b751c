// Durations as people read them ("45s", "1m20s", "2h5m"): the ETA of the Web UI's details line
// (workflows/run-status.ts) and of `relax watch`, and how long ago a run started (`relax status`).
// Built from `ms`, which is pure, so the workflow sandbox may run it.
import ms from 'ms';

/** Day, hour, minute, second in milliseconds: a duration is written in its two largest. */
const UNITS_MS = [86_400_000, 3_600_000, 60_000, 1_000];

/** `seconds`, rounded to a whole second, as its largest unit and the next one when not zero: 45s, 1m20s, 2h5m, 3d4h. */
export function formatDuration(seconds: number): string {
  const total = Math.max(0, Math.round(seconds)) * 1000;
  const i = UNITS_MS.findIndex((unit) => total >= unit);
  if (i < 0) return '0s';
  const big = Math.floor(total / UNITS_MS[i]) * UNITS_MS[i];
  const next = UNITS_MS[i + 1];
  const small = next ? Math.floor((total - big) / next) * next : 0;
  return small ? `${ms(big)}${ms(small)}` : ms(big);
}
