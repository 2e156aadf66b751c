// Where `relax dev` puts its processes' output: every line, in full, into <data-dir>/logs/<process>.log
// (temporal.log, control-0.log, rollout-0.log, ...; relax-dev.log for relax dev's own notices), and on
// the console only what needs a person: by default the workers' warnings and errors (their JSON log
// lines shortened by telemetry/log.ts terseLine) and a worker's other lines that look like trouble (a
// crash's message and stack trace), none of the Temporal server's; --verbose echoes every line, --quiet none.
import fs from 'node:fs';
import path from 'node:path';
import { terseLine } from '../telemetry/log';

export type EchoMode = 'quiet' | 'default' | 'verbose';

const LOUD_LEVELS = new Set(['warn', 'error', 'fatal', 40, 50, 60]);
/** A worker's non-log line shown by default: an error's message or a stack trace's frame (not tfjs' or ONNX Runtime's notices). */
const LOOKS_LIKE_TROUBLE = /(?:error|exception)\b|\b(?:fatal|panic|unhandled|uncaught)\b|^\s+at \S/i;

/** A stack process's tag (`rollout#0`, `temporal`) and its line; tag undefined when the line has none. */
export function splitTag(line: string): { tag?: string; rest: string } {
  const m = /^\[([\w#.-]+)\] ?(.*)$/s.exec(line);
  return m ? { tag: m[1], rest: m[2] } : { rest: line };
}

/** The log file a tag's lines go to: `rollout#0` -> rollout-0.log; untagged and `[relax]` lines -> relax-dev.log. */
export function logFileName(tag: string | undefined): string {
  return `${(tag === undefined || tag === 'relax' ? 'relax-dev' : tag).replace(/[^\w.-]+/g, '-')}.log`;
}

/** What the console shows of one process line in `mode`: the line (shortened), or undefined for none. Pure. */
export function consoleLine(line: string, mode: EchoMode): string | undefined {
  if (mode === 'verbose') return line;
  if (mode === 'quiet') return undefined;
  const { tag, rest } = splitTag(line);
  if (tag === 'temporal') return undefined;
  let entry: { level?: unknown } | undefined;
  try {
    entry = rest.startsWith('{') ? (JSON.parse(rest) as { level?: unknown }) : undefined;
  } catch {
    entry = undefined;
  }
  if (entry) return LOUD_LEVELS.has(entry.level as string) ? `[${tag}] ${terseLine(rest)}` : undefined;
  // Not a log line: a crash's message and stack trace are worth seeing; native libraries' chatter is not.
  return LOOKS_LIKE_TROUBLE.test(rest) ? line : undefined;
}

/** The per-process log files of one relax dev, under `dir` (created); lines are appended. */
export interface DevLogs {
  dir: string;
  /** One tagged line (`[rollout#0] ...`) into its process's file. */
  write(line: string): void;
  close(): Promise<void>;
}

export function openDevLogs(dir: string): DevLogs {
  fs.mkdirSync(dir, { recursive: true });
  const streams = new Map<string, fs.WriteStream>();
  const streamOf = (name: string): fs.WriteStream => {
    let s = streams.get(name);
    if (!s) {
      s = fs.createWriteStream(path.join(dir, name), { flags: 'a' });
      s.on('error', () => undefined); // a full disk must not take the stack down
      streams.set(name, s);
    }
    return s;
  };
  return {
    dir,
    write(line) {
      const { tag, rest } = splitTag(line);
      streamOf(logFileName(tag)).write(`${tag ? rest : line}\n`);
    },
    close: () => Promise.all([...streams.values()].map((s) => new Promise<void>((resolve) => s.end(() => resolve())))).then(() => undefined),
  };
}
