// Writes <home>/stack.json for `relax dev`: how the other commands find the running stack
// (client/index.ts readStackFile reads it), and which processes the stack runs now.
import fs from 'node:fs';
import { stackFilePath } from '../client';
import type { LocalStack } from '../workers/local-stack';

/**
 * It holds the database URL with its password, so it is written 0600 from creation (a fresh temp
 * file renamed over the old one, which also replaces an older, wider file) and never half-written.
 * It records the stack's child pids too; relax dev rewrites it whenever one is replaced.
 */
export function writeStackFile(home: string, stack: LocalStack): void {
  const file = stackFilePath(home);
  const tmp = `${file}.${process.pid}.tmp`;
  const metrics = stack.workers().map((w) => ({ role: w.role, index: w.index, pid: w.pid, urls: w.metricsUrls ?? [] }));
  const body = { temporalAddress: stack.temporalAddress, uiUrl: stack.uiUrl, temporalMetricsUrl: stack.temporalMetricsUrl, databaseUrl: stack.databaseUrl, pid: process.pid, children: stack.childPids(), metrics };
  fs.rmSync(tmp, { force: true });
  fs.writeFileSync(tmp, `${JSON.stringify(body, null, 2)}\n`, { mode: 0o600, flag: 'wx' });
  fs.renameSync(tmp, file);
}
