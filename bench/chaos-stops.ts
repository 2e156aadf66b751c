// The stop faults of `relax bench chaos --set stops=N` (bench/chaos.ts): processes alive but stuck,
// not dead. SIGSTOP of a random worker of every role; of the trainer in the middle of publishing a
// version and of a rollout worker in the middle of a weight sync (config/failpoints.ts: the worker
// stops itself at that place, armed by a file); and of an external engine (`relax serve --engine`,
// registered through the control API) that has accepted requests and never answers. Each stop is
// resumed (SIGCONT) after a hold past the activities' 10 s heartbeat timeout, or never: then relax
// dev's liveness check (workers/supervisor.ts watchLiveness) must kill and restart the worker, and
// the engine's rollout worker must mark it failed (rollout/remote-engine.ts probes while it waits).
// longestStall measures the longest time a run applied no step.
import fs from 'node:fs';
import path from 'node:path';
import { spawn, type ChildProcess } from 'node:child_process';
import { FAILPOINTS, takenPrefix, type FailpointName } from '../config/failpoints';
import { RELAX_BIN } from '../workers/local-stack';
import { freePort } from '../workers/ports';
import { forwardLines } from '../workers/temporal-server';
import { descendants, processInfo, processState, stillAlive, workerRole, type ProcessInfo } from './chaos-checks';
import { shuffledBlocks, sleep, until, type DevProcess } from './chaos-faults';

export type StopKind = 'control' | 'rollout' | 'train' | 'reference' | FailpointName | 'engine';
export interface StopEvent {
  kind: StopKind;
  /** SIGCONT after the hold; false: never (the liveness check, or the engine's worker, must deal with it). */
  resume: boolean;
}

const WORKER_KINDS: StopKind[] = ['control', 'rollout', 'train', 'reference', 'train.publish', 'rollout.sync'];
const isFailpoint = (k: StopKind): k is FailpointName => k in FAILPOINTS;

/**
 * `stops` events: the worker kinds in blocks (each block in seeded random order), every fourth never
 * resumed; with an engine, the middle event is the engine's stop (never resumed).
 */
export function stopSchedule(stops: number, rng: () => number, withEngine: boolean): StopEvent[] {
  const events = shuffledBlocks(WORKER_KINDS, stops, rng).map((kind, i) => ({ kind, resume: i % 4 !== 3 }));
  if (withEngine && stops > 0) events[Math.floor(stops / 2)] = { kind: 'engine', resume: false };
  return events;
}

export interface StopOutcome {
  kind: StopKind;
  pid: number;
  /** When it was stopped (ms since the epoch). */
  at: number;
  /** Seconds it was stopped before SIGCONT; undefined when it never was. */
  heldS?: number;
  /** Seconds from SIGSTOP until relax dev's liveness check killed it (never-resumed workers). */
  killedAfterS?: number;
}

/** An external engine process for the chaos stack, registered through its control API. */
export class ChaosEngine {
  readonly url: string;
  private constructor(readonly child: ChildProcess, port: number) {
    this.url = `http://127.0.0.1:${port}`;
  }

  /** Starts `relax serve --engine` (its own home, no database) and has relax dev scale out to it; resolves when the engine is ACTIVE. */
  static async start(dev: DevProcess, stackHome: string, env: NodeJS.ProcessEnv, log: (line: string) => void): Promise<ChaosEngine> {
    const home = path.join(stackHome, 'engine');
    fs.mkdirSync(home, { recursive: true, mode: 0o700 });
    const port = await freePort();
    const child = spawn(process.execPath, [RELAX_BIN, 'serve', '--engine', '--port', String(port)], { env: { ...env, RELAX_HOME: home, DATABASE_URL: '', TEMPORAL_ADDRESS: '' }, stdio: ['ignore', 'pipe', 'pipe'] });
    const engine = new ChaosEngine(child, port);
    let serving = false;
    const out = fs.createWriteStream(path.join(stackHome, 'engine.log'), { flags: 'a' });
    forwardLines(child, (line) => {
      out.write(`${line}\n`);
      if (line.startsWith('relax engine serving at http')) serving = true;
    });
    void new Promise((r) => child.once('exit', r)).then(() => out.end());
    await until('the external engine to serve', () => (serving ? true : child.exitCode !== null ? Promise.reject(new Error(`relax serve --engine exited (${child.exitCode}); see ${path.join(stackHome, 'engine.log')}`)) : undefined), 120_000, 250);
    const api = dev.apiUrl;
    if (!api) throw new Error('relax bench chaos: relax dev printed no API line (the engine is registered through POST /rollout/scale_out)');
    const token = fs.readFileSync(path.join(stackHome, 'api-token'), 'utf8').trim();
    const call = async (method: string, url: string, body?: unknown) => {
      const res = await fetch(`${api}${url}`, { method, headers: { authorization: `Bearer ${token}`, ...(body ? { 'content-type': 'application/json' } : {}) }, ...(body ? { body: JSON.stringify(body) } : {}) });
      return { status: res.status, json: (await res.json()) as Record<string, any> };
    };
    const asked = await call('POST', '/rollout/scale_out', { engine_urls: [engine.url], timeout_secs: 180 });
    if (asked.status !== 202) throw new Error(`relax bench chaos: POST /rollout/scale_out answered ${asked.status}: ${JSON.stringify(asked.json)}`);
    const op = await until('the scale-out to the external engine to settle', async () => {
      const r = await call('GET', `/rollout/scale_out/${asked.json.request_id}`);
      return r.json.execution === 'RUNNING' ? undefined : r.json;
    }, 240_000, 500);
    if (op.status !== 'ACTIVE') throw new Error(`relax bench chaos: the external engine did not become active: ${JSON.stringify(op)}`);
    log(`[chaos] external engine ${engine.url} (pid ${child.pid}) active`);
    return engine;
  }

  get info(): ProcessInfo | undefined {
    return this.child.pid === undefined ? undefined : processInfo(this.child.pid);
  }

  stop(): void {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill('SIGKILL');
  }
}

/** SIGSTOPs workers (and the engine) as a StopEvent says, and resumes them or waits for the liveness check to replace them. */
export class WorkerStopper {
  /** Stopped and not resumed (the bench resumes what is left before it stops the stack). */
  private readonly frozen = new Map<number, ProcessInfo>();

  constructor(
    private readonly o: {
      dev: () => DevProcess;
      failpointsDir: string;
      livenessMs: number;
      /** The hold before SIGCONT, drawn between these (seconds). */
      holdS: [number, number];
      rng: () => number;
      engine?: ChaosEngine;
      log: (line: string) => void;
    },
  ) {}

  async stop(e: StopEvent): Promise<StopOutcome> {
    const readyBefore = e.kind === 'engine' ? 0 : this.o.dev().ready(roleOf(e.kind));
    const victim = await this.freeze(e.kind);
    const at = Date.now();
    this.frozen.set(victim.pid, victim);
    if (e.resume) {
      const holdMs = (this.o.holdS[0] + this.o.rng() * (this.o.holdS[1] - this.o.holdS[0])) * 1000;
      await sleep(holdMs);
      this.resume(victim);
      return { kind: e.kind, pid: victim.pid, at, heldS: round1((Date.now() - at) / 1000) };
    }
    if (e.kind === 'engine') return { kind: e.kind, pid: victim.pid, at };
    // Never resumed: relax dev's liveness check must kill it, and its supervisor start a replacement.
    const role = roleOf(e.kind);
    await until(`relax dev's liveness check to kill the stopped ${role} worker (pid ${victim.pid})`, () => (stillAlive(victim) ? undefined : true), this.o.livenessMs + 30_000, 250);
    const killedAfterS = round1((Date.now() - at) / 1000);
    this.frozen.delete(victim.pid);
    await until(`the supervisor to restart the ${role} worker its liveness check killed`, () => (this.o.dev().ready(role) > readyBefore ? true : undefined), 120_000, 250);
    return { kind: e.kind, pid: victim.pid, at, killedAfterS };
  }

  /** SIGCONT to every process still stopped (before the stack stops: a stopped worker cannot see its supervisor go). */
  resumeAll(): void {
    for (const p of [...this.frozen.values()]) this.resume(p);
  }

  private resume(p: ProcessInfo): void {
    this.frozen.delete(p.pid);
    if (stillAlive(p)) process.kill(p.pid, 'SIGCONT');
  }

  private async freeze(kind: StopKind): Promise<ProcessInfo> {
    if (kind === 'engine') {
      const info = this.o.engine?.info;
      if (!info) throw new Error('relax bench chaos: no external engine to stop');
      process.kill(info.pid, 'SIGSTOP');
      return info;
    }
    if (isFailpoint(kind)) return this.atFailpoint(kind);
    const victim = await until(`a running ${kind} worker to stop`, () => {
      // Not the external engine's rollout worker: the engine's own stop is about it, and once that
      // engine is frozen for good a replacement of its worker could never start.
      const candidates = descendants(this.o.dev().pid).filter((p) => workerRole(p) === kind && processState(p.pid) !== 'T' && !drivesExternalEngine(p));
      return candidates.length ? candidates[Math.floor(this.o.rng() * candidates.length)] : undefined;
    }, 60_000);
    process.kill(victim.pid, 'SIGSTOP');
    return victim;
  }

  /** Arms failpoint `name` and waits for a worker to take it and stop itself there. */
  private async atFailpoint(name: FailpointName): Promise<ProcessInfo> {
    const armed = path.join(this.o.failpointsDir, name);
    fs.writeFileSync(armed, '', { mode: 0o600 });
    try {
      const taken = await until(`a worker to reach failpoint ${name} (${FAILPOINTS[name]})`, () => fs.readdirSync(this.o.failpointsDir).find((f) => f.startsWith(takenPrefix(name))), 180_000, 50);
      fs.rmSync(path.join(this.o.failpointsDir, taken));
      const pid = Number(taken.slice(takenPrefix(name).length));
      await until(`pid ${pid} to stop at failpoint ${name}`, () => (processState(pid) === 'T' ? true : undefined), 10_000, 20);
      const info = processInfo(pid);
      if (!info) throw new Error(`relax bench chaos: pid ${pid} took failpoint ${name} and is gone`);
      return info;
    } finally {
      fs.rmSync(armed, { force: true });
    }
  }
}

/** Whether `p` is a rollout worker started to drive an external engine (RELAX_ENGINE_URL in its environment). */
function drivesExternalEngine(p: ProcessInfo): boolean {
  try {
    return fs.readFileSync(`/proc/${p.pid}/environ`, 'utf8').split('\0').some((kv) => kv.startsWith('RELAX_ENGINE_URL='));
  } catch {
    return false;
  }
}

/** The worker role a stop kind freezes. */
function roleOf(kind: Exclude<StopKind, 'engine'>): 'control' | 'rollout' | 'train' | 'reference' {
  if (kind === 'train.publish') return 'train';
  if (kind === 'rollout.sync') return 'rollout';
  return kind;
}

const round1 = (x: number) => Math.round(x * 10) / 10;

/**
 * The longest time one of the runs applied no step between `from` and `to` (edges included: a run
 * that applied nothing in the window stalled for all of it): its seconds, when it began and ended, and which run (its index).
 */
export function longestStall(appliedByRun: Date[][], from: number, to: number): { seconds: number; from: number; to: number; run: number } {
  let worst = { ms: 0, from, to: from, run: 0 };
  let run = 0;
  const gap = (a: number, b: number) => {
    if (b - a > worst.ms) worst = { ms: b - a, from: a, to: b, run };
  };
  for (const [i, applied] of appliedByRun.entries()) {
    run = i;
    let last = from;
    for (const t of applied.map((d) => d.getTime()).filter((t) => t > from && t <= to).sort((a, b) => a - b)) {
      gap(last, t);
      last = t;
    }
    gap(last, to);
  }
  return { seconds: round1(worst.ms / 1000), from: worst.from, to: worst.to, run: worst.run };
}

/** How a stop went, in a few words ("SIGSTOP control, never resumed"; with the pid and the liveness kill when `detailed`). */
export function describeStop(s: StopOutcome, detailed = false): string {
  const then = s.heldS !== undefined ? `SIGCONT after ${s.heldS} s` : s.killedAfterS !== undefined && detailed ? `never resumed: relax dev's liveness check killed it after ${s.killedAfterS} s and restarted it` : 'never resumed';
  return `SIGSTOP ${s.kind}${detailed ? ` (pid ${s.pid})` : ''}, ${then}`;
}
