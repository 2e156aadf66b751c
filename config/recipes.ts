// Every recipe, once: tuned run configs (a config names the first four with `"recipe": "add2"`),
// their SFT warm starts, the calculator, real-model and multimodal bench recipes; the quickstart, the
// benchmarks and the tests start from these. Only data lives here (config/ imports nothing outside
// config/); what trains a warm start from it is training/warm-start.ts (sftRecipeOf, ADD2_SFT,
// calculatorWarmStart). A named recipe's values go *under* the user's (a deep merge: objects merge,
// anything else the user gives wins) before the schema fills its defaults, inside parseRunConfig, so
// every parse agrees and a parsed config parses again to itself.
import path from 'node:path';
import type { SftInitConfig } from './init-config';
import type { RunConfigInput } from './run-config';

/** The recipe names `recipe` accepts. */
export const RECIPE_NAMES = ['add2', 'vision-colour', 'audio-tone', 'zoom'] as const;
export type RecipeName = (typeof RECIPE_NAMES)[number];

/** GRPO on add2 from an SFT warm start (tuned on the 2-core CPU machines, wasm backend). */
export const ADD2_GRPO: RunConfigInput = {
  task: 'add2',
  seed: 0,
  model: { d_model: 64, n_layers: 2, n_heads: 8, d_ff: 256, context_length: 16 },
  algorithm: { advantage: 'grpo', policy_loss: 'ppo_clip', group_size: 8, clip_low: 0.2, clip_high: 0.28, entropy_coef: 0.01 },
  rollout: { prompts_per_step: 128, max_new_tokens: 4, temperature: 1 },
  train: { steps: 500, lr: 1e-3, warmup_steps: 10, lr_decay: 'cosine', grad_clip: 1, micro_batch: 256, eval_every: 20 },
  checkpoint: { every: 20 },
};

/**
 * ADD2_GRPO in async mode, one version of staleness: rollout of iteration i + 1 overlaps the train
 * step on iteration i (docs/benchmarks.md#relax-bench-async). What `relax quickstart` runs: 95%
 * held-out 1.8x sooner than sync through the workflow (docs/results.md).
 */
export const ADD2_GRPO_ASYNC: RunConfigInput = { ...ADD2_GRPO, mode: 'async', max_staleness: 1 };

/** The SFT warm start for ADD2_GRPO: lands inside the 20-60% held-out band the RL run starts from. */
export const ADD2_SFT_INIT: SftInitConfig = { lr: 3e-3, batch_size: 64, max_steps: 4000, eval_every: 10, band: [0.2, 0.6], target: 0.55 };

/**
 * GRPO on the vision-colour task (name the colour of one cell of a 2x2 grid in a 64x64 image) from
 * an SFT warm start: the tiny GPT with the task's vision encoder (8x8 patches, a 4x4 grid).
 * Measured in process here: 56% -> 86% held-out in 100 steps (docs/multimodal.md).
 */
export const VISION_GRPO: RunConfigInput = {
  task: 'vision-colour',
  seed: 0,
  model: { d_model: 64, n_layers: 2, n_heads: 4, d_ff: 128 },
  algorithm: { advantage: 'grpo', policy_loss: 'ppo_clip', group_size: 8, clip_low: 0.2, clip_high: 0.28, entropy_coef: 0.01 },
  rollout: { prompts_per_step: 64, max_new_tokens: 8, temperature: 1 },
  train: { steps: 200, lr: 5e-4, warmup_steps: 5, lr_decay: 'constant', grad_clip: 1, micro_batch: 512, eval_every: 10 },
  checkpoint: { every: 50 },
};

/** The vision warm start: stops inside 45-60% held-out, where GRPO has signal on most prompts. */
export const VISION_SFT_INIT: SftInitConfig = { lr: 3e-3, batch_size: 64, max_steps: 3000, eval_every: 10, band: [0.45, 0.6], target: 0.55 };

/** GRPO on audio-tone (which of two tones is higher) from an SFT warm start; the task's two-block audio encoder. */
export const AUDIO_GRPO: RunConfigInput = {
  ...VISION_GRPO,
  task: 'audio-tone',
  rollout: { prompts_per_step: 32, max_new_tokens: 8, temperature: 1 },
  train: { ...VISION_GRPO.train, steps: 150, micro_batch: 256 },
};

/** The audio warm start: its held-out accuracy jumps from chance to over 70% within 5 steps, so it is checked after every step. */
export const AUDIO_SFT_INIT: SftInitConfig = { lr: 1e-3, batch_size: 64, max_steps: 3000, eval_every: 1, band: [0.45, 0.6], target: 0.53 };

/**
 * GRPO on the zoom environment (multi-turn, image observations, the zoom tool). A cosine decay:
 * at a constant 5e-4 tool use reached 1.0 and the policy then collapsed to one answer; at a
 * constant 2e-4 accuracy peaked and slid back (docs/multimodal.md).
 */
export const ZOOM_GRPO: RunConfigInput = {
  ...VISION_GRPO,
  task: 'zoom',
  rollout: { prompts_per_step: 32, max_new_tokens: 16, temperature: 1 },
  train: { ...VISION_GRPO.train, steps: 150, lr: 3e-4, lr_decay: 'cosine', micro_batch: 256 },
};

/** The zoom warm start: demonstrations of which a tenth zoom (envs/zoom.ts), stopped below 60%. */
export const ZOOM_SFT_INIT: SftInitConfig = { lr: 1e-3, batch_size: 64, max_steps: 3000, eval_every: 10, band: [0.3, 0.6], target: 0.45 };

/** What each recipe name supplies: the GRPO config and its warm start (init.sft). */
export const RECIPES: Record<RecipeName, RunConfigInput> = {
  add2: { ...ADD2_GRPO_ASYNC, init: { sft: ADD2_SFT_INIT } },
  'vision-colour': { ...VISION_GRPO, init: { sft: VISION_SFT_INIT } },
  'audio-tone': { ...AUDIO_GRPO, init: { sft: AUDIO_SFT_INIT } },
  zoom: { ...ZOOM_GRPO, init: { sft: ZOOM_SFT_INIT } },
};

/** The runs of `relax bench multimodal`, by the names its JSON reports: the GRPO config and its warm start. */
export type MultimodalBenchTask = 'vision' | 'audio' | 'zoom';
export const MULTIMODAL_RECIPES: Record<MultimodalBenchTask, { config: RunConfigInput; sft: SftInitConfig }> = {
  vision: { config: VISION_GRPO, sft: VISION_SFT_INIT },
  audio: { config: AUDIO_GRPO, sft: AUDIO_SFT_INIT },
  zoom: { config: ZOOM_GRPO, sft: ZOOM_SFT_INIT },
};

/**
 * GRPO on the calculator environment from a short warm start on demonstrations where only a fifth
 * of the episodes call the tool (training/warm-start.ts calculatorWarmStart); GRPO then has to
 * discover that calling it pays.
 */
export const CALCULATOR_GRPO: RunConfigInput = {
  task: 'calculator',
  seed: 0,
  model: { d_model: 64, n_layers: 2, n_heads: 8, d_ff: 256, context_length: 32 },
  algorithm: { group_size: 8, entropy_coef: 0.01 },
  rollout: { prompts_per_step: 64, max_new_tokens: 8 },
  train: { steps: 100, lr: 1e-3, warmup_steps: 5, lr_decay: 'cosine', micro_batch: 256, eval_every: 10 },
};

/** The shipped arithmetic word problems (examples/data, generated by scripts/make-example-data.js). */
export const EXAMPLE_DATA_DIR = path.resolve(__dirname, '..', '..', 'examples', 'data');

export interface RealModelRecipeOptions {
  /** model.from: a named model, a .gguf file or a Hugging Face directory. */
  modelFrom: string;
  steps: number;
  evalEvery: number;
  promptsPerStep: number;
  groupSize: number;
  lr: number;
  rank: number;
  maxNewTokens: number;
  /** The train and eval files (default: the shipped arithmetic problems). */
  train?: string;
  eval?: string;
  /** train.micro_batch_tokens (default REAL_MODEL_MICRO_BATCH_TOKENS). */
  microBatchTokens?: number;
}

/**
 * The real-model recipe's (LoRA) micro-batch token budget: the engines bench's 8 x ~96-token batch
 * in one micro-batch trains at 140 tokens/s where two of 512 ran at 104. The cost is memory: a
 * SmolLM2 LoRA trainer on a GRPO group batch (8 x 4) peaks near 4.2 GB (4.8 GB before each layer's
 * forward freed what its backward pass does not read; docs/results.md).
 */
export const REAL_MODEL_MICRO_BATCH_TOKENS = 1024;

/**
 * The budget for full fine-tuning of the same model: its trainer also holds the gradients and AdamW's
 * two moments of every weight (1.6 GB more than LoRA on SmolLM2-135M), and its step is as fast at
 * 512 as at 1,024 tokens (104 vs 103 tokens/s), with 0.8 GB less at its peak.
 */
export const FULL_FINETUNE_MICRO_BATCH_TOKENS = 512;

/**
 * GRPO + LoRA on a pretrained instruct model and the shipped arithmetic word problems, graded by the
 * last number of the answer (tuned for SmolLM2-135M-Instruct on the 2-core CPU machines). The
 * trainer runs on the worker's trainer thread (training/trainer-thread.ts), so a micro-batch may
 * compute for longer than the heartbeat timeout: micro-batches are packed by a token budget
 * (REAL_MODEL_MICRO_BATCH_TOKENS) that trades throughput (bigger matmuls, fewer passes) against
 * the activations tfjs keeps for the backward pass (~7 MB a token on SmolLM2; docs/benchmarks.md).
 */
export function realModelRecipe(o: RealModelRecipeOptions): RunConfigInput {
  return {
    seed: 0,
    model: { from: o.modelFrom, context_length: 128 },
    lora: { rank: o.rank, alpha: 2 * o.rank, dropout: 0 },
    data: {
      train: o.train ?? path.join(EXAMPLE_DATA_DIR, 'arith-train.jsonl'),
      eval: o.eval ?? path.join(EXAMPLE_DATA_DIR, 'arith-eval.jsonl'),
      reward: { kind: 'numeric', extract: 'last_number' },
    },
    algorithm: { advantage: 'grpo', policy_loss: 'ppo_clip', group_size: o.groupSize, clip_low: 0.2, clip_high: 0.28 },
    rollout: { prompts_per_step: o.promptsPerStep, max_new_tokens: o.maxNewTokens, temperature: 1 },
    train: { steps: o.steps, lr: o.lr, warmup_steps: 0, lr_decay: 'constant', grad_clip: 1, micro_batch: o.promptsPerStep * o.groupSize, micro_batch_tokens: o.microBatchTokens ?? REAL_MODEL_MICRO_BATCH_TOKENS, eval_every: o.evalEvery },
    checkpoint: { every: 5, keep_last: 3 },
  };
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

/** Sets an own property (a key "__proto__" from JSON stays a key the schema can refuse). */
function setOwn(o: Record<string, unknown>, key: string, value: unknown): void {
  Object.defineProperty(o, key, { value, enumerable: true, writable: true, configurable: true });
}

/** `over` on top of `under`: objects merge key by key, anything else in `over` (an array too) replaces; undefined is "not given". */
// Hand-written: no deep-merge library is a dependency, and these rules (arrays replace, "__proto__" stays an own key) are the point.
export function deepMerge(under: unknown, over: unknown): unknown {
  if (over === undefined) return under;
  if (!isPlainObject(under) || !isPlainObject(over)) return over;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(under)) setOwn(out, k, v);
  for (const [k, v] of Object.entries(over)) setOwn(out, k, deepMerge(out[k], v));
  return out;
}

function at(o: Record<string, unknown>, section: string, key: string): unknown {
  const s = o[section];
  return isPlainObject(s) ? s[key] : undefined;
}

/**
 * The config with its recipe's values under the user's; the input itself when it names no known
 * recipe (an unknown name is left for the schema to refuse, naming `recipe`). Three recipe values
 * give way to what the user's own values imply: the recipe's max_staleness when the user asks for
 * mode "sync", its train.warmup_steps, capped at the user's train.steps, and its init.sft.target
 * when it lies outside the user's own init.sft.band.
 */
export function withRecipe(input: Record<string, unknown>): Record<string, unknown> {
  const name = input.recipe;
  if (typeof name !== 'string' || !(RECIPE_NAMES as readonly string[]).includes(name)) return input;
  const recipe = structuredClone(RECIPES[name as RecipeName]) as Record<string, unknown>;
  if (input.mode === 'sync' && input.max_staleness === undefined) delete recipe.max_staleness;
  const steps = at(input, 'train', 'steps');
  const warmup = at(recipe, 'train', 'warmup_steps');
  if (typeof steps === 'number' && typeof warmup === 'number' && at(input, 'train', 'warmup_steps') === undefined && warmup > steps) {
    setOwn(recipe.train as Record<string, unknown>, 'warmup_steps', Math.max(0, Math.floor(steps)));
  }
  const band = at(isPlainObject(input.init) ? input.init : {}, 'sft', 'band');
  const recipeSft = at(recipe, 'init', 'sft');
  if (Array.isArray(band) && isPlainObject(recipeSft) && typeof recipeSft.target === 'number' && !(recipeSft.target >= band[0] && recipeSft.target <= band[1])) delete recipeSft.target;
  return deepMerge(recipe, input) as Record<string, unknown>;
}
