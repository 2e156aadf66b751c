// The trainer's gradients (engines/trainer.ts): tf.variableGrads with a backward pass that frees
// as it goes.
//
// tfjs's backward pass (tfjs-core engine.gradients + tape.ts backpropagateGradients) keeps, until
// it has walked the whole tape, every tensor saved for it, the gradient of every intermediate
// tensor, and every temporary a custom gradient function made: by the time it reaches the first
// layer it holds the activations of all layers plus about as much again (3.6 GB for a SmolLM2 LoRA
// micro-batch of 480 tokens). Here each tape node's work is freed as soon as the node is done:
// its input gradients are computed in their own scope (temporaries freed at once), its output
// gradients and its saved tensors (clones the engine made for that node alone) are disposed, and
// a gradient reaching a tensor twice is summed with both parts freed.
//
// It walks the engine's tape (tf.engine().state.activeTape, as checkpointLayer in
// engines/tfjs-layer-ops.ts does): an internal of tfjs-core 4.x. The trainer's tests compare its
// gradients with tfjs's own (test/trainer.test.ts), so a tfjs whose tape differs fails there.
import * as tf from '@tensorflow/tfjs';

interface TapeNode {
  id: number;
  kernelName: string;
  inputs: Record<string, tf.Tensor>;
  outputs: tf.Tensor[];
  saved?: tf.Tensor[];
  gradient?: (dys: Array<tf.Tensor | null>) => Record<string, () => tf.Tensor>;
}

interface EngineInternals {
  state: { activeTape: TapeNode[] | null; gradientDepth: number };
  startTape(): void;
  endTape(): void;
  scopedRun<R>(start: () => void, end: () => void, f: () => R): R;
  tidy<R extends tf.TensorContainer>(name: string, f: () => R): R;
}

/** The nodes of `tape` on a path from `xs` to `y`, each with only its inputs that depend on `xs` (as tfjs's getFilteredNodesXToY). */
function nodesFromXsToY(tape: readonly TapeNode[], xs: readonly tf.Tensor[], y: tf.Tensor): TapeNode[] {
  const fromX = new Set<number>(xs.map((x) => x.id));
  const nodesFromX = new Set<number>();
  for (const node of tape) {
    if (Object.values(node.inputs).some((input) => fromX.has(input.id))) {
      nodesFromX.add(node.id);
      for (const output of node.outputs) fromX.add(output.id);
    }
  }
  const toY = new Set<number>([y.id]);
  const nodesToY = new Set<number>();
  for (let i = tape.length - 1; i >= 0; i--) {
    const node = tape[i];
    if (node.outputs.some((output) => toY.has(output.id))) {
      nodesToY.add(node.id);
      for (const input of Object.values(node.inputs)) toY.add(input.id);
    }
  }
  return tape
    .filter((node) => nodesFromX.has(node.id) && nodesToY.has(node.id))
    .map((node) => ({ ...node, inputs: Object.fromEntries(Object.entries(node.inputs).filter(([, input]) => fromX.has(input.id))) }));
}

/**
 * tf.variableGrads(f, varList) (the gradients of the scalar f() with respect to the variables, and
 * its value, kept), with the backward pass freeing each node's tensors once done with them. Not for
 * higher-order gradients (f must not itself be differentiated).
 *
 * `into`: gradients to add these to (micro-batch accumulation), by variable name. Each variable's
 * gradient is added as soon as it is complete (its last reader on the tape is done), and freed, so
 * the backward pass never holds a second set of the variables' gradients; `grads` is then `into`.
 */
export function variableGradsReleasing(f: () => tf.Scalar, varList: readonly tf.Variable[], into?: tf.NamedTensorMap): { value: tf.Scalar; grads: tf.NamedTensorMap } {
  const engine = tf.engine() as unknown as EngineInternals;
  if (engine.state.gradientDepth !== 0) throw new Error('variableGradsReleasing: called inside another gradient computation');
  const y = engine.scopedRun(
    () => engine.startTape(),
    () => engine.endTape(),
    () => engine.tidy('forward', f),
  );
  const tape = engine.state.activeTape ?? [];
  try {
    if (!(y instanceof tf.Tensor) || y.rank !== 0) throw new Error(`variableGradsReleasing: f must return a scalar, got a tensor of shape [${(y as tf.Tensor).shape}]`);
    const grads = engine.tidy('backward', () => {
      const gradOf = new Map<number, tf.Tensor>([[y.id, tf.onesLike(y)]]);
      const nodes = nodesFromXsToY(tape, varList, y);
      // Per variable, the tape's reads of it not yet differentiated: at 0 its gradient is complete.
      const variableOf = new Map(varList.map((v) => [v.id, v]));
      const readsLeft = new Map<number, number>();
      for (const node of nodes) for (const input of Object.values(node.inputs)) if (variableOf.has(input.id)) readsLeft.set(input.id, (readsLeft.get(input.id) ?? 0) + 1);
      for (let i = nodes.length - 1; i >= 0; i--) {
        const node = nodes[i];
        if (!node.gradient) throw new Error(`Cannot compute gradient: gradient function not found for ${node.kernelName}.`);
        const dys = node.outputs.map((o) => gradOf.get(o.id) ?? null);
        const names = Object.keys(node.inputs);
        // The node's temporaries (a custom gradient's intermediates too) end with this scope.
        const dxs = tf.tidy(() => {
          const thunks = node.gradient!(dys);
          return names.map((name) => {
            if (!(name in thunks)) throw new Error(`Cannot backprop through input ${name} of ${node.kernelName}.`);
            const dx = thunks[name]();
            // An input gradient that is one of the dys or saved tensors themselves (an identity)
            // outlives them as a copy.
            return dys.includes(dx) || node.saved?.includes(dx) ? tf.clone(dx) : dx;
          });
        });
        for (const o of node.outputs) {
          gradOf.get(o.id)?.dispose();
          gradOf.delete(o.id);
        }
        for (const t of node.saved ?? []) t.dispose();
        names.forEach((name, k) => {
          const x = node.inputs[name];
          const dx = dxs[k];
          if (dx.dtype !== 'float32') throw new Error(`Error in gradient for op ${node.kernelName}: the gradient of input ${name} must be float32, got ${dx.dtype}`);
          if (dx.shape.join(',') !== x.shape.join(',')) throw new Error(`Error in gradient for op ${node.kernelName}: the gradient of input ${name} has shape [${dx.shape}], expected [${x.shape}]`);
          const previous = gradOf.get(x.id);
          if (!previous) gradOf.set(x.id, dx);
          else {
            gradOf.set(x.id, tf.add(previous, dx));
            previous.dispose();
            dx.dispose();
          }
          const variable = variableOf.get(x.id);
          if (!into || !variable) return;
          const left = readsLeft.get(x.id)! - 1;
          readsLeft.set(x.id, left);
          if (left > 0) return;
          const complete = gradOf.get(x.id)!;
          gradOf.delete(x.id);
          const sum = into[variable.name];
          into[variable.name] = tf.keep(sum ? tf.add(sum, complete) : complete);
          if (sum) tf.dispose([sum, complete]);
        });
      }
      if (into) return into;
      const out: tf.NamedTensorMap = {};
      for (const v of varList) {
        const g = gradOf.get(v.id);
        if (g) out[v.name] = g;
      }
      return out;
    });
    return { value: y as tf.Scalar, grads };
  } catch (err) {
    tf.dispose(y);
    throw err;
  } finally {
    for (const node of tape) for (const t of node.saved ?? []) t.dispose();
    engine.state.activeTape = null;
  }
}
