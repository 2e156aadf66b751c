// `relax bench hosts [--set steps=N] [--set cutoffs=N] [--set cutoff_s=S] [--json]`: Relax across
// three hosts with only a network between them (network namespaces, bench/hosts-net.ts; needs root):
// PostgreSQL, Temporal, SeaweedFS's S3 gateway and the control worker on `services`, the train
// worker on `train`, two rollout workers on `rollout`, each host with its own RELAX_HOME and
// checkpoints and media in the object store (RELAX_STORAGE). A first run trains to completion; a
// second is cut off from the network host by host (the train host, then the rollout host, ...: link
// down for cutoff_s seconds, past the 10 s heartbeat timeout, then up) and must still complete. Then
// the chaos bench's integrity counts (bench/chaos-checks.ts) for both runs, and a walk of every
// host's directory for checkpoint files outside its bounded object cache. docs/benchmarks.md ("hosts").
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { Client, Connection, type WorkflowHandle } from '@temporalio/client';
import { Pool } from 'pg';
import type { RunConfigInput } from '../config/run-config';
import { roleTaskQueue, type Role } from '../config/task-queues';
import { isObjectUrl } from '../engines/storage/url';
import { listCheckpoints } from '../store/checkpoint-registry';
import { forwardLines } from '../workers/temporal-server';
import { RELAX_BIN } from '../workers/local-stack';
import type { TrainingProgress, TrainingResult } from '../workflows/training-run';
import { checkRunIntegrity, type RunIntegrity } from './chaos-checks';
import { sleep, until, withTimeout } from './chaos-faults';
import { NetworkHosts } from './hosts-net';
import { SERVICES_READY } from './hosts-services';
import type { Bench } from './index';

export interface HostsOptions {
  steps: number;
  cutoffs: number;
  cutoffSeconds: number;
  log?: (line: string) => void;
}

export interface HostsReport {
  hosts: number;
  shared_filesystem: boolean;
  runs_completed: number;
  lost_samples: number;
  double_trained_samples: number;
  duplicate_versions: number;
  corrupt_checkpoints: number;
  cutoffs: number;
  /** What was cut off at which step of the second run ("train@3"). */
  cut: string[];
  cutoff_s: number;
  /** The longest wait from a host's link coming back up to the run's next step. */
  recovery_s_max: number;
  /** Checkpoint or media files found on a host outside its object cache (0: none). */
  stray_files: number;
  /** Worker processes that exited and were started again (a real host's service manager would). */
  worker_restarts: number;
  steps: number;
  wall_s: number;
  problems: string[];
}

const HOSTS = ['services', 'train', 'rollout'] as const;
const PLACEMENT: Array<[Role, (typeof HOSTS)[number]]> = [['control', 'services'], ['train', 'train'], ['rollout', 'rollout'], ['rollout', 'rollout']];
const BATCH = { prompts: 8, group: 4 };
const RETENTION = { every: 5, keepLast: 2, protect: 1 };

function runConfig(steps: number): RunConfigInput {
  return {
    model: { context_length: 16 },
    algorithm: { group_size: BATCH.group },
    rollout: { prompts_per_step: BATCH.prompts, max_new_tokens: 4 },
    train: { steps, lr: 1e-3, eval_every: steps, keep_consumed_steps: 1000 },
    checkpoint: { every: RETENTION.every, keep_last: RETENTION.keepLast },
  };
}

/** The worker processes of every host, each started again when it exits (until stopAll). */
class HostWorkers {
  private readonly live = new Set<ChildProcess>();
  private stopping = false;
  restarts = 0;

  constructor(
    private readonly net: NetworkHosts,
    private readonly env: (host: string) => NodeJS.ProcessEnv,
    private readonly log: (line: string) => void,
    /** Every worker's output, one file each (kept when the bench fails). */
    private readonly logDir: string,
  ) {}

  async start(role: Role, host: string, restart = false): Promise<void> {
    const args = ['worker', '--role', role, ...(role === 'control' ? [] : ['--device', 'cpu'])];
    const child = this.net.spawn(host, [process.execPath, RELAX_BIN, ...args], this.env(host));
    this.live.add(child);
    const tail: string[] = [];
    const logFile = path.join(this.logDir, `${host}-${role}-${child.pid}.log`);
    const ready = new Promise<void>((resolve) => forwardLines(child, (line) => {
      fs.appendFileSync(logFile, `${line}\n`);
      tail.push(line);
      if (tail.length > 20) tail.shift();
      if (/^relax worker ready/.test(line)) resolve();
    }));
    child.once('exit', (code, signal) => {
      this.live.delete(child);
      if (this.stopping) return;
      this.restarts += 1;
      this.log(`[hosts] ${role} worker on ${host} exited (${code ?? signal}); starting it again. Its last lines:\n  ${tail.slice(-5).join('\n  ')}`);
      void sleep(1000).then(() => this.start(role, host, true)).catch(() => undefined);
    });
    if (restart) return;
    await until(`the ${role} worker on ${host} to be ready`, () => withTimeout(ready.then(() => true), 500), 120_000).catch((err: Error) => {
      throw new Error(`${err.message}; its last lines:\n  ${tail.join('\n  ')}`);
    });
  }

  async stopAll(): Promise<void> {
    this.stopping = true;
    await Promise.all([...this.live].map((c) => new Promise<void>((resolve) => {
      if (c.exitCode !== null || c.signalCode !== null) return resolve();
      c.once('exit', () => resolve());
      c.kill('SIGKILL');
    })));
  }
}

/** Starts the services host and resolves with the environment its ready line carries. */
async function startServices(net: NetworkHosts, dir: string): Promise<{ child: ChildProcess; env: Record<string, string> }> {
  const entry = path.join(__dirname, 'hosts-services.js');
  const child = net.spawn('services', [process.execPath, entry, dir, net.host('services').ip], { ...process.env, RELAX_HOME: path.join(dir, 'home') });
  const lines: string[] = [];
  const env = await new Promise<Record<string, string>>((resolve, reject) => {
    forwardLines(child, (line) => {
      lines.push(line);
      if (line.startsWith(SERVICES_READY)) resolve(JSON.parse(line.slice(SERVICES_READY.length)));
    });
    child.once('exit', (code) => reject(new Error(`the services host exited (${code}) before it was ready:\n${lines.slice(-20).join('\n')}`)));
  });
  return { child, env };
}

/** Checkpoint and media files under `dir` that are not in a RELAX_HOME's object cache. */
function strayFiles(dir: string): string[] {
  const out: string[] = [];
  const visit = (d: string): void => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const full = path.join(d, e.name);
      if (e.isDirectory()) {
        if (e.name !== 'object-cache') visit(full);
      } else if (/\.safetensors$/.test(e.name) || /\/(v\d{8}|media)\//.test(full)) out.push(full);
    }
  };
  visit(dir);
  return out;
}

/** The three hosts with their services and workers, and the bench's client and pool on the bridge. */
class HostsStack {
  readonly base = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-hosts-'));
  readonly net = NetworkHosts.create(HOSTS);
  readonly logDir = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-hosts-logs-'));
  services: { child: ChildProcess; env: Record<string, string> } | undefined;
  workers: HostWorkers | undefined;
  connection: Connection | undefined;
  pool: Pool | undefined;

  async start(log: (line: string) => void): Promise<Client> {
    this.services = await startServices(this.net, path.join(this.base, 'services'));
    const svc = this.services.env;
    log(`[hosts] services on ${this.net.host('services').ip}: Temporal ${svc.TEMPORAL_ADDRESS}, S3 ${svc.RELAX_S3_ENDPOINT}, PostgreSQL (PGlite) :5432`);
    // One RELAX_HOME per host, shared by that host's processes only (as on a real machine).
    const hostEnv = (host: string): NodeJS.ProcessEnv => ({ ...process.env, ...svc, RELAX_HOME: path.join(this.base, host, 'home'), RELAX_STORAGE_CACHE_MB: '64', RELAX_WARM_START_CACHE: path.join(this.base, host, 'warm-starts') });
    const workers = new HostWorkers(this.net, hostEnv, log, this.logDir);
    this.workers = workers;
    await Promise.all(PLACEMENT.map(([role, host]) => workers.start(role, host)));
    log(`[hosts] workers up: ${PLACEMENT.map(([r, h]) => `${r}@${h}`).join(', ')}`);
    this.connection = await Connection.connect({ address: svc.TEMPORAL_ADDRESS });
    this.pool = new Pool({ connectionString: svc.DATABASE_URL, max: 2 });
    return new Client({ connection: this.connection });
  }

  /** Ends every process, removes the namespaces and the hosts' directories, whatever failed before; the workers' logs stay when `keepLogs`. */
  async close(keepLogs: boolean): Promise<void> {
    await this.pool?.end().catch(() => undefined);
    await this.connection?.close().catch(() => undefined);
    await this.workers?.stopAll();
    const services = this.services?.child;
    if (services && services.exitCode === null) {
      services.kill('SIGTERM');
      await withTimeout(new Promise((r) => services.once('exit', r)), 20_000);
      services.kill('SIGKILL');
    }
    this.net.destroy();
    fs.rmSync(this.base, { recursive: true, force: true });
    if (!keepLogs) fs.rmSync(this.logDir, { recursive: true, force: true });
  }
}

/** Cuts the train host off, then the rollout host, ... while `run` trains; what was cut when, and each recovery time. */
async function cutOffHostByHost(net: NetworkHosts, run: WorkflowHandle, options: HostsOptions, log: (line: string) => void): Promise<{ cut: string[]; recoveries: number[] }> {
  const step = async () => (await withTimeout(run.query<TrainingProgress>('progress'), 5_000).catch(() => undefined))?.step ?? 0;
  const cut: string[] = [];
  const recoveries: number[] = [];
  let after = await until('run 2 step 1', async () => ((await step()) >= 1 ? step() : undefined), 180_000);
  for (let i = 0; i < options.cutoffs; i++) {
    const host = i % 2 === 0 ? 'train' : 'rollout';
    const at = await step();
    net.cut(host);
    cut.push(`${host}@${at}`);
    log(`[hosts] cut off ${host} at step ${at} for ${options.cutoffSeconds} s`);
    await sleep(options.cutoffSeconds * 1000);
    net.restore(host);
    const back = performance.now();
    // Recovery: from the link coming up to the run's next step (the next cut-off waits for it).
    const from = Math.max(at, after, await step());
    after = await until(`run 2 to step again after ${host} came back`, async () => {
      const s = await step();
      return s > from || s >= options.steps ? s : undefined;
    }, 300_000);
    recoveries.push((performance.now() - back) / 1000);
    log(`[hosts] ${host} back; run 2 at step ${after} ${recoveries[recoveries.length - 1].toFixed(1)} s later`);
  }
  return { cut, recoveries };
}

/** The integrity counts of the runs, versions registered at local paths, and files outside the hosts' caches. */
async function checkHosts(stack: HostsStack, runs: string[]): Promise<{ integrity: RunIntegrity[]; local: string[]; stray: string[] }> {
  // The checks read the versions from the store as a fourth host would (their cache under base/bench).
  const saved = { ...process.env };
  Object.assign(process.env, stack.services!.env, { RELAX_HOME: path.join(stack.base, 'bench', 'home') });
  try {
    const pool = stack.pool!;
    const integrity: RunIntegrity[] = [];
    for (const id of runs) integrity.push(await checkRunIntegrity(pool, id, BATCH.prompts * BATCH.group, RETENTION));
    const paths = (await Promise.all(runs.map((id) => listCheckpoints(pool, id)))).flat().map((c) => c.path);
    const stray = HOSTS.flatMap((h) => (fs.existsSync(path.join(stack.base, h)) ? strayFiles(path.join(stack.base, h)) : []));
    return { integrity, local: paths.filter((p) => !isObjectUrl(p)), stray };
  } finally {
    process.env = saved;
  }
}

export async function runHostsCheck(options: HostsOptions): Promise<HostsReport> {
  const log = options.log ?? (() => undefined);
  const started = performance.now();
  const stack = new HostsStack();
  let passed = false;
  // An interrupted bench still takes its namespaces and processes down.
  const interrupted = () => void stack.close(true).finally(() => process.exit(130));
  process.once('SIGINT', interrupted);
  process.once('SIGTERM', interrupted);
  try {
    const client = await stack.start(log);
    const runs: string[] = [];
    const start = async (name: string) => {
      const id = `hosts-${name}-${path.basename(stack.base).slice(-6)}`;
      runs.push(id);
      return client.workflow.start('trainingRun', { taskQueue: roleTaskQueue('control'), workflowId: id, args: [runConfig(options.steps)] });
    };
    const firstResult = (await (await start('clean')).result()) as TrainingResult;
    log(`[hosts] run 1 (no faults): ${firstResult.steps} steps`);
    const second = await start('cutoffs');
    const { cut, recoveries } = await cutOffHostByHost(stack.net, second, options, log);
    const secondResult = (await second.result()) as TrainingResult;
    log(`[hosts] run 2 (${cut.length} cut-offs): ${secondResult.steps} steps`);

    const { integrity, local, stray } = await checkHosts(stack, runs);
    const problems = [...integrity.flatMap((r) => r.problems.map((p) => `${r.runId}: ${p}`)), ...local.map((p) => `a version registered at a local path: ${p}`), ...stray.map((f) => `checkpoint file outside the object cache: ${f}`)];
    const sum = (k: keyof RunIntegrity) => integrity.reduce((n, r) => n + (r[k] as number), 0);
    const report: HostsReport = {
      hosts: stack.net.hosts.size,
      shared_filesystem: local.length > 0,
      runs_completed: [firstResult, secondResult].filter((r) => r.steps === options.steps).length,
      lost_samples: sum('lostSamples'),
      double_trained_samples: sum('doubleTrainedSamples'),
      duplicate_versions: sum('duplicateVersions'),
      corrupt_checkpoints: sum('corruptCheckpoints') + sum('missingVersions'),
      cutoffs: cut.length,
      cut,
      cutoff_s: options.cutoffSeconds,
      recovery_s_max: Math.round(Math.max(0, ...recoveries) * 10) / 10,
      stray_files: stray.length,
      worker_restarts: stack.workers?.restarts ?? 0,
      steps: options.steps,
      wall_s: Math.round((performance.now() - started) / 100) / 10,
      problems,
    };
    passed = problems.length === 0;
    return report;
  } finally {
    process.off('SIGINT', interrupted);
    process.off('SIGTERM', interrupted);
    await stack.close(!passed);
    if (!passed) log(`[hosts] the workers' output is in ${stack.logDir}`);
  }
}

export const hostsBench: Bench = async (ctx) => {
  const num = (name: string, fallback: number) => (ctx.options[name] === undefined ? fallback : Number(ctx.options[name]));
  const report = await runHostsCheck({ steps: num('steps', 20), cutoffs: num('cutoffs', 4), cutoffSeconds: num('cutoff_s', 20), log: ctx.log });
  for (const p of report.problems) ctx.log(`[hosts] problem: ${p}`);
  ctx.log(`[hosts] ${report.hosts} hosts, shared filesystem ${report.shared_filesystem}; runs completed ${report.runs_completed}/2; cut-offs ${report.cut.join(', ')}; lost ${report.lost_samples}, double ${report.double_trained_samples}, duplicate versions ${report.duplicate_versions}, corrupt ${report.corrupt_checkpoints}, stray files ${report.stray_files}; longest recovery ${report.recovery_s_max} s; ${report.wall_s} s`);
  return { ...report };
};
