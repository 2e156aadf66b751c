// Per-run state of this worker process, with one owner. Whatever a module keeps for a run across
// activities (its context, trainer, reference model, rollout engine, update rule) it keeps in a
// RunSlot of `runState`, never in a module-level map of its own; `runState.release(runId)` disposes
// every slot of the run together. The worker's reaper (workers/run-reaper.ts) releases a run once its
// workflow has closed, and any run left idle past a bound.

import { componentLog } from '../telemetry/log';

/** Disposes a slot's value when its run is released (a trainer's thread state, an engine's sessions). */
export type DisposeFn<T> = (value: T, runId: string) => unknown;

interface HeldRun {
  lastUsedMs: number;
  values: Map<RunSlot<unknown>, unknown>;
}

/** What a process holds for one run. */
export interface HeldRunInfo {
  runId: string;
  /** Milliseconds since a slot of the run was last read or written. */
  idleMs: number;
}

/** One kind of per-run value (e.g. "train.trainer"), keyed by run id. Reading or writing marks the run used. */
export class RunSlot<T> {
  constructor(
    readonly name: string,
    private readonly registry: RunRegistry,
    readonly dispose?: DisposeFn<T>,
  ) {}

  get(runId: string): T | undefined {
    return this.registry.read(this, runId);
  }

  set(runId: string, value: T): T {
    this.registry.write(this, runId, value);
    return value;
  }

  /** Forgets the run's value without disposing it (the caller owns it); with `only`, only while it is that value. */
  delete(runId: string, only?: T): void {
    this.registry.forget(this, runId, only);
  }

  /** The runs that hold a value in this slot. */
  runIds(): string[] {
    return this.registry.runIdsOf(this);
  }
}

export class RunRegistry {
  private readonly runs = new Map<string, HeldRun>();
  private readonly names = new Set<string>();

  constructor(private readonly now: () => number = Date.now) {}

  /** A new slot; its name must be unique in this registry (it names the slot in logs and metrics). */
  slot<T>(name: string, dispose?: DisposeFn<T>): RunSlot<T> {
    if (this.names.has(name)) throw new Error(`run state slot "${name}" is defined twice: give each slot its own name`);
    this.names.add(name);
    return new RunSlot<T>(name, this, dispose);
  }

  /** @internal RunSlot.get */
  read<T>(slot: RunSlot<T>, runId: string): T | undefined {
    const run = this.runs.get(runId);
    if (!run?.values.has(slot as RunSlot<unknown>)) return undefined;
    run.lastUsedMs = this.now();
    return run.values.get(slot as RunSlot<unknown>) as T;
  }

  /** @internal RunSlot.set */
  write<T>(slot: RunSlot<T>, runId: string, value: T): void {
    let run = this.runs.get(runId);
    if (!run) this.runs.set(runId, (run = { lastUsedMs: this.now(), values: new Map() }));
    run.lastUsedMs = this.now();
    run.values.set(slot as RunSlot<unknown>, value);
  }

  /** @internal RunSlot.delete */
  forget<T>(slot: RunSlot<T>, runId: string, only?: T): void {
    const run = this.runs.get(runId);
    if (!run || (only !== undefined && run.values.get(slot as RunSlot<unknown>) !== only)) return;
    run.values.delete(slot as RunSlot<unknown>);
    if (!run.values.size) this.runs.delete(runId);
  }

  /** @internal RunSlot.runIds */
  runIdsOf<T>(slot: RunSlot<T>): string[] {
    return [...this.runs].filter(([, run]) => run.values.has(slot as RunSlot<unknown>)).map(([id]) => id);
  }

  /** Every run this process holds state for. */
  held(): HeldRunInfo[] {
    const now = this.now();
    return [...this.runs].map(([runId, run]) => ({ runId, idleMs: now - run.lastUsedMs }));
  }

  /**
   * Forgets everything held for the run and disposes it, slot by slot (a failed disposal is reported
   * and does not stop the others). Returns the names of the slots released. A later activity of the
   * same run rebuilds what it needs, as after a worker restart.
   */
  async release(runId: string, warn: (message: string) => void = (message) => componentLog('run-state').warn({ run: runId }, message)): Promise<string[]> {
    const run = this.runs.get(runId);
    if (!run) return [];
    this.runs.delete(runId);
    const released: string[] = [];
    for (const [slot, value] of run.values) {
      released.push(slot.name);
      try {
        await slot.dispose?.(value, runId);
      } catch (err) {
        warn(`[run-state] run ${runId}: disposing its ${slot.name} failed: ${(err as Error).message}`);
      }
    }
    return released;
  }
}

/** This process's per-run state. */
export const runState = new RunRegistry();

/** Disposes a value that may still be loading: waits for it, then disposes; a failed load has nothing to dispose. */
export function whenLoaded<T>(dispose: (value: T) => unknown): DisposeFn<Promise<T>> {
  return async (loading) => {
    let value: T;
    try {
      value = await loading;
    } catch {
      return;
    }
    await dispose(value);
  };
}
