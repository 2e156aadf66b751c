// `relax eval <run>[@<version>]`: a sampled evaluation of one policy version (the evaluateRun
// workflow; client/evaluations.ts): k samples per held-out prompt (or dataset row) at a temperature,
// printed as pass@1, pass@k, maj@k and mean@k, and recorded with the run. With --schedule <name> and
// --every/--cron it creates a Schedule that evaluates each new version of the run instead.
import { InvalidArgumentError, type Command } from 'commander';
import { RelaxClient } from '../client';
import { createEvaluationSchedule, EvaluationInputError, parseEvaluationRef, type EvaluationInput, type EvaluationResult } from '../client/evaluations';
import { ScheduleOptionError } from '../client/schedules';
import { outputOption, wantsJson } from './config-args';
import { UsageError } from './runs';

interface EvalOptions {
  k: number;
  temperature?: number;
  maxPrompts?: number;
  dataset?: string;
  seed?: number;
  output?: string;
  schedule?: string;
  every?: string;
  cron?: string;
}

function integerOption(flag: string) {
  return (value: string): number => {
    if (!/^\d+$/.test(value)) throw new InvalidArgumentError(`${flag} must be a whole number, got "${value}"`);
    return Number(value);
  };
}

function numberOption(flag: string) {
  return (value: string): number => {
    const n = Number(value);
    if (value.trim() === '' || !Number.isFinite(n)) throw new InvalidArgumentError(`${flag} must be a number, got "${value}"`);
    return n;
  };
}

/** The evaluation input of the command line (ref and flags). */
export function evalInput(ref: string, o: EvalOptions): EvaluationInput {
  return {
    ...parseEvaluationRef(ref),
    k: o.k,
    ...(o.temperature !== undefined ? { temperature: o.temperature } : {}),
    ...(o.maxPrompts !== undefined ? { max_prompts: o.maxPrompts } : {}),
    ...(o.dataset !== undefined ? { dataset: o.dataset } : {}),
    ...(o.seed !== undefined ? { seed: o.seed } : {}),
  };
}

/** The result as JSON, with the metrics also under their usual names ("pass@1", "pass@8", "maj@8", "mean@8"). */
export function evalJson(r: EvaluationResult): Record<string, unknown> {
  return { ...r, 'pass@1': r.pass_at_1, [`pass@${r.k}`]: r.pass_at_k, [`maj@${r.k}`]: r.maj_at_k, [`mean@${r.k}`]: r.mean_at_k };
}

/** The result for a person: what was evaluated, then one metric a line. */
export function formatEval(r: EvaluationResult): string {
  if (r.skipped) return `${r.runId}: nothing evaluated: ${r.skipped}`;
  const where = r.dataset === 'held_out' ? 'held-out' : r.dataset;
  const head = `${r.runId}@${r.policyVersion} (step ${r.step}), ${where}: ${r.prompts} prompts x ${r.k} samples at temperature ${r.temperature}`;
  const rows: Array<[string, number]> = [['pass@1', r.pass_at_1], [`pass@${r.k}`, r.pass_at_k], [`maj@${r.k}`, r.maj_at_k], [`mean@${r.k}`, r.mean_at_k]];
  return [head, ...rows.map(([name, v]) => `  ${name.padEnd(9)} ${v.toFixed(4)}`)].join('\n');
}

async function runEval(ref: string, o: EvalOptions): Promise<void> {
  let input: EvaluationInput;
  try {
    input = evalInput(ref, o);
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  const client = await RelaxClient.connect();
  try {
    if (o.schedule !== undefined) {
      await createEvaluationSchedule(client.client, { name: o.schedule, input, every: o.every, cron: o.cron });
      console.log(`created schedule ${o.schedule}: evaluates ${input.run_id}'s newest unevaluated version ${o.every !== undefined ? `every ${o.every}` : `on cron "${o.cron}"`} (k=${input.k})`);
      return;
    }
    const result = await client.evaluate(input);
    console.log(wantsJson(o) ? JSON.stringify(evalJson(result)) : formatEval(result));
  } catch (err) {
    if (err instanceof EvaluationInputError || err instanceof ScheduleOptionError) throw new UsageError(err.message);
    throw err;
  } finally {
    await client.close();
  }
}

export function registerEvalCommand(program: Command): void {
  program
    .command('eval <ref>')
    .description('sampled evaluation of a policy version (<run_id>@<version>, @latest, @unevaluated; default latest): pass@1, pass@k, maj@k, mean@k over the held-out set')
    .option('--k <n>', 'samples per prompt', integerOption('--k'), 8)
    .option('--temperature <t>', 'sampling temperature (default 0.7)', numberOption('--temperature'))
    .option('--max-prompts <n>', 'evaluate only the first n prompts', integerOption('--max-prompts'))
    .option('--dataset <file>', 'a JSONL file of {prompt, answer} rows (read by the rollout worker) instead of the held-out set')
    .option('--seed <n>', 'sampler seed (default 0)', integerOption('--seed'))
    .option('--schedule <name>', 'instead of evaluating now, create a schedule that evaluates each new version (with --every or --cron)')
    .option('--every <duration>', 'with --schedule: how often to look for a new version, e.g. "1m"')
    .option('--cron <expr>', 'with --schedule: a cron expression')
    .addOption(outputOption())
    .action((ref: string, o: EvalOptions) => runEval(ref, o));
}
