// A generative reward model (reward.judge, config/judge-config.ts): the judge is shown each sample
// through a prompt template, generates greedily, and its output becomes the sample's reward (a regex
// capture mapped to a number, or a user reward function run in the reward sandbox). Samples go to the
// engine batch_size at a time; a batch whose generate outlasts timeout_ms, a parse call that does,
// or an output that does not parse fails only its own samples (the failure budget counts them).
// The judge model loads like a policy: a Relax checkpoint directory, or any model.from source.
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type { JudgeConfig, JudgeParse } from '../config/judge-config';
import { CHECKPOINT_FORMAT, loadCheckpoint } from '../engines/checkpoint';
import { parseDevice } from '../engines/device';
import { loadHfModel } from '../engines/hf-checkpoint';
import type { ModelConfig } from '../engines/model';
import { resolveModelSource } from '../engines/model-sources';
import type { GenerationEngine } from '../engines/rollout';
import { ThreadedRolloutEngine } from '../engines/rollout-thread';
import { HfTokenizer } from '../engines/tokenizers/hf';
import { stopTokens, withBos, type Tokenizer } from '../engines/tokenizers/tokenizer';
import type { Task, TaskPrompt } from '../envs/task';
import { scoreGroup, withTimeout, type LoadedReward } from '../envs/user-modules';

/** One sample as the judge sees it, with its key in the iteration (a parse function may use it). */
export interface JudgeItem {
  prompt: string;
  response: string;
  answer: string;
  groupIndex: number;
  sampleIndex: number;
}

/** The judge's reward for a sample, or why it has none (the sample fails). */
export type JudgeVerdict = { reward: number; error: null } | { reward: null; error: string };

/** A loaded judge: its engine, its tokenizer, and the context its prompt and output must fit. */
export interface JudgeModel {
  engine: GenerationEngine;
  tokenizer: Tokenizer;
  contextLength: number;
  release(): Promise<void>;
}

/**
 * What a module parse (reward.judge.parse.module, a reward function in the sandbox like
 * reward.module's) is called with as `prompt`: the sample's prompt and answer, its response and key;
 * its `response` is the judge's output.
 */
export type JudgeParsePrompt = TaskPrompt & Pick<JudgeItem, 'response' | 'groupIndex' | 'sampleIndex'>;

/** reward.judge.prompt_template with {prompt}, {response} and {answer} filled in; other braces are kept. */
export function fillJudgePrompt(template: string, fields: Pick<JudgeItem, 'prompt' | 'response' | 'answer'>): string {
  return template.replace(/\{(prompt|response|answer)\}/g, (_, name: 'prompt' | 'response' | 'answer') => fields[name]);
}

/**
 * The reward in a judge's output under a regex parse: the first capture group, through `map` (or
 * read as a number); `default` when it does not match or maps to nothing. Throws naming the output.
 */
export function parseJudgeOutput(parse: Extract<JudgeParse, { pattern: string }>, output: string): number {
  const captured = new RegExp(parse.pattern).exec(output)?.[1];
  const value = captured === undefined ? undefined : parse.map ? parse.map[captured] : captured.trim() === '' ? NaN : Number(captured);
  if (value !== undefined && Number.isFinite(value)) return value;
  if (parse.default !== undefined) return parse.default;
  const why = captured === undefined ? `does not match reward.judge.parse.pattern ${JSON.stringify(parse.pattern)}` : parse.map ? `captured ${JSON.stringify(captured)}, which reward.judge.parse.map has no entry for` : `captured ${JSON.stringify(captured)}, not a number`;
  throw new Error(`the judge's output ${JSON.stringify(output.slice(0, 200))} ${why} (set reward.judge.parse.default to score such outputs)`);
}

/** `items` in consecutive batches of at most `size`. */
export function judgeBatches<T>(items: readonly T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}

/** Loads reward.judge.from: a Relax policy checkpoint directory (with `taskTokenizer`), or a model source as model.from names one. */
export async function loadJudgeModel(from: string, options: { taskTokenizer: Tokenizer; home: string; device?: string }): Promise<JudgeModel> {
  const { model, weights, tokenizer } = (await isPolicyCheckpoint(from))
    ? { ...(await loadCheckpoint(from).then((c) => ({ model: c.info.model, weights: c.weights }))), tokenizer: options.taskTokenizer }
    : await loadHfJudge(from, options.home);
  const engine = await ThreadedRolloutEngine.create(model, options.device ? { device: parseDevice(options.device) } : {});
  try {
    await engine.setWeights(0, weights);
  } catch (err) {
    await engine.release();
    throw err;
  }
  return { engine, tokenizer, contextLength: (model as ModelConfig).contextLength, release: () => engine.release() };
}

async function isPolicyCheckpoint(dir: string): Promise<boolean> {
  try {
    return (JSON.parse(await readFile(path.join(dir, 'config.json'), 'utf8')) as { format?: unknown }).format === CHECKPOINT_FORMAT;
  } catch {
    return false;
  }
}

async function loadHfJudge(from: string, home: string) {
  const dir = await resolveModelSource(from, { home });
  const hf = await loadHfModel(dir);
  return { model: hf.config, weights: hf.weights, tokenizer: HfTokenizer.fromFile(path.join(dir, 'tokenizer.json')) };
}

export interface JudgeRunOptions {
  judge: Pick<JudgeConfig, 'prompt_template' | 'parse' | 'max_new_tokens' | 'timeout_ms' | 'batch_size'>;
  /** A module parse: the loaded reward function and the run's task (scoreGroup's sandbox, timeouts and failure capture). */
  parseModule?: { reward: LoadedReward; task: Task };
  /** A judge whose generate timed out is given back here (its thread may still be busy): the next batch asks for a fresh one. */
  discard(model: JudgeModel): void;
  /** Called after each batch (the activity heartbeats). */
  onBatch?: (done: number) => void;
}

/** The judge's verdict on every item, in order: batches of batch_size, each generate and parse call under timeout_ms. */
export async function judgeItems(model: () => Promise<JudgeModel>, items: readonly JudgeItem[], options: JudgeRunOptions): Promise<JudgeVerdict[]> {
  const verdicts: JudgeVerdict[] = [];
  for (const batch of judgeBatches(items, options.judge.batch_size)) {
    verdicts.push(...(await judgeBatch(await model(), batch, options)));
    options.onBatch?.(verdicts.length);
  }
  return verdicts;
}

const failed = (error: string): JudgeVerdict => ({ reward: null, error: `judge: ${error}` });

async function judgeBatch(model: JudgeModel, batch: readonly JudgeItem[], options: JudgeRunOptions): Promise<JudgeVerdict[]> {
  const { judge } = options;
  const prompts = batch.map((item) => withBos(model.tokenizer, model.tokenizer.encode(fillJudgePrompt(judge.prompt_template, item))));
  const room = model.contextLength - judge.max_new_tokens;
  const fits = prompts.map((p) => p.length <= room);
  let outputs: string[];
  try {
    const generated = await withTimeout('the judge\'s generate', judge.timeout_ms, () =>
      model.engine.generate(prompts.filter((_, i) => fits[i]), { maxNewTokens: judge.max_new_tokens, greedy: true, temperature: 0, stopTokens: stopTokens(model.tokenizer) }),
    );
    outputs = generated.map((g) => model.tokenizer.decode(g.tokens, { skipSpecial: true }));
  } catch (err) {
    if (/timed out/.test((err as Error).message)) options.discard(model);
    return batch.map(() => failed((err as Error).message));
  }
  let next = 0;
  return Promise.all(
    batch.map((item, i) => (fits[i] ? verdictOf(item, outputs[next++], options) : failed(`its prompt is ${prompts[i].length} tokens, over the judge's context (${model.contextLength}) less reward.judge.max_new_tokens (${judge.max_new_tokens}): shorten reward.judge.prompt_template or use a judge with a longer context`))),
  );
}

async function verdictOf(item: JudgeItem, output: string, options: JudgeRunOptions): Promise<JudgeVerdict> {
  const { parse, timeout_ms } = options.judge;
  if ('pattern' in parse) {
    try {
      return { reward: parseJudgeOutput(parse, output), error: null };
    } catch (err) {
      return failed((err as Error).message);
    }
  }
  if (!options.parseModule) return failed('reward.judge.parse.module is set but no parse module was loaded');
  const prompt: JudgeParsePrompt = { text: item.prompt, answer: item.answer, response: item.response, groupIndex: item.groupIndex, sampleIndex: item.sampleIndex };
  const [scored] = await scoreGroup({ task: options.parseModule.task, reward: options.parseModule.reward, prompt, responses: [output], timeoutMs: timeout_ms });
  return scored.error === null && scored.reward !== null ? { reward: scored.reward, error: null } : failed(`reward.judge.parse: ${scored.error}`);
}
