// What every stage of a training run needs to know about the run, loaded once per worker process
// from the runs table (the config is immutable once the run is registered).
import path from 'node:path';
import { ApplicationFailure } from '@temporalio/activity';
import type { Pool } from 'pg';
import { parseRunConfig, type RunConfig } from '../config/run-config';
import type { ModelConfig } from '../engines/model';
import { loadTask } from '../envs/registry';
import type { Task } from '../envs/task';
import { policyModelConfig } from '../training/policy';
import { relaxEnvironment } from '../workers/environment';

export interface RunContext {
  runId: string;
  config: RunConfig;
  task: Task;
  model: ModelConfig;
  /** Where this run's policy versions are published (shared storage in a multi-host deployment). */
  checkpointRoot: string;
}

const cache = new Map<string, RunContext>();

export async function runContext(pool: Pool, runId: string): Promise<RunContext> {
  const hit = cache.get(runId);
  if (hit) return hit;
  const { rows } = await pool.query<{ config: unknown }>('SELECT config FROM runs WHERE run_id = $1', [runId]);
  if (!rows[0]) throw ApplicationFailure.create({ message: `run "${runId}" is not registered in the database`, type: 'UnknownRun', nonRetryable: true });
  const config = parseRunConfig(rows[0].config);
  let task: Task;
  try {
    task = await loadTask(config.task);
  } catch (err) {
    throw ApplicationFailure.create({ message: (err as Error).message, type: 'UnknownTask', nonRetryable: true });
  }
  const ctx: RunContext = {
    runId,
    config,
    task,
    model: policyModelConfig(config.model, task.tokenizer().vocabSize),
    checkpointRoot: path.resolve(config.checkpoint.dir ?? path.join(relaxEnvironment().home, 'checkpoints', runId)),
  };
  cache.set(runId, ctx);
  return ctx;
}
