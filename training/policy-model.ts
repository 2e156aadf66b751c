// A run's policy model and task, resolved once from its config: the tiny GPT the config sizes with
// the task's own tokenizer, or a pretrained model (`model.from`: a Hugging Face directory, a .gguf
// file, or a named model) with ITS tokenizer, chat template and end-of-turn tokens, optionally with
// LoRA adapters, and the task either built in or read from data files (`data`). The base weights of
// a pretrained model are read from its directory when an engine is made (not kept beside it).
// model.vision / model.audio add freshly initialised encoders to a pretrained model, placed at its
// tokenizer's single <image> / <audio> token: the model's own, or one model.add_special_tokens adds
// (the vocabulary then grows, its new embedding rows starting at the mean of the existing ones).
import path from 'node:path';
import { relaxEnvironment } from '../config/environment';
import { runContextLength, type RunConfig } from '../config/run-config';
import { grownVocabularyWeights } from '../engines/embedding-growth';
import { loadHfModel, readHfModelConfig } from '../engines/hf-checkpoint';
import { hasFrozenParameters, initWeights, loraParameterSpec, parameterPart, parameterSpec, parseModelConfig, trainableParameterSpec, type LoraTarget, type ModelConfig, type PolicyWeights } from '../engines/model';
import { loadAudioEncoderWeights, readAudioEncoderInfo, resolveAudioEncoder } from '../engines/whisper';
import { resolveModelSource } from '../engines/model-sources';
import { newTokenCount, type AddedSpecialToken } from '../engines/tokenizers/added-tokens';
import { ChatTemplate } from '../engines/tokenizers/chat-template';
import { HfTokenizer } from '../engines/tokenizers/hf';
import { loadDatasetTask } from '../envs/datasets';
import { loadTask } from '../envs/registry';
import type { Task } from '../envs/task';
import { audioWindowFrames, encoderConfigs, policyModelConfig, type PretrainedAudioShape } from './options';

export interface RunPolicy {
  model: ModelConfig;
  task: Task;
  /** A pretrained model's Hugging Face directory. */
  modelDir?: string;
  /** A pretrained model's weights (every parameter but LoRA adapters), read for each engine that asks (concurrent asks share one read). */
  baseWeights?: () => Promise<PolicyWeights>;
  /** model.add_special_tokens as resolved on the model's tokenizer (ids; which are new): an export writes them into its tokenizer files. */
  addedTokens?: readonly AddedSpecialToken[];
  /** model.audio.from's imported encoder (engines/whisper.ts): its weights complete baseWeights. */
  audioEncoderDir?: string;
}

/** The run's model or data cannot be used (a missing file, a bad row, an unsupported checkpoint): retrying cannot help. */
export class RunModelError extends Error {
  override readonly name = 'RunModelError';
}

/** Reads in flight, shared by the callers that ask meanwhile (a train and a reference trainer made together). */
const baseWeightsByDir = new Map<string, Promise<PolicyWeights>>();

/**
 * The base weights, read from the model's directory for each caller (the engines copy them into
 * their own tensors): a process keeps no JS copy of them beside its engines' (one copy of the base
 * weights per process), for a read of the directory per engine made (about a second). A vocabulary
 * grown by model.add_special_tokens (model.vocabSize past the checkpoint's) gets its new embedding
 * rows here, computed from the read weights alone, so every worker has the same rows.
 */
function baseWeightsOf(dir: string, contextLength: number, model: Pick<ModelConfig, 'dModel' | 'vocabSize'>): () => Promise<PolicyWeights> {
  const key = `${dir}\0${model.vocabSize}`;
  return () => {
    let loading = baseWeightsByDir.get(key);
    if (!loading) {
      loading = loadHfModel(dir, { contextLength }).then((m) => grownVocabularyWeights(m.weights, model.dModel, model.vocabSize));
      baseWeightsByDir.set(key, loading);
      const forget = () => baseWeightsByDir.delete(key);
      loading.then(forget, forget);
    }
    return loading;
  };
}

const LORA_TARGET_OF: Record<string, LoraTarget> = { q_proj: 'q', k_proj: 'k', v_proj: 'v', o_proj: 'o', gate_proj: 'gate', up_proj: 'up', down_proj: 'down' };

const ENCODER_OF = { image: { section: 'vision', placeholder: '<image>' }, audio: { section: 'audio', placeholder: '<audio>' } } as const;

/**
 * model.vision / model.audio on a pretrained model: its tokenizer must have the placeholder as ONE
 * token, its own or added by model.add_special_tokens (Relax adds none unasked: the new embedding
 * starts untrained, at the mean of the others).
 */
function checkPlaceholderTokens(config: RunConfig, tokenizer: HfTokenizer, dir: string): void {
  for (const { section, placeholder } of Object.values(ENCODER_OF)) {
    if (!config.model[section]) continue;
    let ids: number[] = [];
    try {
      ids = tokenizer.encode(placeholder);
    } catch {
      // an encoding failure reads as "no such token"
    }
    if (ids.length !== 1) {
      throw new RunModelError(
        `model.${section}: the tokenizer of model.from (${path.join(dir, 'tokenizer.json')}) has no single ${placeholder} token to place the ${section === 'vision' ? 'image' : 'audio'} embeddings at ` +
        `(it encodes ${JSON.stringify(placeholder)} as ${ids.length} tokens ${JSON.stringify(ids)}): ` +
        `add it with model.add_special_tokens: ${JSON.stringify([...(config.model.add_special_tokens ?? []), placeholder])} (its embedding starts at the mean of the vocabulary's, untrained), use a model whose tokenizer has ${placeholder} as one token, or remove model.${section}`,
      );
    }
  }
}

/**
 * The encoders' weights beside the language model's: a pretrained audio encoder's from its import
 * (model.audio.from, `audioDir`), the rest freshly initialised (seeded by the run's seed, the same in
 * every worker: projectors, new encoders). Checkpoints of the language model hold no encoders.
 */
function withFreshEncoders(model: ModelConfig, seed: number, base: () => Promise<PolicyWeights>, audioDir?: string): () => Promise<PolicyWeights> {
  // A value head (PPO's critic) is no part of a pretrained checkpoint either: fresh, like the encoders.
  const pretrained = (name: string) => audioDir !== undefined && parameterPart(name) === 'audio_encoder';
  const spec = parameterSpec(model).filter((p) => !pretrained(p.name) && (parameterPart(p.name) !== 'language_model' || p.name.startsWith('value_head.')));
  if (spec.length === 0 && audioDir === undefined) return base;
  let encoders: PolicyWeights | undefined;
  return async () => {
    encoders ??= { ...initWeights(model, seed, spec), ...(audioDir !== undefined && model.audio ? await loadAudioEncoderWeights(audioDir, model.audio.maxFrames) : {}) };
    return { ...(await base()), ...encoders };
  };
}

/** model.audio.from resolved (imported on first use) and its shape, for the model config. */
async function pretrainedAudioEncoder(config: RunConfig, home: string, log?: (line: string) => void): Promise<{ dir: string; shape: PretrainedAudioShape } | undefined> {
  const from = config.model.audio?.from;
  if (from === undefined) return undefined;
  try {
    const dir = await resolveAudioEncoder(from, { home, log });
    const info = await readAudioEncoderInfo(dir);
    const maxFrames = audioWindowFrames(config.model.audio);
    if (maxFrames !== undefined && maxFrames > info.maxFrames) throw new Error(`the window of ${maxFrames} log-mel frames is over the ${info.maxFrames} (${info.maxFrames / 100} s) the encoder's position table reaches: lower model.audio.window_s`);
    return { dir, shape: { nMels: info.nMels, dModel: info.dModel, nLayers: info.nLayers, nHeads: info.nHeads, dFF: info.dFF, gelu: info.gelu } };
  } catch (err) {
    throw new RunModelError(`model.audio.from: ${(err as Error).message}`);
  }
}

/** Resolves the run's model and task; throws RunModelError naming the field for anything unusable. */
export async function loadRunPolicy(config: RunConfig, options: { home?: string; log?: (line: string) => void } = {}): Promise<RunPolicy> {
  const policy = await loadPolicyModel(config, options);
  // algorithm.advantage "gae": the policy carries PPO's value head (training/critic-step.ts).
  if (config.algorithm.advantage !== 'gae') return policy;
  const model = { ...policy.model, valueHead: true };
  return { ...policy, model, ...(policy.modelDir ? { baseWeights: withFreshEncoders(model, config.seed, baseWeightsOf(policy.modelDir, runContextLength(config.model), model), policy.audioEncoderDir) } : {}) };
}

async function loadPolicyModel(config: RunConfig, options: { home?: string; log?: (line: string) => void }): Promise<RunPolicy> {
  if (config.model.from === undefined) {
    const task = await loadTask(config.task);
    const tokenizer = task.tokenizer();
    return { model: policyModelConfig(config.model, tokenizer.vocabSize, task), task };
  }
  let dir: string;
  let hf: Awaited<ReturnType<typeof readHfModelConfig>>;
  try {
    dir = await resolveModelSource(config.model.from, { home: options.home ?? relaxEnvironment().home, log: options.log });
    hf = await readHfModelConfig(dir, { contextLength: runContextLength(config.model) });
  } catch (err) {
    throw new RunModelError(`model.from: ${(err as Error).message}`);
  }
  let model = parseModelConfig({
    ...hf.config,
    ...(config.lora ? { lora: { rank: config.lora.rank, alpha: config.lora.alpha, targets: config.lora.target_modules.map((m) => LORA_TARGET_OF[m]), ...(config.lora.init !== 'peft' ? { init: config.lora.init } : {}) } } : {}),
  });
  let tokenizer: HfTokenizer;
  let chat: ChatTemplate | undefined;
  try {
    tokenizer = HfTokenizer.fromFile(path.join(dir, 'tokenizer.json'), {}, { addSpecialTokens: config.model.add_special_tokens });
    chat = hf.chatTemplate ? new ChatTemplate(hf.chatTemplate, hf.specialTokens) : undefined;
  } catch (err) {
    throw new RunModelError(`model.from: ${(err as Error).message}`);
  }
  const ownTokens = tokenizer.vocabSize - newTokenCount(tokenizer.addedSpecialTokens);
  if (ownTokens > model.vocabSize) throw new RunModelError(`model.from: the tokenizer has ${ownTokens} tokens but the model only ${model.vocabSize} embeddings`);
  // Added tokens past the embedding grow it (a padded embedding may already have rows for them).
  model = { ...model, vocabSize: Math.max(model.vocabSize, tokenizer.vocabSize) };
  checkPlaceholderTokens(config, tokenizer, dir);
  const stopStrings = [...tokenizer.stopIds].map((id) => tokenizer.decode([id]));
  let task: Task;
  if (config.data) {
    try {
      task = await loadDatasetTask(config.data, {
        tokenizer,
        renderChat: (messages) => {
          if (!chat) throw new Error(`the model in ${dir} has no chat template: set data.prompt_format to "raw"`);
          return chat.render(messages, { addGenerationPrompt: true });
        },
        stopStrings,
      });
    } catch (err) {
      throw new RunModelError(`data: ${(err as Error).message}`);
    }
  } else {
    task = await loadTask(config.task);
    if (task.tokenizer().vocabSize > model.vocabSize) throw new RunModelError(`task: ${config.task} has its own ${task.tokenizer().vocabSize}-token vocabulary, which does not fit the pretrained model: give the run a data section (data.train) or a task module that uses the model's tokenizer`);
  }
  const mediaKinds = 'mediaKinds' in task ? (task.mediaKinds as readonly ('image' | 'audio')[]) : [];
  for (const kind of mediaKinds) {
    const { section, placeholder } = ENCODER_OF[kind];
    if (!config.model[section]) {
      throw new RunModelError(`model.${section}: the dataset's prompts have ${kind === 'image' ? 'images' : 'audio clips'}, and the model has no ${section} encoder: add model.${section} (it needs a tokenizer with a single ${placeholder} token), or drop the ${kind === 'image' ? 'images' : 'clips'} from the data`);
    }
  }
  const audio = await pretrainedAudioEncoder(config, options.home ?? relaxEnvironment().home, options.log);
  if (config.model.vision || config.model.audio) {
    try {
      model = parseModelConfig({ ...model, ...encoderConfigs(config.model, task, audio?.shape) });
    } catch (err) {
      const message = (err as Error).message;
      throw new RunModelError(message.startsWith('model.') ? message : `model: ${message}`);
    }
  }
  const addedTokens = tokenizer.addedSpecialTokens.length ? { addedTokens: tokenizer.addedSpecialTokens } : {};
  return {
    model,
    task,
    modelDir: dir,
    baseWeights: withFreshEncoders(model, config.seed, baseWeightsOf(dir, runContextLength(config.model), model), audio?.dir),
    ...addedTokens,
    ...(audio ? { audioEncoderDir: audio.dir } : {}),
  };
}

/** Policy version 0 of a pretrained model: its own weights, or with LoRA fresh adapters (B = 0: the base model exactly). */
export async function initialPolicyWeights(policy: RunPolicy, seed: number): Promise<PolicyWeights> {
  if (!policy.baseWeights) return initWeights(policy.model, seed);
  if (policy.model.audio?.freeze) {
    // A frozen pretrained encoder: version 0 is what trains, from the base where it has it (the LM
    // without LoRA, the fresh projector), else fresh (LoRA adapters).
    const base = await policy.baseWeights();
    const trainable = trainableParameterSpec(policy.model);
    const fresh = initWeights(policy.model, seed, trainable.filter((p) => !(p.name in base)));
    return Object.fromEntries(trainable.map((p) => [p.name, base[p.name] ?? fresh[p.name]]));
  }
  if (policy.model.lora) return initWeights(policy.model, seed, loraParameterSpec(policy.model));
  return policy.baseWeights();
}

/** A version's weights completed with the frozen base weights (LoRA), as the trainer is built from. */
export async function withBaseWeights(policy: RunPolicy, weights: PolicyWeights): Promise<PolicyWeights> {
  if (!hasFrozenParameters(policy.model) || !policy.baseWeights) return weights;
  return { ...(await policy.baseWeights()), ...weights };
}
