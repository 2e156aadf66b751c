// The `relax` commands about training runs: train, status, watch, list, logs, set, stop, pause,
// resume, cancel and terminate. Each connects through the typed client (client/index.ts), prints
// for a person by default (`--output json` for programs), and names the real cause when a run failed.
import { InvalidArgumentError, Option, type Command } from 'commander';
import { listQuery, RelaxClient, RunDatabase, resolveAddresses, runState, type RunDescription, type RunEventRecord, type RunSummary } from '../client';
import type { HyperparameterUpdate } from '../config/hyperparameters';
import type { TrainingProgress } from '../workflows/definitions';
import { formatDuration, progressLine, renderCurves, watchRun } from './watch';
import { CONFIG_FLAG_HELP, NO_PREFLIGHT_HELP, oldInlineJsonError, oldInlineJsonOption, outputOption, OVERRIDES_HELP, runConfigFromArgs, wantsJson } from './config-args';
import { plainTable } from './table';

/** A bad command line (not a runtime failure): main() prints it and exits 2. */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}

/** The run commands that open a Temporal connection (they get the --tls... flags). */
export const RUN_COMMANDS = ['train', 'status', 'watch', 'list', 'logs', 'set', 'stop', 'pause', 'resume', 'cancel', 'terminate'];

async function withClient<T>(fn: (client: RelaxClient) => Promise<T>): Promise<T> {
  const client = await RelaxClient.connect();
  try {
    return await fn(client);
  } finally {
    await client.close();
  }
}

/** `train.lr=3e-4 rollout.temperature=0.8` -> { train: { lr: 0.0003 }, rollout: { temperature: 0.8 } }; values are JSON, else strings. */
export function parseAssignments(pairs: string[]): HyperparameterUpdate {
  if (!pairs.length) throw new UsageError('relax set: give at least one key=value (e.g. train.lr=3e-4 rollout.temperature=0.8)');
  const out: Record<string, unknown> = {};
  for (const pair of pairs) {
    const eq = pair.indexOf('=');
    const key = eq > 0 ? pair.slice(0, eq) : '';
    if (!/^[a-z_]+(\.[a-z_]+)*$/.test(key)) throw new UsageError(`relax set: expected key=value with a dotted key such as train.lr=3e-4, got "${pair}"`);
    const raw = pair.slice(eq + 1);
    let value: unknown = raw;
    try {
      value = JSON.parse(raw);
    } catch {
      // Not JSON: a string (e.g. train.lr_decay=cosine).
    }
    const parts = key.split('.');
    let node = out;
    for (const p of parts.slice(0, -1)) {
      const next = (node[p] ??= {});
      if (typeof next !== 'object' || next === null) throw new UsageError(`relax set: ${key} conflicts with ${p}=${JSON.stringify(next)}`);
      node = next as Record<string, unknown>;
    }
    node[parts[parts.length - 1]] = value;
  }
  return out as HyperparameterUpdate;
}

function ago(date: Date | undefined): string {
  if (!date) return '-';
  return `${date.toISOString().replace(/\.\d+Z$/, 'Z')} (${formatDuration((Date.now() - date.getTime()) / 1000)} ago)`;
}

/** `relax status` for a person: what the run is doing, or how it ended and why. */
export function formatDescription(d: RunDescription): string {
  const lines = [`run ${d.runId}: ${runState(d)} (Temporal: ${d.workflowStatus})`];
  const p = d.progress;
  // A run that failed before its first step has no progress worth a line.
  if (p && (d.workflowStatus === 'RUNNING' || p.step > 0)) {
    const progress = { ...p, lastReward: p.lastReward ?? undefined, lastAccuracy: p.lastAccuracy ?? undefined, lastEvalStep: p.lastEvalStep ?? undefined, etaSeconds: p.etaSeconds ?? undefined } as TrainingProgress;
    lines.push(`  progress: ${progressLine(progress, progress.etaSeconds)}`);
  }
  if (d.summary) {
    const acc = d.summary.evalAccuracy === null ? '-' : `${(d.summary.evalAccuracy * 100).toFixed(1)}%`;
    lines.push(`  result:   ${d.summary.steps} steps, policy v${d.summary.policyVersion}, held-out accuracy ${acc}${d.summary.skippedSteps ? `, ${d.summary.skippedSteps} skipped` : ''}`);
  }
  if (d.failure) lines.push(`  failed:   ${d.failure.message}${d.failure.type ? ` [${d.failure.type}]` : ''}`);
  if (d.task || d.model) lines.push(`  task:     ${d.task ?? '-'}, model ${d.model ?? '-'}`);
  lines.push(`  started:  ${ago(d.startTime)}`);
  if (d.closeTime) lines.push(`  closed:   ${ago(d.closeTime)}`);
  return lines.join('\n');
}

export function formatRunTable(runs: RunSummary[]): string {
  if (!runs.length) return '(no runs)';
  const rows = runs.map((r) => [
    r.runId,
    runState(r),
    r.step !== undefined ? String(r.step) : r.progress ? `${r.progress.step}/${r.progress.totalSteps}` : '-',
    r.accuracy !== undefined ? `${(r.accuracy * 100).toFixed(1)}%` : '-',
    r.task ?? '-',
    r.workflowStatus,
    r.startTime.toISOString().replace(/\.\d+Z$/, 'Z'),
  ]);
  return plainTable(rows, ['RUN', 'STATUS', 'STEP', 'ACCURACY', 'TASK', 'TEMPORAL', 'STARTED']);
}

export function formatEvent(e: RunEventRecord): string {
  const { activity, attempt, ...rest } = e.detail as { activity?: string; attempt?: number } & Record<string, unknown>;
  const extra = Object.keys(rest).length ? ` ${JSON.stringify(rest)}` : '';
  return `${e.createdAt.toISOString()}  ${e.kind}  ${activity ?? '-'}${attempt && attempt > 1 ? ` (attempt ${attempt})` : ''}  ${e.role ?? '-'}@${e.worker ?? '-'}${extra}`;
}

function limitOption(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError(`--limit must be an integer >= 1, got "${value}"`);
  return n;
}

function keywordOption(field: 'task') {
  return (value: string): string => {
    try {
      listQuery({ [field]: value });
    } catch (err) {
      throw new InvalidArgumentError((err as Error).message);
    }
    return value;
  };
}

const STATUSES = ['starting', 'warming_up', 'running', 'paused', 'stopping', 'cancelling', 'completed', 'stopped', 'cancelled', 'continued', 'failed', 'terminated', 'timed_out'];

async function follow(client: RelaxClient, runId: string, json = false): Promise<void> {
  // JSON output: no bar, no lines; only the result object.
  const tty = process.stdout.isTTY === true && !json;
  const result = await watchRun(client.client.workflow.getHandle(runId), { bar: tty, lines: tty || json ? undefined : (l) => console.log(l), detachOnInterrupt: true, result: () => client.result(runId) });
  if (tty) console.log(renderCurves(result));
  console.log(JSON.stringify({ run_id: result.runId, steps: result.steps, policy_version: result.policyVersion, eval_accuracy: result.evalAccuracy, stopped: result.stopped, ...(result.cancelled ? { cancelled: true } : {}) }));
}

export function registerRunCommands(program: Command): void {
  program
    .command('train')
    .description('start a training run on a running stack and follow it (Ctrl-C detaches; the run goes on): relax train --config run.yaml train.steps=3')
    .argument('[overrides...]', OVERRIDES_HELP)
    .option('--config <file>', CONFIG_FLAG_HELP)
    .option('--id <workflowId>', 'workflow id (default: run_id, else generated)')
    .option('--detach', 'print the workflow id and return at once')
    .addOption(outputOption())
    .addOption(oldInlineJsonOption())
    .option('--no-preflight', NO_PREFLIGHT_HELP)
    .action(async (overrides: string[], o: { config?: string; json?: string | boolean; id?: string; detach?: boolean; output: string; preflight: boolean }) => {
      if (typeof o.json === 'string') throw oldInlineJsonError('train');
      const json = wantsJson(o);
      const config = await runConfigFromArgs(o.config, overrides, { preflight: o.preflight });
      return withClient(async (client) => {
        const handle = await client.start(config, { workflowId: o.id });
        if (json && o.detach) console.log(JSON.stringify({ run_id: handle.runId }));
        else if (!json) console.log(`started training run ${handle.runId}`);
        if (!o.detach) await follow(client, handle.runId, json);
      });
    });

  program
    .command('watch <runId>')
    .description('follow a running training run (re-attach after Ctrl-C or --detach) until it ends')
    .action((runId: string) =>
      withClient(async (client) => {
        await client.client.workflow.getHandle(runId).describe();
        await follow(client, runId);
      }),
    );

  program
    .command('status <runId>')
    .description("a training run's state: step, version, reward, accuracy, ETA; how it ended and why")
    .addOption(outputOption())
    .option('--json', 'the same as --output json: the whole description as JSON')
    .action((runId: string, o: { json?: boolean; output: string }) =>
      withClient(async (client) => {
        const d = await client.describe(runId);
        console.log(wantsJson(o) ? JSON.stringify(d, null, 2) : formatDescription(d));
      }),
    );

  program
    .command('list')
    .description('training runs in Temporal visibility, newest first')
    .addOption(new Option('--status <status>', 'only runs with this status').choices(STATUSES))
    .option('--task <task>', 'only runs of this task', keywordOption('task'))
    .option('--limit <n>', 'at most this many runs', limitOption, 20)
    .addOption(outputOption())
    .option('--json', 'the same as --output json')
    .action((o: { status?: string; task?: string; limit: number; json?: boolean; output: string }) =>
      withClient(async (client) => {
        const runs = await client.list({ status: o.status, task: o.task, limit: o.limit });
        console.log(wantsJson(o) ? JSON.stringify(runs, null, 2) : formatRunTable(runs));
      }),
    );

  registerRunRecordCommands(program);
  registerRunControlCommands(program);
}

interface MetricsOutputOptions {
  output: string;
  csv?: boolean;
  json?: boolean;
}

/** `relax metrics`' format: --output, or its older aliases --csv / --json; two different ones are a usage error. */
export function metricsFormat(o: MetricsOutputOptions): string {
  const asked = new Set([...(o.output !== 'text' ? [o.output] : []), ...(o.csv ? ['csv'] : []), ...(o.json ? ['json'] : [])]);
  if (asked.size > 1) throw new UsageError(`relax metrics: choose one output format, got ${[...asked].join(' and ')} (--output csv|json; --csv and --json are its aliases)`);
  return [...asked][0] ?? 'text';
}

/** `relax metrics` and `relax logs`: a run's records in Postgres. */
function registerRunRecordCommands(program: Command): void {
  program
    .command('metrics <runId>')
    .description("a run's metric series from Postgres: a table of the newest values, or every step as --output csv (one column per series) or --output json ({series: [[step, value], ...]})")
    .addOption(outputOption(['csv']))
    .option('--csv', 'the same as --output csv: every step, one row each, one column per series')
    .option('--json', 'the same as --output json: every series as [[step, value], ...]')
    .option('--names <a,b>', 'only these series (comma-separated)')
    .action(async (runId: string, o: MetricsOutputOptions & { names?: string }) => {
      const format = metricsFormat(o);
      const db = new RunDatabase(resolveAddresses().databaseUrl);
      try {
        const series = await db.metrics(runId, o.names ? o.names.split(',').map((n) => n.trim()).filter(Boolean) : undefined);
        const names = Object.keys(series).sort();
        if (!names.length) throw new Error(`run ${runId} has no metrics in this database${o.names ? ` named ${o.names}` : ''}: check the run id (relax list) and DATABASE_URL`);
        if (format === 'json') console.log(JSON.stringify(series));
        else if (format === 'csv') console.log(metricsCsv(series, names));
        else console.log(plainTable(names.map((n) => [n, String(series[n].at(-1)![1]), `step ${series[n].at(-1)![0]} (${series[n].length} points)`])));
      } finally {
        await db.close();
      }
    });

  program
    .command('logs <runId>')
    .description("a run's events (run_events in Postgres: each stage's start and end, worker, attempt) in time order")
    .option('--follow', 'keep printing new events until the run ends')
    .action(async (runId: string, o: { follow?: boolean }) => {
      const db = new RunDatabase(resolveAddresses().databaseUrl);
      let client: RelaxClient | undefined;
      try {
        let after = 0;
        const printNew = async () => {
          for (const e of await db.events(runId, after)) {
            console.log(formatEvent(e));
            after = e.id;
          }
        };
        await printNew();
        if (!o.follow) {
          if (after === 0) throw new Error(`run ${runId} has no events in this database: check the run id (relax list) and DATABASE_URL`);
          return;
        }
        client = await RelaxClient.connect();
        const handle = client.client.workflow.getHandle(runId);
        while (['RUNNING', 'CONTINUED_AS_NEW'].includes((await handle.describe()).status.name)) {
          await new Promise((r) => setTimeout(r, 1_000));
          await printNew();
        }
        await printNew();
      } finally {
        await db.close();
        await client?.close();
      }
    });
}

/** `relax set`, `stop`, `pause`, `resume`, `cancel` and `terminate`: a running run's controls. */
function registerRunControlCommands(program: Command): void {
  program
    .command('set <runId> <assignments...>')
    .description('change hyperparameters of a running run from its next step: relax set <run> train.lr=3e-4 rollout.temperature=0.8')
    .addOption(outputOption())
    .option('--json', "the same as --output json: the Update's answer as JSON")
    .action((runId: string, pairs: string[], o: { json?: boolean; output: string }) => {
      const update = parseAssignments(pairs);
      return withClient(async (client) => {
        const answer = await client.setHyperparameters(runId, update);
        if (wantsJson(o)) return console.log(JSON.stringify(answer, null, 2));
        console.log(`${runId}: ${answer.changed.length ? answer.changed.join(', ') : 'nothing'} changed, from step ${answer.fromStep}`);
        console.log(`  now in force: ${JSON.stringify(answer.hyperparameters)}`);
      });
    });

  for (const [name, what] of [
    ['stop', 'finish the current step (publishing its version), then end the run'],
    ['pause', 'pause a training run between steps'],
    ['resume', 'resume a paused training run'],
    ['cancel', 'cancel the workflow: a graceful stop (the run ends CANCELED, recorded as cancelled; its last version stays usable)'],
  ] as const) {
    program
      .command(`${name} <runId>`)
      .description(what)
      .action((runId: string) =>
        withClient(async (client) => {
          await client[name](runId);
          console.log(`${name} sent to ${runId}${name === 'cancel' ? `: it ends after its current step (relax status ${runId})` : ''}`);
        }),
      );
  }

  program
    .command('terminate <runId>')
    .description('the hard stop: Temporal ends the workflow at once (no step finishes, Postgres is not updated); prefer cancel or stop')
    .option('--reason <text>', 'why (recorded in the workflow history)', 'terminated with relax terminate')
    .action((runId: string, o: { reason: string }) =>
      withClient(async (client) => {
        await client.terminate(runId, o.reason);
        console.log(`terminated ${runId}: ${o.reason}`);
      }),
    );
}

/** Series as CSV: a header `step,<names...>`, then one row per step with a value for each series (empty where it has none). */
// Hand-written: no CSV library is a dependency, and only the header's names need quoting (the cells are numbers).
export function metricsCsv(series: Record<string, Array<[number, number]>>, names: string[]): string {
  const steps = [...new Set(names.flatMap((n) => series[n].map(([step]) => step)))].sort((a, b) => a - b);
  const byName = names.map((n) => new Map(series[n]));
  const quote = (n: string) => (/[",\n]/.test(n) ? `"${n.replace(/"/g, '""')}"` : n);
  return [['step', ...names.map(quote)].join(','), ...steps.map((step) => [step, ...byName.map((m) => m.get(step) ?? '')].join(','))].join('\n');
}
