// The `relax` command. Thin: parse flags, call the library, print.
import fs from 'node:fs';
import path from 'node:path';
import { Command, InvalidArgumentError, Option } from 'commander';
import { DefaultLogger, Runtime, type LogLevel } from '@temporalio/worker';
import { RelaxClient, readStackFile, resolveAddresses, stackFilePath } from '../client';
import { RunConfigError } from '../config/run-config';
import { ROLES, type Role } from '../config/task-queues';
import { parseDevice } from '../engines/device';
import { relaxEnvironment } from '../workers/environment';
import { startLocalStack, type LocalStack } from '../workers/local-stack';
import { freePort } from '../workers/ports';
import { startWorker } from '../workers/worker';
import { describeBenches, loadBench } from '../bench';
import { formatChecks, runChecks } from './doctor';

function intOption(name: string, min = 0) {
  return (value: string): number => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < min) throw new InvalidArgumentError(`${name} must be an integer >= ${min}, got "${value}"`);
    return n;
  };
}

function readJsonConfig(file: string | undefined, inline: string | undefined): unknown {
  if (file && inline) throw new Error('give either --config <file> or --json <object>, not both');
  if (!file && !inline) return {};
  const text = file ? fs.readFileSync(file, 'utf8') : (inline as string);
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new Error(`${file ?? '--json'}: not valid JSON (${(err as Error).message})`);
  }
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
  console.log(`  Temporal:  ${stack.temporalAddress}`);
  console.log(`  Web UI:    ${stack.uiUrl ?? '(headless)'}`);
  console.log(`  Database:  ${stack.databaseUrl}${stack.embeddedDatabase ? '  (embedded PGlite)' : ''}`);
  console.log(`  Workers:   ${ROLES.map((r) => `${r} x${stack.workerPids(r).length}`).join(', ')}`);
}

export function buildProgram(): Command {
  const program = new Command('relax')
    .description('Relax: asynchronous RL post-training for language models, controlled by Temporal')
    .showHelpAfterError();

  program
    .command('dev')
    .description('start the whole local stack (Temporal dev server, database, one worker per role) in the foreground')
    .option('--data-dir <dir>', 'project data directory (Temporal state, embedded database)', relaxEnvironment().home)
    .option('--temporal-port <port>', 'Temporal gRPC port', intOption('--temporal-port', 1), 7233)
    .option('--ui-port <port>', 'Temporal Web UI port (0 = headless)', intOption('--ui-port'), 8233)
    .option('--db-port <port>', 'embedded database port when DATABASE_URL is unset (0 = any free port)', intOption('--db-port'), 0)
    .option('--rollout-workers <n>', 'rollout worker processes', intOption('--rollout-workers'), 1)
    .option('--train-workers <n>', 'train worker processes', intOption('--train-workers'), 1)
    .option('--reference-workers <n>', 'reference worker processes', intOption('--reference-workers'), 1)
    .option('--device <device>', 'device of the accelerator workers: cpu or cuda:N', 'cpu')
    .option('--quiet', 'do not echo the output of the stack processes')
    .action(async (o) => {
      parseDevice(o.device);
      const home = path.resolve(o.dataDir);
      const running = readStackFile(home);
      if (running && isAlive(running.pid)) {
        throw new Error(`a relax dev (pid ${running.pid}) already runs with data directory ${home}: stop it first, or pass --data-dir`);
      }
      const stack = await startLocalStack({
        home,
        temporalPort: o.temporalPort,
        uiPort: o.uiPort,
        dbPort: o.dbPort,
        databaseUrl: relaxEnvironment().databaseUrl,
        workers: { control: 1, rollout: o.rolloutWorkers, train: o.trainWorkers, reference: o.referenceWorkers },
        device: o.device,
        log: o.quiet ? () => undefined : (line) => console.log(line),
      });
      fs.writeFileSync(
        stackFilePath(home),
        JSON.stringify({ temporalAddress: stack.temporalAddress, uiUrl: stack.uiUrl, databaseUrl: stack.databaseUrl, pid: process.pid }, null, 2),
      );
      printStack(stack);
      console.log('Press Ctrl-C to stop.');
      await stopOnSignal(async () => {
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
      Runtime.install({ logger: new DefaultLogger((process.env.RELAX_LOG_LEVEL as LogLevel) || 'WARN') });
      const worker = await startWorker({
        role: o.role,
        device: parseDevice(o.device),
        temporalAddress: addresses.temporalAddress,
        namespace: addresses.namespace,
        databaseUrl: addresses.databaseUrl,
      });
      console.log(`relax worker ready: ${worker.identity} polling ${worker.taskQueues.join(' and ')}`);
      await worker.done;
      // Native handles of the SDK can outlive the workers; the process has nothing left to do.
      process.exit(0);
    });

  program
    .command('doctor')
    .description('check that Temporal, the database and the tensor engines are reachable and load')
    .option('--device <device>', 'device to probe engines for', 'cpu')
    .action(async (o) => {
      const a = resolveAddresses();
      const checks = await runChecks({ ...a, device: parseDevice(o.device) });
      console.log(formatChecks(checks));
      if (checks.some((c) => !c.ok)) process.exitCode = 1;
    });

  program
    .command('smoke')
    .description('run the plumbing smoke workflow on a running stack and print its result')
    .option('--config <file>', 'run config JSON file')
    .option('--json <object>', 'run config as inline JSON')
    .option('--id <workflowId>', 'workflow id (default: run_id, else generated)')
    .action(async (o) => {
      const client = await RelaxClient.connect();
      try {
        const handle = await client.startSmoke(readJsonConfig(o.config, o.json) as object, o.id);
        console.log(`started ${handle.workflowId}`);
        console.log(JSON.stringify(await handle.result(), null, 2));
      } finally {
        await client.close();
      }
    });

  program
    .command('quickstart')
    .description('start a local stack, run the main job end to end, print the result, stop')
    .option('--data-dir <dir>', 'data directory', path.join(relaxEnvironment().home, 'quickstart'))
    .option('--json', 'print one JSON object as the last line')
    .action(async (o) => {
      const started = Date.now();
      const log = (line: string) => (o.json ? undefined : console.log(line));
      log('[relax] starting the local stack (Temporal dev server, embedded PostgreSQL, 4 workers)...');
      const stack = await startLocalStack({
        home: path.resolve(o.dataDir),
        temporalPort: await freePort(),
        uiPort: 0,
        dbPort: 0,
        databaseUrl: relaxEnvironment().databaseUrl,
        workers: { control: 1, rollout: 1, train: 1, reference: 1 },
        device: 'cpu',
        log: () => undefined,
      });
      try {
        if (!o.json) printStack(stack);
        const client = await RelaxClient.connect(stack.temporalAddress);
        try {
          const handle = await client.startSmoke({ smoke: { samples: 32 } }, `quickstart-smoke-${Date.now().toString(36)}`);
          log(`[relax] smoke workflow ${handle.workflowId}: rollout -> reference -> advantage -> train`);
          const result = await handle.result();
          const summary = { workflow_id: handle.workflowId, ...result, wall_s: (Date.now() - started) / 1000 };
          if (o.json) console.log(JSON.stringify(summary));
          else console.log(`[relax] done in ${summary.wall_s.toFixed(1)} s: ${result.samples} samples through every stage\n${JSON.stringify(summary, null, 2)}`);
        } finally {
          await client.close();
        }
      } finally {
        await stack.stop();
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

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

export async function main(argv: string[] = process.argv): Promise<void> {
  try {
    await buildProgram().parseAsync(argv);
  } catch (err) {
    if (err instanceof RunConfigError) {
      console.error(`relax: invalid run config:\n${err.problems.map((p) => `  - ${p}`).join('\n')}`);
    } else {
      console.error(`relax: ${(err as Error).message}`);
    }
    process.exitCode = process.exitCode || 1;
  }
}
