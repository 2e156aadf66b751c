// Multi-turn rollouts: the policy and an environment take turns until the episode ends. All
// episodes of a call advance in lockstep, one turn at a time, so each turn is one batched
// generation. The policy's tokens get loss mask 1 and their log-probs; the environment's
// observations get loss mask 0 and log-prob 0 (they are context, not actions). The whole trajectory
// is one sample: promptTokens = bos + the first observation, responseTokens = everything after.
// Images and audio of observations (the first one's usually the prompt's) accumulate in the
// episode's context: every turn is conditioned on all of them, their placeholder positions carry
// loss mask 0 like any observation token, and the sample keeps their ids in order.
import { episodeTurnSeed } from '../config/seeds';
import type { GenerationEngine, SamplingParams } from '../engines/rollout';
import { withBos, type Tokenizer } from '../engines/tokenizers/tokenizer';
import type { SequenceMedia } from '../engines/media/model-inputs';
import type { Environment, InteractionSpec, Observation, StepResult } from '../envs/interaction';
import type { PromptMedium, Task, TaskPrompt } from '../envs/task';
import { SandboxEnvironment } from '../envs/sandbox-proxies';
import { callEnvironment } from '../envs/user-modules';
import { mediaPromptsOf, type MediaPrompts } from './media-prompts';

export type EpisodeEnd = 'terminated' | 'truncated' | 'max_turns' | 'context_full' | 'error';

export interface Episode {
  promptTokens: number[];
  responseTokens: number[];
  /** Per response token: 1 for the policy's tokens, 0 for observations. */
  lossMask: number[];
  /** Per response token: the policy's log-prob, 0 for observations. */
  logprobs: number[];
  /** Per response token: the version that generated it (observations take the turn's version). */
  tokenVersions: number[];
  /** The oldest version that generated a token. */
  policyVersion: number;
  /** Sum of the turn rewards; null when the episode failed (error set). */
  reward: number | null;
  turnRewards: number[];
  turns: number;
  end: EpisodeEnd;
  /** The last step's info (numeric fields feed evaluation metrics). */
  info: Record<string, unknown>;
  error: string | null;
  /** The whole transcript, specials kept (what a transcript-level reward module sees). */
  text: string;
  /** The ids of the episode's media in placeholder order (prompt, then observations). */
  mediaIds: string[];
}

export interface EpisodeOptions {
  /** Per environment call (reset / step): a call that takes longer fails its episode. */
  timeoutMs: number;
  /** Seeds each episode's environment (episode i gets seed + i). */
  envSeed: number;
  /** Overrides the task's environment (a user class from env.module). */
  createEnv?: InteractionSpec['createEnv'];
  /** Processes (and stores) observation media; default: the engine's in-memory cache. */
  media?: MediaPrompts;
}

function checkStep(result: StepResult): StepResult {
  if (result === null || typeof result !== 'object') throw new Error(`step() returned ${String(result)}: return { observation, reward, terminated, truncated }`);
  if (typeof result.reward !== 'number' || !Number.isFinite(result.reward)) throw new Error(`step() returned reward ${String(result.reward)}: it must be a finite number`);
  if (typeof result.observation !== 'string') throw new Error(`step() returned observation ${String(result.observation)}: it must be a string ("" for none)`);
  if (result.media !== undefined && !Array.isArray(result.media)) throw new Error('step() returned media that is not an array: return media: [{ kind, format, bytes }] in placeholder order');
  return result;
}

/** reset()'s first observation as text and media: a string takes the prompt's media when it has placeholders. */
function firstObservation(first: string | Observation, prompt: TaskPrompt): { text: string; media: PromptMedium[] } {
  if (typeof first === 'string') return { text: first, media: /<image>|<audio>/.test(first) ? (prompt.media ?? []) : [] };
  if (!first || typeof first.text !== 'string') throw new Error(`reset() returned ${JSON.stringify(first)}: return the observation text, or { text, media }`);
  return { text: first.text, media: first.media ?? [] };
}

function appendMedia(to: SequenceMedia, more: SequenceMedia | undefined): void {
  if (!more) return;
  to.images.push(...more.images);
  to.audio.push(...more.audio);
}

interface Live {
  index: number;
  env: Environment;
  episode: Episode;
  /** bos + every token so far (what the next turn is conditioned on). */
  context: number[];
  /** The processed media of the context so far. */
  media: SequenceMedia;
}

/** Frees a sandboxed environment instance that will not be closed (its episode ended before it began). */
function releaseEnvironment(env: Environment | undefined): void {
  if (env instanceof SandboxEnvironment) env.release();
}

/** Token ids of the texts that end a policy turn (each must be one token of the tokenizer). */
export function turnStopIds(tokenizer: Tokenizer, spec: InteractionSpec): number[] {
  return [
    tokenizer.eosId,
    ...spec.turnStops.map((text) => {
      const ids = tokenizer.encode(text);
      if (ids.length !== 1) throw new Error(`turn stop ${JSON.stringify(text)} is ${ids.length} tokens: each turn stop must be one token of the task's tokenizer`);
      return ids[0];
    }),
  ];
}

/**
 * Rolls out one episode per prompt (repeat prompts for groups). `sampling.maxNewTokens` is
 * replaced per turn by the task's maxTurnTokens; `sampling.seed` is varied per turn.
 * Over 80 lines because the turn loop (generate, the environment's step, tool calls, budgets) shares
 * every episode's running state; not yet split (issue 33).
 */
export async function rolloutEpisodes(engine: GenerationEngine, task: Task, prompts: readonly TaskPrompt[], sampling: SamplingParams, options: EpisodeOptions): Promise<Episode[]> {
  const spec = task.interaction;
  if (!spec) throw new Error(`task ${task.name} is single-turn: it has no interaction environment`);
  const tokenizer = task.tokenizer();
  const contextLength = engine.model.contextLength;
  const stops = turnStopIds(tokenizer, spec);
  const createEnv = options.createEnv ?? spec.createEnv.bind(spec);
  const media = options.media ?? mediaPromptsOf(engine);
  let withMedia = false;
  const episodes: Episode[] = [];
  const live: Live[] = [];

  const fail = (l: Live | { episode: Episode }, err: unknown) => {
    l.episode.reward = null;
    l.episode.end = 'error';
    l.episode.error = (err as Error).message ?? String(err);
  };

  await Promise.all(
    prompts.map(async (prompt, index) => {
      const episode: Episode = { promptTokens: [], responseTokens: [], lossMask: [], logprobs: [], tokenVersions: [], policyVersion: engine.policyVersion ?? 0, reward: 0, turnRewards: [], turns: 0, end: 'max_turns', info: {}, error: null, text: '', mediaIds: [] };
      episodes[index] = episode;
      let env: Environment | undefined;
      const contextMedia: SequenceMedia = { images: [], audio: [] };
      try {
        env = createEnv({ seed: options.envSeed + index });
        const first = firstObservation(await callEnvironment<string | Observation>(env, 'reset', prompt, options.timeoutMs), prompt);
        const inputs = await media.encode(tokenizer, first.text, first.media, true);
        episode.promptTokens = inputs.tokens;
        episode.mediaIds.push(...(inputs.mediaIds ?? []));
        appendMedia(contextMedia, inputs.media);
        withMedia ||= inputs.media !== undefined;
        episode.text = first.text;
      } catch (err) {
        releaseEnvironment(env);
        fail({ episode }, new Error(`environment reset failed: ${(err as Error).message}`));
        return;
      }
      if (episode.promptTokens.length >= contextLength) {
        releaseEnvironment(env);
        fail({ episode }, new Error(`the first observation is ${episode.promptTokens.length} tokens with bos, but the model's context is ${contextLength}: raise model.context_length`));
        return;
      }
      live.push({ index, env: env!, episode, context: [...episode.promptTokens], media: contextMedia });
    }),
  );
  live.sort((a, b) => a.index - b.index);

  let active = live;
  for (let turn = 0; active.length > 0; turn++) {
    if (turn >= spec.maxTurns) {
      for (const l of active) l.episode.end = 'max_turns';
      break;
    }
    const generated = await engine.generate(
      active.map((l) => l.context),
      { ...sampling, maxNewTokens: spec.maxTurnTokens, stopTokens: stops, seed: episodeTurnSeed(sampling.seed ?? 0, turn) },
      withMedia ? active.map((l) => l.media) : undefined,
    );
    const next: Live[] = [];
    await Promise.all(
      active.map(async (l, b) => {
        const g = generated[b];
        const e = l.episode;
        e.turns += 1;
        e.responseTokens.push(...g.tokens);
        e.lossMask.push(...g.tokens.map(() => 1));
        e.logprobs.push(...g.logprobs);
        e.tokenVersions.push(...(g.tokenVersions ?? g.tokens.map(() => g.policyVersion)));
        e.policyVersion = Math.min(e.policyVersion, g.policyVersion);
        l.context.push(...g.tokens);
        const response = tokenizer.decode(g.tokens);
        e.text += response;
        let result: StepResult;
        try {
          result = checkStep(await callEnvironment<StepResult>(l.env, 'step', response, options.timeoutMs));
        } catch (err) {
          fail(l, new Error(`environment step ${e.turns} failed: ${(err as Error).message}`));
          return;
        }
        e.turnRewards.push(result.reward);
        e.info = result.info ?? {};
        if (result.terminated || result.truncated) {
          e.end = result.terminated ? 'terminated' : 'truncated';
          return;
        }
        let observation: number[];
        let observationMedia: { ids: string[]; media?: SequenceMedia };
        try {
          const inputs = await media.encode(tokenizer, result.observation, result.media ?? []);
          observation = inputs.tokens;
          observationMedia = { ids: inputs.mediaIds ?? [], media: inputs.media };
        } catch (err) {
          fail(l, new Error(`observation of step ${e.turns} cannot be tokenized: ${(err as Error).message}`));
          return;
        }
        if (l.context.length + observation.length + 1 > contextLength) {
          e.end = 'context_full';
          return;
        }
        e.responseTokens.push(...observation);
        e.lossMask.push(...observation.map(() => 0));
        e.logprobs.push(...observation.map(() => 0));
        e.tokenVersions.push(...observation.map(() => g.policyVersion));
        l.context.push(...observation);
        e.mediaIds.push(...observationMedia.ids);
        appendMedia(l.media, observationMedia.media);
        withMedia ||= observationMedia.media !== undefined;
        e.text += result.observation;
        next.push(l);
      }),
    );
    active = next;
  }
  await Promise.all(live.map((l) => Promise.resolve(l.env.close?.()).catch(() => undefined)));
  for (const e of episodes) if (e.error === null) e.reward = e.turnRewards.reduce((a, r) => a + r, 0);
  return episodes;
}

export interface EpisodeEvaluation {
  /** Mean of the last step's `success` info (1 when the episode solved the task), else of reward > 0. */
  accuracy: number;
  /** Means of the numeric info fields of the last step, over episodes, and mean reward / turns. */
  metrics: Record<string, number>;
  episodes: Episode[];
}

/** Greedy episodes on held-out prompts. */
export async function evaluateEpisodes(engine: GenerationEngine, task: Task, prompts: readonly TaskPrompt[], options: Omit<EpisodeOptions, 'envSeed'> & { envSeed?: number }): Promise<EpisodeEvaluation> {
  const episodes = await rolloutEpisodes(engine, task, prompts, { maxNewTokens: 1, greedy: true }, { envSeed: 0, ...options });
  const sums: Record<string, number> = {};
  for (const e of episodes) for (const [k, v] of Object.entries(e.info)) if (typeof v === 'number' && Number.isFinite(v)) sums[k] = (sums[k] ?? 0) + v;
  const n = Math.max(1, episodes.length);
  const metrics = Object.fromEntries(Object.entries(sums).map(([k, v]) => [k, v / n]));
  metrics.reward = episodes.reduce((a, e) => a + (e.reward ?? 0), 0) / n;
  metrics.turns = episodes.reduce((a, e) => a + e.turns, 0) / n;
  const accuracy = 'success' in metrics ? metrics.success : episodes.filter((e) => (e.reward ?? 0) > 0).length / n;
  return { accuracy, metrics, episodes };
}
