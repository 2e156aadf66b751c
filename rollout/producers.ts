// Score and group a rollout: one slice of an iteration's prompt groups becomes transfer-queue
// samples, in one of four ways a run can produce them: single-turn generation scored by a reward,
// multi-turn episodes against an environment, a user generate function in full control of each
// group, or an external agent program driving the policy through the OpenAI-compatible endpoint.
// Each way is a producer registered by name (registerProducer; producerNameFor picks a run's). The
// rollout activity and the in-process loop both call rolloutSlice, with the same seeds.
import type { RunConfig } from '../config/run-config';
import { dynamicSamplingSeed, generateGroupSeed, promptSeed, rolloutSeed } from '../config/seeds';
import { applyOverlong, dynamicSamplingDone, groupHasSignal, looksTruncated, selectSignalGroups, type DapoCounts } from '../engines/rl/dapo';
import type { GeneratedSample, GenerationEngine, SamplingParams } from '../engines/rollout';
import { stopTokens, withBos, type Tokenizer } from '../engines/tokenizers/tokenizer';
import type { EnvironmentClass } from '../envs/interaction';
import { checkAgentCommandAllowed } from '../envs/module-policy';
import { callUserFunction, loadRewardFunction, loadUserExport, scoreGroup, type LoadedReward } from '../envs/user-modules';
import type { Task, TaskPrompt } from '../envs/task';
import type { NewSample } from '../store/transfer-queue';
import { rolloutEpisodes } from './episodes';
import { mediaPromptsOf, type MediaPrompts } from './media-prompts';
import { runAgentEpisodes, type AgentSessions } from './agent-rollout';

/** The token ids a prompt is conditioned on: bos, then the prompt text. */
export function promptTokens(tokenizer: Tokenizer, prompt: TaskPrompt): number[] {
  return withBos(tokenizer, tokenizer.encode(prompt.text));
}

export function samplingParams(rollout: RunConfig['rollout'], stop: number[], seed: number): SamplingParams {
  return {
    maxNewTokens: rollout.max_new_tokens,
    temperature: rollout.temperature,
    topP: rollout.top_p,
    topK: rollout.top_k,
    stopTokens: stop,
    seed,
  };
}

/** The prompts of one iteration, the same on every rollout worker and every retry. */
export function iterationPrompts(config: RunConfig, task: Task, iteration: number): TaskPrompt[] {
  return task.trainPrompts(promptSeed(config.seed, iteration), config.rollout.prompts_per_step);
}

/** The groups [firstGroup, firstGroup + groups) of rollout iteration `iteration`. */
export interface RolloutSlice {
  iteration: number;
  firstGroup: number;
  groups: number;
}

export interface RolloutContext {
  config: RunConfig;
  task: Task;
  /** The policy, at the version this slice is generated with. */
  engine: GenerationEngine;
  /** rollout.agent: the OpenAI-compatible endpoint the agent programs talk to. */
  agentEndpoint?: () => Promise<AgentEndpoint>;
  /** rollout.in_flight "continue": switches the engine to newer versions between decode steps. */
  followUpdates?: Pick<SamplingParams, 'followUpdates' | 'beforeDecodeStep'>;
  /** Prompts with images or audio: processes their media and puts them in the run's media store. */
  media?: MediaPrompts;
}

/** Makes rows for a slice's prompts (group_size per prompt, groups adjacent). */
export type Producer = (ctx: RowsContext, prompts: TaskPrompt[]) => Promise<RolloutRow[]>;
/** Makes a rollout's producer; `rollout` is the slice's context (its agent endpoint, for one). */
export type ProducerFactory = (rollout: RolloutContext) => Producer;

export interface ProducerDefinition {
  name: string;
  create: ProducerFactory;
}

const producers = new Map<string, ProducerDefinition>();

export function registerProducer(definition: ProducerDefinition): void {
  if (producers.has(definition.name)) throw new Error(`a producer named "${definition.name}" is already registered`);
  producers.set(definition.name, definition);
}

export function producerNames(): string[] {
  return [...producers.keys()];
}

/** The factory of the producer registered as `name`; an unknown name is an error naming the known ones. */
export function producer(name: string): ProducerFactory {
  const definition = producers.get(name);
  if (!definition) throw new Error(`unknown producer ${JSON.stringify(name)}: use one of ${producerNames().join(', ')}`);
  return definition.create;
}

/** The producer a run uses: an agent program (rollout.agent), a generate function (generate.module), an environment's episodes, or single-turn generation. */
export function producerNameFor(config: RunConfig, task: Task): string {
  if (config.rollout.agent) return 'agent';
  if (config.generate.module) return 'generate';
  if (task.interaction) return 'episodes';
  return 'single-turn';
}

registerProducer({ name: 'single-turn', create: () => singleTurnRows });
registerProducer({ name: 'episodes', create: () => episodeRows });
registerProducer({ name: 'generate', create: () => customGenerateRows });
registerProducer({
  name: 'agent',
  create: ({ agentEndpoint }) =>
    async (c, p) => {
      if (!agentEndpoint) throw new Error('rollout.agent is set but this rollout has no agent endpoint');
      return agentRows(c, await agentEndpoint(), p);
    },
});

/**
 * Generates group_size samples for each prompt of the slice, scores them, and returns them as
 * transfer-queue samples keyed (iteration, group, index). A reward or episode that fails marks only
 * its own sample failed, with the error; the rest of its group still trains. Rejects with
 * UserModuleError for a user module that cannot be used. With algorithm.dapo, DAPO's rules apply
 * (rolloutSliceWithStats).
 */
export async function rolloutSlice(ctx: RolloutContext, slice: RolloutSlice): Promise<NewSample[]> {
  return (await rolloutSliceWithStats(ctx, slice)).samples;
}

type PromptGroup = { prompt: TaskPrompt; rows: RolloutRow[] };

/** Round `round` of a slice: round 0 is the iteration's own prompts, extra rounds (dynamic sampling) draw fresh ones with their own seeds. */
async function sliceRound(ctx: RolloutContext, produce: Producer, slice: RolloutSlice, round: number): Promise<PromptGroup[]> {
  const { config, task } = ctx;
  const G = config.algorithm.group_size;
  const all = round === 0 ? iterationPrompts(config, task, slice.iteration) : task.trainPrompts(dynamicSamplingSeed(promptSeed(config.seed, slice.iteration), round), config.rollout.prompts_per_step);
  const prompts = all.slice(slice.firstGroup, slice.firstGroup + slice.groups);
  const sliceSeed = rolloutSeed(config.seed, slice.iteration, slice.firstGroup);
  const seed = round === 0 ? sliceSeed : dynamicSamplingSeed(sliceSeed, round);
  const sampling = { ...samplingParams(config.rollout, stopTokens(task.tokenizer()), seed), ...ctx.followUpdates };
  const media = ctx.media ?? (prompts.some((p) => p.media?.length) ? mediaPromptsOf(ctx.engine) : undefined);
  const rows = await produce({ config, task, engine: ctx.engine, sampling, seed, ...(media ? { media } : {}) }, prompts);
  return prompts.map((prompt, g) => ({ prompt, rows: rows.slice(g * G, (g + 1) * G) }));
}

/**
 * rolloutSlice, with DAPO's counts when algorithm.dapo is set: dynamic sampling draws extra rounds
 * until the slice holds `groups` groups with signal (engines/rl/dapo.ts), kept groups take the
 * slice's keys in order (a retry writes the same keys); then overlong shaping and filtering.
 */
export async function rolloutSliceWithStats(ctx: RolloutContext, slice: RolloutSlice): Promise<{ samples: NewSample[]; dapo?: DapoCounts }> {
  const { config, task } = ctx;
  const dapo = config.algorithm.dapo;
  const produce = producer(producerNameFor(config, task))(ctx);
  const generated: PromptGroup[] = [];
  const signal = (g: PromptGroup) => groupHasSignal(g.rows.map((r) => r.reward));
  let rounds = 0;
  const more = () => rounds === 0 || (dapo?.dynamic_sampling !== undefined && !dynamicSamplingDone(generated.filter(signal).length, slice.groups, rounds, dapo.dynamic_sampling.max_extra_rounds));
  while (more()) generated.push(...(await sliceRound(ctx, produce, slice, rounds++)));
  const selection = dapo?.dynamic_sampling ? selectSignalGroups(generated, slice.groups, signal) : { kept: generated, filtered: 0, filledWithoutSignal: 0 };
  const stop = stopTokens(task.tokenizer());
  const maxTokens = config.rollout.max_new_tokens;
  const penalty = dapo?.overlong_penalty ? { cacheTokens: dapo.overlong_penalty.cache_tokens, factor: dapo.overlong_penalty.factor } : undefined;
  const counts: DapoCounts = { groups: generated.length, filteredGroups: selection.filtered, filledGroups: selection.filledWithoutSignal, extraRounds: rounds - 1, samples: 0, truncated: 0, masked: 0, penaltySum: 0 };
  const samples = selection.kept.flatMap(({ prompt, rows }, k) =>
    rows.map((r, i): NewSample => {
      const policyTokens = r.lossMask.reduce((n, m) => n + m, 0);
      const truncated = r.truncated ?? looksTruncated(r.responseTokens, policyTokens, maxTokens, stop);
      const shaped = dapo ? applyOverlong({ lossMask: r.lossMask, reward: r.reward, truncated }, { maxTokens, filter: dapo.overlong_filter, ...(penalty ? { penalty } : {}) }) : { reward: r.reward, lossMask: r.lossMask, penalty: 0 };
      counts.samples++;
      counts.truncated += Number(truncated);
      counts.masked += Number(dapo?.overlong_filter === true && truncated);
      counts.penaltySum += shaped.penalty;
      const rewards = penalty && r.reward !== null ? { ...r.rewards, task: r.reward, overlong_penalty: shaped.penalty } : r.rewards;
      return {
        iteration: slice.iteration, groupIndex: slice.firstGroup + k, sampleIndex: i,
        promptTokens: r.promptTokens, responseTokens: r.responseTokens, lossMask: shaped.lossMask, rolloutLogprobs: r.rolloutLogprobs,
        reward: shaped.reward, ...(rewards ? { rewards } : {}),
        policyVersion: r.policyVersion, ...(r.tokenVersions ? { tokenVersions: r.tokenVersions } : {}),
        ...(r.mediaIds?.length ? { media: r.mediaIds } : {}),
        // Scored: ready to train on (advantages come from the train batch); with reward.judge, generated: the judge role scores it next.
        ...(r.error !== null ? { status: 'failed' as const, error: `on prompt ${JSON.stringify(prompt.text)}: ${r.error}` } : { status: config.reward.judge ? ('generated' as const) : ('scored' as const) }),
      };
    }),
  );
  return { samples, ...(dapo ? { dapo: counts } : {}) };
}

/** Generates groupSize responses per prompt (groups adjacent), without scoring them. */
async function generateGroups(engine: GenerationEngine, task: Task, prompts: readonly TaskPrompt[], groupSize: number, sampling: SamplingParams, media?: MediaPrompts) {
  const tokenizer = task.tokenizer();
  const inputs = await Promise.all(prompts.map((p) => (media && p.media?.length ? media.prompt(tokenizer, p) : { tokens: promptTokens(tokenizer, p) })));
  const repeat = <T>(xs: T[]): T[] => xs.flatMap((x) => Array.from({ length: groupSize }, () => x));
  const contexts = repeat(inputs.map((i) => i.tokens));
  const withMedia = inputs.some((i) => 'media' in i && i.media);
  const samples = await engine.generate(contexts, sampling, ...(withMedia ? [repeat(inputs.map((i) => ('media' in i ? i.media : undefined)))] : []));
  return { contexts, samples, mediaIds: repeat(inputs.map((i) => ('mediaIds' in i ? i.mediaIds : undefined))) };
}

export interface RolloutRow {
  promptTokens: number[];
  responseTokens: number[];
  lossMask: number[];
  rolloutLogprobs: number[];
  tokenVersions?: number[];
  policyVersion: number;
  reward: number | null;
  rewards?: Record<string, number>;
  error: string | null;
  /** The media ids of the sample's tokens, in placeholder order. */
  mediaIds?: string[];
  /** It hit max_new_tokens (or the context) without a stop token; unset: judged from its tokens (looksTruncated). */
  truncated?: boolean;
}

/** What a user generate function (generate.module) is given for one prompt group. */
export interface GenerateFunctionInput {
  prompt: TaskPrompt;
  groupSize: number;
  task: string;
  tokenizer: Tokenizer;
  seed: number;
  /** Samples from the current policy: one result per context (token ids; start them with tokenizer.bosId). */
  generate(contexts: number[][], params?: Partial<Pick<SamplingParams, 'maxNewTokens' | 'temperature' | 'topP' | 'topK' | 'stopTokens' | 'seed'>>): Promise<GeneratedSample[]>;
}

/** One sample as a user generate function returns it. */
export interface GeneratedTrajectory {
  promptTokens: number[];
  responseTokens: number[];
  /** Per response token; default all 1. */
  lossMask?: number[];
  /** Per response token: the policy's log-probs (0 where lossMask is 0). */
  logprobs: number[];
  /** When absent, the task's reward (or reward.module) scores the decoded response. */
  reward?: number;
}

export type GenerateFunction = (input: GenerateFunctionInput) => GeneratedTrajectory[] | Promise<GeneratedTrajectory[]>;

export interface RowsContext {
  config: RunConfig;
  task: Task;
  engine: GenerationEngine;
  sampling: SamplingParams;
  /** Seeds environments and user generate functions (differs per iteration and slice). */
  seed: number;
  media?: MediaPrompts;
}

/** Scores single-turn responses (or whole transcripts) with reward.module or the task's reward. */
async function score(ctx: RowsContext, reward: LoadedReward | undefined, prompts: TaskPrompt[], responses: string[][]): Promise<Array<{ reward: number | null; error: string | null }>> {
  const scored = await Promise.all(prompts.map((prompt, g) => scoreGroup({ task: ctx.task, reward, prompt, responses: responses[g], timeoutMs: ctx.config.reward.timeout_ms })));
  return scored.flat().map((s) => ({ reward: s.reward, error: s.error === null ? null : `reward: ${s.error}` }));
}

async function singleTurnRows(ctx: RowsContext, prompts: TaskPrompt[]): Promise<RolloutRow[]> {
  const G = ctx.config.algorithm.group_size;
  const tokenizer = ctx.task.tokenizer();
  const batch = await generateGroups(ctx.engine, ctx.task, prompts, G, ctx.sampling, ctx.media);
  const responses = batch.samples.map((s) => tokenizer.decode(s.tokens));
  const scores = await score(ctx, await loadRewardFunction(ctx.config.reward), prompts, prompts.map((_, g) => responses.slice(g * G, (g + 1) * G)));
  return batch.samples.map((s, i) => ({
    promptTokens: batch.contexts[i],
    responseTokens: s.tokens,
    lossMask: s.tokens.map(() => 1),
    rolloutLogprobs: s.logprobs,
    ...(s.tokenVersions ? { tokenVersions: s.tokenVersions } : {}),
    policyVersion: s.policyVersion,
    ...(batch.mediaIds[i] ? { mediaIds: batch.mediaIds[i] } : {}),
    truncated: s.finishReason !== 'stop',
    ...scores[i],
  }));
}

export async function episodeRows(ctx: RowsContext, prompts: TaskPrompt[]): Promise<RolloutRow[]> {
  const G = ctx.config.algorithm.group_size;
  const envClass = ctx.config.env.module ? ((await loadUserExport('env', ctx.config.env.module, ctx.config.env.export)) as EnvironmentClass) : undefined;
  const episodes = await rolloutEpisodes(ctx.engine, ctx.task, prompts.flatMap((p) => Array.from({ length: G }, () => p)), ctx.sampling, {
    timeoutMs: ctx.config.env.timeout_ms,
    envSeed: ctx.seed,
    ...(ctx.media ? { media: ctx.media } : {}),
    ...(envClass ? { createEnv: ({ seed }) => new envClass({ task: ctx.task.name, seed }) } : {}),
  });
  // reward.module, when set, scores the whole transcript (after the first observation) instead.
  const reward = await loadRewardFunction(ctx.config.reward);
  const tokenizer = ctx.task.tokenizer();
  const rescored = reward
    ? await score(ctx, reward, prompts, prompts.map((_, g) => episodes.slice(g * G, (g + 1) * G).map((e) => tokenizer.decode(e.responseTokens))))
    : undefined;
  return episodes.map((e, i) => {
    const s = rescored?.[i];
    const error = e.error !== null ? `environment: ${e.error}` : (s?.error ?? null);
    return {
      promptTokens: e.promptTokens,
      responseTokens: e.responseTokens,
      lossMask: e.lossMask,
      rolloutLogprobs: e.logprobs,
      tokenVersions: e.tokenVersions,
      policyVersion: e.policyVersion,
      reward: error !== null ? null : (s ? s.reward : e.reward),
      rewards: Object.fromEntries(e.turnRewards.map((r, t) => [`turn_${t + 1}`, r])),
      error,
      ...(e.mediaIds.length ? { mediaIds: e.mediaIds } : {}),
    };
  });
}

function checkTrajectory(t: GeneratedTrajectory, vocabSize: number): string | null {
  if (!t || typeof t !== 'object') return `returned ${String(t)}, not a trajectory object`;
  const ids = (name: string, xs: unknown): string | null =>
    Array.isArray(xs) && xs.every((x) => Number.isInteger(x) && x >= 0 && x < vocabSize) ? null : `${name} must be an array of token ids in [0, ${vocabSize})`;
  const problem = ids('promptTokens', t.promptTokens) ?? ids('responseTokens', t.responseTokens);
  if (problem) return problem;
  if (t.promptTokens.length === 0) return 'promptTokens is empty (start it with the tokenizer\'s bos)';
  if (!Array.isArray(t.logprobs) || t.logprobs.length !== t.responseTokens.length || !t.logprobs.every(Number.isFinite)) return 'logprobs must hold one finite number per response token';
  if (t.lossMask !== undefined && (!Array.isArray(t.lossMask) || t.lossMask.length !== t.responseTokens.length || !t.lossMask.every((m) => m === 0 || m === 1))) return 'lossMask must hold one 0 or 1 per response token';
  if (t.reward !== undefined && !(typeof t.reward === 'number' && Number.isFinite(t.reward))) return `reward is ${String(t.reward)}, not a finite number`;
  return null;
}

export async function customGenerateRows(ctx: RowsContext, prompts: TaskPrompt[]): Promise<RolloutRow[]> {
  const G = ctx.config.algorithm.group_size;
  const fn = (await loadUserExport('generate', ctx.config.generate.module as string, ctx.config.generate.export)) as GenerateFunction;
  const tokenizer = ctx.task.tokenizer();
  const vocab = tokenizer.vocabSize;
  const rewardFn = await loadRewardFunction(ctx.config.reward);
  const groups = await Promise.all(
    prompts.map(async (prompt, g): Promise<RolloutRow[]> => {
      let oldest = ctx.engine.policyVersion ?? 0;
      const input: GenerateFunctionInput = {
        prompt: { ...prompt },
        groupSize: G,
        task: ctx.task.name,
        tokenizer,
        seed: generateGroupSeed(ctx.seed, g),
        generate: async (contexts, params = {}) => {
          const out = await ctx.engine.generate(contexts, { ...ctx.sampling, ...params });
          for (const s of out) oldest = Math.min(oldest, s.policyVersion);
          return out;
        },
      };
      const failAll = (error: string): RolloutRow[] =>
        Array.from({ length: G }, () => ({ promptTokens: [tokenizer.bosId], responseTokens: [], lossMask: [], rolloutLogprobs: [], policyVersion: oldest, reward: null, error: `generate: ${error}` }));
      let trajectories: GeneratedTrajectory[];
      try {
        trajectories = await callUserFunction<GeneratedTrajectory[]>('the generate function', ctx.config.generate.timeout_ms, fn, input);
      } catch (err) {
        return failAll(`the generate function failed: ${(err as Error).message ?? String(err)}`);
      }
      if (!Array.isArray(trajectories) || trajectories.length !== G) return failAll(`the generate function returned ${Array.isArray(trajectories) ? trajectories.length : String(trajectories)} trajectories for a group of ${G}: return exactly group_size`);
      const problems = trajectories.map((t) => checkTrajectory(t, vocab));
      const unscored = trajectories.map((t, i) => (problems[i] === null && t.reward === undefined ? i : -1)).filter((i) => i >= 0);
      const scores = unscored.length ? (await score(ctx, rewardFn, [prompt], [unscored.map((i) => tokenizer.decode(trajectories[i].responseTokens))])) : [];
      return trajectories.map((t, i) => {
        if (problems[i] !== null) return failAll(`trajectory ${i}: ${problems[i]}`)[0];
        const scored = unscored.includes(i) ? scores[unscored.indexOf(i)] : { reward: t.reward as number, error: null };
        return {
          promptTokens: t.promptTokens,
          responseTokens: t.responseTokens,
          lossMask: t.lossMask ?? t.responseTokens.map(() => 1),
          rolloutLogprobs: t.logprobs,
          policyVersion: oldest,
          ...scored,
        };
      });
    }),
  );
  return groups.flat();
}

/** The rollout worker's endpoint, for agent-driven rollouts (rollout.agent). */
export interface AgentEndpoint {
  url: string;
  sessions: AgentSessions;
  /** The model name that means this run's current policy. */
  model: string;
}

/** One agent program run per sample; its session on the endpoint is the sample, its report the reward. */
async function agentRows(ctx: RowsContext, endpoint: AgentEndpoint, prompts: TaskPrompt[]): Promise<RolloutRow[]> {
  const agent = ctx.config.rollout.agent;
  if (!agent) throw new Error('rollout.agent is not configured');
  // This worker's allow-list decides, whatever the run config says (NotAllowedError).
  checkAgentCommandAllowed(agent.command);
  const G = ctx.config.algorithm.group_size;
  const bos = ctx.task.tokenizer().bosId;
  const episodes = await runAgentEpisodes({
    command: agent.command,
    serverUrl: endpoint.url,
    model: endpoint.model,
    prompts: prompts.flatMap((p) => Array.from({ length: G }, () => p)),
    sessions: endpoint.sessions,
    timeoutMs: agent.timeout_ms,
    concurrency: agent.concurrency,
    sessionPrefix: `seed${ctx.seed}`,
  });
  // A session's images and clips (sent in chat messages) go to the run's media store; the sample keeps their ids.
  for (const e of episodes) for (const m of e.sample?.media ?? []) await ctx.media?.store?.put(m.bytes, { kind: m.kind, format: m.format });
  return episodes.map((e) => {
    const s = e.sample;
    const mediaIds = s?.mediaIds?.length ? { mediaIds: s.mediaIds } : {};
    if (!s || e.error !== null) {
      return { promptTokens: s?.promptTokens ?? [bos], responseTokens: s?.responseTokens ?? [], lossMask: s?.lossMask ?? [], rolloutLogprobs: s?.rolloutLogprobs ?? [], ...(s ? { tokenVersions: s.tokenVersions } : {}), policyVersion: s?.policyVersion ?? ctx.engine.policyVersion ?? 0, reward: null, error: `agent: ${e.error ?? 'no sample recorded'}`, ...mediaIds };
    }
    return { promptTokens: s.promptTokens, responseTokens: s.responseTokens, lossMask: s.lossMask, rolloutLogprobs: s.rolloutLogprobs, tokenVersions: s.tokenVersions, policyVersion: s.policyVersion, reward: e.reward, error: null, ...mediaIds };
  });
}
