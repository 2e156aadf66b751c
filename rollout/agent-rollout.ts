// Agent-driven rollouts: an external program is the rollout. For each episode Relax starts the
// agent command with the endpoint's base URL and a fresh session id; the agent talks to the policy
// through the OpenAI-compatible endpoint (any OpenAI client), runs its own environment, and reports
// its reward as the last JSON line of its stdout. The tokens its calls caused, recorded by the
// endpoint's session recorder, become the episode's training sample (docs/openai-endpoint.md).
//
// The agent protocol:
//   environment: the worker's, without secrets (DATABASE_URL, PG*, TEMPORAL_*, *TOKEN*, *SECRET*, ...), and
//                RELAX_BASE_URL (the /v1 base URL), RELAX_SESSION_ID (send it as `user` or in the
//                x-relax-session header on every call), RELAX_MODEL (the model name to ask for),
//                RELAX_PROMPT (the episode's prompt text). The reference answer is NOT given: the
//                agent is the environment and scores the episode itself.
//   stdout:      a line {"reward": <finite number>, ...} (the last such line counts; other lines
//                and other fields are kept as the report but ignored for training).
//   exit code:   0. A non-zero exit, a timeout (the agent's process group is killed), a missing or
//                non-finite reward fail the episode: reward null, error saying what happened.
// The reward is trusted: the agent is the episode's environment, as a reward module is code the
// run's owner wrote. Nothing checks it against the prompt.
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { sandboxEnv } from '../envs/sandbox-protocol';
import type { PromptMedium, TaskPrompt } from '../envs/task';

/** A session's trajectory as one training sample (the transfer queue's NewSample fields). */
export interface AgentSample {
  /** The first call's prompt (bos + its text). */
  promptTokens: number[];
  /** Everything after it, up to the end of the last call's completion. */
  responseTokens: number[];
  /** Per response token: 1 where the policy generated it (in any call), 0 where the agent wrote it. */
  lossMask: number[];
  /** Per response token: the policy's log-prob of a generated token, 0 where lossMask is 0. */
  rolloutLogprobs: number[];
  /** Per response token: the version that generated it; agent tokens take the version of the generation before them. */
  tokenVersions: number[];
  /** The oldest policy version that generated a token of the sample. */
  policyVersion: number;
  /** The ids of the media of promptTokens + responseTokens, in placeholder order; absent without media. */
  mediaIds?: string[];
  /** Those media (bytes, kind, format), in the same order, for the caller to store; absent without media. */
  media?: PromptMedium[];
}

/** What take() returns: the sample, or the error that made the session unusable. */
export interface SessionTake {
  id: string;
  /** Calls the session made (completed or not). */
  calls: number;
  sample?: AgentSample;
  /** null when `sample` is set. */
  error: string | null;
}

/** Where the endpoint records agent sessions (serving/sessions.ts SessionRecorder): a finished episode's session is taken once. */
export interface AgentSessions {
  take(sessionId: string): SessionTake;
}

export interface AgentEpisodesOptions {
  /** The agent program and its arguments, e.g. ["node", "examples/agents/add2-agent.js"]. */
  command: string[];
  /** The endpoint's URL (startOpenAIServer's `url`); "/v1" is appended unless it already ends with it. */
  serverUrl: string;
  /** The model name the agent asks for (e.g. the run id). */
  model: string;
  /** One per episode (groups already repeated). Only `text` reaches the agent. */
  prompts: readonly TaskPrompt[];
  /** The endpoint's session recorder. */
  sessions: AgentSessions;
  /** Per episode: the agent is killed after this long. */
  timeoutMs: number;
  /** Extra environment for the agent (on top of this process's environment, less its secrets). */
  env?: Record<string, string>;
  /** Agents running at once. Default 4. */
  concurrency?: number;
  /** Working directory of the agent. Default this process's. */
  cwd?: string;
  /** Session ids are `<prefix>-<episode>-<random>`. Default "agent". */
  sessionPrefix?: string;
  /** Aborting kills the running agents and fails the episodes not yet finished. */
  signal?: AbortSignal;
}

export interface AgentEpisodeResult {
  sessionId: string;
  /** The session's trajectory, when its calls made a consistent one (also on a failed episode, for inspection). */
  sample?: AgentSample;
  /** The reported reward; null exactly when `error` is set. */
  reward: number | null;
  error: string | null;
  /** Calls the agent made in its session. */
  calls: number;
  exitCode: number | null;
  durationMs: number;
  /** The reward line as parsed (extra fields included). */
  report?: Record<string, unknown>;
  /** The last lines of the agent's stderr. */
  stderrTail: string;
}

const STDOUT_KEEP = 64 * 1024;
const STDERR_KEEP = 4 * 1024;
/** Time between SIGTERM and SIGKILL when an agent is stopped. */
const KILL_GRACE_MS = 1_000;

/** A string buffer that keeps only its last `limit` characters. */
function tailBuffer(limit: number) {
  let text = '';
  return {
    push(chunk: string) {
      text += chunk;
      if (text.length > 2 * limit) text = text.slice(-limit);
    },
    get value() {
      return text.length > limit ? text.slice(-limit) : text;
    },
  };
}

export function agentBaseUrl(serverUrl: string): string {
  const trimmed = serverUrl.replace(/\/+$/, '');
  return trimmed.endsWith('/v1') ? trimmed : `${trimmed}/v1`;
}

type RewardLine = { ok: true; reward: number; report: Record<string, unknown> } | { ok: false; error: string };

/** The last stdout line that is a JSON object with a `reward` field. */
export function parseRewardLine(stdout: string): RewardLine {
  const lines = stdout.split('\n').map((l) => l.trim()).filter((l) => l !== '');
  for (let i = lines.length - 1; i >= 0; i--) {
    if (!lines[i].startsWith('{')) continue;
    let parsed: unknown;
    try {
      parsed = JSON.parse(lines[i]);
    } catch {
      continue;
    }
    if (parsed === null || typeof parsed !== 'object' || !('reward' in parsed)) continue;
    const report = parsed as Record<string, unknown>;
    const reward = report.reward;
    if (typeof reward !== 'number' || !Number.isFinite(reward)) {
      return { ok: false, error: `the agent reported reward ${JSON.stringify(reward) ?? String(reward)} (line ${JSON.stringify(lines[i].slice(0, 200))}), not a finite number` };
    }
    return { ok: true, reward, report };
  }
  const last = lines.length ? `; its last stdout line was ${JSON.stringify(lines[lines.length - 1].slice(0, 200))}` : '; it printed nothing on stdout';
  return { ok: false, error: `the agent printed no reward line: print a JSON line like {"reward": 1} on stdout before exiting${last}` };
}

function describeStderr(stderr: string): string {
  const lines = stderr.trim().split('\n').slice(-5).join('\n');
  return lines ? ` (stderr: ${lines.slice(-800)})` : '';
}

interface ProcessOutcome {
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  /** Why the process did not finish on its own (timeout, abort, spawn failure), if it did not. */
  problem?: string;
}

/** Sends `signal` to the agent's whole process group (it may have started children of its own). */
function killGroup(pid: number | undefined, signal: NodeJS.Signals): void {
  if (pid === undefined) return;
  try {
    process.kill(-pid, signal);
  } catch {
    // already gone
  }
}

/** Runs one agent process to its end, killing it (and its children) after timeoutMs or on abort. */
function runProcess(command: string[], env: NodeJS.ProcessEnv, cwd: string | undefined, timeoutMs: number, signal: AbortSignal | undefined): Promise<ProcessOutcome> {
  return new Promise((resolve) => {
    const stdout = tailBuffer(STDOUT_KEEP);
    const stderr = tailBuffer(STDERR_KEEP);
    let problem: string | undefined;
    let settled = false;
    // Its own process group (detached), so a timeout can kill whatever the agent started too.
    const child = spawn(command[0], command.slice(1), { env, cwd, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    const stop = (why: string) => {
      problem ??= why;
      killGroup(child.pid, 'SIGTERM');
      setTimeout(() => {
        if (!settled) killGroup(child.pid, 'SIGKILL');
      }, KILL_GRACE_MS).unref();
    };
    const timer = setTimeout(() => stop(`the agent timed out after ${timeoutMs} ms and was killed`), timeoutMs);
    const onAbort = () => stop('the rollout was aborted and the agent killed');
    signal?.addEventListener('abort', onAbort, { once: true });
    const finish = (outcome: Omit<ProcessOutcome, 'stdout' | 'stderr'>) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      resolve({ ...outcome, stdout: stdout.value, stderr: stderr.value });
    };
    child.stdout.setEncoding('utf8').on('data', (c: string) => stdout.push(c));
    child.stderr.setEncoding('utf8').on('data', (c: string) => stderr.push(c));
    child.on('error', (err) => finish({ exitCode: null, signal: null, problem: `cannot start the agent command ${JSON.stringify(command)}: ${err.message}` }));
    // 'close' waits for stdout to be drained, so the reward line is never cut off.
    child.on('close', (exitCode, sig) => finish({ exitCode, signal: sig, problem }));
    if (signal?.aborted) onAbort();
  });
}

/** The episode's failure from how its process ended, or null when it ended well. */
function processError(o: ProcessOutcome): string | null {
  if (o.problem) return `${o.problem}${describeStderr(o.stderr)}`;
  if (o.signal) return `the agent was killed by ${o.signal}${describeStderr(o.stderr)}`;
  if (o.exitCode !== 0) return `the agent exited with code ${o.exitCode}${describeStderr(o.stderr)}`;
  return null;
}

async function runEpisode(o: AgentEpisodesOptions, index: number): Promise<AgentEpisodeResult> {
  const sessionId = `${o.sessionPrefix ?? 'agent'}-${index}-${randomUUID().slice(0, 8)}`;
  if (o.signal?.aborted) return { sessionId, reward: null, error: 'the rollout was aborted before this agent started', calls: 0, exitCode: null, durationMs: 0, stderrTail: '' };
  // The worker's environment without its secrets (database, Temporal, tokens: envs/sandbox-protocol.ts).
  const env: NodeJS.ProcessEnv = {
    ...sandboxEnv(process.env),
    ...o.env,
    RELAX_BASE_URL: agentBaseUrl(o.serverUrl),
    RELAX_SESSION_ID: sessionId,
    RELAX_MODEL: o.model,
    RELAX_PROMPT: o.prompts[index].text,
  };
  // The agent must not see the reference answer, even when this process happens to have one set.
  delete env.RELAX_ANSWER;
  const started = performance.now();
  const outcome = await runProcess(o.command, env, o.cwd, o.timeoutMs, o.signal);
  const durationMs = performance.now() - started;
  const session = o.sessions.take(sessionId);
  const base = { sessionId, calls: session.calls, exitCode: outcome.exitCode, durationMs, stderrTail: outcome.stderr.slice(-STDERR_KEEP), ...(session.sample ? { sample: session.sample } : {}) };
  const failed = processError(outcome);
  if (failed) return { ...base, reward: null, error: failed };
  const line = parseRewardLine(outcome.stdout);
  if (!line.ok) return { ...base, reward: null, error: `${line.error}${describeStderr(outcome.stderr)}` };
  // A reward without a usable trajectory cannot be trained on.
  if (session.error) return { ...base, reward: null, error: session.error, report: line.report };
  return { ...base, reward: line.reward, error: null, report: line.report };
}

function checkOptions(o: AgentEpisodesOptions): void {
  if (!Array.isArray(o.command) || o.command.length === 0 || o.command.some((c) => typeof c !== 'string' || c === '')) {
    throw new Error(`command is ${JSON.stringify(o.command)}: pass the agent program and its arguments as non-empty strings, e.g. ["node", "examples/agents/add2-agent.js"]`);
  }
  if (!Number.isFinite(o.timeoutMs) || o.timeoutMs <= 0) throw new Error(`timeoutMs is ${o.timeoutMs}: pass a positive number of milliseconds`);
  const c = o.concurrency ?? 4;
  if (!Number.isInteger(c) || c < 1) throw new Error(`concurrency is ${c}: pass a positive integer`);
}

/**
 * Runs one agent process per prompt, at most `concurrency` at once, and returns one result per
 * prompt, in prompt order. Never throws for a failing agent: its episode gets reward null and an
 * error (the caller marks that sample failed).
 */
export async function runAgentEpisodes(o: AgentEpisodesOptions): Promise<AgentEpisodeResult[]> {
  checkOptions(o);
  const results: AgentEpisodeResult[] = new Array(o.prompts.length);
  let next = 0;
  const worker = async () => {
    while (next < o.prompts.length) {
      const i = next++;
      results[i] = await runEpisode(o, i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(o.concurrency ?? 4, o.prompts.length) }, worker));
  return results;
}
