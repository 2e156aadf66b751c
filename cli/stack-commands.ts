// `relax dev` and `relax worker`: the commands that run the local stack and one worker process, and the
// helpers quickstart shares with them (printing a stack, integer options).
import fs from 'node:fs';
import path from 'node:path';
import { InvalidArgumentError, Option, type Command } from 'commander';
import { Runtime } from '@temporalio/worker';
import { readStackFile, resolveAddresses, stackFilePath } from '../client';
import { ROLES, type Role } from '../config/task-queues';
import { parseDevice } from '../engines/device';
import { PACKAGE_ROOT, relaxEnvironment, sdkLogLevel, sdkMetricsPort, workerShutdownGrace } from '../config/environment';
import { checkPortsFree, startLocalStack, type LocalStack } from '../workers/local-stack';
import { freePort } from '../workers/ports';
import { startWorker } from '../workers/worker';
import { metricsEnabled } from '../workers/worker-metrics';
import { redactUrl } from '../store/db';
import { defaultLevel, temporalLogger } from '../telemetry/log';
import { writeStackFile } from './stack-file';
import { consoleLine, openDevLogs, type EchoMode } from './dev-logs';
import { DEFAULT_API_PORT, startStackControl } from './api';

export function intOption(name: string, min = 0) {
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

/** What relax dev adds to the stack's summary: its control API (with its docs and the dashboard) and where the logs go. */
export interface DevSummary {
  /** The control API's base URL; undefined with --no-api. */
  apiUrl?: string;
  tokenSource?: string;
  logDir: string;
  echo: EchoMode;
}

const ECHOED: Record<EchoMode, string> = {
  quiet: 'nothing of it is echoed here (--quiet)',
  default: "workers' warnings and errors are echoed here; --verbose echoes everything",
  verbose: 'everything is echoed here too (--verbose)',
};

export function printStack(stack: LocalStack, dev?: DevSummary): void {
  console.log('Relax local stack is up');
  console.log(`  Temporal:  ${stack.temporalAddress} (pid ${stack.temporalPid() ?? '?'})`);
  console.log(`  Web UI:    ${stack.uiUrl ?? '(headless)'}`);
  if (dev?.apiUrl) {
    console.log(`  Dashboard: ${dev.apiUrl}/dashboard`);
    console.log(`  API:       ${dev.apiUrl}  (docs ${dev.apiUrl}/docs; mutations need the bearer token in ${dev.tokenSource})`);
  } else if (dev) console.log('  API:       (off: --no-api; no dashboard either)');
  // The password stays in stack.json (mode 0600), where the other commands read it.
  console.log(`  Database:  ${redactUrl(stack.databaseUrl)}${stack.embeddedDatabase ? '  (embedded PGlite)' : ''}`);
  console.log(`  Workers:   ${ROLES.map((r) => `${r} x${stack.workerPids(r).length}`).join(', ')}`);
  // Each worker's Prometheus endpoints (its own, the Temporal SDK's); stack.json keeps them current.
  if (stack.temporalMetricsUrl) console.log(`  Metrics:   temporal ${stack.temporalMetricsUrl}`);
  for (const w of stack.workers()) if (w.metricsUrls?.length) console.log(`  Metrics:   ${w.role}#${w.index} ${w.metricsUrls.join(' ')}`);
  if (!dev) return;
  console.log(`  Logs:      ${dev.logDir}${path.sep}  (every process's full output, one file each; ${ECHOED[dev.echo]})`);
  const example = path.relative(process.cwd(), path.join(PACKAGE_ROOT, 'examples', 'add2-grpo.yaml'));
  console.log(`Start a run: relax train --config ${example}${dev.apiUrl ? `  (or POST ${dev.apiUrl}/runs)` : ''}; follow it with relax watch <run-id>`);
}

/** `relax dev`: the whole local stack in the foreground until Ctrl-C; packageVersion is the version the control API reports. */
export function registerDevCommand(program: Command, packageVersion: () => string): void {
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
    .option('--judge-workers <n>', 'judge worker processes (they load a judge model only for runs with reward.judge)', intOption('--judge-workers'), 1)
    .option('--device <device>', 'device of the accelerator workers: cpu or cuda:N', 'cpu')
    .option('--quiet', 'echo nothing of the stack processes (their full output is still in <data-dir>/logs/)')
    .option('--verbose', 'echo every line of the stack processes (the Temporal server\'s too); by default only the workers\' warnings and errors')
    .option('--api-port <port>', 'control API port (0 = any free port)', intOption('--api-port'), DEFAULT_API_PORT)
    .option('--api-host <host>', 'control API listen address', '127.0.0.1')
    .option('--no-api', 'do not serve the control API (rollout capacity is still managed)')
    .addOption(new Option('--storage <kind>', 'where checkpoints and media go: files under the data directory, or an S3 object store relax dev starts (SeaweedFS; npm run setup -- --seaweedfs installs it)').choices(['file', 's3']).default('file'))
    .action(async (o) => {
      parseDevice(o.device);
      // This process's own lines (its API, its capacity worker's SDK) at warn unless RELAX_LOG_LEVEL says otherwise.
      defaultLevel('warn');
      Runtime.install({ logger: temporalLogger(sdkLogLevel()) });
      const home = path.resolve(o.dataDir);
      const running = readStackFile(home);
      if (running && isAlive(running.pid)) {
        throw new Error(`a relax dev (pid ${running.pid}) already runs with data directory ${home}: stop it first, or pass --data-dir`);
      }
      if (o.api) await checkPortsFree([{ port: o.apiPort, flag: '--api-port' }]);
      let up: LocalStack | undefined;
      const echo: EchoMode = o.quiet ? 'quiet' : o.verbose ? 'verbose' : 'default';
      const logs = openDevLogs(path.join(home, 'logs'));
      const stack = await startLocalStack({
        home,
        temporalPort: o.temporalPort,
        uiPort: o.uiPort,
        temporalMetricsPort: o.temporalMetricsPort,
        dbPort: o.dbPort,
        databaseUrl: relaxEnvironment().databaseUrl,
        workers: { control: 1, rollout: o.rolloutWorkers, train: o.trainWorkers, reference: o.referenceWorkers, judge: o.judgeWorkers },
        device: o.device,
        storage: o.storage,
        log: (line) => {
          logs.write(line);
          const shown = consoleLine(line, echo);
          if (shown !== undefined) console.log(shown);
        },
        // Restarts and their backoff are relax dev's own lines: printed even with --quiet.
        notice: (line) => {
          logs.write(line);
          console.log(line);
        },
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
      const control = await startStackControl(stack, home, { host: o.apiHost, port: o.api ? o.apiPort : null, version: packageVersion() }).catch(async (err: Error) => {
        await stack.stop();
        throw err;
      });
      printStack(stack, { ...(control.api ? { apiUrl: control.api.url, tokenSource: control.tokenSource } : {}), logDir: logs.dir, echo });
      console.log(`Press Ctrl-C to stop (or kill -TERM ${process.pid}); running workflows resume when relax dev starts again.`);
      await stopOnSignal(async () => {
        await control.stop();
        await stack.stop();
        fs.rmSync(stackFilePath(home), { force: true });
        await logs.close();
      });
      console.log('[relax] stopped');
    });
}

/** `relax worker`: one worker process for one role, pinned to one device. */
export function registerWorkerCommand(program: Command): void {
  program
    .command('worker')
    .description('run one worker process for one role, pinned to one device')
    .addOption(new Option('--role <role>', 'which stage activities this process serves').choices([...ROLES]).makeOptionMandatory())
    .option('--device <device>', 'cpu or cuda:N', 'cpu')
    .action(async (o: { role: Role; device: string }) => {
      const addresses = resolveAddresses();
      if (!addresses.databaseUrl) throw new Error('DATABASE_URL is not set: point it at PostgreSQL, or start `relax dev` (it serves one)');
      // The SDK logs every state change at INFO; a worker of a busy stack should print what matters:
      // its lines go through Relax's logger (telemetry/log.ts) at WARN by default, repeats collapsed.
      // The Temporal SDK's own metrics (task slots, poll latencies, schedule-to-start...) on a
      // loopback Prometheus endpoint of their own (RELAX_SDK_METRICS_PORT, default a free port).
      // RELAX_METRICS=off: none (nor the worker's own endpoint).
      const sdkPort = !metricsEnabled() ? undefined : (sdkMetricsPort() ?? (await freePort()));
      Runtime.install({
        logger: temporalLogger(sdkLogLevel()),
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
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

