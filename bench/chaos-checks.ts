// What `relax bench chaos` checks after the faults, as counts (0 = held): in Postgres, that every
// applied train step consumed exactly its recorded sample set, no sample was trained twice, every
// policy version was published once and every retained checkpoint verifies; in /proc, which
// processes a stack started and which of them outlived it. docs/benchmarks.md ("chaos") defines
// each count.
import fs from 'node:fs';
import type { Pool } from 'pg';
import { anythingAt } from '../engines/storage/locations';
import { listCheckpoints } from '../store/checkpoint-registry';
import { versionsToKeep, type RetentionPolicy } from '../store/checkpoint-retention';
import { keysInSeveralSteps, stepSampleSets, unconsumedSamplesBefore } from '../store/step-records';
import { verifyPolicyVersion } from '../training/policy-versions';

export interface RunIntegrity {
  runId: string;
  appliedSteps: number;
  /** Samples the run should have trained and did not (see lostSamples in docs/benchmarks.md). */
  lostSamples: number;
  /** Samples recorded in more than one step, or trained by a step that trained an iteration another step also trained. */
  doubleTrainedSamples: number;
  /** Policy versions published more than once, or by a step other than the one that produces them. */
  duplicateVersions: number;
  /** Versions 0..latest with no registry row. */
  missingVersions: number;
  /** Retained versions whose files do not verify, plus versions retention keeps that were pruned. */
  corruptCheckpoints: number;
  retainedCheckpoints: number;
  /** One line per problem found, for the log. */
  problems: string[];
}

/** The samples the steps lost (a step left 'selected', a short batch, keys without a stored sample), each reported in `problems`. */
function stepSamplesLost(steps: Awaited<ReturnType<typeof stepSampleSets>>, batchSize: number, problems: string[]): number {
  let lost = 0;
  for (const s of steps) {
    const recorded = Number(s.recorded);
    const stored = Number(s.stored);
    if (s.status === 'selected') {
      // Claimed, never applied, never released: after the run ended nothing will train these.
      lost += s.sample_count;
      problems.push(`step ${s.step} was left 'selected' holding ${s.sample_count} samples`);
      continue;
    }
    if (s.status !== 'applied') continue;
    if (s.sample_count < batchSize) problems.push(`step ${s.step} trained ${s.sample_count} samples, not the full batch of ${batchSize}`);
    if (recorded !== s.sample_count) problems.push(`step ${s.step} records ${s.sample_count} samples but ${recorded} keys`);
    if (stored !== recorded) problems.push(`step ${s.step}: ${recorded - stored} of its recorded keys have no stored sample consumed by it`);
    lost += Math.max(0, batchSize - s.sample_count) + Math.abs(s.sample_count - recorded) + (recorded - stored);
  }
  return lost;
}

/**
 * Checks one finished run. `batchSize` is the samples one step trains (prompts_per_step x group_size;
 * add2 never fails a sample); `retention` is the run's checkpoint policy (protect = max_staleness + 1).
 */
export async function checkRunIntegrity(pool: Pool, runId: string, batchSize: number, retention: RetentionPolicy): Promise<RunIntegrity> {
  const problems: string[] = [];
  const steps = await stepSampleSets(pool, runId);
  const applied = steps.filter((s) => s.status === 'applied');

  let lost = stepSamplesLost(steps, batchSize, problems);
  // Ready samples of an iteration that an applied step already trained past (step s trains iteration s - 1).
  const left = await unconsumedSamplesBefore(pool, runId, applied.length);
  if (left > 0) problems.push(`${left} samples of trained iterations were never consumed`);
  lost += left;

  // The key is the primary key of train_step_samples, so the first count is a check of the schema too.
  const twice = await keysInSeveralSteps(pool, runId);
  let doubleTrained = twice;
  const stepsByIteration = new Map<number, number[]>();
  for (const s of applied) for (const it of s.iterations ?? []) stepsByIteration.set(it, [...(stepsByIteration.get(it) ?? []), s.step]);
  for (const [it, by] of stepsByIteration) {
    if (by.length < 2) continue;
    const extra = applied.filter((s) => by.slice(1).includes(s.step)).reduce((n, s) => n + s.sample_count, 0);
    doubleTrained += extra;
    problems.push(`iteration ${it} was trained by steps ${by.join(', ')}`);
  }
  if (doubleTrained > 0 && twice > 0) problems.push(`${twice} sample keys are recorded in two steps`);

  // Each update publishes the next version: step s -> version s, once.
  let duplicates = 0;
  const versionCounts = new Map<number, number>();
  for (const s of applied) if (s.policy_version !== null) versionCounts.set(s.policy_version, (versionCounts.get(s.policy_version) ?? 0) + 1);
  for (const [v, n] of versionCounts) if (n > 1) duplicates += n - 1;
  for (const s of applied) {
    if (s.policy_version !== s.step) {
      duplicates += 1;
      problems.push(`step ${s.step} published version ${s.policy_version}`);
    }
  }
  const checkpoints = await listCheckpoints(pool, runId);
  const latest = applied.length ? Math.max(...applied.map((s) => s.policy_version ?? 0)) : 0;
  const registered = new Map<number, number>();
  for (const c of checkpoints) registered.set(c.policyVersion, (registered.get(c.policyVersion) ?? 0) + 1);
  for (const [v, n] of registered) if (n > 1) (duplicates += n - 1), problems.push(`version ${v} is registered ${n} times`);
  for (const c of checkpoints) {
    if (c.policyVersion > 0 && c.step !== c.policyVersion) (duplicates += 1), problems.push(`version ${c.policyVersion} is registered as produced by step ${c.step}`);
  }
  let missing = 0;
  for (let v = 0; v <= latest; v++) if (!registered.has(v)) (missing += 1), problems.push(`version ${v} is not registered`);

  // Every version retention keeps verifies against its registered hash; what it pruned has no files left.
  const keep = new Set(versionsToKeep({ ...retention, versions: checkpoints.map((c) => c.policyVersion), latest }));
  let corrupt = 0;
  let retained = 0;
  for (const c of checkpoints) {
    if (c.prunedAt) {
      if (keep.has(c.policyVersion)) (corrupt += 1), problems.push(`version ${c.policyVersion} was pruned but retention keeps it`);
      else if (await anythingAt(c.path)) problems.push(`pruned version ${c.policyVersion} still has files at ${c.path}`);
      continue;
    }
    retained += 1;
    const v = await verifyPolicyVersion(pool, runId, c.policyVersion);
    if (!v.ok) (corrupt += 1), problems.push(`checkpoint v${c.policyVersion}: ${v.problem}`);
  }
  return {
    runId,
    appliedSteps: applied.length,
    lostSamples: lost,
    doubleTrainedSamples: doubleTrained,
    duplicateVersions: duplicates,
    missingVersions: missing,
    corruptCheckpoints: corrupt,
    retainedCheckpoints: retained,
    problems,
  };
}

// ---------------------------------------------------------------------------------------------
// Processes, from /proc (Linux)

export interface ProcessInfo {
  pid: number;
  ppid: number;
  /** Clock ticks after boot: with the pid, names one process even after the pid is reused. */
  startTime: number;
  cmdline: string[];
}

function readProcess(pid: number): ProcessInfo | undefined {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) is in parentheses and may hold spaces: the fields after it are fixed.
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (rest[0] === 'Z') return undefined;
    const cmdline = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
    return { pid, ppid: Number(rest[1]), startTime: Number(rest[19]), cmdline };
  } catch {
    return undefined; // gone, or not ours to read
  }
}

/** A live process by pid, or undefined. */
export const processInfo = (pid: number): ProcessInfo | undefined => readProcess(pid);

/** Its state letter from /proc (R, S, D, T = stopped, ...), or undefined when it is gone. */
export function processState(pid: number): string | undefined {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0];
  } catch {
    return undefined;
  }
}

export function processTable(): ProcessInfo[] {
  return fs
    .readdirSync('/proc')
    .filter((d) => /^\d+$/.test(d))
    .map((d) => readProcess(Number(d)))
    .filter((p): p is ProcessInfo => p !== undefined);
}

/** Every live descendant of `pid` (children, their children, ...). */
export function descendants(pid: number, table = processTable()): ProcessInfo[] {
  const out: ProcessInfo[] = [];
  const frontier = [pid];
  while (frontier.length) {
    const parent = frontier.pop()!;
    for (const p of table) if (p.ppid === parent) out.push(p), frontier.push(p.pid);
  }
  return out;
}

/** Whether the process `p` names (pid and start time) is still alive. */
export function stillAlive(p: ProcessInfo): boolean {
  const now = readProcess(p.pid);
  return now !== undefined && now.startTime === p.startTime;
}

/** Processes whose command line or environment mentions `marker` (a stack's data directory), except this one. */
export function processesMentioning(marker: string, table = processTable()): ProcessInfo[] {
  return table.filter((p) => {
    if (p.pid === process.pid) return false;
    if (p.cmdline.some((a) => a.includes(marker))) return true;
    try {
      return fs.readFileSync(`/proc/${p.pid}/environ`, 'utf8').split('\0').includes(`RELAX_HOME=${marker}`);
    } catch {
      return false;
    }
  });
}

/** The worker role of a `relax worker --role <role>` process, else undefined. */
export function workerRole(p: ProcessInfo): string | undefined {
  const i = p.cmdline.indexOf('--role');
  return p.cmdline.includes('worker') && i >= 0 ? p.cmdline[i + 1] : undefined;
}

/** Whether `p` is a Temporal dev server (`temporal server start-dev`). */
export function isTemporalServer(p: ProcessInfo): boolean {
  return p.cmdline.includes('start-dev') && p.cmdline.includes('server');
}
