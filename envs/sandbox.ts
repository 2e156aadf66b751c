// The sandbox host: user modules (reward, env, generate and task modules) run in worker_threads
// Workers, never in a worker's own event loop. One thread per (module file, config field), started
// on first use and replaced after it dies. Each thread gets a copy of the environment without
// secrets (sandboxEnv), an old-generation heap limit (RELAX_SANDBOX_MEMORY_MB: running out of memory
// ends only the thread), and a wall-clock watchdog here in the host: a call still inside user code
// past its timeout (plus a small grace) has its thread terminated (worker.terminate() stops even
// `for(;;){}`), the calls pending on that thread are rejected with SandboxStopped (the culprit's
// says so; the others are collateral and may be retried by the caller on the fresh thread the next
// call gets). The module loads again in the fresh thread. Loading has its own limit
// (RELAX_SANDBOX_LOAD_TIMEOUT_MS), counted from the thread's start.
//
// The thread marks in shared memory when it enters and leaves a synchronous user call (which request,
// which item of a batch, its timeout) and when its event loop last turned; the watchdog reads that,
// so it can name the culprit, and it notices a thread stuck in an async continuation too (then no
// single call can be named: every pending call is collateral).
import { MessageChannel, receiveMessageOnPort, Worker, type MessagePort } from 'node:worker_threads';
import path from 'node:path';
import { graceMs, sandboxEnv, sandboxLoadTimeoutMs, sandboxMemoryMb, STATE, STATE_SLOTS, type SandboxReply, type SandboxRequest, type ThreadData, type ThreadEvent } from './sandbox-protocol';

/** A thread is stopped this long after its last call when it holds no environments. */
const IDLE_STOP_MS = 10 * 60_000;
const THREAD_ENTRY = path.join(__dirname, 'sandbox-thread.js');

/** Why a thread was stopped. */
export type StopReason =
  | { kind: 'timeout'; limitMs: number; request?: number; item?: number }
  | { kind: 'loadTimeout'; limitMs: number }
  | { kind: 'memory'; limitMb: number; request?: number; item?: number }
  | { kind: 'exit'; code: number; request?: number; item?: number }
  | { kind: 'crash'; error: string }
  | { kind: 'loadFailed'; error: string; code?: string }
  | { kind: 'closed' };

/** A pending call lost because its thread was stopped. `culprit`: this call was the one that made it stop. */
export class SandboxStopped extends Error {
  override name = 'SandboxStopped';
  constructor(
    message: string,
    readonly reason: StopReason,
    readonly culprit: boolean,
    /** The batch item (its index in the request) that was running, when this call is the culprit. */
    readonly item?: number,
  ) {
    super(message);
  }
}

/** An error the thread reported for one call (a throw, a timeout it noticed itself, a bad module). */
export class SandboxCallError extends Error {
  override name = 'SandboxCallError';
  constructor(
    message: string,
    /** A UserModuleErrorCode when the module or export is unusable. */
    readonly code?: string,
  ) {
    super(message);
  }
}

/** What happened, as the end of an error message naming the module and export. */
export function describeStop(reason: StopReason, culprit: boolean): string {
  switch (reason.kind) {
    case 'timeout':
      if (culprit) return `timed out after ${reason.limitMs} ms (the sandbox thread was stopped)`;
      return reason.request === undefined
        ? `the sandbox thread was blocked for over ${reason.limitMs} ms in code no single call could be blamed for, and was stopped`
        : `lost: the sandbox thread running it was stopped because another call timed out after ${reason.limitMs} ms (collateral)`;
    case 'loadTimeout':
      return `timed out while loading after ${reason.limitMs} ms (the sandbox thread was stopped): make the module's top level finish quickly, or raise RELAX_SANDBOX_LOAD_TIMEOUT_MS in the workers' environment`;
    case 'memory':
      if (culprit || reason.request === undefined) return `ran out of memory (limit ${reason.limitMb} MB; RELAX_SANDBOX_MEMORY_MB in the workers' environment sets it)`;
      return `lost: the sandbox thread running it ran out of memory in another call (limit ${reason.limitMb} MB) (collateral)`;
    case 'exit':
      return `the sandbox thread exited (code ${reason.code})`;
    case 'crash':
      return `the sandbox thread crashed: ${reason.error}`;
    case 'loadFailed':
      return reason.error;
    case 'closed':
      return 'the sandbox was shut down';
  }
}

export interface ModuleRef {
  field: string;
  /** How errors name the config field: "reward.module", "task", ... */
  label: string;
  spec: string;
  resolved: string;
  cwd: string;
}

/** Handlers for the calls a thread makes back into the host while a request runs. */
export interface CallBacks {
  /** Async calls (e.g. a generate function's generate()). */
  rpc?: Record<string, (...args: never[]) => unknown>;
  /** Synchronous calls (e.g. tokenizer.encode): the thread blocks until the answer. */
  sync?: Record<string, (...args: never[]) => unknown>;
}

interface Pending {
  resolve(value: unknown): void;
  reject(err: Error): void;
  timeoutMs: number;
  callbacks?: CallBacks;
}

/** One Worker running one user module. Dead once stopped; SandboxModule.thread() then starts another. */
export class SandboxThread {
  private readonly worker: Worker;
  private readonly state: Float64Array;
  private readonly hostFlag: Int32Array;
  private readonly threadFlag: Int32Array;
  private readonly hostReplies: MessagePort;
  private readonly threadReplies: MessagePort;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private loaded = false;
  private watchdog?: NodeJS.Timeout;
  private watchdogAt = Infinity;
  private readonly loadTimer: NodeJS.Timeout;
  private idleTimer?: NodeJS.Timeout;
  private referenced = false;
  /** Environment instances living in this thread. */
  instances = 0;
  dead?: StopReason;
  /** Messages posted to the thread (tests count them). */
  posted = 0;

  constructor(readonly ref: ModuleRef, private readonly env: NodeJS.ProcessEnv = process.env) {
    const state = new SharedArrayBuffer(STATE_SLOTS * 8);
    const hostFlag = new SharedArrayBuffer(4);
    const threadFlag = new SharedArrayBuffer(4);
    this.state = new Float64Array(state);
    this.hostFlag = new Int32Array(hostFlag);
    this.threadFlag = new Int32Array(threadFlag);
    const host = new MessageChannel();
    const thread = new MessageChannel();
    this.hostReplies = host.port1;
    this.threadReplies = thread.port1;
    const loadTimeoutMs = sandboxLoadTimeoutMs(env);
    const data: ThreadData = { relaxSandbox: true, ...ref, loadTimeoutMs, state, hostFlag, threadFlag, hostReplies: host.port2, threadReplies: thread.port2 };
    this.state[STATE.PROGRESS] = Date.now();
    this.worker = new Worker(THREAD_ENTRY, {
      workerData: data,
      transferList: [host.port2, thread.port2],
      env: sandboxEnv(env),
      resourceLimits: { maxOldGenerationSizeMb: sandboxMemoryMb(env) },
      stdout: false,
      stderr: false,
    });
    this.worker.unref();
    this.hostReplies.unref();
    this.threadReplies.unref();
    this.worker.on('message', (m: SandboxReply | ThreadEvent) => this.onMessage(m));
    this.worker.on('error', (err: Error & { code?: string }) => {
      if (err.code === 'ERR_WORKER_OUT_OF_MEMORY') this.stop({ kind: 'memory', limitMb: sandboxMemoryMb(this.env), ...this.blamed() });
      else this.stop({ kind: 'crash', error: err.message });
    });
    this.worker.on('exit', (code) => this.stop({ kind: 'exit', code, ...this.blamed() }));
    this.loadTimer = setTimeout(() => this.loaded || this.stop({ kind: 'loadTimeout', limitMs: loadTimeoutMs }), loadTimeoutMs);
    this.loadTimer.unref();
    this.touchIdle();
  }

  /** The call the thread is inside right now, if any (from the shared state). */
  private blamed(): { request?: number; item?: number } {
    if (this.state[STATE.ENTERED] <= 0) return {};
    const request = this.state[STATE.REQUEST];
    const item = this.state[STATE.ITEM];
    return { request, ...(item >= 0 ? { item } : {}) };
  }

  private onMessage(m: SandboxReply | ThreadEvent): void {
    if ('kind' in m) {
      if (m.kind === 'loaded') {
        this.loaded = true;
        clearTimeout(this.loadTimer);
        this.arm(0);
      } else if (m.kind === 'loadFailed') {
        this.stop({ kind: 'loadFailed', error: m.error, ...(m.code ? { code: m.code } : {}) });
      } else if (m.kind === 'rpc') {
        void this.answerRpc(m.id, m.rpcId, m.method, m.args);
      } else if (m.kind === 'syncRpc') {
        this.answerSyncRpc(m.id, m.method, m.args);
      }
      return;
    }
    const p = this.pending.get(m.id);
    if (!p) return;
    this.pending.delete(m.id);
    if (m.ok) p.resolve(m.value);
    else p.reject(new SandboxCallError(m.error, m.code));
    this.settled();
  }

  private async answerRpc(id: number, rpcId: number, method: string, args: unknown[]): Promise<void> {
    const fn = this.pending.get(id)?.callbacks?.rpc?.[method] as ((...a: unknown[]) => unknown) | undefined;
    let reply: { ok: boolean; value?: unknown; error?: string };
    try {
      if (!fn) throw new Error(`no host call ${JSON.stringify(method)} is open for this call`);
      reply = { ok: true, value: await fn(...args) };
    } catch (err) {
      reply = { ok: false, error: (err as Error)?.message ?? String(err) };
    }
    if (!this.dead) this.post({ op: 'rpcReply', rpcId, ...reply });
  }

  private answerSyncRpc(id: number, method: string, args: unknown[]): void {
    const fn = this.pending.get(id)?.callbacks?.sync?.[method] as ((...a: unknown[]) => unknown) | undefined;
    let reply: { ok: boolean; value?: unknown; error?: string };
    try {
      if (!fn) throw new Error(`no host call ${JSON.stringify(method)} is open for this call`);
      reply = { ok: true, value: fn(...args) };
    } catch (err) {
      reply = { ok: false, error: (err as Error)?.message ?? String(err) };
    }
    this.threadReplies.postMessage(reply);
    Atomics.store(this.threadFlag, 0, 1);
    Atomics.notify(this.threadFlag, 0);
  }

  private post(message: Record<string, unknown>): void {
    this.posted++;
    this.worker.postMessage(message);
  }

  private settled(): void {
    if (this.pending.size > 0) return;
    clearTimeout(this.watchdog);
    this.watchdog = undefined;
    this.watchdogAt = Infinity;
    if (this.referenced) {
      this.worker.unref();
      this.referenced = false;
    }
    this.touchIdle();
  }

  private touchIdle(): void {
    clearTimeout(this.idleTimer);
    this.idleTimer = setTimeout(() => {
      if (this.pending.size === 0 && this.instances === 0) this.stop({ kind: 'closed' });
      else this.touchIdle();
    }, IDLE_STOP_MS);
    this.idleTimer.unref();
  }

  /** Makes the watchdog look again within `delayMs`. */
  private arm(delayMs: number): void {
    const at = Date.now() + Math.max(0, delayMs);
    if (this.watchdog && at >= this.watchdogAt) return;
    clearTimeout(this.watchdog);
    this.watchdogAt = at;
    this.watchdog = setTimeout(() => this.check(), Math.max(0, delayMs));
  }

  private check(): void {
    this.watchdog = undefined;
    this.watchdogAt = Infinity;
    if (this.dead || this.pending.size === 0 || !this.loaded) return;
    const now = Date.now();
    const entered = this.state[STATE.ENTERED];
    if (entered > 0) {
      const limit = this.state[STATE.LIMIT];
      const deadline = entered + limit + graceMs(limit);
      if (now >= deadline) return this.stop({ kind: 'timeout', limitMs: limit, ...this.blamed() });
      return this.arm(deadline - now);
    }
    const limit = Math.max(...[...this.pending.values()].map((p) => p.timeoutMs));
    const deadline = this.state[STATE.PROGRESS] + limit + graceMs(limit);
    if (now >= deadline) return this.stop({ kind: 'timeout', limitMs: limit });
    this.arm(Math.min(deadline - now, limit));
  }

  /** Sends one request; resolves with the thread's value, rejects with SandboxCallError or SandboxStopped. */
  request(op: SandboxRequest['op'], body: Record<string, unknown>, timeoutMs: number, callbacks?: CallBacks): Promise<unknown> {
    if (this.dead) return Promise.reject(new SandboxStopped(describeStop(this.dead, false), this.dead, false));
    const id = this.nextId++;
    const promise = new Promise<unknown>((resolve, reject) => this.pending.set(id, { resolve, reject, timeoutMs, ...(callbacks ? { callbacks } : {}) }));
    this.post({ ...body, id, op, timeoutMs });
    if (!this.referenced) {
      this.worker.ref();
      this.referenced = true;
    }
    if (this.loaded) this.arm(timeoutMs + graceMs(timeoutMs));
    return promise;
  }

  /**
   * A request the host waits for synchronously (Atomics.wait), for the synchronous Task methods of a
   * task module. Past `timeoutMs` (the load time of a fresh thread included) the thread is stopped
   * and SandboxStopped is thrown.
   */
  requestSync(op: SandboxRequest['op'], body: Record<string, unknown>, timeoutMs: number): unknown {
    if (this.dead) throw new SandboxStopped(describeStop(this.dead, false), this.dead, false);
    const id = this.nextId++;
    Atomics.store(this.hostFlag, 0, 0);
    this.post({ ...body, id, op, timeoutMs, sync: true });
    const deadline = Date.now() + timeoutMs + sandboxLoadTimeoutMs(this.env);
    for (;;) {
      const got = receiveMessageOnPort(this.hostReplies);
      if (got) {
        const m = got.message as SandboxReply & { loadFailed?: boolean };
        if (m.id !== id) continue;
        if (m.ok) return m.value;
        throw new SandboxCallError(m.error, m.code);
      }
      if (this.dead) throw new SandboxStopped(describeStop(this.dead, true), this.dead, true);
      const left = deadline - Date.now();
      if (left <= 0) {
        const reason: StopReason = this.loaded ? { kind: 'timeout', limitMs: timeoutMs, request: id } : { kind: 'loadTimeout', limitMs: sandboxLoadTimeoutMs(this.env) };
        this.stop(reason);
        throw new SandboxStopped(describeStop(reason, true), reason, true);
      }
      Atomics.wait(this.hostFlag, 0, 0, Math.min(left, 1000));
      Atomics.store(this.hostFlag, 0, 0);
    }
  }

  /** Posts a message needing no reply (dropping an environment instance). */
  notify(op: SandboxRequest['op'], body: Record<string, unknown>): void {
    if (!this.dead) this.post({ ...body, id: 0, op, timeoutMs: 0 });
  }

  /** Stops the thread (idempotent) and rejects every pending call with SandboxStopped. */
  stop(reason: StopReason): void {
    if (this.dead) return;
    this.dead = reason;
    clearTimeout(this.loadTimer);
    clearTimeout(this.watchdog);
    clearTimeout(this.idleTimer);
    void this.worker.terminate().catch(() => undefined);
    this.hostReplies.close();
    this.threadReplies.close();
    const pending = [...this.pending.entries()];
    this.pending.clear();
    for (const [id, p] of pending) {
      if (reason.kind === 'loadFailed') {
        p.reject(new SandboxCallError(reason.error, reason.code));
        continue;
      }
      const culprit = reason.kind === 'loadTimeout' || ('request' in reason && reason.request === id);
      const item = culprit && 'item' in reason ? reason.item : undefined;
      p.reject(new SandboxStopped(describeStop(reason, culprit), reason, culprit, item));
    }
  }
}

/** The thread of one module file for one config field, replaced by a fresh one after it dies. */
export class SandboxModule {
  private current?: SandboxThread;
  constructor(readonly ref: ModuleRef) {}

  /** The live thread, started (and the module loading in it) if there is none. */
  thread(): SandboxThread {
    if (!this.current || this.current.dead) this.current = new SandboxThread(this.ref);
    return this.current;
  }

  /** The live thread, if any (tests). */
  get live(): SandboxThread | undefined {
    return this.current && !this.current.dead ? this.current : undefined;
  }

  stop(): void {
    this.current?.stop({ kind: 'closed' });
  }
}

const modules = new Map<string, SandboxModule>();

/** The sandbox of `resolved` for `field`, one per process. */
export function sandboxModule(ref: ModuleRef): SandboxModule {
  const key = `${ref.field}\0${ref.resolved}`;
  let mod = modules.get(key);
  if (!mod) {
    mod = new SandboxModule(ref);
    modules.set(key, mod);
  }
  return mod;
}

/** Stops every sandbox thread and forgets them (tests; a later call starts fresh ones). */
export function stopSandboxes(): void {
  for (const m of modules.values()) m.stop();
  modules.clear();
}
