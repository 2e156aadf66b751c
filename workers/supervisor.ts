// How `relax dev` restarts what dies: exponential backoff (1 s, 2 s, 4 s ... capped at 30 s), reset
// once a process has stayed up for a minute; how it finds a worker that is alive but frozen (the
// liveness ping); and the contract of a supervised child (it answers the ping, and exits when its
// supervisor does; see exitWithSupervisor in workers/worker.ts and workers/process-watchdog.ts).
import type { ChildProcess } from 'node:child_process';

export interface BackoffPolicy {
  baseMs: number;
  maxMs: number;
  /** A process that stayed up this long before it died starts again from baseMs. */
  resetAfterMs: number;
}

export const DEFAULT_BACKOFF: BackoffPolicy = { baseMs: 1_000, maxMs: 30_000, resetAfterMs: 60_000 };

/** The variable `relax dev` sets on its workers (config/environment-workers.ts reads it). */
export { SUPERVISED_ENV } from '../config/environment';

/** The delay before restart number `failures` (1 = the first restart after a run of good health). */
export function restartDelayMs(failures: number, policy: BackoffPolicy = DEFAULT_BACKOFF): number {
  const n = Math.max(1, Math.floor(failures));
  return Math.min(policy.maxMs, policy.baseMs * 2 ** Math.min(n - 1, 30));
}

/**
 * One supervised slot's backoff state: call next() with how long the process was up when it died.
 * Kept by hand: exponential-backoff retries a promise-returning call; this is driven by exit events
 * and resets after a minute of uptime, which it has no hook for.
 */
export class RestartBackoff {
  private failures = 0;

  constructor(private readonly policy: BackoffPolicy = DEFAULT_BACKOFF) {}

  next(upForMs: number): { delayMs: number; restart: number } {
    if (upForMs >= this.policy.resetAfterMs) this.failures = 0;
    this.failures++;
    return { delayMs: restartDelayMs(this.failures, this.policy), restart: this.failures };
  }
}

/** "1 s", "2 s", "30 s" (the delays are whole seconds unless a policy says otherwise). */
export function formatDelay(ms: number): string {
  return ms % 1000 === 0 ? `${ms / 1000} s` : `${(ms / 1000).toFixed(1)} s`;
}

/** How often relax dev pings each ready worker over its IPC channel. */
export const LIVENESS_PING_MS = 2_000;

/** The liveness messages: relax dev sends PING, the worker's event loop answers PONG. */
export const LIVENESS_PING = { relax: 'ping' } as const;
export const LIVENESS_PONG = { relax: 'pong' } as const;

/**
 * Pings `child` every LIVENESS_PING_MS and calls `onFrozen` once (then stops) when it has not
 * answered for `timeoutMs`: stopped (SIGSTOP), or its event loop blocked. A pause of this process
 * itself (its own timer late by more than three pings) restarts the count: the silence was ours.
 * timeoutMs 0: no check.
 */
export function watchLiveness(child: ChildProcess, timeoutMs: number, onFrozen: (silentMs: number) => void): { stop(): void } {
  if (timeoutMs <= 0 || !child.send) return { stop: () => undefined };
  let lastAnswer = Date.now();
  let lastTick = Date.now();
  const onMessage = (m: unknown) => {
    if ((m as { relax?: unknown } | null)?.relax === LIVENESS_PONG.relax) lastAnswer = Date.now();
  };
  const stop = () => {
    clearInterval(timer);
    child.off('message', onMessage);
  };
  const timer = setInterval(() => {
    const now = Date.now();
    if (now - lastTick > 3 * LIVENESS_PING_MS) lastAnswer = now;
    lastTick = now;
    if (now - lastAnswer > timeoutMs) {
      stop();
      onFrozen(now - lastAnswer);
      return;
    }
    if (child.connected) child.send(LIVENESS_PING, () => undefined);
  }, LIVENESS_PING_MS);
  timer.unref();
  child.on('message', onMessage);
  return { stop };
}
