// The RL loop in one process (no Temporal, no database): a thin driver over the same core the
// workflow's activities call (rollout/producers.ts rolloutSlice, training/step.ts: the rollout's
// statistics, the failure budget's verdict, reference log-probs, the update; the sample buffer's
// rules in memory), with the same seeds, so it computes what a sync trainingRun with
// rollout.parallelism 1 computes. For benchmarks (the baseline the workflow's overhead is measured
// against), the fast learning tests, and notebook-style use; a pretrained model (model.from) loads
// as a run's does, `init` then holding what trains (version 0: initialPolicyWeights).
import type { RunConfig } from '../config/run-config';
import { hasFrozenParameters, initWeights, valueHeadParameterSpec, type ModelConfig, type PolicyWeights } from '../engines/model';
import { RolloutEngine } from '../engines/rollout';
import { Trainer } from '../engines/trainer';
import { loadTask } from '../envs/registry';
import type { Task } from '../envs/task';
import { evaluateGreedy } from '../rollout/evaluate';
import { mediaPromptsOf } from '../rollout/media-prompts';
import { rolloutSlice } from '../rollout/producers';
import { policyModelConfig, referenceTrainerOptions, trainerOptions } from './options';
import { loadRunPolicy, withBaseWeights } from './policy-model';
import { InMemorySampleBuffer, type TrainSample } from './sample-buffer';
import { loadTeacher } from './teacher-model';
import { attachReferenceLogprobs, computeUpdate, resolveUpdateRule, rolloutStats, rolloutStatsMetrics, stalenessMetrics, stepAdvantages, stepVerdict, withSequenceMedia } from './step';

export interface StepReport {
  step: number;
  policyVersion: number;
  rewardMean: number;
  /** Held-out greedy accuracy, on evaluation steps. */
  accuracy?: number;
  /** Multi-turn tasks, on evaluation steps: the environments' numeric info averaged (e.g. tool_use). */
  evalMetrics?: Record<string, number>;
  samples: number;
  /** Samples with a learning signal (trained on). */
  trainedSamples: number;
  /** The step's metrics, named as the workflow's train step records them. */
  metrics: Record<string, number>;
  stepMs: number;
  /** Seconds since the run started (engines built, initial evaluation included), at the end of this step and its evaluation. */
  elapsedS: number;
}

export interface InProcessResult {
  initialAccuracy: number;
  finalAccuracy: number;
  curve: StepReport[];
  wallS: number;
  weights: PolicyWeights;
}

/** algorithm.advantage "gae": the policy carries PPO's value head, as training/policy-model.ts loadRunPolicy gives a run's. */
function withCriticHead(config: RunConfig, model: ModelConfig): ModelConfig {
  return config.algorithm.advantage === 'gae' ? { ...model, valueHead: true } : model;
}

/** `init` with a fresh value head where the model has one and `init` does not (a warm start without a critic), as engines/checkpoint.ts loadCheckpoint. */
function withValueHead(model: ModelConfig, init: PolicyWeights): PolicyWeights {
  return model.valueHead && !('value_head.weight' in init) ? { ...init, ...initWeights(model, 0, valueHeadParameterSpec(model)) } : init;
}

/**
 * Runs config.train.steps sync RL steps from `init`; hooks see each step. A step whose samples all
 * failed is skipped (within train.failure_budget; over it FailureBudgetExceededError is thrown).
 */
export async function runInProcess(config: RunConfig, init: PolicyWeights, hooks: { onStep?: (r: StepReport) => void; evalEvery?: number } = {}): Promise<InProcessResult> {
  if (config.reward.judge) throw new Error('reward.judge: the judge role scores samples in the workflow (relax train), not in the in-process loop; remove reward.judge here');
  const started = performance.now();
  // A pretrained model (model.from): its task, tokenizer and frozen base as a run's (training/policy-model.ts).
  const policy = config.model.from !== undefined ? await loadRunPolicy(config) : undefined;
  const task = policy?.task ?? (await loadTask(config.task));
  const model = policy?.model ?? withCriticHead(config, policyModelConfig(config.model, task.tokenizer().vocabSize, task));
  const initial = withValueHead(model, init);
  const trainer = Trainer.create(trainerOptions(config, model, policy ? await withBaseWeights(policy, initial) : initial));
  // The reference policy for the KL term, or on-policy distillation's teacher in its place (training/teacher-model.ts).
  const teacher = config.algorithm.teacher && (await loadTeacher(undefined, config.algorithm.teacher.from, { model }));
  const reference = teacher ? Trainer.create(referenceTrainerOptions(teacher.model, teacher.weights, config.train.share_prompts)) : config.algorithm.kl_coef > 0 ? Trainer.create(referenceTrainerOptions(model, policy ? await withBaseWeights(policy, initial) : initial, config.train.share_prompts)) : undefined;
  const engine = await RolloutEngine.create(model);
  if (policy?.baseWeights && hasFrozenParameters(model)) engine.setFrozenWeights(await policy.baseWeights());
  const rule = await resolveUpdateRule(config.algorithm, { maxCompletionTokens: config.rollout.max_new_tokens });
  const buffer = new InMemorySampleBuffer();
  const evalEvery = hooks.evalEvery ?? config.train.eval_every;
  const evaluate = (t: Task) => evaluateGreedy(engine, t, t.heldOut(), config.rollout.max_new_tokens);
  try {
    engine.setWeights(0, initial);
    const initialAccuracy = (await evaluate(task)).accuracy;
    const curve: StepReport[] = [];
    let finalAccuracy = initialAccuracy;
    let version = 0;
    for (let step = 1; step <= config.train.steps; step++) {
      const t0 = performance.now();
      const iteration = step - 1;
      const fromVersion = version;
      const samples = await rolloutSlice({ config, task, engine }, { iteration, firstGroup: 0, groups: config.rollout.prompts_per_step });
      const rollout = rolloutStats(samples);
      // Every sample failed, within train.failure_budget: nothing to train on, the version stays.
      const train = stepVerdict(rollout, config.train.failure_budget, step) === 'train';
      let metrics: Record<string, number> = { skipped_all_failed: 1 };
      let claimed: TrainSample[] = [];
      if (train) {
        if (reference) await attachReferenceLogprobs(reference, samples, mediaPromptsOf(engine));
        await buffer.put(samples);
        claimed = (await buffer.claim(step, { size: samples.length, iteration, requireRefLogprobs: reference !== undefined, fromVersion })) ?? [];
        metrics = await computeUpdate((sequences, _rule, batch) => trainer.trainStep(sequences, rule.loss, { batch }), rule, await withSequenceMedia(claimed, mediaPromptsOf(engine)), stepAdvantages(rule, claimed), fromVersion, (sequences) => trainer.values(sequences));
        version = fromVersion + 1;
        engine.setWeights(version, await trainer.exportWeights());
      }
      const report: StepReport = {
        step,
        policyVersion: version,
        rewardMean: rollout.rewardMean,
        samples: rollout.samples,
        trainedSamples: metrics.trained_samples ?? 0,
        metrics: { ...rolloutStatsMetrics(rollout), ...metrics, ...stalenessMetrics(claimed, fromVersion) },
        stepMs: performance.now() - t0,
        elapsedS: 0,
      };
      if (step % evalEvery === 0 || step === config.train.steps) {
        const evaluation = await evaluate(task);
        report.accuracy = finalAccuracy = evaluation.accuracy;
        if (evaluation.metrics) report.evalMetrics = evaluation.metrics;
      }
      report.elapsedS = (performance.now() - started) / 1000;
      curve.push(report);
      hooks.onStep?.(report);
    }
    return { initialAccuracy, finalAccuracy, curve, wallS: (performance.now() - started) / 1000, weights: await trainer.exportWeights() };
  } finally {
    trainer.dispose();
    reference?.dispose();
    await engine.release();
  }
}
