// Generated run configs (fast-check): valid ones, absurd sizes (1e15, 1e308, negative, fractions,
// number-like strings), 1 MB strings, deep nesting, unknown keys, wrong types. parseRunConfig either
// accepts (and then every value lies within the bounds table config/run-bounds.ts exports and
// docs/configuration.md shows) or throws RunConfigError naming the field, under 1 KB; nothing
// crashes. RELAX_FUZZ_RUNS=N runs N configs (default 1000). Then a config nested 5,000 deep through
// the real trainingRun workflow fails at once: InvalidRunConfig, no activity, no retry.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { WorkflowFailedError } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import fc from 'fast-check';
import { RUN_CONFIG_JSON_LIMITS } from '../config/json-limits';
import {
  describeBound,
  RUN_CONFIG_ARRAY_BOUNDS,
  RUN_CONFIG_BOUNDS,
  RUN_CONFIG_STRING_BOUNDS,
  tinyRunMemoryEstimate,
  withinBound,
  type NumberBound,
} from '../config/run-bounds';
import { parseRunConfig, RUN_CONFIG_ERROR_MAX_CHARS, RunConfigError, TINY_POLICY_DEFAULTS, runContextLength, type RunConfig } from '../config/run-config';
import { roleTaskQueue } from '../config/task-queues';
import { freshDatabase, sharedTemporalAddress, startWorkerProcess, temporalClient, uniqueId, type TestDatabase, type TestProcess } from './helpers';

const RUNS = Number(process.env.RELAX_FUZZ_RUNS) || 1000;
/** The memory limit the fuzzed configs are parsed under (fixed, so the test does not depend on the machine). */
const MEMORY_LIMIT = 16e9;
const MB_STRING = 'x'.repeat(1024 * 1024);

type Mutation = { kind: string; path: string };
interface Case {
  input: unknown;
  /** What was made absurd ("" = the whole input), or undefined for a config that may well be valid. */
  mutation?: Mutation;
}

function setPath(target: Record<string, unknown>, dotted: string, value: unknown): void {
  const keys = dotted.split('.');
  let o = target;
  for (const k of keys.slice(0, -1)) {
    if (o[k] === null || typeof o[k] !== 'object' || Array.isArray(o[k])) o[k] = {};
    o = o[k] as Record<string, unknown>;
  }
  o[keys[keys.length - 1]] = value;
}

function getPath(source: unknown, dotted: string): unknown {
  let v = source;
  for (const k of dotted.split('.')) {
    if (v === null || typeof v !== 'object') return undefined;
    v = (v as Record<string, unknown>)[k];
  }
  return v;
}

/** An object nested `depth` deep, built without recursion. */
function nested(depth: number): unknown {
  const top: Record<string, unknown> = {};
  let o = top;
  for (let i = 1; i < depth; i++) o = (o.a = {}) as Record<string, unknown>;
  return top;
}

const NUMBER_PATHS = Object.keys(RUN_CONFIG_BOUNDS) as Array<keyof typeof RUN_CONFIG_BOUNDS>;
// Paths whose parent is a string-or-object union, or an array item: set as plain strings below.
const STRING_PATHS = (Object.keys(RUN_CONFIG_STRING_BOUNDS) as Array<keyof typeof RUN_CONFIG_STRING_BOUNDS>).filter((p) => !p.endsWith('[]') && !/^algorithm\.(advantage|policy_loss)\./.test(p));

function inBound(b: NumberBound): fc.Arbitrary<number> {
  if (b.integer) {
    const min = b.exclusiveMin ? b.min + 1 : b.min;
    const max = b.exclusiveMax ? b.max - 1 : b.max;
    return fc.oneof(fc.integer({ min, max: Math.min(max, min + 64) }), fc.integer({ min, max }));
  }
  const max = b.exclusiveMax ? b.max * (1 - 1e-9) : b.max;
  return fc.double({ min: b.min, max, noNaN: true, noDefaultInfinity: true }).filter((v) => withinBound(v, b));
}

/** A config of in-bound values for a few fields (cross-field rules may still refuse it). */
const plausible: fc.Arbitrary<Case> = fc
  .uniqueArray(fc.constantFrom(...NUMBER_PATHS), { maxLength: 6 })
  .chain((paths) => fc.tuple(fc.constant(paths), fc.tuple(...paths.map((p) => inBound(RUN_CONFIG_BOUNDS[p]))), fc.boolean(), fc.boolean()))
  .map(([paths, values, pretrained, async]) => {
    const input: Record<string, unknown> = {};
    paths.forEach((p, i) => setPath(input, p, values[i]));
    if (pretrained) {
      input.model = { from: 'smollm2-135m-instruct', ...Object.fromEntries(Object.entries((input.model as object) ?? {}).filter(([k]) => !['d_model', 'n_layers', 'n_heads', 'd_ff'].includes(k))) };
      if (paths.some((p) => p.startsWith('data.'))) setPath(input, 'data.train', 'examples/data/arith-train.jsonl');
    }
    if (async) input.mode = 'async';
    return { input };
  });

const ABSURD_NUMBERS: unknown[] = [1e15, 1e308, -1, -1e308, 2 ** 53, 0.5, 5e-324, 'NaN', 'Infinity', '1e400', '12', null, true, [], {}];
const ABSURD_STRINGS: unknown[] = [MB_STRING, 'y'.repeat(5000), '', 42, {}, ['a'], null];

const absurdNumber: fc.Arbitrary<Case> = fc.tuple(fc.constantFrom(...NUMBER_PATHS), fc.constantFrom(...ABSURD_NUMBERS)).map(([p, v]) => {
  const input = {};
  setPath(input, p, v);
  return { input, mutation: { kind: `number ${JSON.stringify(v)}`, path: p } };
});

const absurdString: fc.Arbitrary<Case> = fc.tuple(fc.constantFrom(...STRING_PATHS), fc.constantFrom(...ABSURD_STRINGS)).map(([p, v]) => {
  const input = {};
  setPath(input, p, v);
  return { input, mutation: { kind: `string of ${typeof v === 'string' ? v.length : typeof v}`, path: p } };
});

const absurdArray: fc.Arbitrary<Case> = fc.constantFrom(
  { input: { rollout: { agent: { command: Array.from({ length: 300 }, () => 'a') } } }, mutation: { kind: 'array of 300', path: 'rollout.agent.command' } },
  { input: { rollout: { agent: { command: [MB_STRING] } } }, mutation: { kind: 'a 1 MB item', path: 'rollout.agent.command' } },
  { input: { algorithm: { advantage: { module: MB_STRING } } }, mutation: { kind: 'a 1 MB module', path: 'algorithm.advantage' } },
  { input: { algorithm: { policy_loss: { module: 'x'.repeat(2000) } } }, mutation: { kind: 'a long module', path: 'algorithm.policy_loss' } },
);

const deep: fc.Arbitrary<Case> = fc
  .tuple(fc.constantFrom('algorithm.advantage_options', 'algorithm.policy_loss_options', 'train', 'zzz', 'model.vision'), fc.constantFrom(RUN_CONFIG_JSON_LIMITS.maxDepth, 100, 5000))
  .map(([p, depth]) => {
    const input = {};
    setPath(input, p, nested(depth));
    return { input, mutation: { kind: `nested ${depth} deep`, path: p } };
  });

const unknownKey: fc.Arbitrary<Case> = fc
  .tuple(fc.constantFrom('', 'model', 'algorithm', 'rollout', 'train', 'checkpoint', 'reward', 'data.reward'), fc.string({ minLength: 1, maxLength: 20 }).filter((k) => !k.includes('.')))
  .filter(([section, key]) => getPath({ [key]: 1 }, key) === 1 && !(key in Object.prototype))
  .map(([section, key]) => {
    const input: Record<string, unknown> = {};
    const p = section ? `${section}.${key}` : key;
    setPath(input, p, 1);
    return { input, mutation: { kind: 'unknown key', path: p } };
  });

const wrongType: fc.Arbitrary<Case> = fc.oneof(
  fc.constantFrom<unknown>('add2', 42, null, [1, 2], true, MB_STRING).map((input) => ({ input, mutation: { kind: 'not an object', path: '' } })),
  fc.tuple(fc.constantFrom('model', 'algorithm', 'rollout', 'train', 'checkpoint', 'reward', 'env', 'generate', 'data', 'lora'), fc.constantFrom<unknown>(1, 'x', [], true)).map(([section, v]) => ({ input: { [section]: v }, mutation: { kind: 'a section of the wrong type', path: section } })),
);

const anyCase = fc.oneof(
  { weight: 3, arbitrary: plausible },
  { weight: 3, arbitrary: absurdNumber },
  { weight: 2, arbitrary: absurdString },
  { weight: 1, arbitrary: absurdArray },
  { weight: 1, arbitrary: deep },
  { weight: 1, arbitrary: unknownKey },
  { weight: 1, arbitrary: wrongType },
);

/** Every value of an accepted config within its documented bound (and its tiny GPT within the memory limit). */
function checkWithinBounds(c: RunConfig): void {
  for (const p of NUMBER_PATHS) {
    const v = getPath(c, p);
    if (v !== undefined) assert.ok(typeof v === 'number' && withinBound(v, RUN_CONFIG_BOUNDS[p]), `${p} = ${String(v)} was accepted outside ${describeBound(RUN_CONFIG_BOUNDS[p])}`);
  }
  for (const [p, max] of Object.entries(RUN_CONFIG_STRING_BOUNDS)) {
    const v = p.endsWith('[]') ? getPath(c, p.slice(0, -2)) : getPath(c, p);
    for (const s of Array.isArray(v) ? v : [v]) if (typeof s === 'string') assert.ok(s.length <= max, `${p}: a string of ${s.length} characters was accepted (at most ${max})`);
  }
  for (const [p, max] of Object.entries(RUN_CONFIG_ARRAY_BOUNDS)) {
    const v = getPath(c, p);
    if (Array.isArray(v)) assert.ok(v.length <= max, `${p}: ${v.length} items accepted (at most ${max})`);
  }
  if (c.model.from === undefined) {
    const m = c.model;
    const shape = { dModel: m.d_model ?? TINY_POLICY_DEFAULTS.d_model, nLayers: m.n_layers ?? TINY_POLICY_DEFAULTS.n_layers, nHeads: m.n_heads ?? TINY_POLICY_DEFAULTS.n_heads, dFF: m.d_ff ?? TINY_POLICY_DEFAULTS.d_ff, contextLength: runContextLength(m) };
    assert.ok(tinyRunMemoryEstimate(shape, c.train.micro_batch).bytes <= MEMORY_LIMIT, 'a tiny GPT over the memory limit was accepted');
  }
}

/** A problem's field ("train.lr" of "train.lr: must be ..."), related to the mutated path when one is a prefix of the other. */
function namesField(problems: string[], mutation: Mutation): boolean {
  const related = (field: string) => field === mutation.path || field.startsWith(`${mutation.path}.`) || field.startsWith(`${mutation.path}[`) || mutation.path.startsWith(`${field}.`);
  return problems.some((p) => {
    const field = p.slice(0, p.indexOf(': '));
    if (mutation.path === '') return field === 'config';
    // The memory estimate names model.d_model; it is what a model size or train.micro_batch leads to.
    if (/parameters/.test(p) && field === 'model.d_model') return mutation.path.startsWith('model.') || mutation.path === 'train.micro_batch';
    // A value set alone in a section with a required sibling (overlong_penalty.factor without cache_tokens) is refused for the missing sibling.
    const parent = mutation.path.slice(0, mutation.path.lastIndexOf('.'));
    if (parent !== '' && field.startsWith(`${parent}.`) && /received undefined/.test(p)) return true;
    // A cross-field rule names the other field and this one in its message (clip_low 0.5 > clip_high: "algorithm.clip_high: must be >= algorithm.clip_low").
    return related(field) || p.split('; ').some((part) => related(part.slice(0, part.indexOf(': ')))) || (mutation.path.includes('.') && p.includes(mutation.path));
  });
}

test(`${RUNS} generated configs: no crash, nothing accepted outside the bounds, every error names its field in under 1 KB`, (t) => {
  const seen = { accepted: 0, refused: 0 };
  fc.assert(
    fc.property(anyCase, ({ input, mutation }) => {
      let config: RunConfig;
      try {
        config = parseRunConfig(input, { memoryLimitBytes: MEMORY_LIMIT });
      } catch (err) {
        assert.ok(err instanceof RunConfigError, `only RunConfigError may be thrown; got ${(err as Error)?.stack ?? String(err)}`);
        assert.ok(err.message.length <= RUN_CONFIG_ERROR_MAX_CHARS, `a message of ${err.message.length} characters`);
        assert.ok(err.problems.length > 0 && err.problems.every((p) => p.includes(': ') || /^and \d+ more problems$/.test(p)), err.message);
        if (mutation) assert.ok(namesField(err.problems, mutation), `${mutation.kind} at "${mutation.path}": the error does not name it: ${err.message}`);
        seen.refused++;
        return;
      }
      assert.equal(mutation === undefined || !/unknown key|nested|not an object|wrong type|1 MB|of 1048576/.test(mutation.kind), true, `${mutation?.kind} at ${mutation?.path} was accepted`);
      checkWithinBounds(config);
      seen.accepted++;
    }),
    { numRuns: RUNS, seed: Number(process.env.RELAX_FUZZ_SEED) || 14 },
  );
  t.diagnostic(`accepted ${seen.accepted}, refused ${seen.refused} of ${RUNS}`);
  assert.ok(seen.accepted > RUNS * 0.05, `some generated configs are valid and accepted (${seen.accepted} of ${RUNS})`);
  assert.ok(seen.refused > RUNS * 0.5, `most are refused (${seen.refused})`);
});

test('the bounds table in docs/configuration.md is the one config/run-bounds.ts exports', () => {
  const docs = fs.readFileSync(path.resolve(__dirname, '../../docs/configuration.md'), 'utf8');
  for (const [p, b] of Object.entries(RUN_CONFIG_BOUNDS)) assert.ok(docs.includes(`| \`${p}\` | ${describeBound(b)} |`), `docs/configuration.md lists ${p} as ${describeBound(b)}`);
  for (const [p, max] of Object.entries(RUN_CONFIG_STRING_BOUNDS)) assert.ok(docs.includes(`| \`${p}\` | at most ${max} characters |`), `docs/configuration.md lists ${p} (at most ${max} characters)`);
  const l = RUN_CONFIG_JSON_LIMITS;
  assert.ok(docs.includes(`nested at most ${l.maxDepth} deep, at most ${l.maxNodes} values, strings (keys too) of at most ${l.maxStringChars} characters`));
});

test('a huge tiny GPT is refused with its parameter count, the memory it needs and the limit', () => {
  const err = (() => {
    try {
      parseRunConfig({ model: { d_model: 16_384, n_heads: 8, n_layers: 48 } }, { memoryLimitBytes: 64e9 });
    } catch (e) {
      return e as RunConfigError;
    }
    return assert.fail('accepted');
  })();
  assert.match(err.message, /^invalid run config: model\.d_model: 16384 with n_layers 48, .*~5\.2e\+10 parameters .*~832 GB of weights \+ optimizer state and ~971 GB of activations; this worker allows at most 64 GB \(RELAX_MAX_RUN_MEMORY_GB/);
  assert.ok(err.message.length <= RUN_CONFIG_ERROR_MAX_CHARS);
});

test('a 1 MB string is never echoed whole, and a long problem list is capped', () => {
  const input = Object.fromEntries(Array.from({ length: 50 }, (_, i) => [`unknown_${i}`, MB_STRING.slice(0, 4000)]));
  const err = (() => {
    try {
      parseRunConfig({ ...input, task: 'x'.repeat(3000) });
    } catch (e) {
      return e as RunConfigError;
    }
    return assert.fail('accepted');
  })();
  assert.ok(err.message.length <= RUN_CONFIG_ERROR_MAX_CHARS, `${err.message.length}`);
  assert.ok(JSON.stringify(err.problems).length < 4000, 'the problems list (workflow history details) stays small');
});

// ---------------------------------------------------------------------------------------------
// Through the real workflow

let db: TestDatabase;
let home: string;
let worker: TestProcess | undefined;
let temporal: Awaited<ReturnType<typeof temporalClient>>;

before(async () => {
  db = await freshDatabase();
  home = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-fuzz-'));
  worker = await startWorkerProcess('control', { TEMPORAL_ADDRESS: sharedTemporalAddress(), DATABASE_URL: db.url, RELAX_HOME: home } as { TEMPORAL_ADDRESS: string; DATABASE_URL: string });
  temporal = await temporalClient();
});

after(async () => {
  await worker?.stop('SIGKILL');
  await temporal?.close();
  await db?.close();
  fs.rmSync(home, { recursive: true, force: true });
});

test('a config nested 5,000 deep through the trainingRun workflow fails at once: InvalidRunConfig, under 1 KB, no activity, no retry', async () => {
  // JSON.stringify itself overflows the stack at this depth, so the payload is written as text
  // (as `temporal workflow start --input` or the Web UI would send it).
  const depth = 5000;
  const json = `{"algorithm":{"advantage_options":${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}}}`;
  const workflowId = uniqueId('deep');
  const started = Date.now();
  await temporal.client.workflowService.startWorkflowExecution({
    namespace: 'default',
    workflowId,
    requestId: randomUUID(),
    workflowType: { name: 'trainingRun' },
    taskQueue: { name: roleTaskQueue('control') },
    input: { payloads: [{ metadata: { encoding: Buffer.from('json/plain') }, data: Buffer.from(json) }] },
  });
  const handle = temporal.client.workflow.getHandle(workflowId);
  const err = await handle.result().then(
    () => assert.fail('the run should have failed'),
    (e: unknown) => e,
  );
  const elapsed = Date.now() - started;
  assert.ok(err instanceof WorkflowFailedError, String(err));
  const cause = err.cause as ApplicationFailure;
  assert.ok(cause instanceof ApplicationFailure);
  assert.equal(cause.type, 'InvalidRunConfig');
  assert.equal(cause.nonRetryable, true);
  assert.match(cause.message, /^invalid run config: algorithm\.advantage_options(\.a)+: nested deeper than 32 levels/);
  assert.ok(cause.message.length < 1024, `${cause.message.length} characters`);
  assert.ok(elapsed < 5000, `failed in ${elapsed} ms`);
  const events = (await handle.fetchHistory()).events ?? [];
  const types = events.map((e) => Object.keys(e).find((k) => k.endsWith('EventAttributes')));
  assert.ok(!types.includes('activityTaskScheduledEventAttributes'), 'no activity was scheduled');
  assert.ok(!types.includes('workflowTaskFailedEventAttributes'), 'no workflow task failed (and was retried)');
  assert.ok(types.includes('workflowExecutionFailedEventAttributes'));
});

test('an invalid config through the workflow: one startRun attempt, InvalidRunConfig naming the field, under 1 KB', async () => {
  const workflowId = uniqueId('bounds');
  const err = await temporal.client.workflow.execute('trainingRun', { taskQueue: roleTaskQueue('control'), workflowId, args: [{ model: { d_model: 1_048_576 }, task: MB_STRING.slice(0, 4000) }] }).then(
    () => assert.fail('the run should have failed'),
    (e: unknown) => e,
  );
  assert.ok(err instanceof WorkflowFailedError);
  const cause = err.cause as ApplicationFailure;
  assert.equal(cause.type, 'InvalidRunConfig');
  assert.match(cause.message, /model\.d_model: .*<=16384 \(got 1048576\)/);
  assert.match(cause.message, /task: must be at most 1024 characters/);
  assert.ok(cause.message.length < 1024, `${cause.message.length}`);
  const events = (await temporal.client.workflow.getHandle(workflowId).fetchHistory()).events ?? [];
  const started = events.filter((e) => e.activityTaskStartedEventAttributes).map((e) => e.activityTaskStartedEventAttributes?.attempt);
  assert.deepEqual(started, [1], 'startRun ran once: the failure is not retried');
});
