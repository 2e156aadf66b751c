// A published policy version out as a Hugging Face model directory (`relax export <run>@<version>
// --format hf`): config.json, model.safetensors and the model's tokenizer files, loadable by
// `transformers`. A LoRA version is written merged into its base weights, and its adapters also in
// the PEFT layout (adapter_config.json + adapter_model.safetensors) under `adapter/`. Tokens the run
// added (model.add_special_tokens) are written into the tokenizer files, with the grown embedding.
// A model with media encoders (model.audio, model.vision) has no transformers architecture here: the
// language model is exported as above, and the encoders with their projectors (frozen parts
// included, so the directory is whole) go beside it, in Relax's names: encoders.safetensors and
// encoders.json (their configs and placeholder tokens).
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { Pool } from 'pg';
import { writeHfModel, writePeftAdapter } from '../engines/hf-checkpoint';
import { mergeLoraWeights, withoutLora } from '../engines/lora';
import { writeSafetensorsFile } from '../engines/safetensors';
import { tokenizerChanges } from '../engines/tokenizers/added-tokens';
import { hasFrozenParameters, parameterPart, parameterSpec, type ModelConfig, type PolicyWeights } from '../engines/model';
import type { RunPolicy } from './policy-model';
import { loadPolicyWeights } from './policy-versions';
import { loadRunContext } from './run-context';

export interface ExportedPolicy {
  dir: string;
  /** The PEFT adapter directory of a LoRA version. */
  adapterDir?: string;
  parameters: number;
  /** Why a LoRA version's adapters were not also written in the PEFT layout. */
  adapterSkipped?: string;
  /** The media encoders' file (encoders.safetensors) of a model with model.audio or model.vision. */
  encodersFile?: string;
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
  return writeExportedPolicy({ ...policy, modelDir: policy.modelDir, baseWeights: policy.baseWeights }, run.model, weights, path.resolve(outDir));
}

/** A pretrained model's policy (model.from): its directory and base weights are known. */
type PretrainedPolicy = RunPolicy & Required<Pick<RunPolicy, 'modelDir' | 'baseWeights'>>;

const countOf = (weights: PolicyWeights) => Object.values(weights).reduce((n, w) => n + w.length, 0);

/**
 * A version's weights (`model`: the run's, with LoRA adapters only) written to `dir` as a Hugging
 * Face directory, with the tokenizer files of the policy's model and the tokens the run added.
 * A PEFT adapter is written only when the base it names (model.from) is the model it trained on: a
 * run that added tokens trained on a grown vocabulary (mean-initialised rows, a tokenizer with more
 * ids) that model.from does not have, so its adapters alone would load onto the wrong base; the
 * merged model beside it carries everything (grown embedding, tokenizer), and is what to load.
 */
export async function writeExportedPolicy(policy: PretrainedPolicy, model: ModelConfig, weights: PolicyWeights, dir: string): Promise<ExportedPolicy> {
  const files = { tokenizerDir: policy.modelDir, addedTokens: policy.addedTokens };
  // The base weights (read from disk once): a LoRA version merges into them, a frozen encoder comes from them.
  const base = hasFrozenParameters(model) ? await policy.baseWeights() : undefined;
  const encoders = model.audio || model.vision ? await writeEncoders(policy, model, { ...base, ...weights }, dir) : undefined;
  const lm = languageModel(model);
  const written = (lmParameters: PolicyWeights) => ({ dir, parameters: countOf(lmParameters) + (encoders?.parameters ?? 0), ...(encoders ? { encodersFile: encoders.file } : {}) });
  if (!model.lora) {
    const lmOnly = languageModelWeights(weights);
    await writeHfModel(dir, lm, lmOnly, files);
    return written(lmOnly);
  }
  const merged = mergeLoraWeights(lm, base!, weights);
  await writeHfModel(dir, withoutLora(lm), merged, files);
  const done = written(merged);
  const changed = tokenizerChanges(policy.addedTokens ?? []).map((t) => t.content);
  if (changed.length > 0) {
    const adapterSkipped = `the run added ${JSON.stringify(changed)} to the tokenizer of ${policy.modelDir} (model.add_special_tokens), so its LoRA adapters alone do not fit that base: load the merged model in ${dir} (its tokenizer has the tokens, its embedding their rows)`;
    return { ...done, adapterSkipped };
  }
  const adapterDir = path.join(dir, 'adapter');
  await writePeftAdapter(adapterDir, lm, languageModelWeights(weights), { baseModel: policy.modelDir });
  return { ...done, adapterDir };
}

const isEncoderTensor = (name: string) => parameterPart(name) !== 'language_model';
const languageModelWeights = (weights: PolicyWeights): PolicyWeights => Object.fromEntries(Object.entries(weights).filter(([name]) => !isEncoderTensor(name)));

/** The language model alone: model.audio and model.vision (the encoders and their projectors) left out. */
function languageModel(model: ModelConfig): ModelConfig {
  const { audio: _audio, vision: _vision, ...lm } = model;
  return lm;
}

/**
 * The encoders and projectors of `weights` (the version completed with the base weights, where a
 * frozen encoder comes from) to <dir>/encoders.safetensors, with encoders.json naming each encoder's
 * config (engines/model.ts AudioConfig, VisionConfig: its placeholder token id among them).
 */
async function writeEncoders(policy: PretrainedPolicy, model: ModelConfig, weights: PolicyWeights, dir: string): Promise<{ file: string; parameters: number }> {
  const spec = parameterSpec(withoutLora(model)).filter((p) => isEncoderTensor(p.name));
  const missing = spec.filter((p) => !weights[p.name]).map((p) => p.name);
  if (missing.length) throw new Error(`the version has no ${missing.slice(0, 3).join(', ')}${missing.length > 3 ? ` (and ${missing.length - 3} more)` : ''}: it is not a version of this run's model`);
  await mkdir(dir, { recursive: true });
  const file = path.join(dir, 'encoders.safetensors');
  await writeSafetensorsFile(file, spec, (name) => weights[name], { metadata: { format: 'relax-encoders' } });
  const configs = { format: 'relax-encoders', ...(model.audio ? { audio: model.audio } : {}), ...(model.vision ? { vision: model.vision } : {}), ...(policy.audioEncoderDir ? { audio_from: policy.audioEncoderDir } : {}) };
  await writeFile(path.join(dir, 'encoders.json'), `${JSON.stringify(configs, null, 2)}\n`);
  return { file, parameters: spec.reduce((n, p) => n + weights[p.name].length, 0) };
}
