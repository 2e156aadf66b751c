// The typed client: how programs (and the CLI) start and watch Relax runs. A run's config is
// validated here before anything is sent, and again by the workflow (for starts that bypass this
// client, such as the Temporal Web UI form).
import fs from 'node:fs';
import path from 'node:path';
import { Client, Connection, type WorkflowHandle } from '@temporalio/client';
import { parseRunConfig, type RunConfigInput } from '../config/run-config';
import { roleTaskQueue } from '../config/task-queues';
import { relaxEnvironment } from '../config/environment';
import { sdkConnectionOptions, temporalConnectionOptions, type TemporalConnectionOptions } from '../config/temporal-connection';
import type { TrainingProgress, TrainingResult } from '../workflows/training-run';

/** What `relax dev` writes to <home>/stack.json while it runs, so other commands find the stack. */
export interface StackFile {
  temporalAddress: string;
  uiUrl?: string;
  databaseUrl: string;
  pid: number;
}

export function stackFilePath(home: string): string {
  return path.join(home, 'stack.json');
}

export function readStackFile(home: string): StackFile | undefined {
  try {
    return JSON.parse(fs.readFileSync(stackFilePath(home), 'utf8')) as StackFile;
  } catch {
    return undefined;
  }
}

/** Addresses from the environment, falling back to a running `relax dev` in the data directory. */
export function resolveAddresses(env: NodeJS.ProcessEnv = process.env): { temporalAddress: string; namespace: string; databaseUrl?: string } {
  const e = relaxEnvironment(env);
  const stack = readStackFile(e.home);
  return {
    temporalAddress: env.TEMPORAL_ADDRESS || stack?.temporalAddress || e.temporalAddress,
    namespace: e.namespace,
    databaseUrl: e.databaseUrl ?? stack?.databaseUrl,
  };
}

export class RelaxClient {
  private constructor(
    readonly client: Client,
    private readonly connection: Connection,
  ) {}

  /**
   * Connects with TLS / mTLS / an API key as the TEMPORAL_TLS_* and TEMPORAL_API_KEY* variables say
   * (config/temporal-connection.ts); pass `security` (e.g. PLAINTEXT_TEMPORAL for a stack this
   * process started) to override them.
   */
  static async connect(address?: string, namespace?: string, security?: TemporalConnectionOptions): Promise<RelaxClient> {
    const resolved = resolveAddresses();
    const target = address ?? resolved.temporalAddress;
    const options = security ?? temporalConnectionOptions();
    let connection: Connection;
    try {
      connection = await Connection.connect({ address: target, connectTimeout: 5_000, ...sdkConnectionOptions(options) });
    } catch (err) {
      throw new Error(`cannot reach Temporal at ${target} (${options.summary}): ${(err as Error).message}\n  fix: start \`relax dev\` or set TEMPORAL_ADDRESS; for TLS check TEMPORAL_TLS_CA / TEMPORAL_TLS_SERVER_NAME (docs/security.md)`);
    }
    return new RelaxClient(new Client({ connection, namespace: namespace ?? resolved.namespace }), connection);
  }

  /** Starts a training run (the `trainingRun` workflow); throws RunConfigError before sending an invalid config. */
  async startTraining(config: RunConfigInput, workflowId?: string): Promise<WorkflowHandle<(input: unknown) => Promise<TrainingResult>>> {
    const parsed = parseRunConfig(config);
    const id = workflowId ?? parsed.run_id ?? `run-${Date.now().toString(36)}`;
    return this.client.workflow.start('trainingRun', { taskQueue: roleTaskQueue('control'), workflowId: id, args: [config] });
  }

  progress(workflowId: string): Promise<TrainingProgress> {
    return this.client.workflow.getHandle(workflowId).query<TrainingProgress>('progress');
  }

  /** Asks the run to finish its current step (publishing that version) and end. */
  async stop(workflowId: string): Promise<void> {
    await this.client.workflow.getHandle(workflowId).signal('stop');
  }

  async pause(workflowId: string): Promise<void> {
    await this.client.workflow.getHandle(workflowId).signal('pause');
  }

  async resume(workflowId: string): Promise<void> {
    await this.client.workflow.getHandle(workflowId).signal('resume');
  }

  async close(): Promise<void> {
    await this.connection.close();
  }
}
