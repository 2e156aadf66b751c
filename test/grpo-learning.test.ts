// GRPO really learns through the durable loop: from an SFT warm start, a short `trainingRun`
// workflow on real worker processes (control, rollout, train; the run has no KL term, so no
// reference stage) raises add2's held-out greedy accuracy clearly, and every step is applied exactly
// once. (The full run to >= 95% is `relax bench grpo`; this is its fast CI version. The same
// arithmetic without Temporal or a database is training/in-process.ts.)
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { RelaxClient } from '../client/index';
import { parseRunConfig, type RunConfigInput } from '../config/run-config';
import type { Role } from '../config/task-queues';
import { loadTfjsBackend } from '../engines/backends';
import { readMetrics } from '../store/metrics';
import { ADD2_GRPO } from '../config/recipes';
import { ADD2_SFT, loadOrTrainWarmStart } from '../training/warm-start';
import { relaxEnvironment } from '../config/environment';
import { checkCheckpointRegistry, freshDatabase, sharedTemporalAddress, spawnRelax, uniqueId, type TestDatabase, type TestProcess } from './helpers';

// From the quickstart's warm start (ADD2_SFT, about 56% held-out, in the shared cache: the suites
// and lanes that start from it train it once), 30 steps are enough for a clear rise.
const STEPS = 30;
const PROMPTS_PER_STEP = 64;
const EVAL_EVERY = 10;

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

test('GRPO from an SFT warm start, through the trainingRun workflow on real workers, raises add2 held-out accuracy', async (t) => {
  const started = performance.now();
  const seconds = () => ((performance.now() - started) / 1000).toFixed(1);
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-grpo-learning-'));
  const cache = relaxEnvironment().warmStartCache;
  const home = path.join(tmp, 'home');
  fs.mkdirSync(home);
  const workers: TestProcess[] = [];
  let db: TestDatabase | undefined;
  let client: RelaxClient | undefined;
  let workflowId: string | undefined;
  try {
    const base: RunConfigInput = {
      ...ADD2_GRPO,
      rollout: { ...ADD2_GRPO.rollout, prompts_per_step: PROMPTS_PER_STEP },
      train: { ...ADD2_GRPO.train, steps: STEPS, eval_every: EVAL_EVERY },
    };
    const parsed = parseRunConfig(base);
    assert.equal(parsed.algorithm.kl_coef, 0, 'no KL term: the stack below has no reference worker');

    await loadTfjsBackend({ kind: 'cpu' });
    const warm = await loadOrTrainWarmStart(parsed, ADD2_SFT, cache);
    assert.ok(warm.accuracy >= ADD2_SFT.band[0] && warm.accuracy <= ADD2_SFT.band[1], `warm start accuracy ${warm.accuracy} outside ${JSON.stringify(ADD2_SFT.band)}`);
    // The cache returns the identical checkpoint the second time.
    const again = await loadOrTrainWarmStart(parsed, ADD2_SFT, cache);
    assert.equal(again.cached, true);
    assert.equal(again.dir, warm.dir);
    for (const [name, w] of Object.entries(warm.weights)) assert.deepEqual(again.weights[name], w, `cached ${name}`);
    t.diagnostic(`warm start: ${warm.sftSteps} SFT steps, held-out accuracy ${warm.accuracy} (${seconds()} s)`);

    // A fresh database and one real worker process per role the run uses, on the test run's
    // Temporal server. Each is tracked before it is ready, so the finally block ends it whatever happens.
    db = await freshDatabase();
    const env = { TEMPORAL_ADDRESS: sharedTemporalAddress(), DATABASE_URL: db.url, RELAX_HOME: home };
    const roles: Role[] = ['control', 'rollout', 'train'];
    await Promise.all(
      roles.map((role) => {
        const p = spawnRelax(['worker', '--role', role, ...(role === 'control' ? [] : ['--device', 'cpu'])], env);
        workers.push(p);
        return p.waitForLine(/^relax worker ready/);
      }),
    );
    t.diagnostic(`workers ready (${seconds()} s)`);

    client = await RelaxClient.connect(sharedTemporalAddress());
    const runStarted = performance.now();
    const id = (workflowId = uniqueId('grpo-learning'));
    const handle = await client.startTraining({ ...base, checkpoint: { ...base.checkpoint, init_from: warm.dir, dir: path.join(tmp, 'checkpoints') } }, id);
    // A worker that dies mid-run fails the test at once (nothing here replaces it) instead of leaving it waiting.
    let running = true;
    const workerDied = new Promise<never>((_, reject) =>
      workers.forEach((w, i) => void w.exited.then((code) => running && reject(new Error(`the ${roles[i]} worker exited (${code ?? w.child.signalCode}) during the run; output:\n${w.output.slice(-30).join('\n')}`)))),
    );
    const result = await Promise.race([handle.result(), workerDied]).finally(() => (running = false));
    const runS = (performance.now() - runStarted) / 1000;

    assert.equal(result.runId, id);
    assert.equal(result.steps, STEPS);
    assert.equal(result.policyVersion, STEPS);
    assert.equal(result.stopped, false);
    assert.equal(result.initialAccuracy, warm.accuracy, 'the run starts from the warm start');
    assert.deepEqual(result.accuracies.map(([s]) => s), Array.from({ length: STEPS / EVAL_EVERY + 1 }, (_, i) => i * EVAL_EVERY), 'held-out evaluations at start, every eval_every and the end');
    assert.ok(result.evalAccuracy !== undefined);

    // Per-step reward: the workflow's curve, and the same values in the metrics table.
    assert.deepEqual(result.rewards.map(([s]) => s), Array.from({ length: STEPS }, (_, i) => i + 1));
    const metrics = await readMetrics(db.pool, id);
    assert.deepEqual(metrics.reward_mean, result.rewards, 'reward_mean recorded for every step, as the workflow reported it');
    // (The initial evaluation, of version 0 before any step, is in the result only.)
    assert.deepEqual(metrics.eval_accuracy, result.accuracies.slice(1), 'eval_accuracy recorded for every evaluation after a step');
    const rewards = result.rewards.map(([, r]) => r);
    const firstTen = mean(rewards.slice(0, 10));
    const lastTen = mean(rewards.slice(-10));

    // Exactly once: steps 1..STEPS each applied once, step s producing version s from all 64 x 8
    // samples of iteration s - 1; every published version registered once with intact files.
    const { rows: steps } = await db.pool.query<{ step: number; status: string; policy_version: number; sample_count: number }>(
      'SELECT step, status, policy_version, sample_count FROM train_steps WHERE run_id = $1 ORDER BY step',
      [id],
    );
    assert.deepEqual(
      steps.map((s) => [s.step, s.status, s.policy_version, s.sample_count]),
      Array.from({ length: STEPS }, (_, i) => [i + 1, 'applied', i + 1, PROMPTS_PER_STEP * parsed.algorithm.group_size]),
    );
    await checkCheckpointRegistry(db.pool, id, STEPS, { every: parsed.checkpoint.every, keepLast: parsed.checkpoint.keep_last, protect: parsed.max_staleness + 1 });

    t.diagnostic(
      `held-out accuracy ${result.initialAccuracy} -> ${result.evalAccuracy} (${result.accuracies.map(([s, a]) => `${s}: ${a}`).join(', ')}) in ${result.steps} workflow steps; ` +
        `mean reward ${firstTen.toFixed(3)} -> ${lastTen.toFixed(3)}; workflow ${runS.toFixed(1)} s (${((runS * 1000) / STEPS).toFixed(0)} ms/step), test ${seconds()} s`,
    );
    assert.ok(result.evalAccuracy >= result.initialAccuracy + 0.1, `held-out accuracy ${result.initialAccuracy} -> ${result.evalAccuracy}: expected a rise of at least 10 points`);
    assert.ok(lastTen > firstTen + 0.05, `mean reward of the first ten steps ${firstTen.toFixed(3)} vs last ten ${lastTen.toFixed(3)}`);
    workflowId = undefined;
  } finally {
    // A run still going (an assertion or a worker failed mid-run) is ended so it leaves nothing behind.
    if (client && workflowId) await client.client.workflow.getHandle(workflowId).terminate('test cleanup').catch(() => undefined);
    await client?.close().catch(() => undefined);
    await Promise.all(workers.map((w) => w.stop('SIGKILL')));
    await db?.close().catch(() => undefined);
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});
