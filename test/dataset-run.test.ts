// Datasets from files through the workflow on real worker processes: a run names a pretrained-model
// directory (`model.from`; here a tiny random Llama written in the Hugging Face layout with
// SmolLM2's real tokenizer and chat template, so the test is fast) and `data` files in JSONL and
// Parquet with prompt and chat-message rows. Prompts reach the policy rendered by the model's chat
// template, LoRA versions hold adapters only and export to Hugging Face + PEFT, and a dataset with
// a bad row fails the run at start with an error naming the file, the line and the field, before
// anything is trained.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { WorkflowFailedError } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { relaxEnvironment } from '../config/environment';
import type { RunConfigInput } from '../config/run-config';
import { roleTaskQueue, type Role } from '../config/task-queues';
import { writeHfModel } from '../engines/hf-checkpoint';
import { initWeights, type ModelConfig } from '../engines/model';
import { resolveModelSource } from '../engines/model-sources';
import { HfTokenizer } from '../engines/tokenizers/hf';
import { listCheckpoints } from '../store/checkpoint-registry';
import { readSamples } from '../store/transfer-queue';
import { exportPolicyVersion } from '../training/export';
import { EXAMPLE_DATA_DIR } from '../config/recipes';
import type { TrainingResult } from '../workflows/training-run';
import { freshDatabase, sharedTemporalAddress, startWorkerProcess, temporalClient, uniqueId, type TestDatabase, type TestProcess } from './helpers';

let db: TestDatabase;
let home: string;
let modelDir: string;
let tokenizer: HfTokenizer;
const workers: TestProcess[] = [];
let temporal: Awaited<ReturnType<typeof temporalClient>>;

const TINY_LLAMA: ModelConfig = { architecture: 'llama', vocabSize: 49152, dModel: 32, nLayers: 1, nHeads: 2, nKvHeads: 1, dFF: 64, contextLength: 512, ropeTheta: 100000, rmsNormEps: 1e-5, tieEmbeddings: true };

function runConfig(data: RunConfigInput['data'], extra: RunConfigInput = {}): RunConfigInput {
  return {
    model: { from: modelDir, context_length: 256 },
    data,
    algorithm: { group_size: 2 },
    rollout: { prompts_per_step: 2, max_new_tokens: 4 },
    train: { steps: 2, lr: 1e-3, eval_every: 2, micro_batch: 4 },
    ...extra,
  };
}

before(async () => {
  db = await freshDatabase();
  home = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-dataset-run-'));
  const smollm2 = await resolveModelSource('smollm2-135m-instruct', { home: relaxEnvironment().home });
  modelDir = path.join(home, 'tiny-llama');
  await writeHfModel(modelDir, TINY_LLAMA, initWeights(TINY_LLAMA, 0), { tokenizerDir: smollm2 });
  tokenizer = HfTokenizer.fromFile(path.join(modelDir, 'tokenizer.json'));
  const env = { TEMPORAL_ADDRESS: sharedTemporalAddress(), DATABASE_URL: db.url, RELAX_HOME: home };
  const roles: Role[] = ['control', 'rollout', 'reference', 'train'];
  workers.push(...(await Promise.all(roles.map((r) => startWorkerProcess(r, env)))));
  temporal = await temporalClient();
});

after(async () => {
  await Promise.all(workers.map((w) => w.stop('SIGKILL')));
  await temporal?.close();
  await db?.close();
  fs.rmSync(home, { recursive: true, force: true });
});

async function train(config: RunConfigInput): Promise<TrainingResult> {
  return (await temporal.client.workflow.execute('trainingRun', { taskQueue: roleTaskQueue('control'), workflowId: uniqueId('data'), args: [config] })) as TrainingResult;
}

test('a JSONL dataset with chat-message rows trains through the workflow, prompts rendered by the chat template', async () => {
  const result = await train(runConfig({ train: path.join(EXAMPLE_DATA_DIR, 'arith-train.jsonl'), eval: path.join(EXAMPLE_DATA_DIR, 'arith-chat-eval.jsonl'), reward: { kind: 'numeric' } }));
  assert.equal(result.steps, 2);
  assert.ok(result.evalAccuracy !== undefined, 'the chat-format eval file was evaluated');
  const samples = await readSamples(db.pool, result.runId, { iteration: 0 });
  assert.equal(samples.length, 4);
  const text = tokenizer.decode(samples[0].promptTokens);
  assert.match(text, /^<\|im_start\|>system\n[\s\S]*<\|im_start\|>user\n[\s\S]+<\|im_end\|>\n<\|im_start\|>assistant\n$/, `the prompt is the chat template's rendering: ${JSON.stringify(text)}`);
  assert.equal(samples[0].promptTokens[0], 1, '<|im_start|> is one token, and no bos is added (add_bos_token is false)');
});

test('a Parquet dataset trains with LoRA and a KL term to the base: each version holds only the adapters', async () => {
  const result = await train(runConfig({ train: path.join(EXAMPLE_DATA_DIR, 'arith-train.parquet'), eval_size: 8, reward: { kind: 'numeric' } }, { lora: { rank: 4, alpha: 8 }, algorithm: { group_size: 2, kl_coef: 0.01 } }));
  assert.equal(result.steps, 2);
  const checkpoints = await listCheckpoints(db.pool, result.runId);
  assert.ok(checkpoints.length >= 2);
  const weightsFile = fs.readdirSync(checkpoints[checkpoints.length - 1].path).find((f) => f.endsWith('.safetensors'))!;
  const header = fs.readFileSync(path.join(checkpoints[checkpoints.length - 1].path, weightsFile));
  const names = Object.keys(JSON.parse(header.subarray(8, 8 + Number(header.readBigUInt64LE(0))).toString())).filter((k) => k !== '__metadata__');
  assert.ok(names.length > 0 && names.every((n) => n.endsWith('.lora_a') || n.endsWith('.lora_b')), `adapter tensors only: ${names.slice(0, 4).join(', ')}...`);
  const samples = await readSamples(db.pool, result.runId, { iteration: 1 });
  assert.ok(samples.length > 0 && samples.every((s) => s.refLogprobs !== null), 'the reference worker scored every sample under the base model');

  // relax export: the version merged into a Hugging Face directory, its adapters in PEFT layout.
  const out = path.join(home, 'export');
  const exported = await exportPolicyVersion(db.pool, `${result.runId}@2`, out);
  assert.equal(exported.adapterDir, path.join(out, 'adapter'));
  for (const f of ['config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json', 'adapter/adapter_config.json', 'adapter/adapter_model.safetensors']) assert.ok(fs.existsSync(path.join(out, f)), `${f} exported`);
  const adapterConfig = JSON.parse(fs.readFileSync(path.join(out, 'adapter', 'adapter_config.json'), 'utf8'));
  assert.deepEqual([adapterConfig.peft_type, adapterConfig.r, adapterConfig.lora_alpha], ['LORA', 4, 8]);
  await assert.rejects(exportPolicyVersion(db.pool, `${result.runId}`, out), /is not <run_id>@<version>/);
});

test('a dataset with a bad row fails the run at start, naming the file, the line and the field', async () => {
  const bad = path.join(home, 'bad.jsonl');
  fs.writeFileSync(bad, '{"prompt": "What is 1 + 1?", "answer": 2}\n{"prompt": "What is 2 + 2?"}\n');
  const workflowId = uniqueId('bad-data');
  const err = await temporal.client.workflow.execute('trainingRun', { taskQueue: roleTaskQueue('control'), workflowId, args: [runConfig({ train: bad, eval_size: 1 })] }).then(
    () => assert.fail('the run should not start'),
    (e: unknown) => e,
  );
  assert.ok(err instanceof WorkflowFailedError);
  const cause = err.cause as ApplicationFailure;
  assert.equal(cause.type, 'InvalidRunConfig');
  assert.match(cause.message, /bad\.jsonl line 2: field "answer" is missing/);
  const { rows } = await db.pool.query<{ n: string }>('SELECT count(*) AS n FROM runs WHERE workflow_id = $1', [workflowId]);
  assert.equal(Number(rows[0].n), 0, 'the run was never registered: nothing started');
});
