// A published policy version out as a Hugging Face model directory (`relax export <run>@<version>
// --format hf`): config.json, model.safetensors and the model's tokenizer files, loadable by
// `transformers`. A LoRA version is written merged into its base weights, and its adapters also in
// the PEFT layout (adapter_config.json + adapter_model.safetensors) under `adapter/`.
import path from 'node:path';
import type { Pool } from 'pg';
import { writeHfModel, writePeftAdapter } from '../engines/hf-checkpoint';
import { mergeLoraWeights, withoutLora } from '../engines/lora';
import { loadPolicyWeights } from './policy-versions';
import { loadRunContext } from './run-context';

export interface ExportedPolicy {
  dir: string;
  /** The PEFT adapter directory of a LoRA version. */
  adapterDir?: string;
  parameters: number;
}

/** Parses "<run_id>@<version>" (version a non-negative integer). */
export function parseVersionRef(ref: string): { runId: string; version: number } {
  const m = /^(.+)@(\d+)$/.exec(ref);
  if (!m) throw new Error(`"${ref}" is not <run_id>@<version>: name the run and a published policy version, e.g. my-run@12`);
  return { runId: m[1], version: Number(m[2]) };
}

export async function exportPolicyVersion(pool: Pool, ref: string, outDir: string): Promise<ExportedPolicy> {
  const { runId, version } = parseVersionRef(ref);
  const run = await loadRunContext(pool, runId);
  const { policy } = run;
  if (!policy.modelDir || !policy.baseWeights) {
    throw new Error(`run ${runId} trains the tiny GPT, which has no Hugging Face architecture: --format hf exports pretrained (llama-family) models (model.from); its checkpoints are safetensors files already (${run.checkpointRoot})`);
  }
  const weights = await loadPolicyWeights(pool, run, version);
  const dir = path.resolve(outDir);
  if (!run.model.lora) {
    await writeHfModel(dir, run.model, weights, { tokenizerDir: policy.modelDir });
    return { dir, parameters: Object.values(weights).reduce((n, w) => n + w.length, 0) };
  }
  const merged = mergeLoraWeights(run.model, await policy.baseWeights(), weights);
  await writeHfModel(dir, withoutLora(run.model), merged, { tokenizerDir: policy.modelDir });
  const adapterDir = path.join(dir, 'adapter');
  await writePeftAdapter(adapterDir, run.model, weights, { baseModel: policy.modelDir });
  return { dir, adapterDir, parameters: Object.values(merged).reduce((n, w) => n + w.length, 0) };
}
