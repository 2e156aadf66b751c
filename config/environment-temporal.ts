// Where a Relax process finds its share of a Temporal deployment, from the environment: the task
// queue prefix (RELAX_TASK_QUEUE_PREFIX, default "relax": two deployments in one namespace each
// name theirs) and the temporal CLI's config profile (TEMPORAL_PROFILE in TEMPORAL_CONFIG_FILE,
// else in the CLI's default file; security/temporal-connection.ts loads it with @temporalio/envconfig).
import { TEMPORAL_CONNECTION_ENV } from './environment-services';
import { checkedTaskQueuePrefix, DEFAULT_TASK_QUEUE_PREFIX } from './task-queues';

/** RELAX_TASK_QUEUE_PREFIX, validated; the default "relax" when unset or empty. */
export function taskQueuePrefix(env: NodeJS.ProcessEnv = process.env): string {
  const raw = env.RELAX_TASK_QUEUE_PREFIX?.trim();
  return raw ? checkedTaskQueuePrefix(raw, 'RELAX_TASK_QUEUE_PREFIX') : DEFAULT_TASK_QUEUE_PREFIX;
}

/** Which profile of which file: undefined fields mean the loader's defaults ("default", ~/.config/temporalio/temporal.toml). */
export interface TemporalProfileSelection {
  profile?: string;
  /** TEMPORAL_CONFIG_FILE when set (it must exist); undefined: the CLI's default path, which may be absent. */
  configFile?: string;
}

export function temporalProfileSelection(env: NodeJS.ProcessEnv = process.env): TemporalProfileSelection {
  const profile = env.TEMPORAL_PROFILE?.trim();
  const configFile = env.TEMPORAL_CONFIG_FILE?.trim();
  return { ...(profile ? { profile } : {}), ...(configFile ? { configFile } : {}) };
}

/** TEMPORAL_NAMESPACE when set (it wins over a config profile's namespace); else undefined. */
export function explicitTemporalNamespace(env: NodeJS.ProcessEnv = process.env): string | undefined {
  return env.TEMPORAL_NAMESPACE?.trim() || undefined;
}

/** True when any TEMPORAL_TLS* / TEMPORAL_API_KEY* variable is set: the environment then decides TLS and the key, not a config profile. */
export function environmentSetsTemporalSecurity(env: NodeJS.ProcessEnv = process.env): boolean {
  return TEMPORAL_CONNECTION_ENV.some((name) => Boolean(env[name]?.trim()));
}
