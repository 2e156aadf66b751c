// Policy checkpoint files, all of them: one directory per policy version holding model.safetensors
// (float32 weights, the model config in its metadata) and config.json (format, version, model
// config, sha256 of the weights file), and beside them the trainer's optimizer state per version.
// Written (atomically), read, verified and deleted here only; which versions exist is the
// checkpoint registry's job (store/checkpoint-registry.ts). Versions are immutable: publishing the
// same version again succeeds only with identical bytes, which makes a retried publish idempotent.
// A root may be a directory or an object-store URL (s3://..., engines/storage/): there a version is
// the objects <root>/vNNNNNNNN/model.safetensors and then config.json, whose presence marks the
// version complete, read through the worker's bounded cache and verified by sha256 either way.
import { createHash, randomUUID } from 'node:crypto';
import { mkdir, readdir, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { baseName, deleteObjects, forgetCached, isObjectUrl, joinLocation, listObjects, readAt, readIfExists, writeAt } from './storage/locations';
import { z } from 'zod';
import { checkWeights, initWeights, modelConfigDifference, modelConfigSchema, parseModelConfig, trainableParameterSpec, valueHeadParameterSpec, type ModelConfig, type PolicyWeights } from './model';
import { decodeSafetensors, encodeSafetensors } from './safetensors';
import { componentLog } from '../telemetry/log';

export const CHECKPOINT_FORMAT = 'relax.policy-checkpoint/1';
export const WEIGHTS_FILE = 'model.safetensors';
export const CONFIG_FILE = 'config.json';
const MODEL_CONFIG_METADATA_KEY = 'relax.model_config';

const checkpointConfigSchema = z.object({
  format: z.literal(CHECKPOINT_FORMAT),
  policyVersion: z.number().int().min(0),
  model: modelConfigSchema,
  weightsFile: z.string(),
  sha256: z.string().regex(/^[0-9a-f]{64}$/),
  bytes: z.number().int().min(0),
});

export type CheckpointConfig = z.infer<typeof checkpointConfigSchema>;

export interface CheckpointInfo extends CheckpointConfig {
  dir: string;
}

export interface LoadedCheckpoint {
  info: CheckpointInfo;
  weights: PolicyWeights;
}

export function sha256Hex(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('hex');
}

/**
 * The weights file's bytes: a pure function of config + weights, so equal weights hash equally.
 * A LoRA model's version holds its adapters only (the base stays in the model directory).
 */
export function encodeCheckpointWeights(model: ModelConfig, weights: PolicyWeights): Uint8Array {
  const trainable = trainableParameterSpec(model);
  checkWeights(model, weights, undefined, 'trainable');
  return encodeSafetensors(
    trainable.map((p) => [p.name, { shape: p.shape, data: weights[p.name] }]),
    { [MODEL_CONFIG_METADATA_KEY]: JSON.stringify(model) },
  );
}

/** Directory of `policyVersion` under a run's checkpoint root. */
export function checkpointDir(root: string, policyVersion: number): string {
  if (!Number.isInteger(policyVersion) || policyVersion < 0) throw new Error(`policyVersion must be a non-negative integer, got ${policyVersion}`);
  return joinLocation(root, `v${String(policyVersion).padStart(8, '0')}`);
}

/**
 * The trainer's AdamW state for `policyVersion` (written next to the weights, outside the version's
 * directory, so loading a checkpoint never depends on it).
 */
export function optimizerStatePath(root: string, policyVersion: number): string {
  if (!Number.isInteger(policyVersion) || policyVersion < 0) throw new Error(`policyVersion must be a non-negative integer, got ${policyVersion}`);
  return joinLocation(root, 'optimizer', `v${String(policyVersion).padStart(8, '0')}.safetensors`);
}

async function readConfigFile(dir: string, fresh = false): Promise<CheckpointConfig> {
  const file = joinLocation(dir, CONFIG_FILE);
  let raw: string;
  try {
    raw = Buffer.from(await readAt(file, { fresh })).toString('utf8');
  } catch (err) {
    throw new Error(`checkpoint ${dir}: cannot read ${CONFIG_FILE} (${(err as Error).message})`);
  }
  let json: unknown;
  try {
    json = JSON.parse(raw);
  } catch (err) {
    throw new Error(`checkpoint ${file}: not valid JSON (${(err as Error).message})`);
  }
  const r = checkpointConfigSchema.safeParse(json);
  if (!r.success) {
    throw new Error(`checkpoint ${file}: ${r.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ')}`);
  }
  return r.data;
}

/**
 * Writes version `policyVersion` to checkpointDir(root, policyVersion) atomically (a temporary
 * directory renamed into place). If that version exists already with the same content hash, returns
 * it; with a different hash, throws: published versions never change.
 */
export async function publishCheckpoint(root: string, policyVersion: number, model: ModelConfig, weights: PolicyWeights): Promise<CheckpointInfo> {
  const dir = checkpointDir(root, policyVersion);
  const bytes = encodeCheckpointWeights(model, weights);
  const config: CheckpointConfig = { format: CHECKPOINT_FORMAT, policyVersion, model, weightsFile: WEIGHTS_FILE, sha256: sha256Hex(bytes), bytes: bytes.length };
  const existing = await readConfigFile(dir).catch(() => undefined);
  if (existing) return sameOrConflict(dir, existing, config);
  if (isObjectUrl(root)) {
    // The weights first, then config.json: a reader that finds config.json finds the whole version.
    await writeAt(joinLocation(dir, WEIGHTS_FILE), bytes);
    await writeAt(joinLocation(dir, CONFIG_FILE), Buffer.from(`${JSON.stringify(config, null, 2)}\n`));
    return { ...config, dir };
  }
  await mkdir(root, { recursive: true });
  const tmp = path.join(root, `.tmp-${path.basename(dir)}-${randomUUID().slice(0, 8)}`);
  await mkdir(tmp);
  try {
    await writeFile(path.join(tmp, WEIGHTS_FILE), bytes);
    await writeFile(path.join(tmp, CONFIG_FILE), `${JSON.stringify(config, null, 2)}\n`);
    await rename(tmp, dir);
  } catch (err) {
    await rm(tmp, { recursive: true, force: true });
    // A concurrent publisher may have won the rename; that is fine if it wrote the same bytes.
    const raced = await readConfigFile(dir).catch(() => undefined);
    if (raced) return sameOrConflict(dir, raced, config);
    throw err;
  }
  return { ...config, dir };
}

/** Publishing a version again with different weights: versions are immutable (a retry cannot fix it). */
export class CheckpointOverwriteError extends Error {
  override readonly name = 'CheckpointOverwriteError';
}

function sameOrConflict(dir: string, existing: CheckpointConfig, wanted: CheckpointConfig): CheckpointInfo {
  if (existing.sha256 !== wanted.sha256) {
    throw new CheckpointOverwriteError(`policy version ${wanted.policyVersion} is already published at ${dir} with sha256 ${existing.sha256}; refusing to overwrite it with different weights (sha256 ${wanted.sha256})`);
  }
  return { ...existing, dir };
}

export interface LoadCheckpointOptions {
  /** The architecture the caller will run the weights with; a mismatch is an error naming the field. */
  model?: ModelConfig;
  /** The content hash recorded elsewhere (e.g. the checkpoint registry). */
  sha256?: string;
  /** Read an object-store version from the store, not the local cache (verification). */
  fresh?: boolean;
}

/** Reads a checkpoint directory, verifying its content hash, its model config and every tensor's shape. */
export async function loadCheckpoint(dir: string, options: LoadCheckpointOptions = {}): Promise<LoadedCheckpoint> {
  const config = await readConfigFile(dir, options.fresh);
  const file = joinLocation(dir, config.weightsFile);
  let bytes = await readAt(file, { fresh: options.fresh });
  // A cached copy that no longer matches (a disk fault) is dropped and read again from the store.
  if (isObjectUrl(file) && !options.fresh && sha256Hex(bytes) !== config.sha256) {
    await forgetCached([file]);
    bytes = await readAt(file);
  }
  const sha256 = sha256Hex(bytes);
  if (sha256 !== config.sha256) throw new Error(`checkpoint ${file}: sha256 ${sha256} does not match ${config.sha256} recorded in ${CONFIG_FILE} (file corrupted or replaced)`);
  if (options.sha256 !== undefined && options.sha256 !== sha256) {
    throw new Error(`checkpoint ${file}: sha256 ${sha256} does not match the expected ${options.sha256}`);
  }
  // A policy without a value head loads into a model with one (PPO with a critic from a warm start): the head starts fresh.
  const freshValueHead = options.model?.valueHead === true && !config.model.valueHead;
  const expected = freshValueHead ? withoutValueHead(options.model!) : options.model;
  const mismatch = expected && modelConfigDifference(config.model, expected);
  if (mismatch) throw new Error(`checkpoint ${dir}: ${mismatch} by the caller's model config`);
  const decoded = decodeCheckpointWeights(bytes, `checkpoint ${file}`);
  const inner = modelConfigDifference(decoded.model, config.model);
  if (inner) throw new Error(`checkpoint ${dir}: the model config inside ${config.weightsFile} differs from ${CONFIG_FILE}: ${inner}`);
  if (freshValueHead) return { info: { ...config, model: options.model!, dir }, weights: { ...decoded.weights, ...initWeights(options.model!, 0, valueHeadParameterSpec(options.model!)) } };
  const weights = decoded.weights;
  return { info: { ...config, dir }, weights };
}

function withoutValueHead(model: ModelConfig): ModelConfig {
  const { valueHead: _valueHead, ...rest } = model;
  return rest;
}

/**
 * A weights file's bytes (encodeCheckpointWeights) back to its model config and weights, every
 * tensor's shape checked against that config: what an engine that received the file over the
 * network (serving/engine-server.ts) loads. `source` names the file in errors.
 */
export function decodeCheckpointWeights(bytes: Uint8Array, source: string): { model: ModelConfig; weights: PolicyWeights } {
  const parsed = decodeSafetensors(bytes, source);
  const stored = parsed.metadata[MODEL_CONFIG_METADATA_KEY];
  if (stored === undefined) throw new Error(`${source}: no ${MODEL_CONFIG_METADATA_KEY} in its metadata (not a Relax policy checkpoint)`);
  const model = parseModelConfig(JSON.parse(stored));
  const weights: PolicyWeights = {};
  const shapes: Record<string, number[]> = {};
  for (const [name, t] of parsed.tensors) {
    weights[name] = t.data;
    shapes[name] = t.shape;
  }
  try {
    checkWeights(model, weights, shapes, 'trainable');
  } catch (err) {
    throw new Error(`${source}: ${(err as Error).message}`);
  }
  return { model, weights };
}

/** Policy versions published under `root`, ascending. */
export async function listCheckpointVersions(root: string): Promise<number[]> {
  if (isObjectUrl(root)) {
    // A version is complete once its config.json is there (publishCheckpoint writes it last).
    const complete = (await listObjects(root)).map((url) => /\/v(\d{8,})\/config\.json$/.exec(url)).filter((m): m is RegExpExecArray => m !== null);
    return complete.map((m) => Number(m[1])).sort((a, b) => a - b);
  }
  const entries = await readdir(root).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return [] as string[];
    throw err;
  });
  return entries
    .map((e) => /^v(\d{8,})$/.exec(e))
    .filter((m): m is RegExpExecArray => m !== null)
    .map((m) => Number(m[1]))
    .sort((a, b) => a - b);
}

/**
 * Writes the optimizer state of `policyVersion` atomically (a temporary file renamed into place).
 * Publish it before the weights: a published version then always has its moments.
 */
export async function writeOptimizerState(root: string, policyVersion: number, bytes: Uint8Array): Promise<void> {
  // Not kept in the object cache: only a trainer rebuilding a run reads it back.
  await writeAt(optimizerStatePath(root, policyVersion), bytes, { cache: false });
}

/** The optimizer state of `policyVersion`, or undefined when none was written (a warm start, version 0). */
export async function readOptimizerState(root: string, policyVersion: number): Promise<Uint8Array | undefined> {
  return readIfExists(optimizerStatePath(root, policyVersion), { fresh: true });
}

/** A version's files checked against the hash the registry recorded: ok, or the problem found. */
export async function verifyCheckpointFiles(dir: string, policyVersion: number, sha256: string): Promise<{ ok: true } | { ok: false; problem: string }> {
  try {
    const { info } = await loadCheckpoint(dir, { sha256, fresh: true });
    if (info.policyVersion !== policyVersion) return { ok: false, problem: `checkpoint ${dir} holds policy version ${info.policyVersion}, but the registry lists it as version ${policyVersion}` };
    return { ok: true };
  } catch (err) {
    return { ok: false, problem: (err as Error).message };
  }
}

/** File names in `dir`, or none when it does not exist. */
async function namesIn(dir: string): Promise<Set<string>> {
  try {
    return new Set(await readdir(dir));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return new Set();
    throw err;
  }
}

/**
 * Deletes what is still on disk of the given versions (weights directory and optimizer state).
 * Each parent directory is listed once and only present entries are removed, so a long run does not
 * pay one failed unlink per version it ever pruned; missing files are fine (a retry, a concurrent
 * call). Only a directory named like the version's own (checkpointDir) is deleted: a path pointing
 * anywhere else (a hand-registered path, someone's warm start) is not ours to remove; `warnFor`
 * names the versions to warn about when that happens (once, when they are first pruned).
 */
export async function deleteCheckpointFiles(root: string, versions: ReadonlyArray<{ policyVersion: number; path: string }>, warnFor: ReadonlySet<number> = new Set()): Promise<void> {
  if (isObjectUrl(root)) return deleteCheckpointObjects(root, versions, warnFor);
  const listed = new Map<string, Set<string>>();
  const present = async (file: string): Promise<boolean> => {
    const dir = path.dirname(file);
    if (!listed.has(dir)) listed.set(dir, await namesIn(dir));
    return (listed.get(dir) as Set<string>).has(path.basename(file));
  };
  for (const v of versions) {
    const weightsDir = path.resolve(v.path);
    const expectedName = path.basename(checkpointDir(root, v.policyVersion));
    if (path.basename(weightsDir) !== expectedName) {
      if (warnFor.has(v.policyVersion)) componentLog('checkpoints').warn(`version ${v.policyVersion} is pruned but its path ${v.path} is not a ${expectedName}/ checkpoint directory; left in place`);
    } else if (await present(weightsDir)) {
      await rm(weightsDir, { recursive: true, force: true });
    }
    const optimizer = optimizerStatePath(root, v.policyVersion);
    if (await present(optimizer)) await rm(optimizer, { force: true });
  }
}

/** deleteCheckpointFiles for a root in the object store: the version's objects and its optimizer state. */
async function deleteCheckpointObjects(root: string, versions: ReadonlyArray<{ policyVersion: number; path: string }>, warnFor: ReadonlySet<number>): Promise<void> {
  const urls: string[] = [];
  for (const v of versions) {
    const expected = checkpointDir(root, v.policyVersion);
    if (v.path.replace(/\/+$/, '') === expected) urls.push(joinLocation(expected, CONFIG_FILE), joinLocation(expected, WEIGHTS_FILE));
    else if (warnFor.has(v.policyVersion)) componentLog('checkpoints').warn(`version ${v.policyVersion} is pruned but its path ${v.path} is not ${expected}; left in place`);
    urls.push(optimizerStatePath(root, v.policyVersion));
  }
  // config.json first: a version is complete while it exists, so it goes before the weights.
  await deleteObjects(urls.filter((u) => baseName(u) === CONFIG_FILE));
  await deleteObjects(urls.filter((u) => baseName(u) !== CONFIG_FILE));
}
