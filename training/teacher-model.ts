// On-policy distillation's teacher (algorithm.teacher.from), loaded for the reference role: a Relax
// policy checkpoint directory, `<run_id>@<version|latest>` from the checkpoint registry, an SFT warm
// start's cache directory (its version 0), or any model.from source (a Hugging Face directory, a
// .gguf file, a named model, a Hub id). The teacher scores the student's tokens, so it must share the
// student's vocabulary and hold its context. A LoRA checkpoint (adapters only) of the student's own
// base completes with the run's base weights, read the same way the student's trainer reads them.
import { existsSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { relaxEnvironment } from '../config/environment';
import { CHECKPOINT_FORMAT, CONFIG_FILE, checkpointDir, loadCheckpoint } from '../engines/checkpoint';
import { loadHfModel } from '../engines/hf-checkpoint';
import { withoutLora } from '../engines/lora';
import { modelConfigDifference, type ModelConfig, type PolicyWeights } from '../engines/model';
import { resolveModelSource } from '../engines/model-sources';
import { INIT_FROM_REFERENCE } from '../store/checkpoint-registry';
import type { Queryable } from '../store/transfer-queue';
import { RunModelError, type RunPolicy } from './policy-model';
import { resolveInitFrom } from './policy-versions';

export interface TeacherModel {
  model: ModelConfig;
  weights: PolicyWeights;
  /** Where it was read from (a checkpoint or model directory). */
  source: string;
}

/** The warm start cache's marker file (training/warm-start.ts META_FILE): its version 0 is the model. */
const WARM_START_META = 'warm-start.json';

/** A directory holding a Relax policy checkpoint (config.json of format relax.policy-checkpoint/1). */
function isPolicyCheckpoint(dir: string): boolean {
  try {
    return (JSON.parse(readFileSync(path.join(dir, CONFIG_FILE), 'utf8')) as { format?: unknown }).format === CHECKPOINT_FORMAT;
  } catch {
    return false;
  }
}

/** The Relax checkpoint directory `from` names, undefined when it names a model source instead. */
async function checkpointOf(db: Queryable | undefined, from: string): Promise<{ dir: string; sha256?: string } | undefined> {
  const full = path.resolve(from);
  if (existsSync(full) && statSync(full).isDirectory()) {
    if (existsSync(path.join(full, WARM_START_META))) return { dir: checkpointDir(full, 0) };
    return isPolicyCheckpoint(full) ? { dir: full } : undefined;
  }
  if (!INIT_FROM_REFERENCE.test(from)) return undefined;
  if (!db) throw new Error('names a run\'s version in the checkpoint registry, which only a worker with the database reads: give a checkpoint directory here');
  const source = await resolveInitFrom(db, from);
  return source && { dir: source.path, ...(source.sha256 ? { sha256: source.sha256 } : {}) };
}

/** A LoRA checkpoint's adapters with the student's base weights, when the student is a LoRA run of the same base. */
async function completedWithBase(model: ModelConfig, weights: PolicyWeights, student: Pick<RunPolicy, 'model' | 'baseWeights'>): Promise<PolicyWeights> {
  if (!model.lora) return weights;
  const sameBase = student.baseWeights && student.model.lora && !modelConfigDifference(withoutLora(model), withoutLora({ ...student.model, valueHead: undefined }));
  if (!sameBase) throw new Error('is a LoRA checkpoint (adapters only): its base must be the student\'s own LoRA base model (model.from with lora), or give a merged checkpoint or model directory');
  return { ...(await student.baseWeights!()), ...weights };
}

async function readTeacher(db: Queryable | undefined, from: string, student: Pick<RunPolicy, 'model' | 'baseWeights'>, contextLength: number): Promise<TeacherModel> {
  const checkpoint = await checkpointOf(db, from);
  if (checkpoint) {
    const loaded = await loadCheckpoint(checkpoint.dir, checkpoint.sha256 ? { sha256: checkpoint.sha256 } : {});
    return { model: loaded.info.model, weights: await completedWithBase(loaded.info.model, loaded.weights, student), source: checkpoint.dir };
  }
  const dir = await resolveModelSource(from, { home: relaxEnvironment().home });
  const hf = await loadHfModel(dir, { contextLength });
  return { model: hf.config, weights: hf.weights, source: dir };
}

/** Why the teacher cannot score the student's sequences (vocabulary, context), or undefined. */
export function teacherMismatch(teacher: ModelConfig, student: ModelConfig): string | undefined {
  if (teacher.vocabSize !== student.vocabSize) return `has a ${teacher.vocabSize}-token vocabulary and the student ${student.vocabSize}: the teacher must score the student's tokens, so both need the same tokenizer`;
  if (teacher.contextLength < student.contextLength) return `holds ${teacher.contextLength} tokens of context and the student's sequences up to ${student.contextLength}: use a teacher with at least the student's context`;
  if ((student.vision && !teacher.vision) || (student.audio && !teacher.audio)) return 'has no encoder for the student\'s media: use a teacher with the same vision / audio encoders';
  return undefined;
}

/**
 * The teacher `from` names, checked against the student; RunModelError naming algorithm.teacher.from
 * otherwise (a retry cannot fix it). Without `db` (the in-process loop) a registry reference is refused.
 */
export async function loadTeacher(db: Queryable | undefined, from: string, student: Pick<RunPolicy, 'model' | 'baseWeights'>): Promise<TeacherModel> {
  let teacher: TeacherModel;
  try {
    teacher = await readTeacher(db, from, student, student.model.contextLength);
  } catch (err) {
    throw new RunModelError(`algorithm.teacher.from ${JSON.stringify(from.slice(0, 200))}: ${(err as Error).message}`);
  }
  const problem = teacherMismatch(teacher.model, student.model);
  if (problem) throw new RunModelError(`algorithm.teacher.from ${JSON.stringify(from.slice(0, 200))} (${teacher.source}) ${problem}`);
  return teacher;
}
