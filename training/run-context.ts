// What every stage of a training run needs to know about the run, loaded once per process from the
// runs table (the config is immutable once the run is registered): its config, task, policy model,
// checkpoint root and, for a model with encoders, its media store.
import path from 'node:path';
import { checkRunPathsAllowed } from '../envs/module-policy';
import type { Pool } from 'pg';
import { objectStorageSettings, relaxEnvironment } from '../config/environment';
import { isObjectUrl, joinLocation } from '../engines/storage/url';
import { parseRunConfig, type RunConfig } from '../config/run-config';
import { MediaStore } from '../engines/media/store';
import type { ModelConfig } from '../engines/model';
import { MediaPrompts } from '../rollout/media-prompts';
import { registeredRun } from '../store/runs';
import type { Task } from '../envs/task';
import { loadRunPolicy, RunModelError, type RunPolicy } from './policy-model';
import type { RunCheckpoints } from './policy-versions';
import { runState } from './run-state';

export interface RunContext extends RunCheckpoints {
  config: RunConfig;
  task: Task;
  model: ModelConfig;
  /** The model's source, tokens that end a response, and a pretrained model's base weights. */
  policy: RunPolicy;
  /** A model with encoders: the run's media (store at <checkpoint root>/media, processed-input cache). */
  media?: MediaPrompts;
}

/** The run is not in the runs table: nothing registered it, or another database was given. */
export class UnknownRunError extends Error {
  override readonly name = 'UnknownRunError';
}

/** The run's task could not be loaded (a task module that moved or broke since the run started). */
export class RunTaskError extends Error {
  override readonly name = 'RunTaskError';
}

const contexts = runState.slot<Promise<RunContext>>('run.context');

/**
 * Where a run's versions and media live: checkpoint.dir when set (a directory or an s3:// URL), else
 * under the object store RELAX_STORAGE names (<url>/checkpoints/<run>), else <RELAX_HOME>/checkpoints/<run>.
 */
export function runCheckpointRoot(runId: string, dir: string | undefined, env: NodeJS.ProcessEnv = process.env): string {
  if (dir) return isObjectUrl(dir) ? dir.replace(/\/+$/, '') : path.resolve(dir);
  const storage = objectStorageSettings(env);
  return storage ? `${storage.url}/checkpoints/${runId}` : path.join(relaxEnvironment(env).home, 'checkpoints', runId);
}

/** The run's context, cached per process (training/run-state.ts); failures are not cached. Throws UnknownRunError, RunTaskError or RunModelError. */
export function loadRunContext(pool: Pool, runId: string): Promise<RunContext> {
  let loading = contexts.get(runId);
  if (!loading) {
    loading = contexts.set(runId, load(pool, runId));
    const failed = loading;
    failed.catch(() => contexts.delete(runId, failed));
  }
  return loading;
}

async function load(pool: Pool, runId: string): Promise<RunContext> {
  const run = await registeredRun(pool, runId);
  if (!run) throw new UnknownRunError(`run "${runId}" is not registered in the database`);
  // The control worker checked the run fits in memory at start; a rollout host may be smaller and
  // still serve it (the trainer checks its own memory before it allocates: activities/train.ts).
  const config = parseRunConfig(run.config, { memoryLimitBytes: Infinity });
  // This worker's own allow-list decides which files a run may read and write here (NotAllowedError).
  checkRunPathsAllowed(config);
  let policy: RunPolicy;
  try {
    policy = await loadRunPolicy(config);
  } catch (err) {
    if (err instanceof RunModelError) throw err;
    throw new RunTaskError((err as Error).message);
  }
  const checkpointRoot = runCheckpointRoot(runId, config.checkpoint.dir);
  return {
    runId,
    config,
    task: policy.task,
    model: policy.model,
    policy,
    checkpointRoot,
    ...(policy.model.vision || policy.model.audio ? { media: new MediaPrompts(policy.model, new MediaStore(joinLocation(checkpointRoot, 'media'))) } : {}),
  };
}
