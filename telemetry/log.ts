// The one logger of Relax's service code (workers, activities, serving, the API, store, engines,
// training, rollout, envs): pino at RELAX_LOG_LEVEL (default info), one JSON object a line on stderr
// when stderr is not a terminal (what `relax dev` and log collectors read), a short single line when it
// is. Child loggers carry `component` and a run's `run`; setProcessFields adds `role`/`worker` to every
// line of the process. temporalLogger hands the Temporal SDK's logs to it, repeated lines collapsed.
// Logging is not output: the CLI's tables, results and progress lines stay on stdout through console
// (cli/*, bench/*, examples/), and so does a worker's `relax worker ready` line, which `relax dev`
// parses; workers/process-watchdog.ts, a tiny wrapper program, keeps console.error for its usage error.
import pino, { type DestinationStream, type Logger } from 'pino';
import type { LogLevel, LogMetadata, Logger as TemporalLogger } from '@temporalio/worker';
import { logLevel, type RelaxLogLevel } from '../config/environment';

export type { Logger } from 'pino';

/** Fields every line of this process carries (the worker's role and identity), set once they are known. */
const processFields: Record<string, string> = {};

/** Adds `fields` (role, worker identity...) to every later line of this process, its child loggers' too. */
export function setProcessFields(fields: Record<string, string>): void {
  Object.assign(processFields, fields);
}

const KNOWN_KEYS = new Set(['level', 'time', 'pid', 'msg', 'component', 'role', 'worker', 'run', 'err']);

/** One JSON log line as a terminal line: `12:03:04 WARN  [rollout train] run r1: message (key=value) error`. */
export function terseLine(json: string): string {
  let entry: Record<string, unknown>;
  try {
    entry = JSON.parse(json) as Record<string, unknown>;
  } catch {
    return json.trimEnd();
  }
  const time = typeof entry.time === 'string' ? entry.time.slice(11, 19) : '';
  const where = [entry.role, entry.component].filter((v) => typeof v === 'string').join(' ');
  const extra = Object.entries(entry)
    .filter(([k]) => !KNOWN_KEYS.has(k))
    .map(([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`);
  const err = entry.err as { message?: string } | undefined;
  return [
    time,
    String(entry.level ?? '').toUpperCase().padEnd(5),
    where ? `[${where}]` : '',
    `${entry.run ? `run ${String(entry.run)}: ` : ''}${String(entry.msg ?? '')}${err?.message ? `: ${err.message}` : ''}`,
    extra.length ? `(${extra.join(' ')})` : '',
  ].filter(Boolean).join(' ');
}

/** stderr, synchronously (a line written just before process.exit is not lost); terse lines on a terminal. */
function destination(): DestinationStream {
  const stderr = pino.destination({ dest: 2, sync: true });
  if (!process.stderr.isTTY) return stderr;
  return { write: (line: string) => stderr.write(`${terseLine(line)}\n`) };
}

/** The process's root logger; most modules take `log.child({ component })`. */
export const log: Logger = pino(
  {
    level: logLevel(),
    base: { pid: process.pid },
    timestamp: pino.stdTimeFunctions.isoTime,
    formatters: { level: (label) => ({ level: label }) },
    mixin: () => ({ ...processFields }),
  },
  destination(),
);

/** The component loggers, one per name: a level set later (defaultLevel) reaches them too (a pino child keeps the level it was made with). */
const components = new Map<string, Logger>();

/** A child logger for one module: its lines say `component`. */
export function componentLog(component: string): Logger {
  let child = components.get(component);
  if (!child) components.set(component, (child = log.child({ component })));
  return child;
}

/** Sets the process's level to `fallback` unless RELAX_LOG_LEVEL names one (relax dev's own process: warn, its workers' logs are in files). */
export function defaultLevel(fallback: RelaxLogLevel): void {
  const level = logLevel(process.env, fallback);
  log.level = level;
  for (const child of components.values()) child.level = level;
}

/** What a repeated-line filter decides for one line: write it or not, and how many like it were dropped since the last one written. */
export interface RepeatDecision { write: boolean; suppressed: number }

/**
 * Collapses repeated identical lines: a key is written at most once per `windowMs`; the first one
 * written after a quiet window reports how many were dropped in between. Pure apart from its map.
 */
export function repeatFilter(windowMs = 60_000): (key: string, now: number) => RepeatDecision {
  const seen = new Map<string, { at: number; dropped: number }>();
  return (key, now) => {
    const last = seen.get(key);
    if (last && now - last.at < windowMs) {
      last.dropped++;
      return { write: false, suppressed: 0 };
    }
    if (seen.size > 1000) seen.clear();
    seen.set(key, { at: now, dropped: 0 });
    return { write: true, suppressed: last?.dropped ?? 0 };
  };
}

/** SDK warnings that are expected in Relax, written at debug: a worker of an activity-only role polls no workflow queue by design. */
const EXPECTED_SDK_WARNINGS = new Set(['No workflows registered, not polling for workflow tasks']);

const SDK_LEVELS: Record<LogLevel, 'trace' | 'debug' | 'info' | 'warn' | 'error'> = { TRACE: 'trace', DEBUG: 'debug', INFO: 'info', WARN: 'warn', ERROR: 'error' };
const SDK_SEVERITY: Record<LogLevel, number> = { TRACE: 0, DEBUG: 1, INFO: 2, WARN: 3, ERROR: 4 };

/** The SDK's metadata as pino fields: an `error` becomes `err` (its message and stack on one JSON line). */
function sdkFields(meta: LogMetadata | undefined, suppressed: number): Record<string, unknown> {
  const { error, ...rest } = (meta ?? {}) as Record<string, unknown>;
  return { ...rest, ...(error !== undefined ? { err: error } : {}), ...(suppressed ? { repeated: suppressed } : {}) };
}

/**
 * The Temporal SDK's logger (Runtime.install({ logger })): lines at `level` or above go to `target`
 * (component "temporal-sdk"); an identical message at the same level is written once a minute at
 * most, the next one written saying how many were dropped (`repeated`); expected warnings go at debug.
 */
export function temporalLogger(level: LogLevel, target: Logger = componentLog('temporal-sdk'), windowMs = 60_000): TemporalLogger {
  const repeats = repeatFilter(windowMs);
  const write = (sdkLevel: LogLevel, message: string, meta?: LogMetadata): void => {
    const at = sdkLevel === 'WARN' && EXPECTED_SDK_WARNINGS.has(message) ? 'DEBUG' : sdkLevel;
    if (SDK_SEVERITY[at] < SDK_SEVERITY[level]) return;
    const decision = repeats(`${at} ${message}`, Date.now());
    if (decision.write) target[SDK_LEVELS[at]](sdkFields(meta, decision.suppressed), message);
  };
  return {
    log: write,
    trace: (message, meta) => write('TRACE', message, meta),
    debug: (message, meta) => write('DEBUG', message, meta),
    info: (message, meta) => write('INFO', message, meta),
    warn: (message, meta) => write('WARN', message, meta),
    error: (message, meta) => write('ERROR', message, meta),
  };
}
