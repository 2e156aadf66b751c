// The run config of a command line, shared by `relax train` and `relax schedule create`: --config
// (a JSON or YAML file, or inline JSON when it starts with "{"), then key=value overrides, validated
// by the one schema and, unless --no-preflight, checked against this machine (cli/preflight.ts);
// and the machine-output option (--output json) of the commands that print results.
import { Option } from 'commander';
import { configSourceOf, ConfigInputError, readRunConfigInput } from '../config/config-file';
import { withOverrides } from '../config/overrides';
import type { RunConfigInput } from '../config/run-config';
import { preflightRun } from './preflight';

export const CONFIG_FLAG_HELP = 'run config: a YAML or JSON file, or inline JSON when it starts with "{"';
export const OVERRIDES_HELP = 'overrides of the config, key=value with a dotted key (train.steps=3 rollout.temperature=0.7; values read as YAML: numbers, true/false, [a,b]); ~key removes one';
export const NO_PREFLIGHT_HELP = 'skip the checks that the task, model.from and data files exist on this machine (e.g. when the workers see other paths)';

/** `--output <format>`: text for a person (default), json for programs, and any `extra` formats a command has (metrics: csv). */
export function outputOption(extra: readonly string[] = []): Option {
  const what = ['text for a person', 'json for programs', ...extra].join(', ');
  return new Option('--output <format>', what).choices(['text', 'json', ...extra]).default('text');
}

/** Whether a command prints JSON: --output json, or the older --json. */
export function wantsJson(o: { output?: string; json?: unknown }): boolean {
  return o.output === 'json' || o.json === true;
}

/** The hidden `--json [object]` of commands where it once took the config inline: refused with the new spelling. */
export function oldInlineJsonOption(): Option {
  return new Option('--json [object]').hideHelp();
}

/** The error for `--json <config>` on a command where it took the config inline. */
export function oldInlineJsonError(command: string): ConfigInputError {
  return new ConfigInputError(`${command} --json no longer takes the run config: write --config '{...}' (a --config value starting with "{" is inline JSON), or --config file.yaml; for JSON output write --output json`);
}

/**
 * The raw config of `--config` with the overrides applied, validated (RunConfigError naming each
 * field) and, when `preflight` is not false, preflighted (PreflightError). Nothing is started.
 */
export async function runConfigFromArgs(config: string | undefined, overrides: readonly string[], options: { preflight?: boolean } = {}): Promise<RunConfigInput> {
  const input = withOverrides(readRunConfigInput(configSourceOf(config)), overrides);
  if (options.preflight !== false) await preflightRun(input);
  return input;
}
