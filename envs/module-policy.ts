// What code a run may make a worker run: the worker-side allow-list. A run config comes from
// whoever can reach Temporal (the Web UI, a client, a schedule), so the worker, not the run,
// decides. `RELAX_ALLOWED_MODULE_ROOTS` (paths joined by ':') lists the directories user modules
// (reward, env, generate, task, algorithm modules) may resolve under; unset, only the worker's
// working directory and Relax's own package are allowed. `RELAX_ALLOW_AGENT_COMMANDS=1` lets runs
// name `rollout.agent.command` (off by default: an agent command is any program). See docs/security.md.
import fs from 'node:fs';
import path from 'node:path';
import { AGENT_COMMANDS_SETTING, agentCommandsAllowed, configuredModuleRoots, MODULE_ROOTS_SETTING, PACKAGE_ROOT } from '../config/environment';

export { AGENT_COMMANDS_SETTING, agentCommandsAllowed, MODULE_ROOTS_SETTING };

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

function realpath(p: string): string {
  try {
    return fs.realpathSync(p);
  } catch {
    return path.resolve(p);
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
