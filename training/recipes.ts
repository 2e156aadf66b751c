// Tuned starting points, as plain run configs: the quickstart, the benchmarks and the tests start
// from these and override what they need.
import type { RunConfigInput } from '../config/run-config';
import type { SftRecipe } from './warm-start';

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

/** The SFT warm start for ADD2_GRPO: lands inside the 20-60% held-out band the RL run starts from. */
export const ADD2_SFT: SftRecipe = { lr: 3e-3, batchSize: 64, maxSteps: 4000, evalEvery: 10, band: [0.2, 0.6], target: 0.55 };
