// The worker processes of a local stack (workers/local-stack.ts): launching one per slot with its
// role's arguments and environment, restarting a dead one with backoff, and the stack's methods over
// them (list, add, drain, restart).
import path from 'node:path';
import { spawn, type ChildProcess } from 'node:child_process';
import type { Role } from '../config/task-queues';
import { PACKAGE_ROOT, workerLivenessMs } from '../config/environment';
import { formatDelay, RestartBackoff, watchLiveness } from './supervisor';
import { forwardLines } from './temporal-server';
import type { LocalStack, LocalStackOptions, StackWorker, WorkerRestart } from './local-stack';

export const RELAX_BIN = path.join(PACKAGE_ROOT, 'bin', 'relax.js');

/** How long a stopping rollout worker lets its running activities finish (shutdownGraceTime): a drained engine's in-flight rollout completes, not retried elsewhere. */
export const ROLLOUT_DRAIN_GRACE_MS = 120_000;

/** One worker process the stack launched, with what its ready line said. */
export interface ManagedWorker {
  role: Role;
  index: number;
  child: ChildProcess;
  ready: Promise<void>;
  identity?: string;
  initial: boolean;
  startedAt: Date;
  engineUrl?: string;
  metricsUrls?: string[];
  /** Asked to drain: its exit is expected, not restarted. */
  draining?: boolean;
}

export const asStackWorker = (w: ManagedWorker): StackWorker => ({ role: w.role, index: w.index, pid: w.child.pid!, initial: w.initial, startedAt: w.startedAt, ...(w.identity ? { identity: w.identity } : {}), ...(w.engineUrl ? { engineUrl: w.engineUrl } : {}), ...(w.metricsUrls ? { metricsUrls: w.metricsUrls } : {}) });

/** What launching and supervising the stack's workers needs from the stack. */
export interface WorkerFleet {
  opts: Pick<LocalStackOptions, 'device' | 'cpuAffinity' | 'log'>;
  notice: (line: string) => void;
  /** The workers' environment (the Temporal address, the database URL). */
  env: NodeJS.ProcessEnv;
  /** Every worker slot, oldest first; launchWorker's restarts replace entries in place. */
  workers: ManagedWorker[];
  stopping: () => boolean;
  changed: () => void;
  /** One restart backoff per worker slot, by its tag. */
  backoffs: Map<string, ReturnType<typeof supervisor>>;
}

/** Spawns one supervised worker process for a slot; its ready promise settles on its ready line (or its exit). A dead one is relaunched with backoff. */
export function launchWorker(fleet: WorkerFleet, role: Role, index: number, initial: boolean, engineUrl?: string): ManagedWorker {
  const args = [RELAX_BIN, 'worker', '--role', role];
  if (role !== 'control') args.push('--device', fleet.opts.device);
  const cpus = fleet.opts.cpuAffinity?.[role];
  // An IPC channel: the worker exits when it closes (this process died). taskset execs node in
  // place, so the child's pid is the worker's and the channel reaches it.
  const stdio: Array<'ignore' | 'pipe' | 'ipc'> = ['ignore', 'pipe', 'pipe', 'ipc'];
  const roleEnv = role === 'rollout' ? { ...fleet.env, RELAX_WORKER_SHUTDOWN_GRACE_MS: String(ROLLOUT_DRAIN_GRACE_MS), ...(engineUrl ? { RELAX_ENGINE_URL: engineUrl } : {}) } : fleet.env;
  const child = cpus
    ? spawn('taskset', ['-c', cpus, process.execPath, ...args], { env: roleEnv, stdio })
    : spawn(process.execPath, args, { env: roleEnv, stdio });
  const startedAt = Date.now();
  const tag = `[${role}#${index}]`;
  let markReady: () => void;
  let markFailed: (e: Error) => void;
  const ready = new Promise<void>((resolve, reject) => {
    markReady = resolve;
    markFailed = reject;
  });
  const managed: ManagedWorker = { role, index, child, ready, initial, startedAt: new Date(), ...(engineUrl ? { engineUrl } : {}) };
  forwardLines(child, (line) => {
    const readyLine = /^relax worker ready: (\S+)/.exec(line);
    if (readyLine) {
      managed.identity = readyLine[1];
      const urls = [...line.matchAll(/\b(?:metrics|sdk-metrics) (http:\/\/\S+)/g)].map((m) => m[1]);
      if (urls.length) managed.metricsUrls = urls;
      markReady();
    }
    fleet.opts.log(`${tag} ${line}`);
  });
  // Alive but frozen (stopped, or its event loop blocked): killed once ready and silent past the
  // liveness timeout, then restarted by the exit handler below like a worker that died.
  let liveness: { stop(): void } | undefined;
  ready.then(() => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    liveness = watchLiveness(child, workerLivenessMs(fleet.env), (silentMs) => {
      if (fleet.stopping() || managed.draining) return;
      fleet.notice(`[relax] ${tag} (pid ${child.pid}) has not answered relax dev's liveness ping for ${formatDelay(Math.round(silentMs / 1000) * 1000)} (stopped, or its event loop is blocked): killing it (SIGKILL) to restart it`);
      child.kill('SIGKILL');
    });
  }, () => undefined);
  child.once('exit', (code, signal) => {
    liveness?.stop();
    markFailed(new Error(`${tag} exited (${signal ?? code}) before it was ready`));
    if (fleet.stopping() || managed.draining) return;
    fleet.notice(`[relax] ${tag} (pid ${child.pid}) exited (${signal ?? `code ${code}`})`);
    fleet.changed();
    let restart = fleet.backoffs.get(tag);
    if (!restart) {
      restart = supervisor(fleet.notice, fleet.stopping, async () => {
        const slot = fleet.workers.findIndex((w) => w.role === role && w.index === index);
        // Gone, draining, or already running again (the health manager's restartWorkers relaunched it).
        const current = fleet.workers[slot];
        if (slot < 0 || current.draining || (current.child.exitCode === null && current.child.signalCode === null)) return;
        const replacement = launchWorker(fleet, role, index, initial, engineUrl);
        if (slot >= 0) fleet.workers[slot] = replacement;
        fleet.changed();
        // Not awaiting ready: a replacement that dies early comes back through its own exit.
        replacement.ready.catch(() => undefined);
      });
      fleet.backoffs.set(tag, restart);
    }
    restart(Date.now() - startedAt, tag);
  });
  return managed;
}

/** The stack's methods over its workers: listing them, scaling out, draining one, the health manager's restarts. */
export function workerMethods(fleet: WorkerFleet): Pick<LocalStack, 'workerPids' | 'workers' | 'addWorkers' | 'drainWorker' | 'slots' | 'restartWorkers'> {
  return {
    workerPids: (role) => fleet.workers.filter((w) => !role || w.role === role).map((w) => w.child.pid!),
    workers: (role) =>
      fleet.workers.filter((w) => (!role || w.role === role) && !w.draining && w.child.exitCode === null && w.child.signalCode === null && w.child.pid).map(asStackWorker),
    addWorkers: async (role, count, options = {}) => {
      if (fleet.stopping()) throw new Error('the stack is stopping');
      const next = Math.max(-1, ...fleet.workers.filter((w) => w.role === role).map((w) => w.index)) + 1;
      const added = Array.from({ length: count }, (_, k) => launchWorker(fleet, role, next + k, false, options.engineUrls?.[k]));
      fleet.workers.push(...added);
      fleet.changed();
      try {
        await Promise.all(added.map((w) => w.ready));
      } catch (err) {
        // All or none: a worker that died before it was ready takes the others of the batch down
        // too, so a retried scale-out does not leave extra workers behind.
        for (const w of added) w.draining = true;
        await Promise.all(added.map((w) => stopChild(w.child, 5_000)));
        fleet.workers.splice(0, fleet.workers.length, ...fleet.workers.filter((w) => !added.includes(w)));
        fleet.changed();
        throw err;
      }
      return added.map(asStackWorker);
    },
    drainWorker: async (pid, timeoutMs) => {
      const w = fleet.workers.find((x) => x.child.pid === pid);
      if (!w) return;
      w.draining = true;
      await stopChild(w.child, timeoutMs);
      const slot = fleet.workers.indexOf(w);
      if (slot >= 0) fleet.workers.splice(slot, 1);
      fleet.changed();
    },
    slots: (role) =>
      fleet.workers
        .filter((w) => w.role === role && !w.draining)
        .map((w) => ({ index: w.index, pid: w.child.pid!, alive: w.child.exitCode === null && w.child.signalCode === null, ...(w.identity ? { identity: w.identity } : {}), startedAt: w.startedAt })),
    restartWorkers: async (role, notPolling, graceMs = 30_000) => {
      const done: WorkerRestart = { relaunched: [], killed: [], starting: [] };
      for (const [slot, w] of fleet.workers.entries()) {
        if (w.role !== role || w.draining || fleet.stopping()) continue;
        const exited = w.child.exitCode !== null || w.child.signalCode !== null;
        if (exited) {
          const replacement = launchWorker(fleet, role, w.index, w.initial, w.engineUrl);
          fleet.workers[slot] = replacement;
          replacement.ready.catch(() => undefined);
          done.relaunched.push(replacement.child.pid!);
        } else if (!w.identity) done.starting.push(w.child.pid!);
        else if (notPolling.includes(w.identity) && Date.now() - w.startedAt.getTime() > graceMs) {
          w.child.kill('SIGKILL');
          done.killed.push(w.child.pid!);
        }
      }
      if (done.relaunched.length) fleet.changed();
      return done;
    },
  };
}

/** Stops one child: SIGTERM, then SIGKILL after `graceMs`; resolves when it has exited. */
export async function stopChild(child: ChildProcess, graceMs = 15_000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  const killer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await exited;
  clearTimeout(killer);
}

/**
 * One supervised slot: restart(upForMs, what) waits the backoff delay (logged) and runs `start`; a
 * start that throws is retried with the next delay. A process that dies later calls restart again.
 */
export function supervisor(notice: (line: string) => void, stopping: () => boolean, start: () => Promise<void>) {
  const backoff = new RestartBackoff();
  const restart = (upForMs: number, what: string): void => {
    const { delayMs, restart: n } = backoff.next(upForMs);
    notice(`[relax] restarting ${what} in ${formatDelay(delayMs)} (restart ${n})`);
    setTimeout(() => {
      if (stopping()) return;
      start().catch((err) => {
        if (stopping()) return;
        notice(`[relax] ${what} failed to start: ${(err as Error).message.split('\n')[0]}`);
        restart(0, what);
      });
    }, delayMs);
  };
  return restart;
}
