// The entry of a sandbox thread (envs/sandbox.ts starts it): loads one user module, then answers the
// host's requests: export checks, batched reward calls, generate calls (whose generate() and
// tokenizer reach back to the host: generate() asynchronously, encode/decode synchronously through
// Atomics.wait + receiveMessageOnPort), environment instances by id (reset / step / close), and a
// task module's methods. Every call into user code is bracketed in the shared state so the host's
// watchdog can name the call that hangs; timeouts the thread can notice itself (a promise that never
// settles, a synchronous call that returned late) are reported as that call's error, and the thread
// lives on.
import { isMainThread, parentPort, receiveMessageOnPort, workerData } from 'node:worker_threads';
import { seededRandom } from '../config/seeds';
import { HEARTBEAT_MS, STATE, type SandboxRequest, type ThreadData } from './sandbox-protocol';
import { describeThrown, loadModule, pickExport, scoreLocally, withTimeout, type ModuleField, type UserModuleError } from './user-modules';

/** How long a synchronous call back into the host (tokenizer.encode) may take. */
const SYNC_RPC_TIMEOUT_MS = 30_000;

if (!isMainThread && parentPort && (workerData as ThreadData | undefined)?.relaxSandbox) main(workerData as ThreadData, parentPort);

// Over 80 lines because it is the sandbox thread's whole entry (the locked-down context, the
// environment's module, the message loop over its calls); not yet split (issue 33).
function main(d: ThreadData, port: NonNullable<typeof parentPort>): void {
  const state = new Float64Array(d.state);
  const hostFlag = new Int32Array(d.hostFlag);
  const threadFlag = new Int32Array(d.threadFlag);
  const field = d.field as ModuleField;
  state[STATE.PROGRESS] = Date.now();
  setInterval(() => (state[STATE.PROGRESS] = Date.now()), HEARTBEAT_MS);

  /** Runs fn (synchronous user code) marked in the shared state as request `id`'s item `item`. */
  const bracket = <T>(id: number, item: number, limitMs: number, fn: () => T): T => {
    state[STATE.LIMIT] = limitMs;
    state[STATE.REQUEST] = id;
    state[STATE.ITEM] = item;
    state[STATE.ENTERED] = Date.now();
    try {
      return fn();
    } finally {
      state[STATE.ENTERED] = 0;
      state[STATE.PROGRESS] = Date.now();
    }
  };

  let mod: unknown;
  const loading = bracket(-1, -1, d.loadTimeoutMs, () => loadModule(d.spec, d.resolved, d.cwd, field)).then((m) => {
    mod = m;
  });
  loading.then(
    () => port.postMessage({ kind: 'loaded' }),
    (err: UserModuleError) => port.postMessage({ kind: 'loadFailed', error: err.message, code: err.code }),
  );

  const exportsByName = new Map<string, unknown>();
  const exported = (name: string): unknown => {
    if (!exportsByName.has(name)) exportsByName.set(name, pickExport(mod, d.spec, name, d.resolved, d.cwd, field));
    return exportsByName.get(name);
  };
  let task: TaskState | undefined;
  const taskModule = (): TaskState => (task ??= describeTask(exported('default') as Record<string, unknown>));

  // Calls back into the host.
  let nextRpc = 1;
  const rpcs = new Map<number, { resolve(v: unknown): void; reject(e: Error): void }>();
  const rpc = (id: number, method: string, args: unknown[]): Promise<unknown> =>
    new Promise((resolve, reject) => {
      const rpcId = nextRpc++;
      rpcs.set(rpcId, { resolve, reject });
      port.postMessage({ kind: 'rpc', id, rpcId, method, args });
    });
  const rpcSync = (id: number, method: string, args: unknown[]): unknown => {
    Atomics.store(threadFlag, 0, 0);
    port.postMessage({ kind: 'syncRpc', id, method, args });
    const deadline = Date.now() + SYNC_RPC_TIMEOUT_MS;
    for (;;) {
      const got = receiveMessageOnPort(d.threadReplies);
      if (got) {
        const reply = got.message as { ok: boolean; value?: unknown; error?: string };
        if (!reply.ok) throw new Error(reply.error);
        return reply.value;
      }
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`the host did not answer ${method}() within ${SYNC_RPC_TIMEOUT_MS} ms`);
      Atomics.wait(threadFlag, 0, 0, left);
    }
  };

  const instances = new Map<number, Record<string, (arg?: unknown) => unknown>>();

  async function run(req: SandboxRequest): Promise<unknown> {
    const t = req.timeoutMs;
    switch (req.op) {
      case 'check': {
        return bracket(req.id, -1, t, () => {
          if (field === 'task') return taskModule().descriptor;
          exported(req.exportName as string);
          return true;
        });
      }
      case 'reward': {
        const scope = req.scope as 'sample' | 'group';
        const fn: (input: Record<string, unknown>) => unknown = req.taskReward
          ? (input) => (taskModule().m.reward as (p: unknown, r: unknown) => unknown)(input.prompt, input.response)
          : (exported(req.exportName as string) as (input: Record<string, unknown>) => unknown);
        return scoreLocally(scope, fn as never, req.prompt as never, req.responses as string[], req.task as string, t, (item, call) => bracket(req.id, item, t, call));
      }
      case 'generate': {
        const fn = exported(req.exportName as string) as (input: unknown) => unknown;
        const info = req.tokenizer as Record<string, unknown>;
        const tokenizer = { ...info, encode: (text: string) => rpcSync(req.id, 'encode', [text]), decode: (ids: number[], opts?: unknown) => rpcSync(req.id, 'decode', [ids, opts]) };
        const input = { ...(req.input as object), tokenizer, generate: (contexts: number[][], params?: unknown) => rpc(req.id, 'generate', [contexts, params]) };
        let sync = true;
        try {
          return await withTimeout('the generate function', t, () =>
            bracket(req.id, -1, t, () => {
              const r = fn(input);
              sync = false;
              return r;
            }),
          );
        } catch (err) {
          if ((err as Error)?.name === 'UserCodeTimeout') throw err;
          throw new Error(`the generate function ${sync ? 'threw' : 'rejected'}: ${describeThrown(err)}`);
        }
      }
      case 'envCall': {
        const id = req.instance as number;
        const method = req.method as string;
        if (method === 'new') {
          const Env = (req.taskEnv ? taskModule().m.environment : exported(req.exportName as string)) as new (o: unknown) => Record<string, (arg?: unknown) => unknown>;
          try {
            instances.set(id, bracket(req.id, -1, t, () => new Env(req.options)));
          } catch (err) {
            throw new Error(`the constructor threw: ${describeThrown(err)}`);
          }
          return true;
        }
        const env = instances.get(id);
        if (!env) throw new Error('this environment instance does not exist in the sandbox thread (it was never created, or was closed)');
        if (method === 'close') instances.delete(id);
        if (typeof env[method] !== 'function') {
          if (method === 'close') return undefined;
          throw new Error(`the environment has no ${method}() method`);
        }
        let sync = true;
        try {
          return await withTimeout(`environment ${method}`, t, () => bracket(req.id, -1, t, () => {
            const r = env[method](req.arg);
            sync = false;
            return r;
          }));
        } catch (err) {
          if ((err as Error)?.name === 'UserCodeTimeout') throw err;
          throw new Error(`${method}() ${sync ? 'threw' : 'rejected'}: ${describeThrown(err)}`);
        }
      }
      case 'envDrop':
        instances.delete(req.instance as number);
        return undefined;
      case 'task':
        return bracket(req.id, -1, t, () => taskCall(taskModule(), req.method as string, req.args as unknown[]));
    }
  }

  const reply = (req: SandboxRequest, message: Record<string, unknown>): void => {
    if (req.id === 0) return;
    const target = req.sync ? d.hostReplies : port;
    try {
      target.postMessage({ id: req.id, ...message });
    } catch (err) {
      target.postMessage({ id: req.id, ok: false, error: `returned a value that cannot be copied out of the sandbox thread (${describeThrown(err)}): return plain data (numbers, strings, arrays, objects, typed arrays)` });
    }
    if (req.sync) {
      Atomics.store(hostFlag, 0, 1);
      Atomics.notify(hostFlag, 0);
    }
  };

  port.on('message', (req: SandboxRequest & { op: string; rpcId?: number; ok?: boolean; value?: unknown; error?: string }) => {
    if ((req.op as string) === 'rpcReply') {
      const waiting = rpcs.get(req.rpcId as number);
      rpcs.delete(req.rpcId as number);
      if (req.ok) waiting?.resolve(req.value);
      else waiting?.reject(new Error(req.error));
      return;
    }
    loading
      .then(() => run(req))
      .then(
        (value) => reply(req, { ok: true, value }),
        (err: Error & { code?: string }) => reply(req, { ok: false, error: err?.message ?? describeThrown(err), ...(typeof err?.code === 'string' ? { code: err.code } : {}) }),
      );
  });
}

interface TaskState {
  m: Record<string, unknown>;
  descriptor: TaskDescriptor;
  tokenizer?: { encode(t: string): number[]; decode(ids: number[], o?: unknown): string };
}

/** What the host learns of a task module at load: its shape, and everything static. */
export interface TaskDescriptor {
  kind: string;
  name?: string;
  alphabet?: unknown;
  functions: Record<string, boolean>;
  environmentKind: string;
  heldOut?: unknown;
  maxTurns?: number;
  maxTurnTokens?: number;
  turnStops?: string[];
  encoders?: unknown;
  contextLength?: number;
  tokenizer?: { vocabSize: number; padId: number; bosId: number; eosId: number; addBos?: boolean; stopIds?: number[] };
}

function describeTask(m: Record<string, unknown>): TaskState {
  const kind = m === null ? 'null' : typeof m;
  const functions = Object.fromEntries(['trainPrompts', 'heldOut', 'tokenizer', 'reward', 'demonstrate', 'warmStartPrompts'].map((f) => [f, kind === 'object' && typeof m[f] === 'function']));
  const descriptor: TaskDescriptor = { kind, functions, environmentKind: kind === 'object' ? typeof m.environment : 'undefined' };
  if (kind !== 'object') return { m, descriptor };
  const state: TaskState = { m, descriptor };
  Object.assign(descriptor, {
    ...(typeof m.name === 'string' ? { name: m.name } : {}),
    alphabet: m.alphabet,
    ...(functions.heldOut ? { heldOut: (m.heldOut as () => unknown)() } : {}),
    ...(m.maxTurns !== undefined ? { maxTurns: m.maxTurns } : {}),
    ...(m.maxTurnTokens !== undefined ? { maxTurnTokens: m.maxTurnTokens } : {}),
    ...(m.turnStops !== undefined ? { turnStops: m.turnStops } : {}),
    ...(m.encoders !== undefined ? { encoders: m.encoders } : {}),
    ...(m.contextLength !== undefined ? { contextLength: m.contextLength } : {}),
  });
  if (functions.tokenizer) {
    const tok = (m.tokenizer as () => Record<string, unknown>)();
    state.tokenizer = tok as TaskState['tokenizer'];
    descriptor.tokenizer = {
      vocabSize: tok.vocabSize as number,
      padId: tok.padId as number,
      bosId: tok.bosId as number,
      eosId: tok.eosId as number,
      ...(tok.addBos !== undefined ? { addBos: tok.addBos as boolean } : {}),
      ...(tok.stopIds !== undefined ? { stopIds: [...(tok.stopIds as number[])] } : {}),
    };
  }
  return state;
}

function taskCall(task: TaskState, method: string, args: unknown[]): unknown {
  const m = task.m as Record<string, (...a: unknown[]) => unknown>;
  switch (method) {
    case 'trainPrompts':
    case 'warmStartPrompts':
    case 'reward':
      return m[method](...args);
    case 'demonstrate':
      // The module gets a PRNG seeded by the host's draw, not the host's own random().
      return m.demonstrate(args[0], seededRandom(args[1] as number));
    case 'encode':
      return task.tokenizer!.encode(args[0] as string);
    case 'decode':
      return task.tokenizer!.decode(args[0] as number[], args[1]);
    default:
      throw new Error(`unknown task method ${method}`);
  }
}
