// The thread side of a request/reply channel to a worker thread (training/trainer-thread.ts,
// training/data-parallel-thread.ts): requests are served one at a time in arrival order (a
// trainer's operations must not interleave: a train step and an export of the same weights), each
// answered with its value or its error, typed arrays transferred instead of copied.
import type { MessagePort } from 'node:worker_threads';

export type ThreadRequest = { id: number; op: string; args: unknown[] };
export type ThreadReply = { id: number; ok: true; value: unknown } | { id: number; ok: false; error: { name: string; message: string; stack?: string } };

/** The ArrayBuffers of the typed arrays in `value` (one, or a record of them, or a record with a `gradients` record), to transfer. */
export function transferableBuffers(value: unknown): ArrayBuffer[] {
  const record = value && typeof value === 'object' && !ArrayBuffer.isView(value) && 'gradients' in value ? (value as { gradients: unknown }).gradients : value;
  const arrays = ArrayBuffer.isView(record) ? [record] : record && typeof record === 'object' ? Object.values(record) : [];
  const out = new Set<ArrayBuffer>();
  for (const a of arrays) if (ArrayBuffer.isView(a) && a.buffer instanceof ArrayBuffer) out.add(a.buffer);
  return [...out];
}

/** Serves `port`'s requests with `handle`, one at a time, in arrival order. */
export function serveInOrder<Req extends ThreadRequest>(port: MessagePort, handle: (req: Req) => Promise<unknown>): void {
  let queue: Promise<void> = Promise.resolve();
  port.on('message', (req: Req) => {
    queue = queue.then(async () => {
      let reply: ThreadReply;
      let transfer: ArrayBuffer[] = [];
      try {
        const value = await handle(req);
        reply = { id: req.id, ok: true, value };
        transfer = transferableBuffers(value);
      } catch (err) {
        const e = err instanceof Error ? err : new Error(String(err));
        reply = { id: req.id, ok: false, error: { name: e.name, message: e.message, ...(e.stack ? { stack: e.stack } : {}) } };
      }
      port.postMessage(reply, transfer);
    });
  });
}
