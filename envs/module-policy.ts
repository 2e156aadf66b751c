// What code a run may make a worker run: the worker-side allow-list. A run config comes from
// whoever can reach Temporal (the Web UI, a client, a schedule), so the worker, not the run,
// decides. `RELAX_ALLOWED_MODULE_ROOTS` (paths joined by ':') lists the directories user modules
// (reward, env, generate, task, algorithm modules) may resolve under; unset, only the worker's
// working directory and Relax's own package are allowed. `RELAX_ALLOW_AGENT_COMMANDS=1` lets runs
// name `rollout.agent.command` (off by default: an agent command is any program).
// `RELAX_ALLOWED_DATA_ROOTS` lists the directories a run's files may lie under (checkpoint.dir,
// checkpoint.init_from, data.train/eval, model.from, algorithm.teacher.from, reward.judge.from and
// evaluation datasets, where they name paths); unset, the worker's working directory, RELAX_HOME, the
// warm-start cache and the Hugging Face cache. See docs/security.md.
import fs from 'node:fs';
import path from 'node:path';
import { AGENT_COMMANDS_SETTING, agentCommandsAllowed, configuredDataRoots, configuredModuleRoots, DATA_ROOTS_SETTING, hubEnvironment, MODULE_ROOTS_SETTING, PACKAGE_ROOT, relaxEnvironment } from '../config/environment';
import { POLICY_VERSION_REFERENCE, type RunConfig } from '../config/run-config';
import { isObjectUrl } from '../engines/storage/url';

export { AGENT_COMMANDS_SETTING, agentCommandsAllowed, DATA_ROOTS_SETTING, MODULE_ROOTS_SETTING };

/** A module or agent command this worker's allow-list refuses (a retry cannot change that). */
export class NotAllowedError extends Error {
  override name = 'NotAllowedError';
  constructor(
    message: string,
    /** The environment variable that decides it. */
    readonly setting: string,
  ) {
    super(message);
  }
}

/** The real path of `p`, or of its nearest existing ancestor with the rest appended (a directory not made yet). */
function realpath(p: string): string {
  const full = path.resolve(p);
  try {
    return fs.realpathSync(full);
  } catch {
    const parent = path.dirname(full);
    return parent === full ? full : path.join(realpath(parent), path.basename(full));
  }
}

/** The directories user modules may resolve under, as real paths. */
export function allowedModuleRoots(env: NodeJS.ProcessEnv = process.env, cwd: string = process.cwd()): string[] {
  const configured = configuredModuleRoots(env);
  const roots = configured.length ? configured.map((r) => path.resolve(cwd, r)) : [cwd, PACKAGE_ROOT];
  return [...new Set(roots.map(realpath))];
}

function isUnder(file: string, root: string): boolean {
  const rel = path.relative(root, file);
  return rel === '' || (!rel.startsWith('..') && !path.isAbsolute(rel));
}

/**
 * Throws NotAllowedError unless `resolvedFile` (what a module spec resolved to) lies under an
 * allowed root. `label` names the config field ("reward.module", "task", ...).
 */
export function checkModuleAllowed(label: string, spec: string, resolvedFile: string, env: NodeJS.ProcessEnv = process.env, cwd: string = process.cwd()): void {
  const roots = allowedModuleRoots(env, cwd);
  const file = realpath(resolvedFile);
  if (roots.some((root) => isUnder(file, root))) return;
  throw new NotAllowedError(
    `${label} ${JSON.stringify(spec)} resolves to ${file}, outside the directories this worker allows user modules from (${roots.join(', ')}): ` +
      `move the module under one of them, or add its directory to ${MODULE_ROOTS_SETTING} in the workers' environment`,
    MODULE_ROOTS_SETTING,
  );
}

/** Throws NotAllowedError when a run names rollout.agent.command and this worker does not allow agent commands. */
export function checkAgentCommandAllowed(command: readonly string[] | undefined, env: NodeJS.ProcessEnv = process.env): void {
  if (command === undefined || agentCommandsAllowed(env)) return;
  const shown = command.join(' ');
  throw new NotAllowedError(
    `rollout.agent.command ${JSON.stringify(shown.length > 80 ? `${shown.slice(0, 77)}...` : shown)} is refused: this worker runs no agent commands unless ` +
      `${AGENT_COMMANDS_SETTING}=1 is set in the workers' environment (an agent command runs any program as the worker's user)`,
    AGENT_COMMANDS_SETTING,
  );
}

/** The directories a run's files (checkpoints, datasets, models) may lie under, as real paths. */
export function allowedDataRoots(env: NodeJS.ProcessEnv = process.env, cwd: string = process.cwd()): string[] {
  const configured = configuredDataRoots(env);
  const relax = relaxEnvironment(env);
  const roots = configured.length ? configured.map((r) => path.resolve(cwd, r)) : [cwd, relax.home, relax.warmStartCache, hubEnvironment(env).cacheDir];
  return [...new Set(roots.map(realpath))];
}

/** A model source that names a path (not a named model or a Hub id): it exists here, or looks like a path. */
function isPathSource(from: string, cwd: string): boolean {
  return path.isAbsolute(from) || /^\.{1,2}([\\/]|$)/.test(from) || /\.gguf$/i.test(from) || fs.existsSync(path.resolve(cwd, from));
}

/**
 * Throws NotAllowedError unless `file` (a path a run names in `field`) lies under an allowed data
 * root. Relative paths are taken from `cwd`, as the workers take them.
 */
export function checkDataPathAllowed(field: string, file: string, env: NodeJS.ProcessEnv = process.env, cwd: string = process.cwd()): void {
  const roots = allowedDataRoots(env, cwd);
  const real = realpath(path.resolve(cwd, file));
  if (roots.some((root) => isUnder(real, root))) return;
  throw new NotAllowedError(
    `${field} ${JSON.stringify(file)} resolves to ${real}, outside the directories this worker keeps run files in (${roots.join(', ')}): ` +
      `use a path under one of them, or add its directory to ${DATA_ROOTS_SETTING} in the workers' environment`,
    DATA_ROOTS_SETTING,
  );
}

/** The paths a run config names, by field: what checkRunPathsAllowed checks. Registry references, object-store URLs, named models and Hub ids are not paths. */
export function runConfigPaths(config: RunConfig, cwd: string = process.cwd()): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  const add = (field: string, value: string | undefined, kind: 'path' | 'source' | 'checkpoint') => {
    if (value === undefined) return;
    if (kind !== 'path' && POLICY_VERSION_REFERENCE.test(value)) return;
    if (kind !== 'source' && isObjectUrl(value)) return; // an object-store location: no file on this host
    if (kind === 'source' && !isPathSource(value, cwd)) return;
    out.push([field, value]);
  };
  add('checkpoint.dir', config.checkpoint.dir, 'path');
  add('checkpoint.init_from', config.checkpoint.init_from, 'checkpoint');
  add('data.train', config.data?.train, 'path');
  add('data.eval', config.data?.eval, 'path');
  add('model.from', config.model.from, 'source');
  add('algorithm.teacher.from', config.algorithm.teacher?.from, 'source');
  add('reward.judge.from', config.reward.judge?.from, 'source');
  return out;
}

/** Throws NotAllowedError for the first path the run names outside this worker's allowed data roots. */
export function checkRunPathsAllowed(config: RunConfig, env: NodeJS.ProcessEnv = process.env, cwd: string = process.cwd()): void {
  for (const [field, file] of runConfigPaths(config, cwd)) checkDataPathAllowed(field, file, env, cwd);
}
