// What the sandbox host (envs/sandbox.ts) and its threads (envs/sandbox-thread.ts) share: the
// worker-side settings (RELAX_SANDBOX, RELAX_SANDBOX_MEMORY_MB, RELAX_SANDBOX_LOAD_TIMEOUT_MS, read in
// config/environment-engines.ts and re-exported here), the
// secret-free environment user code and agent programs get, the layout of the shared state a
// thread writes for the host's watchdog, and the messages between the two.
import type { MessagePort } from 'node:worker_threads';
import { sandboxPassEnv } from '../config/environment';

/** Slots of the Float64Array a thread shares with its host (the watchdog reads them). */
export const STATE = {
  /** Date.now() when the current synchronous user call began; 0 between calls. */
  ENTERED: 0,
  /** That call's timeout in ms. */
  LIMIT: 1,
  /** That call's request id (-1: the module's loading). */
  REQUEST: 2,
  /** That call's item in a batch (-1: none). */
  ITEM: 3,
  /** Date.now() when the thread's event loop last turned or a user call returned. */
  PROGRESS: 4,
} as const;
export const STATE_SLOTS = 5;
/** How often an idle thread marks PROGRESS. */
export const HEARTBEAT_MS = 25;

/** What a thread is started with (workerData). */
export interface ThreadData {
  relaxSandbox: true;
  field: string;
  label: string;
  spec: string;
  resolved: string;
  cwd: string;
  loadTimeoutMs: number;
  state: SharedArrayBuffer;
  /** Raised (1) by the thread when it posted the reply to the host's synchronous call on hostReplies. */
  hostFlag: SharedArrayBuffer;
  /** Raised (1) by the host when it posted the answer to the thread's synchronous call on threadReplies. */
  threadFlag: SharedArrayBuffer;
  hostReplies: MessagePort;
  threadReplies: MessagePort;
}

/** host -> thread */
export interface SandboxRequest {
  id: number;
  op: 'check' | 'reward' | 'generate' | 'envCall' | 'envDrop' | 'task';
  timeoutMs: number;
  /** The host waits for the reply synchronously (it comes on hostReplies). */
  sync?: boolean;
  [key: string]: unknown;
}

/** thread -> host: a request's outcome. */
export type SandboxReply = { id: number; ok: true; value: unknown } | { id: number; ok: false; error: string; code?: string };

/** thread -> host: everything else. */
export type ThreadEvent =
  | { kind: 'loaded' }
  | { kind: 'loadFailed'; error: string; code?: string }
  | { kind: 'rpc'; id: number; rpcId: number; method: string; args: unknown[] }
  | { kind: 'syncRpc'; id: number; method: string; args: unknown[] };

export { sandboxEnabled, sandboxLoadTimeoutMs, sandboxMemoryMb } from '../config/environment';

const SECRET_NAME = /TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|APIKEY|CREDENTIAL|PRIVATE_KEY|ACCESS_KEY|AUTH/i;
const SECRET_PREFIX = /^(PG|TEMPORAL_|DATABASE_|AWS_|GOOGLE_APPLICATION_|AZURE_)/;

/** True for a variable user code must not see: the database, Temporal, and anything named like a secret. */
export function isSecretVariable(name: string): boolean {
  return name === 'DATABASE_URL' || /_DATABASE_URL$|_DSN$/.test(name) || SECRET_PREFIX.test(name) || SECRET_NAME.test(name);
}

/** Never passed, whatever RELAX_SANDBOX_PASS_ENV says: the data plane and the controller. */
function isControlPlaneVariable(name: string): boolean {
  return name === 'DATABASE_URL' || /^(PG|TEMPORAL_)/.test(name);
}

/**
 * A copy of `env` without the variables isSecretVariable names (what sandbox threads and agent
 * programs get). RELAX_SANDBOX_PASS_ENV (names joined by ',') passes some anyway, e.g. a judge
 * reward's RELAX_JUDGE_API_KEY; never DATABASE_URL, PG* or TEMPORAL_*.
 */
export function sandboxEnv(env: NodeJS.ProcessEnv = process.env): Record<string, string> {
  const pass = sandboxPassEnv(env);
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(env)) {
    if (v === undefined) continue;
    if (!isSecretVariable(k) || (pass.has(k) && !isControlPlaneVariable(k))) out[k] = v;
  }
  return out;
}

/** The grace past a call's timeout before the host stops a thread that is still inside it. */
export function graceMs(limitMs: number): number {
  return Math.min(1000, Math.max(50, Math.round(limitMs * 0.1)));
}
