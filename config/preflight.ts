// Preflight: what a valid run config names that must exist before a workflow is started (the task,
// the module files of the task, environment, reward and generate function, the model of model.from,
// the dataset files), checked on the starting machine so a typo is a usage error naming the field,
// not a FAILED workflow. The checks that need the task registry and the model sources come in as
// probes (cli/preflight.ts binds them), so this module stays pure config. Relative paths are taken
// from the current directory, as a local stack's workers take them from theirs.
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { parseRunConfig, POLICY_VERSION_REFERENCE, type RunConfig, type RunConfigInput } from './run-config';

export interface PreflightProbes {
  /** The built-in task names. */
  taskNames(): readonly string[];
  /** True when a `task` names a module (a path or a .js file) rather than a built-in task. */
  isTaskModule(name: string): boolean;
  /** Resolves model.from without downloading anything; throws an Error saying why it cannot. */
  checkModelSource?(from: string): Promise<void>;
  /** Throws when `file` is not a readable file (default: fs.accessSync on the path from the current directory). */
  readable?(file: string): void;
  /** Whether a module spec resolves as the workers resolve it (default: a path from the current directory, else a package). */
  resolvesModule?(spec: string): boolean;
}

/** One thing the config names that is not there: the field (dot path) and why. */
export interface PreflightProblem {
  field: string;
  message: string;
}

/** A run refused before any workflow was started: each problem names its field. */
export class PreflightError extends Error {
  override readonly name = 'PreflightError';
  constructor(readonly problems: PreflightProblem[]) {
    super(`preflight refused the run config (no workflow was started): ${problems.map((p) => `${p.field}: ${p.message}`).join('; ')}`);
  }
}

/** A module spec that is a file path (./x.js, ../x.js, /abs/x.js), not a package name. */
function isLocalPath(spec: string): boolean {
  return /^\.{1,2}[\\/]/.test(spec) || path.isAbsolute(spec);
}

/** As envs/user-modules.ts resolves a module: a path from the working directory, else (not path-like) a package. */
function defaultResolvesModule(spec: string): boolean {
  const require = createRequire(path.join(process.cwd(), 'noop.js'));
  for (const candidate of isLocalPath(spec) ? [path.resolve(spec)] : [path.resolve(spec), spec]) {
    try {
      require.resolve(candidate);
      return true;
    } catch {
      // the next candidate
    }
  }
  return false;
}

function moduleProblem(field: string, spec: string | undefined, probes: PreflightProbes): PreflightProblem[] {
  if (spec === undefined || (probes.resolvesModule ?? defaultResolvesModule)(spec)) return [];
  return [{ field, message: `module ${JSON.stringify(spec)} is not found (neither a file from ${process.cwd()} nor an installed package; the workers resolve it from the directory they run in)` }];
}

/** Paths with a schedule's date patterns are only known at the tick (config/scheduled-runs.ts). */
function hasDatePattern(file: string): boolean {
  return file.includes('{date}') || file.includes('{scheduled_at}');
}

function defaultReadable(file: string): void {
  const full = path.resolve(file);
  let stat: fs.Stats;
  try {
    stat = fs.statSync(full);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new Error(code === 'ENOENT' ? `${file}: no such file${full !== file ? ` (looked at ${full})` : ''}` : `${file}: cannot read it (${(err as Error).message})`);
  }
  if (!stat.isFile()) throw new Error(`${file}: not a file`);
  fs.accessSync(full, fs.constants.R_OK);
}

function fileProblem(field: string, file: string | undefined, probes: PreflightProbes): PreflightProblem[] {
  if (file === undefined || hasDatePattern(file)) return [];
  try {
    (probes.readable ?? defaultReadable)(file);
    return [];
  } catch (err) {
    return [{ field, message: `${(err as Error).message} (a relative path is taken from the directory the workers run in)` }];
  }
}

function taskProblems(task: string, probes: PreflightProbes): PreflightProblem[] {
  if (probes.isTaskModule(task)) return moduleProblem('task', task, probes);
  const names = probes.taskNames();
  if (names.includes(task)) return [];
  return [{ field: 'task', message: `unknown task ${JSON.stringify(task)}: known tasks are ${names.join(', ')} (or a task module file such as ./my-task.js; docs/environments.md)` }];
}

function moduleProblems(config: RunConfig, probes: PreflightProbes): PreflightProblem[] {
  const modules: Array<[string, string | undefined]> = [
    ['env.module', config.env.module],
    ['reward.module', config.reward.module],
    ['generate.module', config.generate.module],
  ];
  return modules.flatMap(([field, spec]) => moduleProblem(field, spec, probes));
}

async function modelProblems(from: string | undefined, probes: PreflightProbes): Promise<PreflightProblem[]> {
  if (from === undefined || !probes.checkModelSource) return [];
  try {
    await probes.checkModelSource(from);
    return [];
  } catch (err) {
    return [{ field: 'model.from', message: (err as Error).message }];
  }
}

/**
 * A model a run loads beside its policy (algorithm.teacher.from, reward.judge.from): an existing
 * directory (a Relax checkpoint, a warm start's cache, a Hugging Face directory: the loader reads its
 * format) or file, a registry reference when `registry`, else a model.from source.
 */
async function sideModelProblems(field: string, from: string | undefined, probes: PreflightProbes, registry: boolean): Promise<PreflightProblem[]> {
  if (from === undefined || (registry && POLICY_VERSION_REFERENCE.test(from)) || fs.existsSync(path.resolve(from))) return [];
  const problems = await modelProblems(from, probes);
  return problems.map((p) => ({ field, message: `${p.message}${registry ? ' (or <run_id>@<version|latest> of a run in the checkpoint registry)' : ''}` }));
}

/** Every preflight problem of a parsed config (empty: nothing it names is missing). */
export async function preflightProblems(config: RunConfig, probes: PreflightProbes): Promise<PreflightProblem[]> {
  return [
    ...taskProblems(config.task, probes),
    ...moduleProblems(config, probes),
    ...(await modelProblems(config.model.from, probes)),
    ...(await sideModelProblems('algorithm.teacher.from', config.algorithm.teacher?.from, probes, true)),
    ...(await sideModelProblems('reward.judge.from', config.reward.judge?.from, probes, false)),
    ...(config.reward.judge && 'module' in config.reward.judge.parse ? moduleProblem('reward.judge.parse.module', config.reward.judge.parse.module, probes) : []),
    ...fileProblem('data.train', config.data?.train, probes),
    ...fileProblem('data.eval', config.data?.eval, probes),
  ];
}

/**
 * Validates a raw config (RunConfigError when invalid) and checks what it names (PreflightError
 * when something is missing); returns the parsed config. Call it before starting a run.
 */
export async function preflightRunConfig(input: RunConfigInput, probes: PreflightProbes): Promise<RunConfig> {
  const config = parseRunConfig(input);
  const problems = await preflightProblems(config, probes);
  if (problems.length) throw new PreflightError(problems);
  return config;
}
