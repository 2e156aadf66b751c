// The preflight of `relax train` and `relax schedule create` on this machine: config/preflight.ts's
// checks bound to the task registry (envs/registry.ts) and the model sources
// (engines/model-sources.ts checkModelSource: a local directory, a .gguf file, a named model, or a
// Hugging Face Hub id in the cache), so a missing task, model or dataset is refused with exit 2
// before any workflow exists. Programs call preflightRun the same way before RelaxClient.start.
import { relaxEnvironment } from '../config/environment';
import { checkModelSource } from '../engines/model-sources';
import { taskNames } from '../envs/registry';
import { isTaskModule } from '../envs/task-modules';
import { preflightRunConfig, type PreflightProbes } from '../config/preflight';
import type { RunConfig, RunConfigInput } from '../config/run-config';

/** The probes of this machine; `home` is the data directory named models are imported into (default RELAX_HOME). */
export function localPreflightProbes(home: string = relaxEnvironment().home): PreflightProbes {
  return { taskNames, isTaskModule, checkModelSource: (from) => checkModelSource(from, home) };
}

/**
 * Validates `config` (RunConfigError) and checks that what it names exists here (PreflightError,
 * each problem naming its field); returns the parsed config. Nothing is started.
 */
export async function preflightRun(config: RunConfigInput, options: { home?: string } = {}): Promise<RunConfig> {
  return preflightRunConfig(config, localPreflightProbes(options.home));
}
