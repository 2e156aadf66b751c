// A training run's Temporal user metadata: the one-line static summary and the markdown static
// details the Web UI shows in a workflow's Summary panel (task, model, algorithm, steps), set where
// runs are started (RelaxClient.startTraining, schedule actions). Pure: from the parsed config.
import type { RunConfig } from '../config/run-config';

/** A registered name, or a user module's `path#export`. */
function named(v: string | { module: string; export?: string }): string {
  return typeof v === 'string' ? v : `${v.module}#${v.export ?? 'default'}`;
}

function modelOf(c: RunConfig): string {
  const base = c.model.from ?? 'tiny GPT';
  return c.lora ? `${base} + LoRA r${c.lora.rank}` : base;
}

function algorithmOf(c: RunConfig): string {
  return `${named(c.algorithm.advantage)} / ${named(c.algorithm.policy_loss)}`;
}

function taskOf(c: RunConfig): string {
  return c.data ? `${c.task} (data ${JSON.stringify(c.data).slice(0, 80)})` : c.task;
}

/** "add2 · tiny GPT · grpo / ppo_clip · 50 steps · sync": what the Web UI lists for the run. */
export function runStaticSummary(c: RunConfig): string {
  return [taskOf(c), modelOf(c), algorithmOf(c), `${c.train.steps} steps`, c.mode].join(' · ');
}

/** A markdown table of the settings one looks for first; the full config is the workflow's input. */
export function runStaticDetails(c: RunConfig): string {
  const rows: Array<[string, string | number]> = [
    ['task', taskOf(c)],
    ['model', modelOf(c)],
    ['algorithm', `${algorithmOf(c)}, group size ${c.algorithm.group_size}, clip ${c.algorithm.clip_low}/${c.algorithm.clip_high}, KL ${c.algorithm.kl_coef}`],
    ['rollout', `${c.rollout.prompts_per_step} prompts/step, temperature ${c.rollout.temperature}, max ${c.rollout.max_new_tokens} new tokens`],
    ['train', `${c.train.steps} steps, lr ${c.train.lr}`],
    ['mode', `${c.mode}, placement ${c.placement}, max staleness ${c.max_staleness}`],
  ];
  if (c.recipe) rows.push(['recipe', c.recipe]);
  if (c.init) rows.push(['init', JSON.stringify(c.init)]);
  if (c.checkpoint.init_from) rows.push(['init from', c.checkpoint.init_from]);
  return ['| setting | value |', '| --- | --- |', ...rows.map(([k, v]) => `| ${k} | ${String(v).replace(/\|/g, '\\|')} |`)].join('\n');
}

/** Both, as `client.workflow.start` and a schedule's startWorkflow action take them. */
export function runUserMetadata(c: RunConfig): { staticSummary: string; staticDetails: string } {
  return { staticSummary: runStaticSummary(c), staticDetails: runStaticDetails(c) };
}
