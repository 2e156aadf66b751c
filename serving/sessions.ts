// Sessions: the calls an agent program makes to the OpenAI-compatible endpoint under one session id,
// recorded token by token so the whole conversation becomes ONE training sample (rollout/agent-rollout.ts
// AgentSample: the types live with the rollout that takes it).
//
// The protocol is prefix consistency: every call of a session sends, as its prompt, the previous
// call's prompt + completion followed by whatever the agent adds (tool output, feedback, the next
// question). The session then knows, for every token of the final sequence, whether the policy
// generated it (trained on, with the log-prob and policy version it was sampled with) or the agent
// wrote it (context only). A call whose prompt does not extend the transcript would mix two
// conversations into one sample, so the session is marked failed instead, with a message saying
// where the prompts diverged; take() then reports that error.
//
// The returned text of a completion leaves out the stop token that ended it (OpenAI's convention),
// so an agent's next prompt naturally lacks it; a prompt that extends the transcript minus that
// final stop token is accepted as well, and the stop token is dropped from the sample (the policy
// never saw it as context).
//
// Tokens are compared, not text: a prompt is re-encoded from text, so with a tokenizer whose
// encoding of a string is not unique (BPE), a completion re-encoded as part of the next prompt may
// come out as different tokens and be reported as a divergence. The character tokenizers of the
// built-in tasks encode uniquely.
//
// Media (images and audio in chat messages) are part of the transcript: their placeholder tokens are
// compared like any other, and the media themselves by id (sha256 of the bytes), so a call must
// resend the conversation's earlier media, in order, unchanged. The sample lists the ids of every
// medium of its tokens in placeholder order (the transfer queue's `media`), and carries the media
// themselves so the caller can put them in the run's media store.
//
// Memory is bounded: at most `maxSessions` sessions and `maxMediaBytes` of their media are held
// (the least recently used session is evicted first; a call in flight never is), and a session
// idle for `maxIdleMs` is forgotten. An evicted session leaves a small tombstone (bounded the same
// way), so its next call or take() says it was evicted instead of silently starting afresh.
import type { Tokenizer } from '../engines/tokenizers/tokenizer';
import type { PromptMedium } from '../envs/task';
import type { AgentSample, AgentSessions, SessionTake } from '../rollout/agent-rollout';
import { componentLog } from '../telemetry/log';

/** A medium of a call's prompt, with its id (sha256 of the bytes, engines/media/store.ts mediaIdOf). */
export interface SessionMedium extends PromptMedium {
  id: string;
}

/** A call's completion, as the session records it. */
export interface RecordedCompletion {
  tokens: readonly number[];
  logprobs: readonly number[];
  /** The version of each token, or one version for all. */
  versions: readonly number[] | number;
  /** True when the last token is a stop token the caller's text did not include. */
  hiddenStop: boolean;
}

interface Session {
  id: string;
  tokens: number[];
  generated: boolean[];
  logprobs: number[];
  versions: number[];
  promptLength: number;
  /** The media of the transcript, in placeholder order. */
  media: SessionMedium[];
  calls: number;
  completed: number;
  inFlight: boolean;
  hiddenStop: boolean;
  error: string | null;
  touchedAt: number;
}

/** One call of a session between begin() and complete()/fail(). */
export interface SessionCall {
  complete(completion: RecordedCompletion): void;
  fail(message: string): void;
}

export interface SessionRecorderOptions {
  /**
   * Sessions not used for this long are forgotten (checked when a call starts). Default 1 hour, the
   * longest an agent episode may run (rollout.agent.timeout_ms <= 3,600,000), so an episode's session
   * never expires before the rollout takes it.
   */
  maxIdleMs?: number;
  /** Sessions held at most; one more evicts the least recently used. Default DEFAULT_MAX_SESSIONS. */
  maxSessions?: number;
  /** Bytes of media (images, clips) all sessions hold at most; over it, least recently used sessions are evicted. Default DEFAULT_SESSION_MEDIA_BYTES. */
  maxMediaBytes?: number;
  /** Called on the first eviction and then every EVICTION_LOG_EVERY-th, with a line to log. Default: a warning in the log (telemetry/log.ts). */
  log?: (line: string) => void;
}

export const DEFAULT_MAX_SESSIONS = 10_000;
export const DEFAULT_SESSION_IDLE_MS = 3_600_000;
export const DEFAULT_SESSION_MEDIA_BYTES = 1024 * 1024 * 1024;
const EVICTION_LOG_EVERY = 1000;

/** Why sessions left the recorder other than by take()/discard(). */
export interface SessionStats {
  /** Sessions held now. */
  sessions: number;
  /** Bytes of media they hold. */
  mediaBytes: number;
  evicted: { cap: number; idle: number; media: number };
}

type EvictionReason = keyof SessionStats['evicted'];

/** Thrown by begin() when the call cannot be part of its session; the session is failed with the same message. */
export class SessionError extends Error {
  override readonly name = 'SessionError';
}

const NO_SESSION_HINT = 'omit the session id (the `user` field / x-relax-session header) for calls that are not part of a rollout';

function tokenText(tokenizer: Tokenizer | undefined, id: number): string {
  if (!tokenizer) return `token ${id}`;
  try {
    return `${JSON.stringify(tokenizer.decode([id]))} (id ${id})`;
  } catch {
    return `token ${id}`;
  }
}

function positive(name: string, value: number): number {
  if (!(Number.isSafeInteger(value) && value > 0)) throw new Error(`SessionRecorder option ${name} is ${value}: pass a positive integer`);
  return value;
}

function mediaBytesOf(media: readonly SessionMedium[]): number {
  return media.reduce((n, m) => n + m.bytes.length, 0);
}

export class SessionRecorder implements AgentSessions {
  /** In least recently used order (a touched session moves to the end). */
  private readonly sessions = new Map<string, Session>();
  /** Evicted ids -> why, in eviction order, at most maxSessions. */
  private readonly tombstones = new Map<string, { reason: string; at: number }>();
  private readonly maxIdleMs: number;
  private readonly maxSessions: number;
  private readonly maxMediaBytes: number;
  private readonly log: (line: string) => void;
  private mediaBytes = 0;
  private readonly evicted = { cap: 0, idle: 0, media: 0 };

  constructor(options: SessionRecorderOptions = {}) {
    this.maxIdleMs = positive('maxIdleMs', options.maxIdleMs ?? DEFAULT_SESSION_IDLE_MS);
    this.maxSessions = positive('maxSessions', options.maxSessions ?? DEFAULT_MAX_SESSIONS);
    this.maxMediaBytes = positive('maxMediaBytes', options.maxMediaBytes ?? DEFAULT_SESSION_MEDIA_BYTES);
    this.log = options.log ?? ((line) => componentLog('sessions').warn(line));
  }

  /** Sessions held, their media bytes, and evictions so far. */
  stats(): SessionStats {
    return { sessions: this.sessions.size, mediaBytes: this.mediaBytes, evicted: { ...this.evicted } };
  }

  /** Ids of the sessions currently held. */
  ids(): string[] {
    return [...this.sessions.keys()];
  }

  /**
   * Starts a call of session `id` with `promptTokens` (bos + prompt text, media placeholders
   * expanded) and the prompt's media in placeholder order. Throws SessionError (and fails the
   * session) when the prompt does not extend the session's transcript (tokens or media), when
   * another call of the session is still running, or when the session already failed.
   */
  begin(id: string, promptTokens: readonly number[], tokenizer?: Tokenizer, media: readonly SessionMedium[] = []): SessionCall {
    this.forgetIdle();
    const s = this.touch(id);
    s.calls += 1;
    const call = s.calls;
    if (s.error) throw new SessionError(`session ${JSON.stringify(id)} already failed, so call ${call} is refused: ${s.error}`);
    if (s.inFlight) {
      throw this.failWith(s, `call ${call} arrived while call ${call - 1} was still running: the calls of one session must be sequential (wait for each reply); use separate session ids for parallel conversations`);
    }
    if (s.completed === 0) {
      s.tokens = [...promptTokens];
      s.generated = s.tokens.map(() => false);
      s.logprobs = s.tokens.map(() => 0);
      s.versions = s.tokens.map(() => 0);
      s.promptLength = s.tokens.length;
      this.mediaBytes -= mediaBytesOf(s.media);
      s.media = [...media];
      this.mediaBytes += mediaBytesOf(s.media);
    } else {
      this.extend(s, call, promptTokens, tokenizer);
      this.extendMedia(s, call, media);
    }
    s.inFlight = true;
    this.evictOverLimits(s);
    let settled = false;
    return {
      complete: (c) => {
        if (settled) return;
        settled = true;
        this.record(s, c);
      },
      fail: (message) => {
        if (settled) return;
        settled = true;
        s.inFlight = false;
        s.error ??= `call ${call} failed: ${message}`;
      },
    };
  }

  /** Marks session `id` failed (creating it if needed); the first error is the one reported. */
  fail(id: string, message: string): void {
    this.touch(id).error ??= message;
  }

  /**
   * Session `id`, created if needed, moved to the most recently used end. A new session of an
   * evicted id starts failed with the eviction's reason (its earlier calls are lost).
   */
  private touch(id: string): Session {
    let s = this.sessions.get(id);
    if (s) this.sessions.delete(id);
    else {
      s = { id, tokens: [], generated: [], logprobs: [], versions: [], promptLength: 0, media: [], calls: 0, completed: 0, inFlight: false, hiddenStop: false, error: null, touchedAt: Date.now() };
      const tomb = this.tombstones.get(id);
      if (tomb) {
        this.tombstones.delete(id);
        s.error = `the session ${tomb.reason}, so its earlier calls are lost: use a new session id for a new conversation`;
      }
    }
    s.touchedAt = Date.now();
    this.sessions.set(id, s);
    this.evictOverLimits(s);
    return s;
  }

  /** Evicts least recently used sessions (never `keep`, never one in flight) while over the count or media limit. */
  private evictOverLimits(keep: Session): void {
    for (const victim of this.sessions.values()) {
      const overCount = this.sessions.size > this.maxSessions;
      const overMedia = this.mediaBytes > this.maxMediaBytes;
      if (!overCount && !overMedia) return;
      if (victim === keep || victim.inFlight) continue;
      this.evict(
        victim,
        overCount ? 'cap' : 'media',
        overCount
          ? `was evicted: the endpoint holds at most ${this.maxSessions} sessions and this one was the least recently used (raise the session cap, e.g. \`relax serve --max-sessions\`)`
          : `was evicted: the endpoint's sessions held more than ${this.maxMediaBytes} bytes of media and this one was the least recently used (raise \`relax serve --session-media-mb\`)`,
      );
    }
  }

  private evict(s: Session, why: EvictionReason, reason: string): void {
    this.drop(s.id);
    this.tombstones.set(s.id, { reason, at: Date.now() });
    for (const oldest of this.tombstones.keys()) {
      if (this.tombstones.size <= this.maxSessions) break;
      this.tombstones.delete(oldest);
    }
    this.evicted[why] += 1;
    const total = this.evicted.cap + this.evicted.idle + this.evicted.media;
    if (total === 1 || total % EVICTION_LOG_EVERY === 0) {
      this.log(`[relax serve] sessions: ${total} evicted so far (${this.evicted.cap} over the cap of ${this.maxSessions}, ${this.evicted.idle} idle over ${this.maxIdleMs} ms, ${this.evicted.media} over ${this.maxMediaBytes} bytes of media); ${this.sessions.size} held`);
    }
  }

  /** Removes session `id` and its media from the accounts. */
  private drop(id: string): Session | undefined {
    const s = this.sessions.get(id);
    if (!s) return undefined;
    this.sessions.delete(id);
    this.mediaBytes -= mediaBytesOf(s.media);
    return s;
  }

  /**
   * Removes session `id` and returns its trajectory as one sample, or the reason there is none
   * (unknown session, no completed call, a call still running, or the error that failed it).
   */
  take(id: string): SessionTake {
    const s = this.drop(id);
    const tomb = this.tombstones.get(id);
    this.tombstones.delete(id);
    if (!s && tomb) return { id, calls: 0, error: `session ${JSON.stringify(id)} ${tomb.reason}` };
    if (!s) return { id, calls: 0, error: `session ${JSON.stringify(id)} made no calls to the endpoint (did the agent send its session id in the \`user\` field or the x-relax-session header?)` };
    if (s.error) return { id, calls: s.calls, error: `session ${JSON.stringify(id)}: ${s.error}` };
    if (s.inFlight) return { id, calls: s.calls, error: `session ${JSON.stringify(id)}: call ${s.calls} was still running when the session was taken (the agent exited or was stopped before its reply)` };
    if (s.completed === 0) return { id, calls: s.calls, error: `session ${JSON.stringify(id)} has no completed call` };
    return { id, calls: s.calls, sample: this.sample(s), error: null };
  }

  /** Drops session `id` without reading it. */
  discard(id: string): void {
    this.drop(id);
    this.tombstones.delete(id);
  }

  private failWith(s: Session, message: string): SessionError {
    s.error ??= message;
    return new SessionError(`session ${JSON.stringify(s.id)}: ${message}`);
  }

  /** Appends the agent's new text (the part of the prompt after the transcript) to the transcript. */
  private extend(s: Session, call: number, prompt: readonly number[], tokenizer: Tokenizer | undefined): void {
    const matches = (length: number) => prompt.length >= length && s.tokens.slice(0, length).every((t, i) => prompt[i] === t);
    let base = s.tokens.length;
    if (!matches(base) && s.hiddenStop && matches(base - 1)) {
      // The agent continued from the returned text, which leaves out the stop token: drop it.
      base -= 1;
      s.tokens.length = s.generated.length = s.logprobs.length = s.versions.length = base;
    }
    if (!matches(base)) {
      const at = s.tokens.findIndex((t, i) => i >= prompt.length || prompt[i] !== t);
      const where =
        at >= prompt.length
          ? `the prompt has ${prompt.length} tokens, fewer than the ${base} of the transcript so far`
          : `they differ at token ${at}: the transcript has ${tokenText(tokenizer, s.tokens[at])}, the prompt ${tokenText(tokenizer, prompt[at])}`;
      throw this.failWith(
        s,
        `call ${call}'s prompt does not extend the session's transcript (the previous call's prompt + completion), ${where}. ` +
          `Every call of a session must send the previous prompt + the returned completion text (+ new text) as its prompt; ` +
          `use a new session id for an unrelated conversation, or ${NO_SESSION_HINT}`,
      );
    }
    const lastVersion = s.versions[s.versions.length - 1] ?? 0;
    for (const t of prompt.slice(base)) {
      s.tokens.push(t);
      s.generated.push(false);
      s.logprobs.push(0);
      s.versions.push(lastVersion);
    }
  }

  /**
   * Appends the call's new media. The token prefix already matched, placeholders included, and the
   * policy never generates placeholders, so the transcript's media are the call's first ones: they
   * must be the same media.
   */
  private extendMedia(s: Session, call: number, media: readonly SessionMedium[]): void {
    const differs = s.media.findIndex((m, k) => media[k]?.id !== m.id);
    if (differs >= 0) {
      const given = media[differs];
      const what = (m: SessionMedium) => `${m.kind === 'image' ? 'an image' : 'an audio clip'} (${m.id.slice(0, 19)}...)`;
      throw this.failWith(
        s,
        `call ${call}'s medium ${differs + 1} is ${given ? what(given) : 'missing'}, but the session's medium ${differs + 1} is ${what(s.media[differs])}: ` +
          `every call of a session must resend the conversation's earlier images and clips unchanged, in order; ` +
          `use a new session id for an unrelated conversation, or ${NO_SESSION_HINT}`,
      );
    }
    const added = media.slice(s.media.length);
    s.media.push(...added);
    this.mediaBytes += mediaBytesOf(added);
  }

  private record(s: Session, c: RecordedCompletion): void {
    c.tokens.forEach((t, j) => {
      s.tokens.push(t);
      s.generated.push(true);
      s.logprobs.push(c.logprobs[j]);
      s.versions.push(typeof c.versions === 'number' ? c.versions : c.versions[j]);
    });
    s.hiddenStop = c.hiddenStop;
    s.inFlight = false;
    s.completed += 1;
    s.touchedAt = Date.now();
    // Most recently used again: to the end of the map (unless take() already removed it).
    if (this.sessions.get(s.id) === s) {
      this.sessions.delete(s.id);
      this.sessions.set(s.id, s);
    }
  }

  private sample(s: Session): AgentSample {
    const p = s.promptLength;
    const versions = s.versions.filter((_, i) => i >= p && s.generated[i]);
    return {
      promptTokens: s.tokens.slice(0, p),
      responseTokens: s.tokens.slice(p),
      lossMask: s.generated.slice(p).map((g) => (g ? 1 : 0)),
      rolloutLogprobs: s.logprobs.slice(p),
      tokenVersions: s.versions.slice(p),
      policyVersion: Math.min(...versions),
      ...(s.media.length ? { mediaIds: s.media.map((m) => m.id), media: s.media.map(({ kind, format, bytes }) => ({ kind, format, bytes })) } : {}),
    };
  }

  /** Forgets idle sessions (the oldest are first in the map, so this stops at the first recent one) and old tombstones. */
  private forgetIdle(): void {
    const cutoff = Date.now() - this.maxIdleMs;
    for (const s of this.sessions.values()) {
      if (s.touchedAt >= cutoff) break;
      if (s.inFlight) continue;
      this.evict(s, 'idle', `was forgotten after ${this.maxIdleMs} ms without a call (raise \`relax serve --session-idle-s\`)`);
    }
    for (const [id, t] of this.tombstones) {
      if (t.at >= cutoff) break;
      this.tombstones.delete(id);
    }
  }
}
