// Shared by the multimodal workflow tests (test/multimodal-run.test.ts, test/multimodal-audio-run.test.ts):
// a database, control / rollout / train worker processes on the shared Temporal server, SFT warm
// starts of the bench recipes (cached under RELAX_HOME/warm-starts, so the second CI pass reuses
// them), and the checks the tests make: a short GRPO run's rise, the samples' media ids, the sizes
// of activity payloads in a workflow's history.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { temporal as proto } from '@temporalio/proto';
import { relaxEnvironment } from '../config/environment';
import { parseRunConfig, type RunConfigInput } from '../config/run-config';
import { roleTaskQueue, type Role } from '../config/task-queues';
import { loadTfjsBackend } from '../engines/backends';
import { MULTIMODAL_RECIPES, type MultimodalBenchTask } from '../config/recipes';
import { loadOrTrainWarmStart, sftRecipeOf, type SftRecipe, type WarmStart } from '../training/warm-start';
import type { TrainingResult } from '../workflows/training-run';
import { freshDatabase, sharedTemporalAddress, startWorkerProcess, temporalClient, uniqueId, type TestDatabase, type TestProcess } from './helpers';

/** A recipe cut to `steps` GRPO steps with one evaluation at the end. */
export function shortRecipe(task: MultimodalBenchTask, steps: number): RunConfigInput {
  const recipe = MULTIMODAL_RECIPES[task].config;
  return { ...recipe, train: { ...recipe.train, steps, eval_every: steps }, checkpoint: { every: 20, keep_last: 1 } };
}

export class MultimodalStack {
  readonly warm = new Map<MultimodalBenchTask, WarmStart>();
  private constructor(
    readonly db: TestDatabase,
    readonly home: string,
    private readonly temporal: Awaited<ReturnType<typeof temporalClient>>,
    private readonly workers: TestProcess[],
  ) {}

  /** Starts the workers and computes (or loads) the warm starts of `tasks` (the bench recipes', with `sft` changes per task). */
  static async start(tasks: MultimodalBenchTask[], sft: Partial<Record<MultimodalBenchTask, Partial<SftRecipe>>> = {}): Promise<MultimodalStack> {
    const db = await freshDatabase();
    const home = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-mm-'));
    await loadTfjsBackend({ kind: 'cpu' });
    const env = { TEMPORAL_ADDRESS: sharedTemporalAddress(), DATABASE_URL: db.url, RELAX_HOME: home };
    const roles: Role[] = ['control', 'rollout', 'train'];
    const workers = await Promise.all(roles.map((r) => startWorkerProcess(r, env)));
    const stack = new MultimodalStack(db, home, await temporalClient(), workers);
    for (const task of tasks) {
      const recipe = MULTIMODAL_RECIPES[task];
      stack.warm.set(task, await loadOrTrainWarmStart(parseRunConfig(recipe.config), { ...sftRecipeOf(recipe.sft), ...sft[task] }, relaxEnvironment().warmStartCache));
    }
    return stack;
  }

  async stop(): Promise<void> {
    await Promise.all(this.workers.map((w) => w.stop('SIGKILL')));
    await this.temporal.close();
    await this.db.close();
    fs.rmSync(this.home, { recursive: true, force: true });
  }

  /** Runs a trainingRun to its result; a failure is rethrown with its cause chain in the message. */
  async runToEnd(workflowId: string, config: RunConfigInput): Promise<TrainingResult> {
    try {
      return (await this.temporal.client.workflow.execute('trainingRun', { taskQueue: roleTaskQueue('control'), workflowId, args: [config] })) as TrainingResult;
    } catch (err) {
      const causes: string[] = [];
      for (let e = err as Error | undefined; e; e = (e as { cause?: Error }).cause) causes.push(e.message);
      throw new Error(`run ${workflowId} failed: ${causes.join(' <- ')}`);
    }
  }

  /** A short GRPO run of `task` from its warm start (below 60%); asserts held-out accuracy rose by minRise. */
  async shortRun(task: MultimodalBenchTask, steps: number, minRise: number): Promise<{ id: string; checkpoints: string; result: TrainingResult }> {
    const warm = this.warm.get(task);
    assert.ok(warm, `no warm start for ${task}`);
    assert.ok(warm.accuracy < 0.6, `the ${task} warm start is below 60% (${warm.accuracy})`);
    const id = uniqueId(task);
    const checkpoints = path.join(this.home, 'checkpoints', id);
    const config = shortRecipe(task, steps);
    const result = await this.runToEnd(id, { ...config, run_id: id, checkpoint: { ...config.checkpoint, init_from: warm.dir, dir: checkpoints } });
    assert.equal(result.steps, steps);
    const initial = result.initialAccuracy ?? 0;
    const final = result.evalAccuracy ?? 0;
    console.log(`[${task}] held-out accuracy ${initial} -> ${final} in ${steps} steps (warm start: ${warm.sftSteps} SFT steps)`);
    assert.ok(final >= initial + minRise, `${task}: held-out accuracy rose clearly: ${initial} -> ${final}`);
    return { id, checkpoints, result };
  }

  /** Each sample's media ids. */
  async sampleMedia(runId: string): Promise<string[][]> {
    const { rows } = await this.db.pool.query<{ media: string[] | null }>('SELECT media FROM samples WHERE run_id = $1', [runId]);
    return rows.map((r) => r.media ?? []);
  }

  /** The largest activity input or result payload in a workflow's history, in bytes. */
  async largestActivityPayload(workflowId: string): Promise<number> {
    const history = await this.temporal.client.workflow.getHandle(workflowId).fetchHistory();
    const size = (p: proto.api.common.v1.IPayloads | null | undefined) => (p?.payloads ?? []).reduce((a, x) => a + (x.data?.length ?? 0), 0);
    const sizes = (history.events ?? []).flatMap((e) => [e.activityTaskScheduledEventAttributes?.input, e.activityTaskCompletedEventAttributes?.result].filter((p) => p !== undefined).map(size));
    assert.ok(sizes.length > 0, 'the history has activities');
    return Math.max(...sizes);
  }
}
