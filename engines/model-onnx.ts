// The model's ops as an ONNX graph builder: running engines/model.ts's forward() with these ops
// emits the generation graphs instead of computing. Weights are graph INPUTS, not initializers, so a
// session built once serves every policy version: the next run simply feeds the new tensors.
// The prefill graph optionally takes image / audio inputs (the KV cache then holds the prompt with its
// media, so decode graphs never do); buildForwardGraph is the full-sequence graph with them (no cache).
import { encodeOnnxModel, OnnxDataType, type OnnxAttributeValue, type OnnxGraph, type OnnxNode, type OnnxTensor, type OnnxValueInfo } from './onnx-proto';
import { attentionDims, forward, geluTanh, parameterSpec, type LayerCache, type MediaInputs, type ModelConfig, type TensorOps } from './model';

/** Opset 17: the first with LayerNormalization. */
export const ONNX_OPSET = 17;

function int64Tensor(values: number[]): OnnxTensor {
  return { dims: [values.length], dataType: OnnxDataType.INT64, rawData: new Uint8Array(BigInt64Array.from(values.map(BigInt)).buffer) };
}

function floatScalar(value: number): OnnxTensor {
  return { dims: [], dataType: OnnxDataType.FLOAT, rawData: new Uint8Array(Float32Array.of(value).buffer) };
}

/** Emits nodes; a tensor is the name of the graph value that holds it. */
export class OnnxGraphBuilder implements TensorOps<string> {
  readonly nodes: OnnxNode[] = [];
  private counter = 0;
  private readonly constants = new Map<string, string>();

  private fresh(hint: string): string {
    return `${hint}_${this.counter++}`;
  }

  node(opType: string, inputs: string[], attributes: Record<string, OnnxAttributeValue> = {}, outputCount = 1): string[] {
    const name = this.fresh(opType);
    const outputs = Array.from({ length: outputCount }, (_, i) => `${name}_out${i}`);
    this.nodes.push({ opType, inputs, outputs, name, attributes });
    return outputs;
  }

  private one(opType: string, inputs: string[], attributes: Record<string, OnnxAttributeValue> = {}): string {
    return this.node(opType, inputs, attributes)[0];
  }

  private constant(key: string, value: OnnxTensor): string {
    const existing = this.constants.get(key);
    if (existing) return existing;
    const out = this.one('Constant', [], { value: { kind: 'tensor', value } });
    this.constants.set(key, out);
    return out;
  }

  private ints(values: number[]): string {
    return this.constant(`i64:${values.join(',')}`, int64Tensor(values));
  }

  private float(value: number): string {
    return this.constant(`f32:${value}`, floatScalar(value));
  }

  /**
   * Gives value `from` the graph-visible name `to` (for graph outputs): its producer's output is
   * renamed in place, since an Identity node copies its tensor on every run (for the KV cache that
   * was 5% of a SmolLM2 decode step). A graph input has no producer and gets an Identity.
   */
  rename(from: string, to: string): void {
    if (!this.nodes.some((n) => n.outputs.includes(from))) {
      this.nodes.push({ opType: 'Identity', inputs: [from], outputs: [to], name: this.fresh('Identity'), attributes: {} });
      return;
    }
    for (const n of this.nodes) {
      for (const names of [n.inputs, n.outputs]) for (let i = 0; i < names.length; i++) if (names[i] === from) names[i] = to;
    }
  }

  embed(table: string, ids: string): string {
    return this.one('Gather', [table, ids], { axis: { kind: 'int', value: 0 } });
  }
  linear(x: string, weight: string, bias?: string): string {
    const y = this.one('MatMul', [x, weight]);
    return bias ? this.one('Add', [y, bias]) : y;
  }
  matmul(a: string, b: string): string {
    return this.one('MatMul', [a, b]);
  }
  add(a: string, b: string): string {
    return this.one('Add', [a, b]);
  }
  mul(a: string, b: string): string {
    return this.one('Mul', [a, b]);
  }
  scale(x: string, s: number): string {
    return this.one('Mul', [x, this.float(s)]);
  }
  shift(x: string, s: number): string {
    return this.one('Add', [x, this.float(s)]);
  }
  tanh(x: string): string {
    return this.one('Tanh', [x]);
  }
  erf(x: string): string {
    return this.one('Erf', [x]);
  }
  softmax(x: string): string {
    return this.one('Softmax', [x], { axis: { kind: 'int', value: -1 } });
  }
  layerNorm(x: string, gamma: string, beta: string, eps: number): string {
    return this.one('LayerNormalization', [x, gamma, beta], { axis: { kind: 'int', value: -1 }, epsilon: { kind: 'float', value: eps } });
  }
  rmsNorm(x: string, gamma: string, eps: number): string {
    const meanSquare = this.one('ReduceMean', [this.one('Mul', [x, x])], { axes: { kind: 'ints', value: [-1] }, keepdims: { kind: 'int', value: 1 } });
    const rms = this.one('Sqrt', [this.one('Add', [meanSquare, this.float(eps)])]);
    return this.one('Mul', [this.one('Div', [x, rms]), gamma]);
  }
  gelu(x: string): string {
    return geluTanh(this, x);
  }

  sigmoid(x: string): string {
    return this.one('Sigmoid', [x]);
  }
  linearTransposed(x: string, weight: string): string {
    // ONNX Runtime fuses Transpose + MatMul into one FusedMatMul with transB (no copy of the weight).
    return this.one('MatMul', [x, this.one('Transpose', [weight], { perm: { kind: 'ints', value: [1, 0] } })]);
  }
  splitSizes(x: string, sizes: number[]): string[] {
    return this.node('Split', [x, this.ints(sizes)], { axis: { kind: 'int', value: -1 } }, sizes.length);
  }

  split(x: string, parts: number): string[] {
    // Opset 17's Split takes the chunk sizes as an input; the last axis size is only known at run
    // time, so compute it: size = Shape(x)[-1] / parts.
    const last = this.one('Slice', [this.one('Shape', [x]), this.ints([-1]), this.ints([Number.MAX_SAFE_INTEGER])]);
    const chunk = this.one('Div', [last, this.ints([parts])]);
    const sizes = this.one('Tile', [chunk, this.ints([parts])]);
    return this.node('Split', [x, sizes], { axis: { kind: 'int', value: -1 } }, parts);
  }
  cachedAttention(q: string, pastKT: string, pastV: string, kT: string, v: string, bias?: string): string {
    // One softmax over [cached keys, new keys], split back at the cache's length (known at run time).
    const scores = this.concat([this.matmul(q, pastKT), this.matmul(q, kT)], 3);
    const probs = this.softmax(bias === undefined ? scores : this.add(scores, bias));
    const lengthOf = (keys: string) => this.one('Slice', [this.one('Shape', [keys]), this.ints([3]), this.ints([4])]);
    const [cached, fresh] = this.node('Split', [probs, this.concat([lengthOf(pastKT), lengthOf(kT)], 0)], { axis: { kind: 'int', value: -1 } }, 2);
    return this.add(this.matmul(cached, pastV), this.matmul(fresh, v));
  }
  reshape(x: string, shape: number[]): string {
    return this.one('Reshape', [x, this.ints(shape)]);
  }
  transpose(x: string, perm: number[]): string {
    return this.one('Transpose', [x], { perm: { kind: 'ints', value: perm } });
  }
  concat(xs: string[], axis: number): string {
    return this.one('Concat', xs, { axis: { kind: 'int', value: axis } });
  }
  positionsFrom(x: string, start: number): string {
    return this.one('Slice', [x, this.ints([start]), this.ints([Number.MAX_SAFE_INTEGER]), this.ints([1])]);
  }
  lastPosition(x: string): string {
    return this.one('Slice', [x, this.ints([-1]), this.ints([Number.MAX_SAFE_INTEGER]), this.ints([1])]);
  }
  leadingRows(table: string, x: string): string {
    const n = this.one('Slice', [this.one('Shape', [x]), this.ints([1]), this.ints([2])]);
    return this.one('Slice', [table, this.ints([0]), n, this.ints([0])]);
  }
  conv1d(x: string, weight: string, bias: string, stride: number, padding: number): string {
    // ONNX Conv is channels-first with weights [Cout, Cin, k]: transpose the input, the weight
    // (ours is [k, Cin, Cout]) and the output; the transposes are on graph inputs, no constants.
    const w = this.transpose(weight, [2, 1, 0]);
    const y = this.one('Conv', [this.transpose(x, [0, 2, 1]), w, bias], { strides: { kind: 'ints', value: [stride] }, pads: { kind: 'ints', value: [padding, padding] } });
    return this.transpose(y, [0, 2, 1]);
  }
}

/** The extra graph input of a tied model: the token embedding transposed, [D, V]. */
export const TIED_HEAD = 'lm_head.weight';

/** Whether the generation graph takes the tied unembedding as its own (transposed) input. */
export function tiedHead(cfg: ModelConfig): boolean {
  return cfg.architecture === 'llama' && cfg.tieEmbeddings === true;
}

/** Graph input/output names shared by the builder and the rollout engine. */
export const GRAPH_NAMES = {
  tokens: 'tokens',
  positions: 'positions',
  ropeCos: 'rope_cos',
  ropeSin: 'rope_sin',
  attentionBias: 'attention_bias',
  logits: 'logits',
  /** exp(logits - max over the vocabulary), per row. */
  expLogits: 'exp_logits',
  /** The max of the logits over the vocabulary and the sum of exp_logits, [batch, 1, 1]: log-normalizer = max + log(sum). */
  logitMax: 'logit_max',
  expSum: 'exp_sum',
  pastKey: (l: number) => `past_key_${l}`,
  pastValue: (l: number) => `past_value_${l}`,
  presentKey: (l: number) => `present_key_${l}`,
  presentValue: (l: number) => `present_value_${l}`,
  images: 'images',
  audio: 'audio',
  embeddingIndex: 'embedding_index',
};

/** Which media a graph takes as inputs. */
export interface GraphMedia {
  images?: boolean;
  audio?: boolean;
}

/**
 * The media inputs of a graph, appended to `inputs`: images [nImages, nPatches, p*p*3], audio
 * [nClips, nFrames, nMels], and with either embedding_index [batch, new] int32 (MediaInputs).
 * Returns forward()'s `media` argument, or undefined for a text-only graph.
 */
function addMediaInputs(cfg: ModelConfig, media: GraphMedia, inputs: OnnxValueInfo[]): MediaInputs<string> | undefined {
  const F = OnnxDataType.FLOAT;
  if (media.images) {
    if (!cfg.vision) throw new Error('a graph with images needs a vision encoder in the model config');
    inputs.push({ name: GRAPH_NAMES.images, dataType: F, shape: ['images', 'patches', cfg.vision.patchSize * cfg.vision.patchSize * 3] });
  }
  if (media.audio) {
    if (!cfg.audio) throw new Error('a graph with audio needs an audio encoder in the model config');
    inputs.push({ name: GRAPH_NAMES.audio, dataType: F, shape: ['clips', 'frames', cfg.audio.nMels] });
  }
  if (!media.images && !media.audio) return undefined;
  inputs.push({ name: GRAPH_NAMES.embeddingIndex, dataType: OnnxDataType.INT32, shape: ['batch', 'new'] });
  return { embeddingIndex: GRAPH_NAMES.embeddingIndex, ...(media.images ? { images: GRAPH_NAMES.images } : {}), ...(media.audio ? { audio: GRAPH_NAMES.audio } : {}) };
}

/**
 * The generation graph. Inputs: every weight (by parameter name), tokens and positions [batch, new]
 * int32, attention_bias [batch, 1, new, past + new] float, for llama models rope_cos / rope_sin
 * [batch, 1, new, Dh] (engines/model.ts ropeTables), and with `withPast` the cache
 * past_key_l [batch, Hkv, Dh, past] / past_value_l [batch, Hkv, past, Dh]. Outputs: logits of the
 * last position [batch, 1, V], exp_logits (exp(logits - their max), same shape), logit_max and
 * exp_sum [batch, 1, 1] (that max and the sum of exp_logits), and present_key_l / present_value_l
 * of the new positions only: the caller appends them to its cache (engines/rollout-cache.ts), and
 * a past buffer may hold unused slots as long as attention_bias masks them.
 * Prefill is withPast = false (the prompt), decode is withPast = true (one token per step). A prefill
 * graph with `media` also takes those media inputs (addMediaInputs) and places their embeddings at
 * the prompt's placeholder positions; decode graphs take none (the cache holds the prompt).
 * A decode graph fed an empty past ([batch, Hkv, Dh, 0]) is a prefill graph.
 *
 * Weights named in `constants` are graph initializers instead of inputs: ONNX Runtime then prepacks
 * the MatMul operands once per session instead of on every run (a SmolLM2 decode step at batch 8:
 * 92 -> 52 ms on 2 threads), at the price of a new session when they change (a LoRA base: never).
 */
export function buildGenerationGraph(cfg: ModelConfig, withPast: boolean, media: GraphMedia = {}, constants: Readonly<Record<string, Float32Array>> = {}): OnnxGraph {
  if (withPast && (media.images || media.audio)) throw new Error('a decode graph (withPast) takes no media: the prefill graph encodes them into the key/value cache');
  const b = new OnnxGraphBuilder();
  const { Hkv: H, Dh } = attentionDims(cfg);
  const F = OnnxDataType.FLOAT;
  const llama = cfg.architecture === 'llama';
  const inputs: OnnxValueInfo[] = parameterSpec(cfg).map((p) => ({ name: p.name, dataType: F, shape: p.shape }));
  // A tied unembedding is fed once more, transposed (engines/rollout.ts does it once per weight
  // set): a per-step transpose of a [V, D] embedding costs more than a decode step's matmuls.
  if (tiedHead(cfg)) inputs.push({ name: TIED_HEAD, dataType: F, shape: [cfg.dModel, cfg.vocabSize] });
  inputs.push(
    { name: GRAPH_NAMES.tokens, dataType: OnnxDataType.INT32, shape: ['batch', 'new'] },
    { name: GRAPH_NAMES.positions, dataType: OnnxDataType.INT32, shape: ['batch', 'new'] },
    { name: GRAPH_NAMES.attentionBias, dataType: F, shape: ['batch', 1, 'new', 'total'] },
  );
  if (llama) {
    inputs.push({ name: GRAPH_NAMES.ropeCos, dataType: F, shape: ['batch', 1, 'new', Dh] }, { name: GRAPH_NAMES.ropeSin, dataType: F, shape: ['batch', 1, 'new', Dh] });
  }
  let past: LayerCache<string>[] | undefined;
  if (withPast) {
    past = [];
    for (let l = 0; l < cfg.nLayers; l++) {
      inputs.push({ name: GRAPH_NAMES.pastKey(l), dataType: F, shape: ['batch', H, Dh, 'past'] });
      inputs.push({ name: GRAPH_NAMES.pastValue(l), dataType: F, shape: ['batch', H, 'past', Dh] });
      past.push({ k: GRAPH_NAMES.pastKey(l), v: GRAPH_NAMES.pastValue(l) });
    }
  }
  const mediaInputs = addMediaInputs(cfg, media, inputs);
  const weights: Record<string, string> = Object.fromEntries(parameterSpec(cfg).map((p) => [p.name, p.name]));
  if (tiedHead(cfg)) weights[TIED_HEAD] = TIED_HEAD;
  const out = forward(b, cfg, weights, {
    tokens: GRAPH_NAMES.tokens,
    positions: GRAPH_NAMES.positions,
    attentionBias: GRAPH_NAMES.attentionBias,
    ...(llama ? { rope: { cos: GRAPH_NAMES.ropeCos, sin: GRAPH_NAMES.ropeSin } } : {}),
    past,
    lastPositionOnly: true,
    ...(mediaInputs ? { media: mediaInputs } : {}),
  });
  b.rename(out.logits, GRAPH_NAMES.logits);
  // exp(logits - max) as well: the rollout engine's log-probs and temperature-1 sampling need only
  // its sum and a running subtraction, where a float64 log-softmax in JS cost ~1 ms per row for a
  // 49,152-token vocabulary (as long as a SmolLM2 decode step's matmuls at batch 32 / 4 rows).
  // The max and the sum too: a JS pass over 49,152 logits per row cost ~0.45 ms (14 ms of a batch-32 step).
  b.nodes.push({ opType: 'ReduceMax', inputs: [GRAPH_NAMES.logits], outputs: [GRAPH_NAMES.logitMax], name: 'logit_max', attributes: { axes: { kind: 'ints', value: [-1] }, keepdims: { kind: 'int', value: 1 } } });
  b.nodes.push({ opType: 'Exp', inputs: [b.node('Sub', [GRAPH_NAMES.logits, GRAPH_NAMES.logitMax])[0]], outputs: [GRAPH_NAMES.expLogits], name: 'exp_logits', attributes: {} });
  b.nodes.push({ opType: 'ReduceSum', inputs: [GRAPH_NAMES.expLogits, b.node('Constant', [], { value: { kind: 'tensor', value: int64Tensor([-1]) } })[0]], outputs: [GRAPH_NAMES.expSum], name: 'exp_sum', attributes: { keepdims: { kind: 'int', value: 1 } } });
  const outputs: OnnxValueInfo[] = [
    { name: GRAPH_NAMES.logits, dataType: F, shape: ['batch', 1, cfg.vocabSize] },
    { name: GRAPH_NAMES.expLogits, dataType: F, shape: ['batch', 1, cfg.vocabSize] },
    { name: GRAPH_NAMES.logitMax, dataType: F, shape: ['batch', 1, 1] },
    { name: GRAPH_NAMES.expSum, dataType: F, shape: ['batch', 1, 1] },
  ];
  out.present.forEach((c, l) => {
    b.rename(c.k, GRAPH_NAMES.presentKey(l));
    b.rename(c.v, GRAPH_NAMES.presentValue(l));
    outputs.push({ name: GRAPH_NAMES.presentKey(l), dataType: F, shape: ['batch', H, Dh, 'new'] });
    outputs.push({ name: GRAPH_NAMES.presentValue(l), dataType: F, shape: ['batch', H, 'new', Dh] });
  });
  for (const name of Object.keys(constants)) if (!inputs.some((i) => i.name === name)) throw new Error(`constant "${name}" is not a weight of this model`);
  const initializers = inputs
    .filter((i) => constants[i.name] !== undefined)
    .map((i) => {
      const values = constants[i.name];
      const dims = i.shape as number[];
      if (values.length !== dims.reduce((a, d) => a * d, 1)) throw new Error(`constant "${i.name}" has ${values.length} values, expected shape [${dims}]`);
      return { name: i.name, dims, dataType: F, rawData: new Uint8Array(values.buffer, values.byteOffset, values.byteLength) };
    });
  return {
    name: withPast ? 'relax_policy_decode' : 'relax_policy_prefill',
    nodes: b.nodes,
    inputs: inputs.filter((i) => constants[i.name] === undefined),
    outputs,
    initializers,
  };
}

export function buildGenerationModel(cfg: ModelConfig, withPast: boolean, media: GraphMedia = {}, constants: Readonly<Record<string, Float32Array>> = {}): Uint8Array {
  return encodeOnnxModel(buildGenerationGraph(cfg, withPast, media, constants), ONNX_OPSET);
}

/**
 * The full-sequence forward graph with media (no KV cache): every weight, tokens / positions
 * [batch, T] int32, attention_bias [batch, 1, T, T], rope_cos / rope_sin for llama, with
 * `media.images` images [nImages, nPatches, p*p*3], with `media.audio` audio [nClips, nFrames,
 * nMels], and with either embedding_index [batch, T] int32 (MediaInputs). Output: logits [batch, T, V].
 * For generation, buildGenerationGraph's prefill graph takes the same media inputs.
 */
export function buildForwardGraph(cfg: ModelConfig, media: GraphMedia = {}): OnnxGraph {
  const b = new OnnxGraphBuilder();
  const F = OnnxDataType.FLOAT;
  const I = OnnxDataType.INT32;
  const { Dh } = attentionDims(cfg);
  const llama = cfg.architecture === 'llama';
  const inputs: OnnxValueInfo[] = parameterSpec(cfg).map((p) => ({ name: p.name, dataType: F, shape: p.shape }));
  inputs.push(
    { name: GRAPH_NAMES.tokens, dataType: I, shape: ['batch', 'new'] },
    { name: GRAPH_NAMES.positions, dataType: I, shape: ['batch', 'new'] },
    { name: GRAPH_NAMES.attentionBias, dataType: F, shape: ['batch', 1, 'new', 'new'] },
  );
  if (llama) inputs.push({ name: GRAPH_NAMES.ropeCos, dataType: F, shape: ['batch', 1, 'new', Dh] }, { name: GRAPH_NAMES.ropeSin, dataType: F, shape: ['batch', 1, 'new', Dh] });
  const mediaInputs = addMediaInputs(cfg, media, inputs);
  const weights: Record<string, string> = Object.fromEntries(parameterSpec(cfg).map((p) => [p.name, p.name]));
  const out = forward(b, cfg, weights, {
    tokens: GRAPH_NAMES.tokens,
    positions: GRAPH_NAMES.positions,
    attentionBias: GRAPH_NAMES.attentionBias,
    ...(llama ? { rope: { cos: GRAPH_NAMES.ropeCos, sin: GRAPH_NAMES.ropeSin } } : {}),
    ...(mediaInputs ? { media: mediaInputs } : {}),
  });
  b.rename(out.logits, GRAPH_NAMES.logits);
  return { name: 'relax_policy_forward', nodes: b.nodes, inputs, outputs: [{ name: GRAPH_NAMES.logits, dataType: F, shape: ['batch', 'new', cfg.vocabSize] }] };
}

export function buildForwardModel(cfg: ModelConfig, media: GraphMedia = {}): Uint8Array {
  return encodeOnnxModel(buildForwardGraph(cfg, media), ONNX_OPSET);
}
