// The vocabulary head of a train step, fused: from hidden states to each target's log-prob and the
// policy's entropy, computed in chunks of rows. On a 49,152-token vocabulary the unfused head
// (logits, log-softmax, one-hot, exp, their tape and their gradients) kept ~10 [tokens x V] tensors
// alive per micro-batch, ~2 MB per trained token; here each chunk is reduced to two numbers per row
// at once, and only its logits are kept for the gradient (~0.2 MB per token), whose other
// temporaries live for one chunk.
//
// For row n with logits z = h W, log-sum-exp L and p = softmax(z):
//   logprob_n = z[target] - L,  entropy_n = L - sum_i p_i z_i = L - E_p[z];
//   d logprob / dz_i = 1[i = target] - p_i,  d entropy / dz_i = p_i (E_p[z] - z_i);
//   dh = dz W^T, and for a trained W, dW = h^T dz (summed over chunks).
// The exp-sums run in two levels (blocks of 128, then the block sums), as engines/rl/losses.ts
// vocabLogSoftmax does, so log-probs keep ~1e-6 of float32 precision on large vocabularies.
import * as tf from '@tensorflow/tfjs';

/** Rows per chunk: 512 x 49,152 floats is 96 MiB per temporary; the matmuls stay at full speed (128 rows ran at half). */
const ROWS = 512;
const SUM_BLOCK = 128;

/**
 * The unembedding in whichever layouts the caller holds: `dv` [D, V] (lm_head, or a tied
 * embedding transposed once) and/or `vd` [V, D] (the tied embedding). Each product uses the layout
 * that needs no transposed operand: logits h dv (else h vd^T), gradient dz vd (else dz dv^T).
 */
export interface Unembedding {
  dv?: tf.Tensor2D;
  vd?: tf.Tensor2D;
}

/** Sum over the last axis of [n, V] in blocks of SUM_BLOCK, then the block sums: [n, 1]. */
function twoLevelSum(x: tf.Tensor): tf.Tensor2D {
  const [n, V] = x.shape as [number, number];
  const blocks = Math.ceil(V / SUM_BLOCK);
  const padded = blocks * SUM_BLOCK === V ? x : tf.pad(x, [[0, 0], [0, blocks * SUM_BLOCK - V]]);
  return tf.sum(tf.sum(tf.reshape(padded, [n, blocks, SUM_BLOCK]), -1), -1, true) as tf.Tensor2D;
}

function logitsOf(h: tf.Tensor, head: Unembedding): tf.Tensor2D {
  return (head.dv ? tf.matMul(h, head.dv) : tf.matMul(h, head.vd!, false, true)) as tf.Tensor2D;
}

/** z[row, targets[row]] of [n, V] logits: [n, 1]. */
function atTargets(z: tf.Tensor2D, targets: tf.Tensor): tf.Tensor2D {
  const [n, V] = z.shape;
  const flat = tf.add(tf.mul(tf.range(0, n, 1, 'int32'), tf.scalar(V, 'int32')), targets);
  return tf.reshape(tf.gather(tf.reshape(z, [-1]), flat), [n, 1]);
}

/**
 * [N, 2]: per row of h [N, D], the log-prob of targets[row] (int32 [N]) and the entropy of
 * softmax(h W). With `trained` ('dv' or 'vd', the layout that is a variable) the head gets a
 * gradient too (full fine-tuning); otherwise only h does.
 */
export function headLogprobsAndEntropy(h: tf.Tensor2D, head: Unembedding, targets: tf.Tensor1D, trained?: 'dv' | 'vd'): tf.Tensor2D {
  const N = h.shape[0];
  const ranges = Array.from({ length: Math.ceil(N / ROWS) }, (_, c) => [c * ROWS, Math.min(ROWS, N - c * ROWS)] as const);
  const forward = (hs: tf.Tensor2D, heads: Unembedding, save: tf.GradSaveFunc) => {
    const logits: tf.Tensor[] = [];
    const stats: tf.Tensor[] = [];
    const rows = ranges.map(([start, n]) => {
      const out = tf.tidy(() => {
        const z = logitsOf(tf.slice(hs, [start, 0], [n, -1]), heads);
        const max = tf.max(z, -1, true);
        const e = tf.exp(tf.sub(z, max));
        const total = twoLevelSum(e);
        const lse = tf.add(max, tf.log(total));
        const meanZ = twoLevelSum(tf.mul(tf.div(e, total), z));
        const row = tf.concat([tf.sub(atTargets(z, tf.slice(targets, [start], [n])), lse), tf.sub(lse, meanZ)], 1);
        return { z, row, lseMean: tf.concat([lse, meanZ], 1) };
      });
      logits.push(out.z);
      stats.push(out.lseMean);
      return out.row;
    });
    // The targets, logits and statistics reach the gradient through `save`: what the forward only
    // closes over is disposed before the backward pass runs.
    save([hs, targets, ...stats, ...logits]);
    const value = tf.concat(rows, 0) as tf.Tensor2D;
    tf.dispose(rows);
    return value;
  };
  const backward = (dy: tf.Tensor, saved: tf.Tensor[], heads: Unembedding): { dh: tf.Tensor; dw?: tf.Tensor } => {
    const [hs, ts] = saved;
    const stats = saved.slice(2, 2 + ranges.length);
    const logits = saved.slice(2 + ranges.length);
    let dw: tf.Tensor | undefined;
    const dhs = ranges.map(([start, n], c) => {
      const out = tf.tidy(() => {
        const z = logits[c];
        const lse = tf.slice(stats[c], [0, 0], [n, 1]);
        const meanZ = tf.slice(stats[c], [0, 1], [n, 1]);
        const p = tf.exp(tf.sub(z, lse));
        const g = tf.slice(dy, [start, 0], [n, 2]);
        const gLogprob = tf.slice(g, [0, 0], [n, 1]);
        const gEntropy = tf.slice(g, [0, 1], [n, 1]);
        // dz = g_lp (onehot - p) + g_ent p (E[z] - z) = p (g_ent (E[z] - z) - g_lp) + g_lp onehot:
        // the one-hot term added at the targets only (a scatter of n values, not three [n, V] passes).
        const dense = tf.mul(p, tf.sub(tf.mul(gEntropy, tf.sub(meanZ, z)), gLogprob));
        const at = tf.stack([tf.range(0, n, 1, 'int32'), tf.slice(ts, [start], [n])], 1);
        const dz = tf.tensorScatterUpdate(dense, at, tf.add(tf.gatherND(dense, at), tf.reshape(gLogprob, [n])));
        const dh = heads.vd ? tf.matMul(dz, heads.vd) : tf.matMul(dz, heads.dv!, false, true);
        const hc = tf.slice(hs, [start, 0], [n, -1]);
        const dwChunk = trained === 'dv' ? tf.matMul(hc, dz, true, false) : trained === 'vd' ? tf.matMul(dz, hc, true, false) : undefined;
        return { dh, dwChunk };
      });
      if (out.dwChunk) {
        const previous = dw;
        dw = previous ? tf.add(previous, out.dwChunk) : out.dwChunk;
        if (previous) tf.dispose([previous, out.dwChunk]);
      }
      return out.dh;
    });
    const dh = tf.concat(dhs, 0);
    tf.dispose(dhs);
    return { dh, ...(dw ? { dw } : {}) };
  };
  if (trained) {
    // The trained layout is a differentiated input; the other one (if any) is read as it is.
    const other: Unembedding = trained === 'dv' ? { vd: head.vd } : { dv: head.dv };
    const withHead = (w: tf.Tensor): Unembedding => ({ ...other, [trained]: w as tf.Tensor2D });
    return tf.customGrad((hIn, wIn, save) => ({
      value: forward(hIn as tf.Tensor2D, withHead(wIn as tf.Tensor), save as tf.GradSaveFunc),
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const { dh, dw } = backward(dy, saved, withHead(wIn as tf.Tensor));
        return [dh, dw!];
      },
    }))(h, head[trained]!) as tf.Tensor2D;
  }
  return tf.customGrad((hIn, save) => ({
    value: forward(hIn as tf.Tensor2D, head, save as tf.GradSaveFunc),
    gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => backward(dy, saved, head).dh,
  }))(h) as tf.Tensor2D;
}
