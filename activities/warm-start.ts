// The SFT warm start as a train activity: the run's init.sft trained on some train worker (or read
// from the cache under <RELAX_HOME>/warm-starts, keyed by everything that determines it, so a
// second run or a retry is instant), heartbeating while it trains, recorded as a `warm_start` run
// event. It takes no trainer lock: a train step of another run on this worker goes on beside it.
import path from 'node:path';
import { ApplicationFailure } from '@temporalio/activity';
import { relaxEnvironment } from '../config/environment';
import type { NonRetryableFailureType } from '../config/failure-types';
import { shortened } from '../config/json-limits';
import { loadOrTrainWarmStart, sftRecipeOf, WarmStartBandError } from '../training/warm-start';
import { FAILURE_MESSAGE_MAX_CHARS, recordStageEvent, runContext, withHeartbeats, type WorkerContext } from './context';
import { componentLog } from '../telemetry/log';

const warmStartLog = componentLog('warm-start');

export interface WarmStartInput {
  runId: string;
}

export interface WarmStartResult {
  /** The warm start's checkpoint directory (its policy version 0): initPolicy's warmStartDir. */
  dir: string;
  /** Held-out greedy accuracy of the warm start. */
  accuracy: number;
  sftSteps: number;
  /** True when it came from the cache (nothing was trained). */
  cached: boolean;
}

/** Where warm starts are cached (the quickstart and the benchmarks use the same directory). */
export function warmStartCacheRoot(): string {
  return relaxEnvironment().warmStartCache;
}

function invalidConfig(message: string): ApplicationFailure {
  return ApplicationFailure.create({ message: shortened(message, FAILURE_MESSAGE_MAX_CHARS), type: 'InvalidRunConfig' satisfies NonRetryableFailureType, nonRetryable: true });
}

/**
 * The run's SFT warm start (init.sft), trained once and cached as a checkpoint. A retry finds the
 * cache (or, while the first attempt still trains in this process, waits for it). A warm start
 * that never lands in its band fails the run as InvalidRunConfig, naming the fields to change.
 */
export async function warmStart(ctx: WorkerContext, { runId }: WarmStartInput): Promise<WarmStartResult> {
  const run = await runContext(ctx, runId);
  const sft = run.config.init?.sft;
  if (!sft) throw invalidConfig(`init.sft: run ${runId} has no init.sft, so there is no warm start to make; set init.sft (or "recipe": "add2") or do not call warmStart`);
  const log = (line: string) => warmStartLog.info({ run: runId }, line);
  let warm;
  try {
    warm = await withHeartbeats(() => loadOrTrainWarmStart(run.config, sftRecipeOf(sft), warmStartCacheRoot(), log));
  } catch (err) {
    if (err instanceof WarmStartBandError) throw invalidConfig(`init.sft: ${err.message} (in the run config: init.sft.max_steps, init.sft.lr, init.sft.eval_every, init.sft.band)`);
    throw err;
  }
  const result: WarmStartResult = { dir: warm.dir, accuracy: warm.accuracy, sftSteps: warm.sftSteps, cached: warm.cached };
  await recordStageEvent(ctx, runId, 'warm_start', { ...result, sftWallS: warm.sftWallS });
  return result;
}
