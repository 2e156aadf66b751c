// The engine thread's side of engines/rollout-thread.ts: builds one RolloutEngine, then serves its
// requests as they come (generate calls run concurrently, as on a local engine; a weight switch
// applies when its message arrives, so in the order it was sent). Replies carry results or the
// error's name and message.
import { parentPort, workerData } from 'node:worker_threads';
import type { ModelConfig, PolicyWeights } from './model';
import { RolloutEngine, type RolloutEngineOptions, type SamplingParams } from './rollout';
import type { FromRolloutThread, RolloutRequest, ToRolloutThread } from './rollout-thread';

const port = parentPort;
if (!port) throw new Error('engines/rollout-thread-entry.js runs as a worker thread (engines/rollout-thread.ts starts it)');
const { model, options } = workerData as { model: ModelConfig; options: RolloutEngineOptions };

/** Weights copied for a setWeights/setFrozenWeights not sent yet, by stage id. */
const staged = new Map<number, PolicyWeights>();
/** beforeDecodeStep questions waiting for the main thread's answer, by callback and question id. */
const questions = new Map<string, { resolve: () => void; reject: (e: Error) => void }>();
let nextQuestion = 1;

function send(message: FromRolloutThread): void {
  port!.postMessage(message);
}

function errorOf(err: unknown): { name: string; message: string; stack?: string } {
  const e = err instanceof Error ? err : new Error(String(err));
  return { name: e.name, message: e.message, ...(e.stack ? { stack: e.stack } : {}) };
}

/** Asks the main thread to run call `callback`'s beforeDecodeStep, and waits for it. */
function ask(callback: number, decodeStep: number): Promise<void> {
  const question = nextQuestion++;
  return new Promise((resolve, reject) => {
    questions.set(`${callback}:${question}`, { resolve, reject });
    send({ question: { callback, question, decodeStep } });
  });
}

function takeStaged(stage: number): PolicyWeights {
  const w = staged.get(stage) ?? {};
  staged.delete(stage);
  return w;
}

async function handle(engine: RolloutEngine, req: RolloutRequest): Promise<unknown> {
  const a = req.args as never[];
  switch (req.op) {
    case 'stageWeights':
      staged.set(a[0], { ...staged.get(a[0]), ...(a[1] as PolicyWeights) });
      return undefined;
    case 'setWeights':
      return engine.setWeights(a[0], takeStaged(a[1]));
    case 'setFrozenWeights':
      return engine.setFrozenWeights(takeStaged(a[0]));
    case 'generate': {
      const callback = a[3] as number | undefined;
      const params: SamplingParams = callback === undefined ? a[1] : { ...(a[1] as SamplingParams), beforeDecodeStep: (step: number) => ask(callback, step) };
      return engine.generate(a[0], params, a[2]);
    }
    case 'release':
      return engine.release();
  }
}

void RolloutEngine.create(model, options).then(
  (engine) => {
    port.on('message', (message: ToRolloutThread) => {
      if ('answer' in message) {
        const { callback, question, error } = message.answer;
        const waiting = questions.get(`${callback}:${question}`);
        questions.delete(`${callback}:${question}`);
        if (error === undefined) waiting?.resolve();
        else waiting?.reject(new Error(error));
        return;
      }
      const req = message.request;
      void (async () => {
        try {
          send({ reply: { id: req.id, ok: true, value: await handle(engine, req) } });
        } catch (err) {
          send({ reply: { id: req.id, ok: false, error: errorOf(err) } });
        }
      })();
    });
    send({ ready: true });
  },
  (err: unknown) => send({ failed: errorOf(err) }),
);
