// AdamW on native TensorFlow (the tfjs-node backends) through TensorFlow's own fused kernel,
// ResourceApplyAdam: one pass over each parameter updates both moments and the weight, where the
// same update in tfjs ops (engines/adamw.ts) is about twelve passes, each a temporary of the
// bucket's size. Measured on 4M elements, 2 cores: 5.6 ms a step vs 40 ms (docs/results.md).
// The kernel updates resource variables, which tfjs has no API for: the parameter, m and v are
// TensorFlow resource variables made with VarHandleOp and driven through the backend's
// executeSingleOutput / executeMultipleOutputs (the ops tfjs-node's own kernels call). A handle is
// anonymous (TensorFlow's ANONYMOUS_NAME): the variable is freed with its last handle.
//
// Per parameter and step: the tfjs variable's tensor is assigned to the resource (a shared buffer;
// with decoupled decay, p (1 - lr wd) is assigned instead), ResourceApplyAdam updates it (copying
// the buffer first when the tfjs variable still shares it), and the result is read back into the
// tfjs variable the model reads. TensorFlow's Adam is lr_t = lr sqrt(1 - b2^t) / (1 - b1^t),
// p -= lr_t m / (sqrt(v) + eps'): with eps' = eps sqrt(1 - b2^t) it is the textbook update
// lr m_hat / (sqrt(v_hat) + eps) that BucketedAdamW and PyTorch compute.
import * as tf from '@tensorflow/tfjs';
import { BucketedAdamW, groupLearningRate, type AdamWOptimizer, type AdamWOptions, type AdamWParameter, type GroupLearningRates } from './adamw';

/** TensorFlow's ResourceHandle::ANONYMOUS_NAME: a variable owned by its handles, not by a resource manager. */
const ANONYMOUS_NAME = 'cd2c89b7-88b7-44c8-ad83-06c2a9158347';

interface NativeBackend {
  binding: Record<string, number>;
  executeSingleOutput(name: string, attrs: unknown[], inputs: tf.Tensor[]): tf.Tensor;
  executeMultipleOutputs(name: string, attrs: unknown[], inputs: tf.Tensor[], outputs: number): tf.Tensor[];
}

/** The native TensorFlow backend, when it is the active one (and has the ops this needs). */
export function nativeBackend(): NativeBackend | undefined {
  if (tf.getBackend() !== 'tensorflow') return undefined;
  const backend = tf.backend() as unknown as Partial<NativeBackend>;
  return backend.binding && backend.executeSingleOutput && backend.executeMultipleOutputs ? (backend as NativeBackend) : undefined;
}

/** TensorFlow resource variables and the ops on them, through a native backend. */
class ResourceOps {
  constructor(private readonly be: NativeBackend) {}

  private type(name: string) {
    return { name, type: this.be.binding.TF_ATTR_TYPE, value: this.be.binding.TF_FLOAT };
  }

  /** A new float32 variable of `shape`, uninitialized; returns its handle (a tfjs string tensor). */
  create(shape: number[]): tf.Tensor {
    const b = this.be.binding;
    return this.be.executeSingleOutput(
      'VarHandleOp',
      [
        { name: 'container', type: b.TF_ATTR_STRING, value: '' },
        { name: 'shared_name', type: b.TF_ATTR_STRING, value: ANONYMOUS_NAME },
        this.type('dtype'),
        { name: 'shape', type: b.TF_ATTR_SHAPE, value: shape },
      ],
      [],
    );
  }

  assign(handle: tf.Tensor, value: tf.Tensor): void {
    this.be.executeMultipleOutputs('AssignVariableOp', [this.type('dtype')], [handle, value], 0);
  }

  read(handle: tf.Tensor): tf.Tensor {
    return this.be.executeSingleOutput('ReadVariableOp', [this.type('dtype')], [handle]);
  }

  /** ResourceApplyAdam: scalars are beta1^t, beta2^t, lr, beta1, beta2, epsilon. */
  applyAdam(p: tf.Tensor, m: tf.Tensor, v: tf.Tensor, scalars: tf.Tensor[], grad: tf.Tensor): void {
    const b = this.be.binding;
    const attrs = [this.type('T'), { name: 'use_locking', type: b.TF_ATTR_BOOL, value: false }, { name: 'use_nesterov', type: b.TF_ATTR_BOOL, value: false }];
    this.be.executeMultipleOutputs('ResourceApplyAdam', attrs, [p, m, v, ...scalars, grad], 0);
  }

  /** sum(x^2) / 2 in one pass (TensorFlow's L2Loss, no temporary). */
  halfSumOfSquares(x: tf.Tensor): tf.Tensor {
    return this.be.executeSingleOutput('L2Loss', [this.type('T')], [x]);
  }
}

interface Slot {
  param: AdamWParameter;
  /** Resource variables: the parameter's working copy, and its moments (made on the first step). */
  p?: tf.Tensor;
  m?: tf.Tensor;
  v?: tf.Tensor;
}

/** AdamW with TensorFlow's fused Adam kernel, one parameter at a time (see the file's first comment). */
export class FusedAdamW implements AdamWOptimizer {
  private readonly ops: ResourceOps;
  private readonly slots: Slot[];
  private readonly options: Required<AdamWOptions>;

  constructor(params: readonly AdamWParameter[], options: AdamWOptions, backend: NativeBackend) {
    this.ops = new ResourceOps(backend);
    this.options = { beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0, ...options };
    this.slots = params.map((param) => ({ param }));
  }

  /** The gradients as they are (one per parameter, constructor order); they are the optimizer's now. */
  prepare(grads: readonly tf.Tensor[]): tf.Tensor[] {
    return [...grads];
  }

  async sumsOfSquares(prepared: readonly tf.Tensor[]): Promise<Float32Array> {
    const sums = tf.tidy(() => tf.mul(tf.stack(prepared.map((g) => this.ops.halfSumOfSquares(g))), tf.scalar(2)));
    const values = (await sums.data()) as Float32Array;
    sums.dispose();
    return values;
  }

  async nonFiniteParameter(_prepared: readonly tf.Tensor[], index: number): Promise<string> {
    return this.slots[index].param.name;
  }

  apply(prepared: readonly tf.Tensor[], step: number, clipScale: number, stepLr: number, groupLr: GroupLearningRates = {}): void {
    const { beta1, beta2, eps, weightDecay } = this.options;
    // The kernel's scalars and the decay factor, one set per learning rate in use (parameter groups).
    const made: tf.Tensor[] = [];
    const perLr = new Map<number, { scalars: tf.Tensor[]; decay?: tf.Tensor }>();
    const scalarsFor = (lr: number) => {
      let s = perLr.get(lr);
      if (!s) {
        const scalars = [beta1 ** step, beta2 ** step, lr, beta1, beta2, eps * Math.sqrt(1 - beta2 ** step)].map((x) => tf.scalar(x));
        s = { scalars, decay: weightDecay > 0 ? tf.scalar(1 - lr * weightDecay) : undefined };
        made.push(...scalars, ...(s.decay ? [s.decay] : []));
        perLr.set(lr, s);
      }
      return s;
    };
    const clip = clipScale < 1 ? tf.scalar(clipScale) : undefined;
    try {
      this.slots.forEach((slot, i) => {
        const { scalars, decay } = scalarsFor(groupLearningRate(stepLr, groupLr, slot.param.lrGroup));
        const variable = slot.param.variable;
        const shape = variable.shape as number[];
        slot.p ??= this.ops.create(shape);
        if (!slot.m || !slot.v) {
          slot.m = this.zeroed(shape);
          slot.v = this.zeroed(shape);
        }
        // Decoupled decay p (1 - lr wd) as the value the kernel updates: it is the resource's alone,
        // so the kernel updates it in place (the undecayed variable's buffer is copied first).
        const start = decay && slot.param.decayed ? tf.mul(variable, decay) : undefined;
        this.ops.assign(slot.p, start ?? variable);
        start?.dispose();
        const grad = clip ? tf.mul(prepared[i], clip) : prepared[i];
        this.ops.applyAdam(slot.p, slot.m, slot.v, scalars, grad);
        if (grad !== prepared[i]) grad.dispose();
        prepared[i].dispose();
        const next = this.ops.read(slot.p);
        variable.assign(next);
        next.dispose();
      });
    } finally {
      tf.dispose([...made, ...(clip ? [clip] : [])]);
    }
  }

  private zeroed(shape: number[]): tf.Tensor {
    const handle = this.ops.create(shape);
    const zeros = tf.zeros(shape);
    this.ops.assign(handle, zeros);
    zeros.dispose();
    return handle;
  }

  async exportMoments(): Promise<Array<{ name: string; shape: number[]; m: Float32Array; v: Float32Array }>> {
    const out: Array<{ name: string; shape: number[]; m: Float32Array; v: Float32Array }> = [];
    for (const slot of this.slots) {
      if (!slot.m || !slot.v) continue;
      const [m, v] = [this.ops.read(slot.m), this.ops.read(slot.v)];
      out.push({ name: slot.param.name, shape: slot.param.variable.shape as number[], m: (await m.data()) as Float32Array, v: (await v.data()) as Float32Array });
      tf.dispose([m, v]);
    }
    return out;
  }

  importMoments(moments: ReadonlyMap<string, { m: Float32Array; v: Float32Array }>): void {
    for (const slot of this.slots) {
      tf.dispose([slot.m, slot.v].filter((t): t is tf.Tensor => t !== undefined));
      slot.m = slot.v = undefined;
      const s = moments.get(slot.param.name);
      if (!s) continue;
      const shape = slot.param.variable.shape as number[];
      [slot.m, slot.v] = [s.m, s.v].map((values) => {
        const handle = this.ops.create(shape);
        const t = tf.tensor(values, shape, 'float32');
        this.ops.assign(handle, t);
        t.dispose();
        return handle;
      });
    }
  }

  dispose(): void {
    for (const slot of this.slots) {
      tf.dispose([slot.p, slot.m, slot.v].filter((t): t is tf.Tensor => t !== undefined));
      slot.p = slot.m = slot.v = undefined;
    }
  }
}

/** The AdamW for the active backend: TensorFlow's fused kernel on native TensorFlow, tfjs ops over flat buckets elsewhere. */
export function createAdamW(params: readonly AdamWParameter[], options: AdamWOptions): AdamWOptimizer {
  const backend = nativeBackend();
  return backend ? new FusedAdamW(params, options, backend) : new BucketedAdamW(params, options);
}
