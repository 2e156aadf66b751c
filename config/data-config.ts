// The `data` section of a run config: a dataset from files (JSONL or Parquet) becomes the task, graded
// by a built-in rule reward (envs/rule-rewards.ts). Keys are snake_case like the rest of the config.
// Defaults that depend on other fields (reward.extract on reward.kind, eval_size on eval, ...) are
// filled by a transform whose output parses again to itself, so a parsed config can be re-validated.
import { z } from 'zod';
import { checkJsonLimits, RUN_CONFIG_JSON_LIMITS, shortened } from './json-limits';
import { boundedNumber as n, boundedString as str } from './run-bounds';

/** Rows held out of `train` for evaluation when no `eval` file is given. */
export const DEFAULT_EVAL_SIZE = 64;
/** numeric reward: |response - answer| <= tolerance * max(1, |answer|) (absolute below 1, relative above). */
export const DEFAULT_NUMERIC_TOLERANCE = 1e-6;
/** Share of the reward that the format check gives when `format_pattern` is set without `format_weight`. */
export const DEFAULT_FORMAT_WEIGHT = 0.1;

function regexProblem(pattern: string): string | undefined {
  try {
    new RegExp(pattern);
    return undefined;
  } catch (err) {
    return (err as Error).message;
  }
}

const RewardKind = z.enum(['exact', 'numeric', 'regex']);
const Extract = z.enum(['none', 'last_number', 'boxed', 'regex']);

/**
 * How a response is graded against a row's answer: `extract` picks the part of the response to
 * compare (the whole text, its last number, its last \boxed{...}, or the last match of `pattern`),
 * `kind` compares it (exact: equal after normalizeAnswer; numeric: equal as numbers within
 * `tolerance`; regex: the row's answer is a regular expression the extracted text must match in
 * full). With `format_pattern`, reward = (1 - format_weight) * correct + format_weight * formatted,
 * where formatted is 1 when the whole response (trimmed) matches format_pattern.
 */
export const DataRewardConfigSchema = z
  .object({
    kind: RewardKind.default('exact'),
    /** Default: "last_number" for numeric, "none" for exact and regex. */
    extract: Extract.optional(),
    /** numeric only; default 1e-6 (see DEFAULT_NUMERIC_TOLERANCE). */
    tolerance: n('data.reward.tolerance').optional(),
    /** The extraction regex of extract "regex": its first capture group (or the whole match) of the LAST match is extracted. */
    pattern: str('data.reward.pattern').optional(),
    /** A regex the whole response (cut at the stop string, trimmed) must match; `.` also matches newlines. */
    format_pattern: str('data.reward.format_pattern').optional(),
    /** In [0, 1]; needs format_pattern; default 0.1 (see DEFAULT_FORMAT_WEIGHT). */
    format_weight: n('data.reward.format_weight').optional(),
  })
  .strict()
  .superRefine((r, ctx) => {
    const extract = r.extract ?? (r.kind === 'numeric' ? 'last_number' : 'none');
    if (r.tolerance !== undefined && r.kind !== 'numeric') {
      ctx.addIssue({ code: 'custom', path: ['tolerance'], message: `applies only to kind "numeric" (kind is "${r.kind}"): remove tolerance or set kind to "numeric"` });
    }
    if (extract === 'regex' && r.pattern === undefined) {
      ctx.addIssue({ code: 'custom', path: ['pattern'], message: 'is required with extract "regex": give the regex whose first capture group is the answer, e.g. "answer: (\\\\S+)"' });
    }
    if (extract !== 'regex' && r.pattern !== undefined) {
      ctx.addIssue({ code: 'custom', path: ['pattern'], message: `is used only with extract "regex" (extract is "${extract}"): set extract to "regex" or remove pattern` });
    }
    if (r.format_weight !== undefined && r.format_pattern === undefined) {
      ctx.addIssue({ code: 'custom', path: ['format_weight'], message: 'needs format_pattern: give the regex the whole response must match, or remove format_weight' });
    }
    for (const key of ['pattern', 'format_pattern'] as const) {
      const pattern = r[key];
      const problem = pattern === undefined ? undefined : regexProblem(pattern);
      if (problem) ctx.addIssue({ code: 'custom', path: [key], message: `is not a valid regular expression (${problem}): fix the pattern (in JSON, backslashes are written twice)` });
    }
  })
  .transform((r) => {
    const out: {
      kind: z.infer<typeof RewardKind>;
      extract: z.infer<typeof Extract>;
      tolerance?: number;
      pattern?: string;
      format_pattern?: string;
      format_weight?: number;
    } = { kind: r.kind, extract: r.extract ?? (r.kind === 'numeric' ? 'last_number' : 'none') };
    if (r.kind === 'numeric') out.tolerance = r.tolerance ?? DEFAULT_NUMERIC_TOLERANCE;
    if (r.pattern !== undefined) out.pattern = r.pattern;
    if (r.format_pattern !== undefined) {
      out.format_pattern = r.format_pattern;
      out.format_weight = r.format_weight ?? DEFAULT_FORMAT_WEIGHT;
    }
    return out;
  });

export const DataConfigSchema = z
  .object({
    /** The training rows: a .jsonl (or .json) or .parquet file; a relative path is resolved against the worker's working directory. */
    train: str('data.train'),
    /** The evaluation rows, in file order. Without it the last `eval_size` rows of train are held out (and not trained on). */
    eval: str('data.eval').optional(),
    /** Only without `eval`: how many rows at the end of train to hold out; default 64. */
    eval_size: n('data.eval_size').optional(),
    /** The field with the prompt text (a string; an array of messages there is read as messages). */
    prompt_field: str('data.prompt_field').default('prompt'),
    /** The field with chat messages: a non-empty array of {role: "system"|"user"|"assistant", content}, ending with a user message. */
    messages_field: str('data.messages_field').default('messages'),
    /** The field with the reference answer (string or number); default "answer", falling back to "label". */
    answer_field: str('data.answer_field').optional(),
    /** The field with what init.sft trains on instead of the answer (a worked solution the reward's answer ends it; e.g. "9 + 5 = 14" for answer 14); default none: the answer. */
    demonstration_field: str('data.demonstration_field').optional(),
    /**
     * The field with a row's images: one source or an array of them, each a file path (relative to
     * the dataset file's directory) or a data URL (Parquet: also binary, or {bytes, path}); PNG or
     * JPEG. Default "images", falling back to "image". The prompt holds one <image> per image, in
     * order, or none (then they are put before the prompt text).
     */
    image_field: str('data.image_field').optional(),
    /** The field with a row's audio clips (WAV), the same forms as images, one <audio> each; default "audio". */
    audio_field: str('data.audio_field').optional(),
    /**
     * "chat": a prompt string becomes one user message rendered by the model's chat template
     * (which adds the generation prompt); "raw": the prompt string is the model's input as is.
     * Messages rows are always rendered by the chat template.
     */
    prompt_format: z.enum(['chat', 'raw']).default('chat'),
    /** Chat only: a system message put first in every prompt that has none of its own. */
    system_prompt: str('data.system_prompt').optional(),
    reward: DataRewardConfigSchema.prefault({}),
  })
  .strict()
  .superRefine((d, ctx) => {
    if (d.eval !== undefined && d.eval_size !== undefined) {
      ctx.addIssue({ code: 'custom', path: ['eval_size'], message: 'is used only without data.eval (it holds out the last rows of data.train): remove eval_size or eval' });
    }
    if (d.system_prompt !== undefined && d.prompt_format === 'raw') {
      ctx.addIssue({ code: 'custom', path: ['system_prompt'], message: 'needs prompt_format "chat" (a raw prompt has no system message): remove system_prompt or set prompt_format to "chat"' });
    }
    if (d.prompt_field === d.messages_field) {
      ctx.addIssue({ code: 'custom', path: ['messages_field'], message: `must differ from prompt_field (both are "${d.prompt_field}")` });
    }
    const others = { prompt_field: d.prompt_field, messages_field: d.messages_field, answer_field: d.answer_field };
    for (const key of ['image_field', 'audio_field'] as const) {
      const clash = Object.entries(others).find(([, v]) => v !== undefined && v === d[key]);
      if (clash) ctx.addIssue({ code: 'custom', path: [key], message: `must differ from ${clash[0]} (both are "${d[key]}")` });
    }
    const imageFields = d.image_field ? [d.image_field] : ['images', 'image'];
    const audioField = d.audio_field ?? 'audio';
    if (imageFields.includes(audioField)) {
      ctx.addIssue({ code: 'custom', path: [d.audio_field ? 'audio_field' : 'image_field'], message: `the image and audio fields must differ (both are "${audioField}")` });
    }
  })
  .transform((d) => (d.eval === undefined ? { ...d, eval_size: d.eval_size ?? DEFAULT_EVAL_SIZE } : d));

/** What a user writes in `data`. */
export type DataConfigInput = z.input<typeof DataConfigSchema>;
/** `data` with defaults filled in. */
export type DataConfig = z.output<typeof DataConfigSchema>;
export type DataRewardConfigInput = z.input<typeof DataRewardConfigSchema>;
/** A resolved rule-reward spec: `extract` always set, `tolerance` set for numeric, `format_weight` with format_pattern. */
export type DataRewardConfig = z.output<typeof DataRewardConfigSchema>;

/** Parses a `data` section; throws an Error whose message lists each problem as `data.<field>: <problem>`. */
export function parseDataConfig(input: unknown): DataConfig {
  const tooBig = checkJsonLimits(input, RUN_CONFIG_JSON_LIMITS);
  if (tooBig) throw new Error(`invalid data config: data${tooBig.path ? `.${tooBig.path}` : ''}: ${tooBig.message}`);
  const result = DataConfigSchema.safeParse(input);
  if (result.success) return result.data;
  const field = (path: PropertyKey[]) => shortened(['data', ...path].map((k) => shortened(String(k), 60)).join('.'), 200);
  const problems = result.error.issues.slice(0, 10).map((issue) => {
    if (issue.code === 'unrecognized_keys') {
      return issue.keys.map((k) => `${field(issue.path)}.${shortened(k, 60)}: unknown field (check the spelling)`).join('; ');
    }
    return `${field(issue.path)}: ${shortened(issue.message, 200)}`;
  });
  throw new Error(shortened(`invalid data config: ${problems.join('; ')}`, 1000));
}
