// The `relax` command's conventions against a real stack (real worker processes, the shared Temporal
// server, PGlite): --version, exit code 2 for usage errors, the workflow's real failure cause in
// `relax train` and `relax status`, progress lines when stdout is not a TTY (ending at the last
// step), `status` for a person and as JSON, `list`, `logs`, `metrics` and `set` with --output json,
// and Ctrl-C detaching with a message;
// a YAML config with key=value overrides, and the preflight that refuses an unknown task or a
// missing Hub model with exit 2 before any workflow exists.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import type { RunConfigInput } from '../config/run-config';
import { WorkflowNotFoundError } from '@temporalio/client';
import { describeError, formatFailureChain, listQuery, UpdateRefusedError } from '../client';
import { ApplicationFailure } from '@temporalio/common';
import { Format } from 'cli-progress';
import { parseAssignments } from '../cli/runs';
import { BAR_FORMAT, barPayload, progressLine } from '../cli/watch';
import { spawnRelax, startWorkerStack, uniqueId, waitFor, type WorkerStack } from './helpers';

const TINY: RunConfigInput = {
  model: { context_length: 16 },
  algorithm: { group_size: 2 },
  rollout: { prompts_per_step: 2, max_new_tokens: 4 },
  train: { steps: 3, eval_every: 2 },
};

const EXAMPLE = path.resolve(__dirname, '../../examples/add2-grpo.yaml');

let stack: WorkerStack | undefined;
let env: Record<string, string>;

async function relax(args: string[], extraEnv: Record<string, string> = env): Promise<{ code: number | null; out: string; lines: string[] }> {
  const p = spawnRelax(args, extraEnv);
  const code = await p.exited;
  // forwardLines may deliver the last lines just after exit.
  await new Promise((r) => setImmediate(r));
  return { code, out: p.output.join('\n'), lines: p.output };
}

before(async () => {
  stack = await startWorkerStack(['control', 'rollout', 'train'], {}, 'relax-cli-');
  env = { TEMPORAL_ADDRESS: process.env.TEMPORAL_ADDRESS as string, DATABASE_URL: stack.db.url, RELAX_HOME: stack.home };
});

after(async () => {
  await stack?.close();
});

test('relax --version prints the package version', async () => {
  const version = (JSON.parse(fs.readFileSync(path.resolve(__dirname, '../../package.json'), 'utf8')) as { version: string }).version;
  const r = await relax(['--version'], { RELAX_HOME: '/nonexistent-relax-home' });
  assert.equal(r.code, 0);
  assert.equal(r.out.trim(), version);
});

test('usage errors exit 2 with the reason; a runtime error exits 1', async () => {
  const cases: Array<[string[], RegExp]> = [
    [['list', '--bogus'], /unknown option '--bogus'/],
    [['status'], /missing required argument 'runId'/],
    [['list', '--limit', '0'], /--limit must be an integer >= 1, got "0"/],
    [['list', '--status', 'sleeping'], /argument 'sleeping' is invalid/],
    [['set', 'some-run', 'lr'], /expected key=value with a dotted key such as train.lr=3e-4, got "lr"/],
    [['train', '--config', '{not json'], /--config \(inline\):1:10: not valid YAML or JSON: Flow map must end/],
    [['train', '--json', '{}'], /train --json no longer takes the run config: write --config '\{\.\.\.\}'/],
    [['train', '--config', 'no-such.yaml'], /--config no-such\.yaml: no such file/],
    [['train', '--config', EXAMPLE, 'train.steps'], /override "train\.steps": expected key=value/],
    [['train', '--config', EXAMPLE, 'train.stepz=3'], /invalid run config:\n {2}- train\.stepz: unknown field/],
    [['no-such-command'], /unknown command 'no-such-command'/],
  ];
  for (const [args, message] of cases) {
    const r = await relax(args, { RELAX_HOME: '/nonexistent-relax-home', TEMPORAL_ADDRESS: '127.0.0.1:1' });
    assert.equal(r.code, 2, `relax ${args.join(' ')}: exit 2\n${r.out}`);
    assert.match(r.out, message, `relax ${args.join(' ')}`);
  }
  // Nothing listens on port 1: a runtime failure, exit 1, with the fix.
  const down = await relax(['status', 'x'], { RELAX_HOME: '/nonexistent-relax-home', TEMPORAL_ADDRESS: '127.0.0.1:1' });
  assert.equal(down.code, 1, down.out);
  assert.match(down.out, /cannot reach Temporal at 127\.0\.0\.1:1/);
});

test('relax set parses dotted keys and JSON values; list queries name their field on bad values', () => {
  assert.deepEqual(parseAssignments(['train.lr=3e-4', 'rollout.temperature=0.8', 'train.lr_decay=cosine', 'max_staleness=2']), {
    train: { lr: 3e-4, lr_decay: 'cosine' },
    rollout: { temperature: 0.8 },
    max_staleness: 2,
  });
  assert.equal(listQuery({ status: 'running', task: 'add2' }), "WorkflowType = 'trainingRun' AND ExecutionStatus != 'ContinuedAsNew' AND RelaxStatus = 'running' AND RelaxTask = 'add2'");
  assert.match(listQuery({ status: 'failed' }), /ExecutionStatus = 'Failed'/);
  assert.throws(() => listQuery({ task: "x' OR 1=1" }), /^Error: task: "x' OR 1=1" is not a valid value/);
  assert.equal(progressLine({ status: 'running', step: 12, totalSteps: 100, policyVersion: 12, lastReward: 0.41, lastAccuracy: 0.63, lastEvalStep: 10, samplesPerSecond: 95 }, 80), 'step 12/100 · v12 · reward 0.410 · held-out 63.0% (step 10) · 95 samples/s · ETA 1m20s · running');
  assert.equal(formatFailureChain([{ kind: 'WorkflowFailedError', message: 'Workflow execution failed' }, { kind: 'ApplicationFailure', type: 'InvalidRunConfig', message: 'bad' }]), 'Workflow execution failed <- ApplicationFailure(InvalidRunConfig): bad');
  // A refused Update says its cause chain once (it is in the message; describeError does not walk it again).
  const refused = describeError(new UpdateRefusedError('setHyperparameters', 'r1', ApplicationFailure.create({ type: 'InvalidHyperparameters', message: 'rollout.temperature must be > 0' })));
  assert.equal(refused, 'setHyperparameters on r1 refused: ApplicationFailure(InvalidHyperparameters): rollout.temperature must be > 0');
  // The progress bar's ETA has units: cli-progress would put its own bare seconds in an {eta} token.
  const options = { format: BAR_FORMAT, barsize: 10, barCompleteString: '=', barIncompleteString: '-', barGlue: '', formatValue: Format.ValueFormat, formatBar: Format.BarFormat, formatTime: Format.TimeFormat, autopaddingChar: '   ' };
  const bar = Format.Formatter(options, { progress: 0.12, eta: 37, startTime: Date.now(), stopTime: null, total: 100, value: 12, maxWidth: 200 }, barPayload({ status: 'running', step: 12, totalSteps: 100, policyVersion: 12 }, 80));
  assert.match(bar, /\| ETA 1m20s \|/, bar);
});

test('preflight: relax train with an unknown task or a Hub id not in the cache exits 2 naming the field, and starts no workflow', async () => {
  const hubEnv = { ...env, HF_HUB_OFFLINE: '1', HF_HOME: path.join(stack!.home, 'empty-hf-home') };
  const cases: Array<[string[], RegExp]> = [
    [['task=add3'], /^ {2}- task: unknown task "add3": known tasks are add2, /m],
    [['model.from=no-such-org/no-such-model', 'model.context_length=64'], /^ {2}- model\.from: Hugging Face Hub model no-such-org\/no-such-model .*is not in the Hub cache/m],
  ];
  const ids: string[] = [];
  for (const [overrides, message] of cases) {
    const id = uniqueId('cli-preflight');
    ids.push(id);
    const r = await relax(['train', '--id', id, '--config', EXAMPLE, ...overrides], hubEnv);
    assert.equal(r.code, 2, r.out);
    assert.match(r.out, /relax: no workflow was started; the run config names what is not there:/);
    assert.match(r.out, message);
    assert.doesNotMatch(r.out, /started training run/);
    await assert.rejects(stack!.temporal.client.workflow.getHandle(id).describe(), WorkflowNotFoundError, `no workflow ${id}`);
  }
  const listed = JSON.parse((await relax(['list', '--output', 'json', '--limit', '100'])).out) as Array<{ runId: string }>;
  assert.deepEqual(listed.filter((x) => ids.includes(x.runId)), [], 'relax list shows none of them');
});

test('relax train --no-preflight on an unknown task exits 1 and prints the workflow message naming the task; relax status says why it failed', async () => {
  const id = uniqueId('cli-bad-task');
  const r = await relax(['train', '--no-preflight', '--id', id, '--config', JSON.stringify({ ...TINY, task: 'no-such-task' })]);
  assert.equal(r.code, 1, r.out);
  assert.match(r.out, /relax: run cli-bad-task-\w+ failed: .*ApplicationFailure\(InvalidRunConfig\): .*unknown task "no-such-task": known tasks are add2/);
  assert.doesNotMatch(r.out, /relax: Workflow execution failed\s*$/m, 'more than the generic message');

  const status = await relax(['status', id]);
  assert.equal(status.code, 0, status.out);
  assert.match(status.out, new RegExp(`^run ${id}: failed \\(Temporal: FAILED\\)`, 'm'));
  assert.match(status.out, /failed: {3}.*unknown task "no-such-task".*\[InvalidRunConfig\]/);
  for (const flag of [['--output', 'json'], ['--json']]) {
    const json = JSON.parse((await relax(['status', id, ...flag])).out) as { workflowStatus: string; failure: { type: string; message: string } };
    assert.equal(json.workflowStatus, 'FAILED', flag.join(' '));
    assert.equal(json.failure.type, 'InvalidRunConfig');
  }
});

test('relax train --config examples/add2-grpo.yaml train.steps=3 rollout.temperature=0.7 without a TTY prints a line per step up to the last; status, list and logs read the run back', async () => {
  const id = uniqueId('cli-run');
  const r = await relax(['train', '--id', id, '--config', EXAMPLE, 'train.steps=3', 'rollout.temperature=0.7']);
  assert.equal(r.code, 0, r.out);
  const { rows } = await stack!.db.pool.query('SELECT config FROM runs WHERE run_id = $1', [id]);
  const config = rows[0]?.config as { train: { steps: number; lr: number }; rollout: { temperature: number; prompts_per_step: number } };
  assert.deepEqual([config.train.steps, config.rollout.temperature, config.train.lr, config.rollout.prompts_per_step], [3, 0.7, 2e-3, 16], 'the overrides over the YAML file');
  assert.ok(r.lines.includes(`started training run ${id}`), r.out);
  const steps = r.lines.filter((l) => l.startsWith('[train] step ')).map((l) => Number(/^\[train\] step (\d+)\/3 /.exec(l)?.[1]));
  assert.ok(steps.length >= 2, `progress lines before the end, not silence:\n${r.out}`);
  assert.deepEqual([...steps].sort((a, b) => a - b), steps, 'in step order');
  assert.match(r.lines.filter((l) => l.startsWith('[train] step '))?.at(-1) ?? '', /^\[train\] step 3\/3 · v3 · .* · completed$/, 'the last line is at the last step');
  const last = JSON.parse(r.lines[r.lines.length - 1]) as { run_id: string; steps: number; policy_version: number };
  assert.deepEqual([last.run_id, last.steps, last.policy_version], [id, 3, 3]);

  const status = await relax(['status', id]);
  assert.equal(status.code, 0, status.out);
  assert.match(status.out, new RegExp(`^run ${id}: completed \\(Temporal: COMPLETED\\)`, 'm'));
  assert.match(status.out, /result: {3}3 steps, policy v3, held-out accuracy [\d.]+%/);
  const json = JSON.parse((await relax(['status', id, '--output', 'json'])).out) as { runId: string; workflowStatus: string; summary?: { steps: number } };
  assert.equal(json.runId, id);
  assert.equal(json.workflowStatus, 'COMPLETED');

  const listed = await waitFor('the run in relax list', async () => {
    const l = await relax(['list', '--limit', '100', '--task', 'add2']);
    return l.code === 0 && l.lines.some((line) => line.startsWith(`${id} `)) ? l : undefined;
  }, 30_000, 500);
  assert.match(listed.lines[0], /^RUN +STATUS +STEP +ACCURACY +TASK +TEMPORAL +STARTED$/);
  assert.match(listed.lines.find((line) => line.startsWith(`${id} `)) ?? '', new RegExp(`^${id} +completed +3 +[\\d.]+% +add2 +COMPLETED +\\d{4}-`));
  const completed = JSON.parse((await relax(['list', '--status', 'completed', '--json', '--limit', '100'])).out) as Array<{ runId: string }>;
  assert.ok(completed.some((x) => x.runId === id), 'list --status completed --json has the run');

  const logs = await relax(['logs', id]);
  assert.equal(logs.code, 0, logs.out);
  const times = logs.lines.map((l) => Date.parse(l.split('  ')[0]));
  assert.ok(times.length >= 4 && times.every((t, i) => Number.isFinite(t) && (i === 0 || t >= times[i - 1])), `events in time order:\n${logs.out}`);
  assert.match(logs.lines[0], /run_started {2}startRun {2}control@/);
  assert.match(logs.out, /activity_started {2}trainStep {2}train@.*"step":3/);
  assert.match(logs.lines.at(-1) ?? '', /run_finished {2}finishRun {2}control@.*"status":"completed"/);
  const metrics = await relax(['metrics', id, '--output', 'json']);
  assert.equal(metrics.code, 0, metrics.out);
  assert.equal((JSON.parse(metrics.out) as Record<string, Array<[number, number]>>).reward_mean?.length, 3, 'metrics --output json: every step of a series');
  const csv = await relax(['metrics', id, '--output', 'csv', '--names', 'reward_mean']);
  assert.deepEqual(csv.lines.slice(0, 2).map((l) => l.split(',')[0]), ['step', '1'], csv.out);
  const none = await relax(['logs', 'no-such-run']);
  assert.equal(none.code, 1);
  assert.match(none.out, /run no-such-run has no events in this database/);
});

test('Ctrl-C while following detaches with how to re-attach (exit 130); relax watch re-attaches to the end', async () => {
  const id = uniqueId('cli-detach');
  // Enough steps that the run is still going when the signal lands (a tiny step takes ~0.25 s on CI;
  // with 6 steps the run once ended first and SIGINT met no handler).
  const p = spawnRelax(['train', '--id', id, '--config', JSON.stringify(TINY), 'train.steps=40', 'train.eval_every=20'], env);
  const first = await p.waitForLine(/^\[train\] step \d+\/40 /, 120_000);
  p.child.kill('SIGINT');
  assert.equal(await p.exited, 130, `the CLI was still following (first line: ${first})`);
  await new Promise((r) => setImmediate(r));
  assert.ok(p.output.includes(`[relax] detached: run ${id} continues; re-attach with \`relax watch ${id}\`, stop it with \`relax stop ${id}\``), p.output.join('\n'));

  const w = await relax(['watch', id]);
  assert.equal(w.code, 0, w.out);
  assert.match(w.lines.filter((l) => l.startsWith('[train] step ')).at(-1) ?? '', /^\[train\] step 40\/40 · v40 · .* · completed$/);
  assert.deepEqual((JSON.parse(w.lines[w.lines.length - 1]) as { steps: number }).steps, 40);
});

test('relax set changes hyperparameters through the Update and prints the validator message on a bad value; relax cancel ends the run cancelled', async () => {
  const id = uniqueId('cli-set');
  const started = await relax(['train', '--detach', '--output', 'json', '--id', id, '--config', JSON.stringify({ ...TINY, train: { steps: 200, eval_every: 50 } })]);
  assert.equal(started.code, 0, started.out);
  assert.deepEqual(JSON.parse(started.out), { run_id: id }, '--detach --output json prints only the run id as JSON');
  await waitFor('the run at step 1', async () => {
    const p = await stack?.temporal.client.workflow.getHandle(id).query<{ step: number }>('progress').catch(() => undefined);
    return p && p.step >= 1 ? p : undefined;
  }, 120_000, 300);
  const set = await relax(['set', id, 'train.lr=5e-4', 'rollout.temperature=0.8']);
  assert.equal(set.code, 0, set.out);
  const changed = new RegExp(`^${id}: (.*) changed, from step \\d+$`, 'm').exec(set.out);
  assert.deepEqual(changed?.[1].split(', ').sort(), ['rollout.temperature', 'train.lr'], set.out);
  assert.match(set.out, /now in force: .*"lr":0\.0005.*"temperature":0\.8/);
  const setJson = await relax(['set', id, 'train.lr=4e-4', '--output', 'json']);
  assert.equal(setJson.code, 0, setJson.out);
  const answer = JSON.parse(setJson.out) as { changed: string[]; hyperparameters: { train: { lr: number } } };
  assert.deepEqual([answer.changed, answer.hyperparameters.train.lr], [['train.lr'], 4e-4], 'set --output json prints the Update\'s answer');
  const bad = await relax(['set', id, 'rollout.temperature=-1']);
  assert.equal(bad.code, 1, bad.out);
  assert.match(bad.out, new RegExp(`relax: setHyperparameters on ${id} refused: .*temperature`));
  const links = bad.out.trim().split(' <- ');
  assert.equal(new Set(links).size, links.length, `the cause chain is printed once: ${bad.out}`);
  assert.equal(bad.out.split('refused').length, 2, bad.out);

  const cancel = await relax(['cancel', id]);
  assert.equal(cancel.code, 0, cancel.out);
  const status = await waitFor('the run closed', async () => {
    const s = await relax(['status', id]);
    return /\(Temporal: CANCELLED\)/.test(s.out) ? s : undefined;
  }, 120_000, 1_000);
  assert.match(status.out, new RegExp(`^run ${id}: cancelled \\(Temporal: CANCELLED\\)`, 'm'));
  assert.match(status.out, /result: {3}\d+ steps, policy v\d+/);
});
