// A run's generative reward model, the judge of `reward.judge`, which scores the samples on its own
// worker role and task queue (activities/judge.ts, rollout/judge.ts): the model it loads, the prompt
// it is shown, how its greedy output becomes a reward, its batching and timeouts. Node-free (zod only).
import { z } from 'zod';
import { boundedNumber as n, boundedString as str } from './run-bounds';

/** The placeholders of reward.judge.prompt_template; {response} is required. */
export const JUDGE_TEMPLATE_FIELDS = ['prompt', 'response', 'answer'] as const;

/** Why `pattern` cannot parse a judge's output (not a regex, or no capture group); undefined when it can. */
export function judgePatternProblem(pattern: string): string | undefined {
  let groups: number;
  try {
    groups = new RegExp(`${pattern}|`).exec('')!.length - 1;
  } catch (err) {
    return `is not a valid regular expression: ${(err as Error).message}`;
  }
  return groups >= 1 ? undefined : `has no capture group: wrap the part of the judge's output that holds the verdict in ( ), e.g. "Score: (\\\\d+)"`;
}

/** A regex over the judge's output: its first capture group, through `map` (or read as a number), is the reward. */
const RegexParseSchema = z
  .object({
    pattern: str('reward.judge.parse.pattern'),
    /** Captured text -> reward (e.g. {"yes": 1, "no": 0}); absent: the captured text read as a number. */
    map: z.record(z.string().max(256), z.number().finite()).optional(),
    /** The reward when the pattern does not match (or the capture is not in `map`); absent: the sample fails. */
    default: z.number().finite().optional(),
  })
  .strict()
  .superRefine((p, ctx) => {
    const problem = judgePatternProblem(p.pattern);
    if (problem) ctx.addIssue({ code: 'custom', path: ['pattern'], message: problem });
  });

/** A user function ({ output, prompt, response, answer, groupIndex, sampleIndex }) => reward, run in the reward sandbox. */
const ModuleParseSchema = z
  .object({
    module: str('reward.judge.parse.module'),
    export: str('reward.judge.parse.export').default('default'),
  })
  .strict();

export const JudgeConfigSchema = z
  .object({
    /** A Relax policy checkpoint directory (tiny GPT, the run task's tokenizer) or a model source as in model.from (Hugging Face directory, .gguf, named model). */
    from: str('reward.judge.from'),
    /** What the judge is shown per sample: {prompt}, {response} and {answer} are filled in. */
    prompt_template: str('reward.judge.prompt_template').refine((t) => t.includes('{response}'), {
      message: 'must contain {response} (the sample the judge scores); {prompt} and {answer} are filled in too',
    }),
    parse: z.union([RegexParseSchema, ModuleParseSchema]),
    /** Greedy tokens the judge generates per sample. */
    max_new_tokens: n('reward.judge.max_new_tokens').default(8),
    /** Per batch generate and per parse call: one that takes longer fails its samples only. */
    timeout_ms: n('reward.judge.timeout_ms').default(60_000),
    /** Samples per engine generate call. */
    batch_size: n('reward.judge.batch_size').default(32),
  })
  .strict();

export type JudgeConfig = z.infer<typeof JudgeConfigSchema>;
export type JudgeParse = JudgeConfig['parse'];

/**
 * What reward.judge cannot run with, each naming the field and the way out: the judge scores an
 * iteration after its rollout, so nothing that needs the reward while generating (DAPO's dynamic
 * sampling and overlong shaping) and no colocated step (rollout and update in one activity).
 */
export function judgeProblems(c: { placement: string; reward: { judge?: unknown }; algorithm: { dapo?: { dynamic_sampling?: unknown; overlong_penalty?: unknown } } }): Array<{ path: string[]; message: string }> {
  if (!c.reward.judge) return [];
  const problems: Array<{ path: string[]; message: string }> = [];
  const why = 'the judge scores an iteration after its rollout, on the judge queue';
  if (c.placement === 'colocated') problems.push({ path: ['reward', 'judge'], message: `needs placement "stages": ${why}, and a colocated step generates and trains in one activity` });
  if (c.algorithm.dapo?.dynamic_sampling) problems.push({ path: ['algorithm', 'dapo', 'dynamic_sampling'], message: `cannot be used with reward.judge: ${why}, and dynamic sampling needs rewards while generating` });
  if (c.algorithm.dapo?.overlong_penalty) problems.push({ path: ['algorithm', 'dapo', 'overlong_penalty'], message: `cannot be used with reward.judge: ${why}, and the penalty is added to the reward while generating` });
  return problems;
}
