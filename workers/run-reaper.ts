// Releases what this worker process holds for a run (training/run-state.ts) once the run is over.
// Every few seconds it looks up the workflow of each run it holds (the runs table) and asks Temporal
// about it. It releases a run whose workflow has closed (completed, failed, cancelled, terminated or
// timed out, or gone from Temporal) and a run whose row is gone. As a backstop it also releases any
// run that no activity has used for a while, whatever its state. Such a run, resumed later, rebuilds
// its engines from its last checkpoint, optimizer state included, as after a worker restart.
import v8 from 'node:v8';
import vm from 'node:vm';
import { Client, Connection, WorkflowNotFoundError } from '@temporalio/client';
import { sdkConnectionOptions, type TemporalConnectionOptions } from '../security/temporal-connection';
import { runWorkflowIds } from '../store/runs';
import type { Queryable } from '../store/transfer-queue';
import { runState, type RunRegistry } from '../training/run-state';

/** What Temporal says of a run's workflow: still running, closed, or unknown (unreachable). */
export type WorkflowState = 'open' | 'closed' | 'unknown';

export interface RunRelease {
  runId: string;
  reason: string;
  /** The slots released (training/run-state.ts names). */
  slots: string[];
}

export interface SweepOptions {
  db: Queryable;
  workflowState: (workflowId: string) => Promise<WorkflowState>;
  /** Release any run unused for this long, whatever its workflow's state. */
  idleMs: number;
  registry?: RunRegistry;
}

/** One pass: releases every held run that is over (or idle past the bound) and says which and why. */
export async function sweepRuns(o: SweepOptions): Promise<RunRelease[]> {
  const registry = o.registry ?? runState;
  const held = registry.held();
  if (!held.length) return [];
  // The database unreachable: only the idle bound applies this time.
  const workflows = await runWorkflowIds(o.db, held.map((h) => h.runId)).catch(() => undefined);
  const released: RunRelease[] = [];
  for (const h of held) {
    let reason: string | undefined;
    const workflowId = workflows?.get(h.runId);
    if (workflows && workflowId === undefined) reason = 'its run is not registered in the database';
    else if (workflowId !== undefined && (await o.workflowState(workflowId).catch(() => 'unknown' as const)) === 'closed') reason = `its workflow ${workflowId} has closed`;
    else if (h.idleMs >= o.idleMs) reason = `unused for ${Math.round(h.idleMs / 1000)} s`;
    if (reason) released.push({ runId: h.runId, reason, slots: await registry.release(h.runId) });
  }
  return released;
}

/** A workflow's state from Temporal over a client connection opened on first use. */
export function temporalWorkflowStates(address: string, namespace: string, security: TemporalConnectionOptions): { state: (workflowId: string) => Promise<WorkflowState>; close: () => Promise<void> } {
  let client: Promise<Client> | undefined;
  const connect = () => {
    client ??= Connection.connect({ address, connectTimeout: 5_000, ...sdkConnectionOptions(security) }).then((connection) => new Client({ connection, namespace }));
    client.catch(() => (client = undefined)); // try again next time
    return client;
  };
  return {
    state: async (workflowId) => {
      try {
        const description = await (await connect()).workflow.getHandle(workflowId).describe();
        return description.status.name === 'RUNNING' ? 'open' : 'closed';
      } catch (err) {
        return err instanceof WorkflowNotFoundError ? 'closed' : 'unknown';
      }
    },
    close: async () => {
      const c = await client?.catch(() => undefined);
      await c?.connection.close().catch(() => undefined);
    },
  };
}

/**
 * A full garbage collection, run after a release: a run's engines leave hundreds of MB of buffers
 * (weights, KV caches) to the garbage collector, which otherwise returns them only when the heap
 * next grows, so a worker's RSS would drift by tens of MB from run to run. Node exposes gc() only
 * under --expose-gc; the flag set at run time makes it reachable from a fresh context.
 */
function collectGarbage(): void {
  v8.setFlagsFromString('--expose-gc');
  (vm.runInNewContext('gc') as () => void)();
}

/** Sweeps every `checkMs` (a sweep still running skips the next tick) until stopped; each release is logged. */
export function startRunReaper(o: SweepOptions & { checkMs: number; log: (line: string) => void }): { stop: () => Promise<void> } {
  let running: Promise<void> | undefined;
  const sweep = async () => {
    try {
      const released = await sweepRuns(o);
      if (released.length) collectGarbage();
      for (const r of released) o.log(`released run ${r.runId} (${r.reason}): ${r.slots.join(', ')}`);
    } catch (err) {
      o.log(`releasing finished runs failed (tried again in ${o.checkMs / 1000} s): ${(err as Error).message}`);
    }
  };
  const timer = setInterval(() => {
    running ??= sweep().finally(() => (running = undefined));
  }, o.checkMs);
  timer.unref();
  return {
    stop: async () => {
      clearInterval(timer);
      await running;
    },
  };
}
