// `relax schedule create|list|describe|pause|unpause|trigger|delete`: scheduled retraining over
// Temporal Schedules (client/schedules.ts, docs/schedules.md). Bad options are usage errors
// (exit 2); the run config is read, overridden and preflighted as relax train's (cli/config-args.ts).
import { InvalidArgumentError, Option, type Command } from 'commander';
import { RelaxClient } from '../client';
import { UsageError } from './runs';
import { CONFIG_FLAG_HELP, NO_PREFLIGHT_HELP, oldInlineJsonError, oldInlineJsonOption, outputOption, OVERRIDES_HELP, runConfigFromArgs, wantsJson } from './config-args';
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

/** Runs `fn` with a connected client; a ScheduleOptionError becomes a usage error. */
async function withClient<T>(fn: (client: RelaxClient) => Promise<T>): Promise<T> {
  const client = await RelaxClient.connect();
  try {
    return await fn(client);
  } catch (err) {
    // A UsageError, not commander's InvalidArgumentError: thrown from an action, commander would not print that one.
    if (err instanceof ScheduleOptionError) throw new UsageError(err.message);
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

/** `relax schedule create <name> --config run.yaml [key=value ...]`: preflighted like `relax train`. */
function registerScheduleCreate(schedule: Command): void {
  schedule
    .command('create <name>')
    .description('create a schedule that starts a training run with one config on a cron or an interval')
    .argument('[overrides...]', OVERRIDES_HELP)
    .option('--config <file>', CONFIG_FLAG_HELP)
    .addOption(oldInlineJsonOption())
    .option('--no-preflight', NO_PREFLIGHT_HELP)
    .option('--cron <expr>', 'cron expression, e.g. "0 6 * * *" (UTC) or "@daily"')
    .option('--every <duration>', 'interval, e.g. "6h", "30m", "10s"', durationOption('--every'))
    .addOption(new Option('--overlap <policy>', 'what a tick does while the previous run still runs').choices(OVERLAP_POLICIES).default('skip'))
    .option('--catchup-window <duration>', 'how late a missed tick may still start (default: Temporal\'s, 1 year)', durationOption('--catchup-window'))
    .option('--pause-on-failure', 'pause the schedule when a run fails')
    .option('--paused', 'create it paused')
    .option('--note <text>', 'a note shown with its state')
    .action(async (name: string, overrides: string[], o: { config?: string; json?: string | boolean; cron?: string; every?: string; overlap: OverlapPolicy; catchupWindow?: string; pauseOnFailure?: boolean; paused?: boolean; note?: string; preflight: boolean }) => {
      if (o.json !== undefined) throw oldInlineJsonError('schedule create');
      if (o.config === undefined) throw new UsageError('give the run config with --config <file> (YAML or JSON) or --config \'{...}\' (inline JSON)');
      if ((o.cron === undefined) === (o.every === undefined)) throw new UsageError('give exactly one of --cron <expr> or --every <duration>');
      const config = await runConfigFromArgs(o.config, overrides, { preflight: o.preflight });
      await withClient(async (client) => {
        await createSchedule(client.client, { name, config, cron: o.cron, every: o.every, overlap: o.overlap, catchupWindow: o.catchupWindow, pauseOnFailure: o.pauseOnFailure, paused: o.paused, note: o.note });
        console.log(`created schedule ${name}${o.paused ? ' (paused)' : ''}: ${o.cron !== undefined ? `cron "${o.cron}"` : `every ${o.every}`}, overlap ${o.overlap}; its runs are named ${name}-<scheduled time>`);
      });
    });
}

export function registerScheduleCommands(program: Command): void {
  const schedule = program.command('schedule').description('scheduled retraining: Temporal Schedules that start training runs (docs/schedules.md)');
  registerScheduleCreate(schedule);

  schedule
    .command('list')
    .description('the schedules in the namespace')
    .addOption(outputOption())
    .option('--json', 'the same as --output json')
    .action(async (o: { json?: boolean; output: string }) => {
      const schedules = await withClient((client) => listSchedules(client.client));
      if (wantsJson(o)) return console.log(JSON.stringify(schedules, null, 2));
      if (schedules.length === 0) return console.log('no schedules (create one with `relax schedule create <name> --every 6h --config run.yaml`)');
      for (const s of schedules) {
        console.log(`${s.name}  ${s.paused ? 'PAUSED' : 'active'}  ${s.spec}  ${s.workflowType ?? ''}  next ${s.nextRuns[0] ?? '-'}  last ${s.recentRuns.at(-1)?.workflowId ?? '-'}`);
      }
    });

  schedule
    .command('describe <name>')
    .description("a schedule's spec, policies, state, recent and next runs")
    .addOption(outputOption())
    .option('--json', 'the same as --output json (JSON with the run config)')
    .action(async (name: string, o: { json?: boolean; output: string }) => {
      const d = await withClient((client) => describeSchedule(client.client, name));
      if (wantsJson(o)) console.log(JSON.stringify(d, null, 2));
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
