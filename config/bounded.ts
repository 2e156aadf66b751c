// The bounds of every size, count, coefficient and string of a run config, in ONE table, and the
// zod schemas built from it: the run config's schemas (config/run-config.ts, config/data-config.ts)
// and the mid-run hyperparameter validator (config/hyperparameters.ts) use the same ones. Node-free
// (zod and plain data only): the workflow bundle imports it through config/hyperparameters.ts.
import { z } from 'zod';

export interface NumberBound {
  min: number;
  max: number;
  integer: boolean;
  /** min itself is not allowed (a positive number). */
  exclusiveMin?: boolean;
  /** max itself is not allowed. */
  exclusiveMax?: boolean;
}

const int = (min: number, max: number): NumberBound => ({ min, max, integer: true });
const real = (min: number, max: number, open: { exclusiveMin?: boolean; exclusiveMax?: boolean } = {}): NumberBound => ({ min, max, integer: false, ...open });
const positive = (max: number): NumberBound => real(0, max, { exclusiveMin: true });
const TIMEOUT_MS = int(1, 3_600_000);
const STEPS = int(1, 1_000_000);

/** The learning-rate schedules (train.lr_decay). */
export const LR_DECAY_KINDS = ['constant', 'linear', 'cosine'] as const;

/** Every number of a run config, by dotted path (a union's object branch: "algorithm.advantage" is a string or an object). */
export const RUN_CONFIG_BOUNDS = {
  seed: int(0, 2 ** 31 - 1),
  max_staleness: int(0, 64),
  'model.d_model': int(1, 16_384),
  'model.n_layers': int(1, 48),
  'model.n_heads': int(1, 256),
  'model.d_ff': int(1, 65_536),
  'model.context_length': int(1, 131_072),
  'model.vision.patch_size': int(1, 64),
  'model.vision.max_patches': int(1, 4096),
  'model.vision.d_model': int(1, 4096),
  'model.vision.n_layers': int(1, 48),
  'model.vision.n_heads': int(1, 64),
  'model.vision.d_ff': int(1, 16_384),
  'model.audio.n_mels': int(1, 256),
  'model.audio.max_frames': int(2, 3000),
  'model.audio.d_model': int(1, 4096),
  'model.audio.n_layers': int(1, 48),
  'model.audio.n_heads': int(1, 64),
  'model.audio.d_ff': int(1, 16_384),
  'model.audio.window_s': positive(30),
  'model.audio.stack': int(1, 64),
  'model.audio.projector_hidden': int(1, 16_384),
  'lora.rank': int(1, 1024),
  'lora.alpha': positive(4096),
  'lora.dropout': real(0, 1, { exclusiveMax: true }),
  'algorithm.group_size': int(1, 1024),
  'algorithm.clip_low': positive(1),
  'algorithm.clip_high': positive(10),
  'algorithm.kl_coef': real(0, 100),
  'algorithm.entropy_coef': real(0, 10),
  'algorithm.importance_cap': positive(1_000_000),
  'algorithm.rollout_correction.lower': positive(1),
  'algorithm.rollout_correction.upper': real(1, 1_000_000),
  'algorithm.rollout_correction.opsm_delta': real(0, 100),
  'algorithm.max_token_staleness': int(0, 1_000_000),
  'algorithm.critic.gamma': real(0, 1),
  'algorithm.critic.lambda': real(0, 1),
  'algorithm.critic.vf_coef': real(0, 100),
  'algorithm.critic.value_clip': real(0, 1_000_000),
  'algorithm.critic.lr': positive(1),
  'algorithm.teacher.kl_coef': real(0, 100),
  'algorithm.teacher.task_coef': real(0, 100),
  'algorithm.dapo.dynamic_sampling.max_extra_rounds': int(0, 64),
  'algorithm.dapo.overlong_penalty.cache_tokens': int(1, 131_072),
  'algorithm.dapo.overlong_penalty.factor': real(0, 100),
  'rollout.prompts_per_step': int(1, 4096),
  'rollout.temperature': positive(10),
  'rollout.top_p': positive(1),
  'rollout.top_k': int(0, 1_000_000),
  'rollout.max_new_tokens': int(1, 131_072),
  'rollout.parallelism': int(1, 256),
  'rollout.agent.timeout_ms': TIMEOUT_MS,
  'rollout.agent.concurrency': int(1, 256),
  'train.steps': STEPS,
  'train.lr': positive(1),
  'train.warmup_steps': int(0, 1_000_000),
  'train.weight_decay': real(0, 1),
  'train.grad_clip': positive(1_000_000),
  'train.micro_batch': int(1, 65_536),
  'train.micro_batch_tokens': int(2, 16_777_216),
  'train.eval_every': STEPS,
  'train.failure_budget': real(0, 1),
  'train.keep_consumed_steps': int(0, 1_000_000),
  'checkpoint.every': STEPS,
  'checkpoint.keep_last': int(1, 10_000),
  'notify.digest_every': int(0, 1_000_000),
  'notify.min_interval_secs': int(0, 86_400),
  'reward.timeout_ms': TIMEOUT_MS,
  'reward.judge.max_new_tokens': int(1, 4096),
  'reward.judge.timeout_ms': TIMEOUT_MS,
  'reward.judge.batch_size': int(1, 4096),
  'env.timeout_ms': TIMEOUT_MS,
  'generate.timeout_ms': TIMEOUT_MS,
  'data.eval_size': int(1, 10_000_000),
  'data.reward.tolerance': real(0, 1_000_000),
  'data.reward.format_weight': real(0, 1),
  'init.sft.lr': positive(1),
  'init.sft.batch_size': int(1, 4096),
  'init.sft.max_steps': int(1, 1_000_000),
  'init.sft.eval_every': int(1, 1_000_000),
  'init.sft.band[]': real(0, 1),
  'init.sft.target': real(0, 1),
} as const satisfies Record<string, NumberBound>;

export type BoundedPath = keyof typeof RUN_CONFIG_BOUNDS;

/** Characters of a path or module name (a file path, a package name, a model name). */
const PATH_CHARS = 1024;
/** Characters of an export or field name. */
const NAME_CHARS = 256;

/** Every string of a run config, by dotted path ("[]": each item of an array): its most characters. */
export const RUN_CONFIG_STRING_BOUNDS = {
  run_id: 64,
  task: PATH_CHARS,
  'model.from': PATH_CHARS,
  'model.audio.from': PATH_CHARS,
  'model.add_special_tokens[]': 128,
  'algorithm.advantage': PATH_CHARS,
  'algorithm.advantage.module': PATH_CHARS,
  'algorithm.advantage.export': NAME_CHARS,
  'algorithm.policy_loss': PATH_CHARS,
  'algorithm.policy_loss.module': PATH_CHARS,
  'algorithm.policy_loss.export': NAME_CHARS,
  'rollout.agent.command[]': PATH_CHARS,
  'checkpoint.dir': PATH_CHARS,
  'checkpoint.init_from': PATH_CHARS,
  'algorithm.teacher.from': PATH_CHARS,
  'reward.module': PATH_CHARS,
  'reward.export': NAME_CHARS,
  'reward.judge.from': PATH_CHARS,
  'reward.judge.prompt_template': 16_384,
  'reward.judge.parse.pattern': PATH_CHARS,
  'reward.judge.parse.module': PATH_CHARS,
  'reward.judge.parse.export': NAME_CHARS,
  'env.module': PATH_CHARS,
  'env.export': NAME_CHARS,
  'generate.module': PATH_CHARS,
  'generate.export': NAME_CHARS,
  'data.train': PATH_CHARS,
  'data.eval': PATH_CHARS,
  'data.prompt_field': NAME_CHARS,
  'data.messages_field': NAME_CHARS,
  'data.answer_field': NAME_CHARS,
  'data.demonstration_field': NAME_CHARS,
  'data.image_field': NAME_CHARS,
  'data.audio_field': NAME_CHARS,
  'data.system_prompt': 4096,
  'data.reward.pattern': PATH_CHARS,
  'data.reward.format_pattern': PATH_CHARS,
} as const satisfies Record<string, number>;

export type StringBoundedPath = keyof typeof RUN_CONFIG_STRING_BOUNDS;

/** Items of an array of a run config, at most. */
export const RUN_CONFIG_ARRAY_BOUNDS = { 'rollout.agent.command': 256, 'model.add_special_tokens': 256 } as const satisfies Record<string, number>;

/** The zod schema of the number at `path`, with its bounds from RUN_CONFIG_BOUNDS. */
export function boundedNumber(path: BoundedPath): z.ZodNumber {
  const b: NumberBound = RUN_CONFIG_BOUNDS[path];
  let s = b.integer ? z.number().int() : z.number();
  s = b.exclusiveMin ? s.gt(b.min) : s.min(b.min);
  s = b.exclusiveMax ? s.lt(b.max) : s.max(b.max);
  return s;
}

/** The zod schema of a non-empty string at `path`, at most RUN_CONFIG_STRING_BOUNDS[path] characters. */
/** Names an `export` field may not take: every object inherits them, none is a module's own export. */
export const RESERVED_EXPORT_NAMES: readonly string[] = ['constructor', '__proto__', 'prototype'];

export function boundedString(path: StringBoundedPath): z.ZodString {
  const max = RUN_CONFIG_STRING_BOUNDS[path];
  const s = z.string().min(1).max(max, `must be at most ${max} characters`);
  if (!path.endsWith('.export')) return s;
  return s.refine((name) => !RESERVED_EXPORT_NAMES.includes(name), {
    message: `must name the module's own export (a function or class it exports); ${RESERVED_EXPORT_NAMES.map((n) => JSON.stringify(n)).join(', ')} are inherited by every object, never exports`,
  });
}

/** True when `value` lies within `bound`. */
export function withinBound(value: number, bound: NumberBound): boolean {
  if (!Number.isFinite(value) || (bound.integer && !Number.isInteger(value))) return false;
  if (bound.exclusiveMin ? value <= bound.min : value < bound.min) return false;
  return bound.exclusiveMax ? value < bound.max : value <= bound.max;
}

/** A bound as docs/configuration.md shows it: "1 ..= 16384 (integer)", "(0, 1]". */
export function describeBound(b: NumberBound): string {
  return `${b.exclusiveMin ? '(' : '['}${b.min}, ${b.max}${b.exclusiveMax ? ')' : ']'}${b.integer ? ' integer' : ''}`;
}
