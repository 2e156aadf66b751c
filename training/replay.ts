// `relax replay <run> --step N`: recomputes a recorded train step from the data plane, on CPU in
// this process, and reports the first stage (and sample, or tensor) where the recomputation differs
// from what was recorded. Every input is in Postgres and the checkpoint registry: the step's sample
// set (train_step_samples), each sample's tokens, rollout and reference log-probs, reward and the
// advantage it was trained with, the version the step started from with its optimizer state, the
// version it published, and its metrics. The stages, in order:
//   prompt     each sample's prompt tokens against the task's prompt for its iteration and group
//   reward     the run's reward recomputed on the decoded response (single-turn, rule or module rewards)
//   advantage  the run's estimator on the recorded rewards (any registered estimator) against the
//              advantages recorded for the step
//   update     one optimizer step from the start version (its weights and AdamW moments) with the
//              run's loss (any registered loss) on the recorded samples: loss and grad norm against
//              the step's metrics, every tensor against the published version
// A stage that cannot be recomputed here says why (skipped), and the later stages still run.
import path from 'node:path';
import type { Pool } from 'pg';
import { withHyperparameters, type Hyperparameters } from '../config/hyperparameters';
import type { RunConfig } from '../config/run-config';
import { Trainer } from '../engines/trainer';
import type { PolicyWeights } from '../engines/model';
import { loadRewardFunction, scoreGroup } from '../envs/user-modules';
import { iterationPrompts, promptTokens } from '../rollout/producers';
import { getCheckpoint, retainedVersions } from '../store/checkpoint-registry';
import { hyperparametersInForce } from '../store/events';
import { getTrainStep, readSamples, type SampleRow } from '../store/transfer-queue';
import { trainerOptions } from './options';
import { withBaseWeights } from './policy-model';
import { loadOptimizerState, loadPolicyWeights } from './policy-versions';
import { loadRunContext, type RunContext } from './run-context';
import { computeUpdate, resolveUpdateRule, stepAdvantages, withSequenceMedia } from './step';

export type ReplayStageName = 'prompt' | 'reward' | 'advantage' | 'update';

export interface ReplayStage {
  stage: ReplayStageName;
  status: 'match' | 'differs' | 'skipped';
  /** What was compared (or why it was skipped). */
  detail: string;
  /** The largest absolute difference seen (numbers compared as the float32 they are stored as). */
  maxAbsDiff?: number;
  /** The first difference: a sample key "iteration/group/index" or a tensor name, with both values. */
  first?: { sample?: string; tensor?: string; recorded: unknown; recomputed: unknown };
}

export interface ReplayReport {
  runId: string;
  step: number;
  fromVersion: number;
  toVersion: number;
  samples: number;
  estimator: string;
  loss: string;
  stages: ReplayStage[];
  /** The first stage that differs, or null when every compared stage matches. */
  firstDivergence: { stage: ReplayStageName; sample?: string; tensor?: string } | null;
}

/** A step that cannot be replayed (not applied, its samples pruned, its versions gone): says which and why. */
export class ReplayError extends Error {
  override readonly name = 'ReplayError';
}

export interface ReplayOptions {
  /** Largest absolute difference still called equal for the update's tensors, loss and grad norm (default 0: bitwise). */
  tolerance?: number;
}

const key = (s: Pick<SampleRow, 'iteration' | 'groupIndex' | 'sampleIndex'>) => `${s.iteration}/${s.groupIndex}/${s.sampleIndex}`;

/** float32 as the transfer queue stores it (real columns): a recomputed number is compared after the same rounding. */
const f32 = Math.fround;

function compareNumbers(stage: ReplayStageName, what: string, rows: ReadonlyArray<{ sample: string; recorded: number | null; recomputed: number | null }>, tolerance: number): ReplayStage {
  let max = 0;
  let first: ReplayStage['first'];
  for (const r of rows) {
    const same = r.recorded === r.recomputed || (r.recorded !== null && r.recomputed !== null && Math.abs(r.recorded - r.recomputed) <= tolerance);
    if (r.recorded !== null && r.recomputed !== null) max = Math.max(max, Math.abs(r.recorded - r.recomputed));
    if (!same && !first) first = { sample: r.sample, recorded: r.recorded, recomputed: r.recomputed };
  }
  return { stage, status: first ? 'differs' : 'match', detail: `${what} of ${rows.length} samples`, maxAbsDiff: max, ...(first ? { first } : {}) };
}

/** The policy loss as the config names it: a registered name, or a user module's path and export. */
function lossName(loss: RunConfig['algorithm']['policy_loss']): string {
  return typeof loss === 'string' ? loss : `${loss.module}#${loss.export}`;
}

function samePrompt(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((t, i) => t === b[i]);
}

/** Why the prompts and rewards of this run are not recomputed here, or undefined when they are. */
function notRecomputable(config: RunConfig, run: RunContext): string | undefined {
  if (config.rollout.agent || config.generate.module || run.task.interaction) return 'multi-turn or custom rollouts (an environment, a generate function or an agent) are not re-run';
  if (config.data) return 'dataset prompts (data.train) are not re-read';
  if (config.algorithm.dapo?.dynamic_sampling) return "DAPO's dynamic sampling moves groups between rounds: a group's prompt is not its iteration's";
  return undefined;
}

async function promptAndRewardStages(config: RunConfig, run: RunContext, samples: readonly SampleRow[]): Promise<ReplayStage[]> {
  const why = notRecomputable(config, run);
  if (why) return [{ stage: 'prompt', status: 'skipped', detail: why }, { stage: 'reward', status: 'skipped', detail: why }];
  const tokenizer = run.task.tokenizer();
  const byIteration = new Map<number, ReturnType<typeof iterationPrompts>>();
  const promptOf = (s: SampleRow) => {
    if (!byIteration.has(s.iteration)) byIteration.set(s.iteration, iterationPrompts(config, run.task, s.iteration));
    return byIteration.get(s.iteration)![s.groupIndex];
  };
  const badPrompt = samples.find((s) => !promptOf(s) || !samePrompt(promptTokens(tokenizer, promptOf(s)), s.promptTokens));
  const prompt: ReplayStage = badPrompt
    ? { stage: 'prompt', status: 'differs', detail: `prompt tokens of ${samples.length} samples against the task's prompts`, first: { sample: key(badPrompt), recorded: badPrompt.promptTokens, recomputed: promptOf(badPrompt) ? promptTokens(tokenizer, promptOf(badPrompt)) : null } }
    : { stage: 'prompt', status: 'match', detail: `prompt tokens of ${samples.length} samples against the task's prompts` };
  if (config.reward.judge) return [prompt, { stage: 'reward', status: 'skipped', detail: 'reward.judge: the judge model is not re-run' }];
  if (badPrompt) return [prompt, { stage: 'reward', status: 'skipped', detail: 'the prompts differ: the rewards are not comparable' }];
  const reward = await loadRewardFunction(config.reward);
  const rows = await Promise.all(
    samples.map(async (s) => {
      const [scored] = await scoreGroup({ task: run.task, reward, prompt: promptOf(s), responses: [tokenizer.decode(s.responseTokens)], timeoutMs: config.reward.timeout_ms });
      // DAPO's overlong penalty is part of the recorded reward: the task's own score is under rewards.task.
      const recorded = s.rewards?.overlong_penalty !== undefined ? (s.rewards.task ?? null) : s.reward;
      return { sample: key(s), recorded, recomputed: scored.reward === null ? null : f32(scored.reward) };
    }),
  );
  return [prompt, compareNumbers('reward', "the run's reward recomputed on the decoded responses", rows, 0)];
}

function advantageStage(samples: readonly SampleRow[], recomputed: readonly number[]): ReplayStage {
  const rows = samples.map((s, i) => ({ sample: key(s), recorded: s.advantage, recomputed: f32(recomputed[i]) }));
  // Stored as float32 from a float64 computation: equal after rounding, up to one float32 ulp of noise.
  return compareNumbers('advantage', 'advantages from the recorded rewards', rows, 1e-6);
}

async function updateStage(pool: Pool, run: RunContext, config: RunConfig, samples: readonly SampleRow[], advantages: readonly number[], fromVersion: number, toVersion: number, recordedMetrics: Record<string, number> | null, tolerance: number): Promise<ReplayStage> {
  // The checkpoint root as the registry recorded it (the trainer's), not as this process would derive it.
  const recordedAt = await getCheckpoint(pool, run.runId, fromVersion);
  const checkpoints = recordedAt ? { ...run, checkpointRoot: path.dirname(recordedAt.path) } : run;
  const [start, optimizerState, published] = await Promise.all([loadPolicyWeights(pool, run, fromVersion), loadOptimizerState(checkpoints, fromVersion), loadPolicyWeights(pool, run, toVersion)]);
  const rule = await resolveUpdateRule(config.algorithm, { maxCompletionTokens: config.rollout.max_new_tokens });
  const trainer = Trainer.create(trainerOptions(config, run.model, await withBaseWeights(run.policy, start)));
  try {
    if (optimizerState) trainer.importOptimizerState(optimizerState);
    else if (fromVersion > 0) return { stage: 'update', status: 'skipped', detail: `version ${fromVersion} has no optimizer state: the update cannot be recomputed exactly` };
    const metrics = await computeUpdate((sequences, r, batch) => trainer.trainStep(sequences, r.loss, { batch }), rule, await withSequenceMedia([...samples], run.media), [...advantages], fromVersion, (sequences) => trainer.values(sequences));
    const after: PolicyWeights = await trainer.exportWeights();
    let max = 0;
    let first: ReplayStage['first'];
    for (const name of Object.keys(published).sort()) {
      const want = published[name];
      const got = after[name];
      if (!got || got.length !== want.length) {
        first ??= { tensor: name, recorded: `${want.length} values`, recomputed: got ? `${got.length} values` : 'absent' };
        continue;
      }
      for (let i = 0; i < want.length; i++) {
        const d = Math.abs(want[i] - got[i]);
        if (d > max) max = d;
        if (d > tolerance && !first) first = { tensor: `${name}[${i}]`, recorded: want[i], recomputed: got[i] };
      }
    }
    const compared = ['loss', 'grad_norm'].filter((m) => recordedMetrics?.[m] !== undefined && metrics[m] !== undefined);
    const metricDiff = compared.find((m) => Math.abs((recordedMetrics![m] as number) - metrics[m]) > Math.max(tolerance, 1e-6 * Math.abs(recordedMetrics![m] as number)));
    if (!first && metricDiff) first = { tensor: `metric ${metricDiff}`, recorded: recordedMetrics![metricDiff], recomputed: metrics[metricDiff] };
    return {
      stage: 'update',
      status: first ? 'differs' : 'match',
      detail: `one ${lossName(config.algorithm.policy_loss)} step from version ${fromVersion} against published version ${toVersion} (${Object.keys(published).length} tensors${compared.length ? `; ${compared.join(', ')}` : ''})`,
      maxAbsDiff: max,
      ...(first ? { first } : {}),
    };
  } finally {
    trainer.dispose();
  }
}

/** Replays step `step` of run `runId` (see the file's first comment). Throws ReplayError when the step cannot be replayed. */
export async function replayStep(pool: Pool, runId: string, step: number, options: ReplayOptions = {}): Promise<ReplayReport> {
  const recorded = await getTrainStep(pool, runId, step);
  if (!recorded) throw new ReplayError(`run ${runId} has no train step ${step}: replay a step the run recorded (relax status ${runId} shows its steps)`);
  if (recorded.status !== 'applied' || recorded.policyVersion === null) {
    throw new ReplayError(`step ${step} of run ${runId} is ${recorded.status}${recorded.skipReason ? ` (${recorded.skipReason})` : ''}: only an applied step published a version to compare with`);
  }
  const toVersion = recorded.policyVersion;
  const fromVersion = toVersion - 1;
  const run = await loadRunContext(pool, runId);
  const h = await hyperparametersInForce<Hyperparameters>(pool, runId, step);
  const config = h ? withHyperparameters(run.config, h) : run.config;
  const samples = await readSamples(pool, runId, { consumedByStep: step });
  if (samples.length !== recorded.sampleCount) {
    throw new ReplayError(
      `step ${step} trained ${recorded.sampleCount} samples and ${samples.length} are left in the transfer queue: the rest were pruned (train.keep_consumed_steps keeps the last ${run.config.train.keep_consumed_steps} steps' samples); replay a more recent step, or raise keep_consumed_steps`,
    );
  }
  const retained = await retainedVersions(pool, runId);
  const gone = [fromVersion, toVersion].filter((v) => !retained.includes(v));
  if (gone.length) {
    throw new ReplayError(
      `step ${step} goes from version ${fromVersion} to ${toVersion}, and checkpoint retention pruned version ${gone.join(' and ')} (retained: ${retained.join(', ')}): replay a step between two retained versions, or keep every version (checkpoint.every 1 and a larger checkpoint.keep_last) in runs you may replay`,
    );
  }
  const rule = await resolveUpdateRule(config.algorithm, { maxCompletionTokens: config.rollout.max_new_tokens });
  const tolerance = options.tolerance ?? 0;
  const stages = await promptAndRewardStages(config, run, samples);
  const advantages = stepAdvantages(rule, samples);
  stages.push(advantageStage(samples, advantages));
  stages.push(await updateStage(pool, run, config, samples, advantages, fromVersion, toVersion, recorded.metrics, tolerance));
  const diverged = stages.find((s) => s.status === 'differs');
  return {
    runId,
    step,
    fromVersion,
    toVersion,
    samples: samples.length,
    estimator: rule.estimator.name,
    loss: lossName(config.algorithm.policy_loss),
    stages,
    firstDivergence: diverged ? { stage: diverged.stage, ...(diverged.first?.sample ? { sample: diverged.first.sample } : {}), ...(diverged.first?.tensor ? { tensor: diverged.first.tensor } : {}) } : null,
  };
}
