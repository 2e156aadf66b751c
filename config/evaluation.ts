// The input of a sampled evaluation (the `evaluateRun` workflow, `relax eval`, the client and the
// Web UI's Start Workflow form), its checks and defaults, and the result it reports: k samples per
// prompt at a temperature against one policy version of one run, scored as pass@1, pass@k, maj@k and
// mean@k (engines/rl/pass-at-k.ts). Plain code with no imports: the workflow validates with it too.

/** The JSON a user gives (snake_case, like a run config). */
export interface EvaluationInput {
  /** The run whose policy is evaluated. */
  run_id: string;
  /** A published version, "latest" (the newest retained one; default), or "unevaluated" (the newest, skipped when these settings already evaluated it). */
  version?: number | 'latest' | 'unevaluated';
  /** Samples per prompt (default 8). */
  k?: number;
  /** Sampling temperature, > 0 (default 0.7). */
  temperature?: number;
  /** Evaluate only the first n prompts (default: all). */
  max_prompts?: number;
  /** A JSONL file (prompt and answer per row, read by the rollout worker) instead of the run's held-out set. */
  dataset?: string;
  /** Seeds the sampler (default 0): the same seed and version give the same samples. */
  seed?: number;
}

/** A checked input with its defaults filled in. */
export interface EvaluationRequest {
  runId: string;
  version: number | 'latest' | 'unevaluated';
  k: number;
  temperature: number;
  maxPrompts?: number;
  dataset?: string;
  seed: number;
}

/** What an evaluation reports (and records in the evaluations table and the run's metrics). */
export interface EvaluationResult {
  runId: string;
  policyVersion: number;
  /** The train step that published the version: the step its metrics are recorded at. */
  step: number;
  k: number;
  temperature: number;
  /** "held_out" or the dataset file. */
  dataset: string;
  prompts: number;
  seed: number;
  pass_at_1: number;
  pass_at_k: number;
  maj_at_k: number;
  mean_at_k: number;
  /** Set when nothing was evaluated ("unevaluated" found the newest version already evaluated, or no version yet), with why. */
  skipped?: string;
}

export const EVALUATION_DEFAULTS = { k: 8, temperature: 0.7, seed: 0 } as const;
/** The most samples per prompt one evaluation draws. */
export const MAX_EVALUATION_K = 1024;
export const HELD_OUT_DATASET = 'held_out';

/** A bad evaluation input: names the field and the fix. */
export class EvaluationInputError extends Error {
  override readonly name = 'EvaluationInputError';
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(`${field}: ${message}`);
  }
}

const RUN_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
const FIELDS = new Set(['run_id', 'version', 'k', 'temperature', 'max_prompts', 'dataset', 'seed']);

function integerIn(field: string, value: unknown, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) throw new EvaluationInputError(field, `must be an integer in [${min}, ${max}], got ${JSON.stringify(value)}`);
  return value;
}

function versionOf(value: unknown): EvaluationRequest['version'] {
  if (value === undefined) return 'latest';
  if (value === 'latest' || value === 'unevaluated') return value;
  if (typeof value === 'string' && /^\d+$/.test(value)) return Number(value);
  if (typeof value === 'number' && Number.isInteger(value) && value >= 0) return value;
  throw new EvaluationInputError('version', `must be a published version (an integer >= 0), "latest" or "unevaluated", got ${JSON.stringify(value)}`);
}

function temperatureOf(value: unknown): number {
  if (value === undefined) return EVALUATION_DEFAULTS.temperature;
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0 || value > 10) {
    throw new EvaluationInputError('temperature', `must be a number in (0, 10], got ${JSON.stringify(value)} (pass@k needs sampled answers: for greedy accuracy see the run's eval_accuracy)`);
  }
  return value;
}

/** The checked request; throws EvaluationInputError naming the first bad field. */
export function parseEvaluationInput(raw: unknown): EvaluationRequest {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw new EvaluationInputError('input', `must be a JSON object like {"run_id": "my-run", "k": 8}, got ${JSON.stringify(raw)}`);
  const o = raw as Record<string, unknown>;
  const unknown = Object.keys(o).filter((key) => !FIELDS.has(key));
  if (unknown.length) throw new EvaluationInputError(unknown[0], `is not an evaluation field (fields: ${[...FIELDS].join(', ')})`);
  if (typeof o.run_id !== 'string' || !RUN_ID.test(o.run_id)) throw new EvaluationInputError('run_id', `must name a run (1-64 letters, digits, ".", "_", "-"), got ${JSON.stringify(o.run_id)}`);
  if (o.dataset !== undefined && (typeof o.dataset !== 'string' || o.dataset.length === 0)) throw new EvaluationInputError('dataset', `must be the path of a JSONL file, got ${JSON.stringify(o.dataset)}`);
  return {
    runId: o.run_id,
    version: versionOf(o.version),
    k: o.k === undefined ? EVALUATION_DEFAULTS.k : integerIn('k', o.k, 1, MAX_EVALUATION_K),
    temperature: temperatureOf(o.temperature),
    ...(o.max_prompts !== undefined ? { maxPrompts: integerIn('max_prompts', o.max_prompts, 1, 1_000_000) } : {}),
    ...(o.dataset !== undefined ? { dataset: o.dataset as string } : {}),
    seed: o.seed === undefined ? EVALUATION_DEFAULTS.seed : integerIn('seed', o.seed, 0, 2 ** 31 - 1),
  };
}

/** "<run>@<version>", "<run>@latest", "<run>@unevaluated" or "<run>" (latest) as input fields. */
export function parseEvaluationRef(ref: string): Pick<EvaluationInput, 'run_id' | 'version'> {
  const at = ref.lastIndexOf('@');
  const runId = at < 0 ? ref : ref.slice(0, at);
  const version = at < 0 ? undefined : ref.slice(at + 1);
  if (!RUN_ID.test(runId)) throw new EvaluationInputError('run', `must be <run_id>[@<version>|@latest|@unevaluated], got ${JSON.stringify(ref)}`);
  return { run_id: runId, ...(version !== undefined ? { version: versionOf(version) } : {}) };
}

/** The metric names an evaluation records: eval_pass_at_1, eval_pass_at_<k>, eval_maj_at_<k>, eval_mean_at_<k> (a dataset's under eval_<name>_...). */
export function evaluationMetrics(r: Pick<EvaluationResult, 'k' | 'dataset' | 'pass_at_1' | 'pass_at_k' | 'maj_at_k' | 'mean_at_k'>): Record<string, number> {
  const base = r.dataset === HELD_OUT_DATASET ? 'eval' : `eval_${datasetLabel(r.dataset)}`;
  return { [`${base}_pass_at_1`]: r.pass_at_1, [`${base}_pass_at_${r.k}`]: r.pass_at_k, [`${base}_maj_at_${r.k}`]: r.maj_at_k, [`${base}_mean_at_${r.k}`]: r.mean_at_k };
}

/** A dataset file's name as a metric-name part: "data/gsm8k-test.jsonl" -> "gsm8k_test". */
export function datasetLabel(file: string): string {
  const base = file.split(/[\\/]/).pop() ?? file;
  return base.replace(/\.[^.]*$/, '').replace(/[^A-Za-z0-9_]+/g, '_').toLowerCase() || 'dataset';
}
