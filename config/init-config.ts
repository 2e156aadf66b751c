// The `init` section of a run config: how policy version 0 is made before RL starts. `init.sft` is
// a supervised warm start on the task's demonstrations, run inside the workflow (the train
// activity `warmStart`, training/warm-start.ts) and cached as a checkpoint, until the held-out
// greedy accuracy lands in `band`. A snake_case mirror of training/warm-start.ts SftRecipe. Its
// numbers have their bounds in config/bounded.ts's one table, like every other number of the config.
import { z } from 'zod';
import { boundedNumber as bounded } from './bounded';
import { TRAINABLE_PARTS } from './trainable-parts';

/** The add2 warm start's values (config/recipes.ts ADD2_SFT_INIT), also init.sft's defaults. */
export const SFT_INIT_DEFAULTS = { lr: 3e-3, batch_size: 64, max_steps: 4000, eval_every: 10, band: [0.2, 0.6] as [number, number] } as const;

export const SftInitConfigSchema = z
  .object({
    /** AdamW learning rate of the supervised steps. */
    lr: bounded('init.sft.lr').default(SFT_INIT_DEFAULTS.lr),
    /** Demonstrations per supervised step (also the trainer's micro-batch). */
    batch_size: bounded('init.sft.batch_size').default(SFT_INIT_DEFAULTS.batch_size),
    /** Supervised steps at most; the warm start fails if the band is not reached by then. */
    max_steps: bounded('init.sft.max_steps').default(SFT_INIT_DEFAULTS.max_steps),
    /** Held-out greedy evaluation every N supervised steps. */
    eval_every: bounded('init.sft.eval_every').default(SFT_INIT_DEFAULTS.eval_every),
    /** The warm start's held-out accuracy must land inside [low, high]... */
    band: z.tuple([bounded('init.sft.band[]'), bounded('init.sft.band[]')]).default([...SFT_INIT_DEFAULTS.band]),
    /** ...and it stops at the first evaluation at or above this (default: band[0]). */
    target: bounded('init.sft.target').optional(),
    /** The parts the supervised steps train (default: train.trainable's), e.g. ["audio_projector"]: a new encoder's projector learns to speak to a frozen LM first. */
    trainable: z.array(z.enum(TRAINABLE_PARTS)).min(1).max(TRAINABLE_PARTS.length).optional(),
  })
  .strict()
  .superRefine((s, ctx) => {
    if (s.band[1] < s.band[0]) ctx.addIssue({ code: 'custom', path: ['band', 1], message: `must be >= init.sft.band[0] (${s.band[0]}); got ${s.band[1]}` });
    if (s.target !== undefined && (s.target < s.band[0] || s.target > s.band[1])) {
      ctx.addIssue({ code: 'custom', path: ['target'], message: `must lie inside init.sft.band [${s.band[0]}, ${s.band[1]}]; got ${s.target}` });
    }
    if (s.eval_every > s.max_steps) ctx.addIssue({ code: 'custom', path: ['eval_every'], message: `must be <= init.sft.max_steps (${s.max_steps}): the warm start is judged at its evaluations; got ${s.eval_every}` });
  });

export const InitConfigSchema = z
  .object({
    /** An SFT warm start before RL (version 0 is its weights unless checkpoint.init_from resolves). */
    sft: SftInitConfigSchema.optional(),
  })
  .strict();

export type SftInitConfig = z.output<typeof SftInitConfigSchema>;
export type InitConfig = z.output<typeof InitConfigSchema>;

/** What `init` needs of the rest of the config (cross-field rules, run by RunConfigSchema). */
export function initConfigProblems(c: { init?: InitConfig; model: { from?: string }; data?: unknown }): Array<{ path: string[]; message: string }> {
  if (!c.init?.sft) return [];
  // The tiny GPT learns a built-in task's demonstrations; a pretrained model its dataset's answers.
  if (c.model.from !== undefined && c.data === undefined) {
    return [{ path: ['init', 'sft'], message: 'on a pretrained model (model.from) trains on a dataset\'s answers: add a data section, or remove init.sft' }];
  }
  return [];
}
