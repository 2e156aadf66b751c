// The `relax` command. Thin: parse flags, call the library, print.
import fs from 'node:fs';
import path from 'node:path';
import { Command, CommanderError, Option } from 'commander';
import { describeError, resolveAddresses } from '../client';
import { RunConfigError } from '../config/run-config';
import { ConfigInputError } from '../config/config-file';
import { PreflightError } from '../config/preflight';
import { parseDevice } from '../engines/device';
import { fileCreationMask, relaxEnvironment } from '../config/environment';
import { describeBenches, loadBench } from '../bench';
import { formatChecks, runChecks } from './doctor';
import { openStore } from '../store/db';
import { addServeLimitOptions, serveCommandAction, type ServeCommandOptions } from './serve';
import { chromeTrace, listSpans, utilization } from '../store/spans';
import { exportPolicyVersion } from '../training/export';
import { registerModelCommands } from './model';
import { addTemporalFlags, TEMPORAL_COMMANDS } from './temporal-flags';
import { registerReplayCommand } from './replay';
import { registerRunCommands, RUN_COMMANDS, UsageError } from './runs';
import { registerHealthCommand } from './health';
import { registerScheduleCommands } from './schedule';
import { registerEvalCommand } from './eval';
import { registerApiCommand } from './api';
import { registerDevCommand, registerWorkerCommand } from './stack-commands';
import { registerQuickstartCommand } from './quickstart';
import { registerTensorboardCommand } from './tensorboard';

export function buildProgram(): Command {
  const program = new Command('relax')
    .description('Relax: asynchronous RL post-training for language models, controlled by Temporal')
    .version(packageVersion(), '-V, --version', 'print the relax version')
    .showHelpAfterError()
    // Usage errors (unknown option, missing argument, bad value) throw CommanderError: main() exits 2.
    .exitOverride();

  registerDevCommand(program, packageVersion);
  registerWorkerCommand(program);
  registerDoctorCommand(program);
  registerRunCommands(program);
  registerApiCommand(program, packageVersion());
  registerQuickstartCommand(program);
  registerServeCommand(program);
  registerExportCommand(program);
  registerModelCommands(program);
  registerScheduleCommands(program);
  registerEvalCommand(program);
  registerHealthCommand(program);
  addTemporalFlags(program, [...new Set([...TEMPORAL_COMMANDS, ...RUN_COMMANDS, 'schedule', 'eval'])]);
  registerTraceCommand(program);
  registerReplayCommand(program);
  registerTensorboardCommand(program);
  registerBenchCommand(program);
  return program;
}

function registerDoctorCommand(program: Command): void {
  program
    .command('doctor')
    .description('check that Temporal, the database and the tensor engines are reachable and load')
    .option('--device <device>', 'device to probe engines for', 'cpu')
    .option('--model <model>', 'also check a model path (a Hugging Face directory, a .gguf file or a named model) as model.from would use it')
    .action(async (o) => {
      const a = resolveAddresses();
      const checks = await runChecks({ ...a, device: parseDevice(o.device), ...(o.model ? { model: o.model } : {}) });
      console.log(formatChecks(checks));
      if (checks.some((c) => !c.ok)) process.exitCode = 1;
    });
}

function registerServeCommand(program: Command): void {
  addServeLimitOptions(program.command('serve'))
    .description("serve a run's policy on an OpenAI-compatible endpoint (/v1/completions, /v1/chat/completions; docs/openai-endpoint.md)")
    .option('--run <runId>', 'the run whose policy to serve: model "<run_id>" is its newest version, "<run_id>@<n>" version n')
    .option('--engine', 'serve as an external rollout engine: hold no run until a Relax stack that registered this URL tells it which version to load (needs RELAX_ENGINE_TOKEN)')
    .option('--max-checkpoint-mb <n>', 'with --engine: the largest checkpoint it fetches, MiB (default 8192)', (v) => Number(v))
    .option('--port <n>', 'port', (v) => Number(v), 8000)
    .option('--host <host>', 'interface to listen on', '127.0.0.1')
    .option('--device <device>', 'cpu or cuda:N')
    .action((o: ServeCommandOptions) => serveCommandAction(o));
}

function registerExportCommand(program: Command): void {
  program
    .command('export <ref>')
    .description('write a published policy version (<run_id>@<version>) as a Hugging Face model directory (LoRA: merged, plus the PEFT adapter)')
    .addOption(new Option('--format <format>', 'output format').choices(['hf']).default('hf'))
    .requiredOption('--out <dir>', 'the directory to write')
    .action(async (ref: string, o: { out: string }) => {
      const { databaseUrl } = resolveAddresses();
      if (!databaseUrl) throw new Error("DATABASE_URL is not set: point it at the run's database, or start `relax dev` (it serves one)");
      const pool = await openStore({ url: databaseUrl, maxConnections: 2 });
      try {
        const out = await exportPolicyVersion(pool, ref, o.out);
        console.log(`${ref} written to ${out.dir} (${out.parameters.toLocaleString('en-US')} parameters)${out.adapterDir ? `; LoRA adapter (PEFT) in ${out.adapterDir}` : ''}${out.adapterSkipped ? `; no PEFT adapter: ${out.adapterSkipped}` : ''}${out.encodersFile ? `; the media encoders and projectors (Relax's names, configs in encoders.json) in ${out.encodersFile}` : ''}`);
      } finally {
        await pool.end();
      }
    });
}

function registerTraceCommand(program: Command): void {
  program
    .command('trace <runId>')
    .description("a run's timeline as a Chrome trace (open in ui.perfetto.dev or chrome://tracing), and each role's busy and idle time")
    .option('--out <file>', 'where to write the trace', '')
    .action(async (runId: string, o: { out: string }) => {
      const { databaseUrl } = resolveAddresses();
      if (!databaseUrl) throw new Error('DATABASE_URL is not set: point it at the run\'s database, or start `relax dev` (it serves one)');
      const pool = await openStore({ url: databaseUrl, maxConnections: 1 });
      try {
        const spans = await listSpans(pool, runId);
        if (!spans.length) throw new Error(`run ${runId} has no recorded stage spans: check the run id (relax status ${runId})`);
        const out = o.out || path.join(relaxEnvironment().home, 'traces', `${runId}.trace.json`);
        fs.mkdirSync(path.dirname(path.resolve(out)), { recursive: true });
        fs.writeFileSync(out, `${JSON.stringify(chromeTrace(spans))}\n`);
        for (const [role, u] of Object.entries(utilization(spans))) {
          console.log(`${role.padEnd(10)} busy ${(u.busyMs / 1000).toFixed(1)} s of ${(u.windowMs / 1000).toFixed(1)} s (idle ${(u.idleFraction * 100).toFixed(0)}%), ${u.spans} spans`);
        }
        console.log(`trace of ${spans.length} spans written to ${out}`);
      } finally {
        await pool.end();
      }
    });
}

function registerBenchCommand(program: Command): void {
  program
    .command('bench <name>')
    .description(`run a benchmark; names:\n${describeBenches()}`)
    .option('--json', 'print one JSON object as the last line')
    .option('--set <key=value...>', 'benchmark-specific options')
    .action(async (name: string, o: { json?: boolean; set?: string[] }) => {
      const bench = await loadBench(name);
      const options = Object.fromEntries(
        (o.set ?? []).map((kv) => {
          const eq = kv.indexOf('=');
          if (eq <= 0) throw new Error(`--set: expected key=value, got "${kv}"`);
          return [kv.slice(0, eq), kv.slice(eq + 1)];
        }),
      );
      const json = Boolean(o.json);
      const result = await bench({ json, options, log: json ? () => undefined : (line) => console.log(line) });
      console.log(json ? JSON.stringify(result) : JSON.stringify(result, null, 2));
    });
}

/** The version in package.json (dist/cli/main.js -> ../../package.json). */
export function packageVersion(): string {
  return (JSON.parse(fs.readFileSync(path.resolve(__dirname, '../../package.json'), 'utf8')) as { version: string }).version;
}

/**
 * Runs the command line. Exit codes: 0 done (help and --version too), 2 a usage error (unknown
 * option, missing argument, bad value, an unreadable or invalid run config, or one naming a task, model
 * or dataset that is not there: refused before sending), 1 a runtime
 * failure (its message is the cause chain of a failed run), 130 detached with Ctrl-C.
 */
export async function main(argv: string[] = process.argv): Promise<void> {
  try {
    // Everything relax and its children create (database, histories, checkpoints, logs) is private by default.
    process.umask(fileCreationMask());
    await buildProgram().parseAsync(argv);
  } catch (err) {
    if (err instanceof CommanderError) {
      // Commander has printed the message (and the help) already.
      process.exitCode = err.exitCode === 0 ? 0 : 2;
    } else if (err instanceof RunConfigError) {
      console.error(`relax: invalid run config:\n${err.problems.map((p) => `  - ${p}`).join('\n')}`);
      process.exitCode = 2;
    } else if (err instanceof PreflightError) {
      console.error(`relax: no workflow was started; the run config names what is not there:\n${err.problems.map((p) => `  - ${p.field}: ${p.message}`).join('\n')}`);
      process.exitCode = 2;
    } else if (err instanceof UsageError || err instanceof ConfigInputError) {
      console.error(`relax: ${err.message}`);
      process.exitCode = 2;
    } else {
      // A failed workflow's reason is its cause chain (workflow failure -> activity failure -> application failure).
      console.error(`relax: ${describeError(err)}`);
      process.exitCode = process.exitCode || 1;
    }
  }
}
