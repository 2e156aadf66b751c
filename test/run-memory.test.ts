// What a worker holds for a run has one owner and goes when the run ends (training/run-state.ts,
// workers/run-reaper.ts): 20 short runs through the trainingRun workflow on one stack of real worker
// processes. Each worker releases each run once its workflow has closed, and every worker's RSS
// after the last run is within 10% of its RSS after the second. Before the registry, each run left
// its engines behind and the RSS grew with every run: measured on this model (two steps a run, glibc's
// default allocator), the rollout worker went 457 -> 1,785 MB from run 2 to run 20, the train worker
// 602 -> 1,035.
//
// The workers run with a fixed mmap threshold (MALLOC_MMAP_THRESHOLD_), so that their RSS is the
// memory they hold. With glibc's default, a worker keeps the blocks a released run frees for the
// next run to reuse, and raises its mmap threshold after the first large free. Its RSS then steps
// up over its first 3-10 runs and moves in a band of tens of MB, whatever it holds (measured: the
// rollout worker at 277 MB after run 2 and 349-464 MB later). `relax dev` keeps glibc's default:
// with the fixed threshold, rollout generates 15-25% slower (docs/results.md). They also run with at
// most two malloc arenas (MALLOC_ARENA_MAX): on PostgreSQL the rollout worker's RSS otherwise climbed
// ~1 MB a run over its first ~8 runs before it levelled off (194 -> 215 MB; its V8 heap stayed at
// 49-50 MB throughout, printed with the table), and one CI run failed on it (171 -> 191 MB).
// With two arenas the same run went 201 -> 211 MB.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, test } from 'node:test';
import type { RunConfigInput } from '../config/run-config';
import { roleTaskQueue, type Role } from '../config/task-queues';
import { startWorkerStack, uniqueId, type TestProcess, type WorkerStack } from './helpers';

const RUNS = 20;
// A model big enough that a run's state is plain in the RSS (4.2M parameters: the trainer's weights,
// gradients and AdamW moments are ~70 MB) and that most of its buffers are over the mmap threshold
// (a d_model of 128 leaves many under it, and glibc's free lists then add a step of tens of MB over
// the first runs), small enough that a run, one step, takes a few seconds.
const RUN: RunConfigInput = {
  model: { d_model: 256, n_layers: 4, n_heads: 4, d_ff: 1024, context_length: 16 },
  algorithm: { group_size: 4, kl_coef: 0.01 },
  rollout: { prompts_per_step: 8, max_new_tokens: 4 },
  train: { steps: 1, eval_every: 100 },
  checkpoint: { every: 1, keep_last: 1 },
};
const ROLES: Role[] = ['control', 'rollout', 'reference', 'train'];
/** The slot each stateful role must have released (training/run-state.ts names). */
const RELEASED_SLOT: Partial<Record<Role, string>> = { rollout: 'rollout.policy', reference: 'reference.model', train: 'train.trainer' };

let stack: WorkerStack;

before(async () => {
  stack = await startWorkerStack(ROLES, { RELAX_RUN_RELEASE_CHECK_S: '0.5', MALLOC_MMAP_THRESHOLD_: '131072', MALLOC_ARENA_MAX: '2' }, 'relax-memory-');
});

after(async () => {
  await stack?.close();
});

function rssMb(worker: TestProcess): number {
  const status = fs.readFileSync(`/proc/${worker.child.pid}/status`, 'utf8');
  const kb = Number(/^VmRSS:\s+(\d+) kB/m.exec(status)?.[1]);
  return kb / 1024;
}

/** Each worker's RSS once it has settled: the least of five readings 200 ms apart (a release returns memory over a moment). */
async function settledRss(): Promise<Record<string, number>> {
  const readings: Array<Record<string, number>> = [];
  for (let k = 0; k < 5; k++) {
    await new Promise((resolve) => setTimeout(resolve, 200));
    readings.push(Object.fromEntries(ROLES.map((r) => [r, rssMb(workerOf(r))])));
  }
  return Object.fromEntries(ROLES.map((r) => [r, Math.min(...readings.map((x) => x[r]))]));
}

const workerOf = (role: Role) => stack.workers[ROLES.indexOf(role)];

/** The rollout worker's V8 heap in use and its external memory (MB), from its metrics endpoint (diagnostics). */
async function heapMb(role: Role): Promise<string> {
  const url = workerOf(role).output.map((l) => / metrics (http:\/\/\S+)/.exec(l)?.[1]).find(Boolean);
  if (!url) return '?';
  const text = await (await fetch(url)).text();
  const read = (name: string) => Number(new RegExp(`^relax_worker_${name}(?:\\{[^}]*\\})? (\\S+)`, 'm').exec(text)?.[1] ?? NaN) / 1048576;
  return `${read('nodejs_heap_size_used_bytes').toFixed(0)}/${read('nodejs_external_memory_bytes').toFixed(0)}`;
}

test(`${RUNS} runs on one stack: each worker releases every run when its workflow closes, and its RSS stays flat`, { skip: process.platform !== 'linux' && 'reads /proc' }, async () => {
  const rss: Array<Record<string, number>> = [];
  const heaps: string[] = [];
  for (let i = 1; i <= RUNS; i++) {
    const id = uniqueId(`memory-${i}`);
    const result = (await stack.temporal.client.workflow.execute('trainingRun', { taskQueue: roleTaskQueue('control'), workflowId: id, args: [RUN] })) as { steps: number };
    assert.equal(result.steps, 1);
    for (const [role, slot] of Object.entries(RELEASED_SLOT) as Array<[Role, string]>) {
      const line = await workerOf(role).waitForLine(new RegExp(`released run ${id} \\(its workflow ${id} has closed\\): .*${slot.replace('.', '\\.')}`), 20_000);
      assert.ok(line.includes('run.context'), `the ${role} worker released the run's context too: ${line}`);
    }
    rss.push(await settledRss());
    heaps.push(await heapMb('rollout'));
  }
  const table = `${ROLES.map((r) => `${r}: ${rss.map((x) => x[r].toFixed(0)).join(' ')}`).join('\n')}\nrollout heap used/external (MB): ${heaps.join(' ')}`;
  for (const role of ROLES) {
    const second = rss[1][role];
    const last = rss[RUNS - 1][role];
    assert.ok(last <= second * 1.1, `the ${role} worker's RSS after run ${RUNS} (${last.toFixed(0)} MB) is within 10% of its RSS after run 2 (${second.toFixed(0)} MB); RSS (MB) after each run:\n${table}`);
  }
  // The runs table agrees: every run completed (the workers learnt it from Temporal, not from here).
  const { rows } = await stack.db.pool.query<{ status: string; n: string }>("SELECT status, count(*) AS n FROM runs WHERE run_id LIKE 'memory-%' GROUP BY status");
  assert.deepEqual(rows.map((r) => [r.status, Number(r.n)]), [['completed', RUNS]]);
  console.log(`RSS (MB) after each run:\n${table}`);
});
