// `relax schedule create|list|describe|pause|unpause|trigger|delete`: scheduled retraining over
// Temporal Schedules (client/schedules.ts, docs/schedules.md). Bad options are usage errors
// (commander's InvalidArgumentError); an invalid run config is reported field by field.
import fs from 'node:fs';
import { InvalidArgumentError, Option, type Command } from 'commander';
import { RelaxClient } from '../client';
import type { RunConfigInput } from '../config/run-config';
import {
  createSchedule,
  deleteSchedule,
  describeSchedule,
  listSchedules,
  OVERLAP_POLICIES,
  parseScheduleDuration,
  pauseSchedule,
  ScheduleOptionError,
  triggerSchedule,
  unpauseSchedule,
  type OverlapPolicy,
  type ScheduleDescriptionView,
} from '../client/schedules';

function durationOption(option: string) {
  return (value: string): string => {
    try {
      parseScheduleDuration(option, value);
    } catch (err) {
      throw new InvalidArgumentError((err as Error).message);
    }
    return value;
  };
}

function readConfig(file: string | undefined, inline: string | undefined): RunConfigInput {
  if ((file === undefined) === (inline === undefined)) throw new InvalidArgumentError('give the run config with exactly one of --config <file> or --json <object>');
  let text: string;
  try {
    text = file !== undefined ? fs.readFileSync(file, 'utf8') : (inline as string);
  } catch (err) {
    throw new InvalidArgumentError(`--config: cannot read ${file}: ${(err as Error).message}`);
  }
  try {
    return JSON.parse(text) as RunConfigInput;
  } catch (err) {
    throw new InvalidArgumentError(`${file ?? '--json'}: not valid JSON (${(err as Error).message})`);
  }
}

/** Runs `fn` with a connected client; a ScheduleOptionError becomes a usage error. */
async function withClient<T>(fn: (client: RelaxClient) => Promise<T>): Promise<T> {
  const client = await RelaxClient.connect();
  try {
    return await fn(client);
  } catch (err) {
    if (err instanceof ScheduleOptionError) throw new InvalidArgumentError(err.message);
    throw err;
  } finally {
    await client.close();
  }
}

function printDescription(d: ScheduleDescriptionView): void {
  console.log(`schedule ${d.name}: ${d.paused ? 'PAUSED' : 'active'}${d.note ? ` (${d.note})` : ''}`);
  console.log(`  when:      ${d.spec}; overlap ${d.overlap}; catch-up window ${Math.round(d.catchupWindowMs / 1000)}s${d.pauseOnFailure ? '; pauses on failure' : ''}`);
  console.log(`  runs:      ${d.actionsTaken} started, ${d.skippedOverlap} skipped (overlap), ${d.missedCatchupWindow} missed (catch-up window)`);
  if (d.running.length) console.log(`  running:   ${d.running.join(', ')}`);
  for (const r of d.recentRuns) console.log(`  recent:    ${r.workflowId} (scheduled ${r.scheduledAt})`);
  if (d.nextRuns.length) console.log(`  next:      ${d.nextRuns.join(', ')}`);
}

export function registerScheduleCommands(program: Command): void {
  const schedule = program.command('schedule').description('scheduled retraining: Temporal Schedules that start training runs (docs/schedules.md)');

  schedule
    .command('create <name>')
    .description('create a schedule that starts a training run with one config on a cron or an interval')
    .option('--config <file>', 'run config JSON file')
    .option('--json <object>', 'run config as inline JSON')
    .option('--cron <expr>', 'cron expression, e.g. "0 6 * * *" (UTC) or "@daily"')
    .option('--every <duration>', 'interval, e.g. "6h", "30m", "10s"', durationOption('--every'))
    .addOption(new Option('--overlap <policy>', 'what a tick does while the previous run still runs').choices(OVERLAP_POLICIES).default('skip'))
    .option('--catchup-window <duration>', 'how late a missed tick may still start (default: Temporal\'s, 1 year)', durationOption('--catchup-window'))
    .option('--pause-on-failure', 'pause the schedule when a run fails')
    .option('--paused', 'create it paused')
    .option('--note <text>', 'a note shown with its state')
    .action(async (name: string, o: { config?: string; json?: string; cron?: string; every?: string; overlap: OverlapPolicy; catchupWindow?: string; pauseOnFailure?: boolean; paused?: boolean; note?: string }) => {
      if ((o.cron === undefined) === (o.every === undefined)) throw new InvalidArgumentError('give exactly one of --cron <expr> or --every <duration>');
      const config = readConfig(o.config, o.json);
      await withClient(async (client) => {
        await createSchedule(client.client, { name, config, cron: o.cron, every: o.every, overlap: o.overlap, catchupWindow: o.catchupWindow, pauseOnFailure: o.pauseOnFailure, paused: o.paused, note: o.note });
        console.log(`created schedule ${name}${o.paused ? ' (paused)' : ''}: ${o.cron !== undefined ? `cron "${o.cron}"` : `every ${o.every}`}, overlap ${o.overlap}; its runs are named ${name}-<scheduled time>`);
      });
    });

  schedule
    .command('list')
    .description('the schedules in the namespace')
    .option('--json', 'print JSON')
    .action(async (o: { json?: boolean }) => {
      const schedules = await withClient((client) => listSchedules(client.client));
      if (o.json) return console.log(JSON.stringify(schedules, null, 2));
      if (schedules.length === 0) return console.log('no schedules (create one with `relax schedule create <name> --every 6h --config run.json`)');
      for (const s of schedules) {
        console.log(`${s.name}  ${s.paused ? 'PAUSED' : 'active'}  ${s.spec}  ${s.workflowType ?? ''}  next ${s.nextRuns[0] ?? '-'}  last ${s.recentRuns.at(-1)?.workflowId ?? '-'}`);
      }
    });

  schedule
    .command('describe <name>')
    .description("a schedule's spec, policies, state, recent and next runs")
    .option('--json', 'print JSON (with the run config)')
    .action(async (name: string, o: { json?: boolean }) => {
      const d = await withClient((client) => describeSchedule(client.client, name));
      if (o.json) console.log(JSON.stringify(d, null, 2));
      else printDescription(d);
    });

  for (const [verb, what, fn] of [
    ['pause', 'pause a schedule (no new runs start; running ones go on)', pauseSchedule],
    ['unpause', 'unpause a schedule', unpauseSchedule],
  ] as const) {
    schedule
      .command(`${verb} <name>`)
      .description(what)
      .option('--note <text>', 'why')
      .action(async (name: string, o: { note?: string }) => {
        await withClient((client) => fn(client.client, name, o.note));
        console.log(`${verb}d schedule ${name}`);
      });
  }

  schedule
    .command('trigger <name>')
    .description("start one of the schedule's runs now")
    .addOption(new Option('--overlap <policy>', "override the schedule's overlap policy for this run").choices(OVERLAP_POLICIES))
    .action(async (name: string, o: { overlap?: OverlapPolicy }) => {
      await withClient((client) => triggerSchedule(client.client, name, o.overlap));
      console.log(`triggered schedule ${name}`);
    });

  schedule
    .command('delete <name>')
    .description('delete a schedule (its runs, running or finished, are not touched)')
    .action(async (name: string) => {
      await withClient((client) => deleteSchedule(client.client, name));
      console.log(`deleted schedule ${name}`);
    });
}
