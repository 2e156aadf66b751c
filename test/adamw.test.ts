// AdamW over flat parameter buckets (engines/adamw.ts) computes exactly the textbook per-parameter
// update (Loshchilov & Hutter; bias-corrected moments, decoupled decay on matrices only), whatever
// the bucketing, and its moments round-trip per parameter; so does AdamW through TensorFlow's fused
// kernel on the native backend (engines/adamw-fused.ts), which the trainer picks there.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as tf from '@tensorflow/tfjs';
import { bucketParameters, BucketedAdamW } from '../engines/adamw';
import { createAdamW, FusedAdamW } from '../engines/adamw-fused';
import { loadTfjsBackend } from '../engines/backends';

/** The per-parameter reference, in float64. */
function referenceAdamW(p: number[], g: number[][], o: { lr: number; beta1: number; beta2: number; eps: number; wd: number; clip: number[] }): number[] {
  const m = p.map(() => 0);
  const v = p.map(() => 0);
  const x = [...p];
  g.forEach((grad, s) => {
    const t = s + 1;
    for (let i = 0; i < x.length; i++) {
      const gi = grad[i] * o.clip[s];
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * gi;
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * gi * gi;
      const update = m[i] / (1 - o.beta1 ** t) / (Math.sqrt(v[i] / (1 - o.beta2 ** t)) + o.eps);
      x[i] = x[i] - o.lr * update - o.lr * o.wd * x[i];
    }
  });
  return x;
}

test('bucketParameters keeps order and caps bucket size; a parameter larger than the cap is a bucket alone', () => {
  const sized = (n: number[]) => n.map((size) => ({ size }));
  assert.deepEqual(bucketParameters(sized([3, 4, 2, 9, 1]), 8).map((b) => b.map((p) => p.size)), [[3, 4], [2], [9], [1]]);
  assert.deepEqual(bucketParameters(sized([1, 1, 1]), 100).map((b) => b.length), [3]);
});

test('bucketed AdamW = the per-parameter reference, with clipping and decay on matrices only, for any bucketing', async () => {
  await tf.setBackend('cpu');
  const shapes: number[][] = [[2, 3], [3], [4, 2], [1]];
  const init = shapes.map((s, k) => Array.from({ length: s.reduce((a, b) => a * b, 1) }, (_, i) => Math.sin(k * 7 + i)));
  const grads = [0, 1, 2].map((s) => shapes.map((sh, k) => Array.from({ length: init[k].length }, (_, i) => Math.cos(s * 3 + k + i * 0.7))));
  const clip = [1, 0.5, 0.25];
  const options = { lr: 0.01, beta1: 0.9, beta2: 0.99, eps: 1e-8, weightDecay: 0.1 };
  for (const limit of [1 << 24, 6, 1]) {
    const vars = shapes.map((s, k) => tf.variable(tf.tensor(init[k], s), true, `adamw-test-${limit}-${k}`));
    const opt = new BucketedAdamW(vars.map((v, k) => ({ name: `p${k}`, variable: v, decayed: shapes[k].length >= 2 })), options, limit);
    for (let s = 0; s < 3; s++) {
      const given = grads[s].map((g, k) => tf.tensor(g, shapes[k]));
      const flat = opt.flatten(given, s === 1);
      assert.deepEqual(given.map((g) => g.isDisposed), given.map(() => s === 1), 'flatten consumes the gradients only when asked');
      tf.dispose(given);
      const squares = await opt.sumsOfSquares(flat);
      const expected = grads[s].flat().reduce((a, x) => a + x * x, 0);
      assert.ok(Math.abs(squares.reduce((a, b) => a + b, 0) - expected) < 1e-4, `sum of squares, bucket limit ${limit}`);
      const before = tf.memory().numTensors;
      opt.apply(flat, s + 1, clip[s], options.lr);
      assert.equal(tf.memory().numTensors - before, (s === 0 ? 2 * flat.length : 0) - flat.length, `the update keeps its moments only (two per bucket, made on the first step), limit ${limit}`);
      assert.ok(flat.every((f) => f.isDisposed), 'apply disposes the flat gradients');
    }
    for (let k = 0; k < shapes.length; k++) {
      const want = referenceAdamW(init[k], grads.map((g) => g[k]), { ...options, wd: shapes[k].length >= 2 ? options.weightDecay : 0, clip });
      const got = Array.from(await vars[k].data());
      got.forEach((x, i) => assert.ok(Math.abs(x - want[i]) < 1e-5, `limit ${limit}, p${k}[${i}]: ${x} vs ${want[i]}`));
    }
    const moments = await opt.exportMoments();
    assert.deepEqual(moments.map((m) => m.name), ['p0', 'p1', 'p2', 'p3']);
    const copy = new BucketedAdamW(vars.map((v, k) => ({ name: `p${k}`, variable: v, decayed: false })), options, limit);
    copy.importMoments(new Map(moments.map((m) => [m.name, m])));
    assert.deepEqual(await copy.exportMoments(), moments, 'moments round-trip');
    copy.dispose();
    opt.dispose();
    tf.dispose(vars);
  }
});

test("parameter groups: a group's learning rate from apply() (bucketed and fused), the others at the step's lr; one step moves each by its own", async () => {
  const shapes: number[][] = [[2, 3], [3], [4, 2], [1]];
  const init = shapes.map((s, k) => Array.from({ length: s.reduce((a, b) => a * b, 1) }, (_, i) => Math.sin(k * 7 + i)));
  const grads = [0, 1].map((s) => shapes.map((sh, k) => Array.from({ length: init[k].length }, (_, i) => Math.cos(s * 3 + k + i * 0.7))));
  const options = { lr: 0.01, beta1: 0.9, beta2: 0.99, eps: 1e-8, weightDecay: 0.1 };
  const inHead = (k: number) => k === 2 || k === 3; // a matrix and a bias in the group "head"
  const lrOf = (k: number) => (inHead(k) ? 0.1 : 0.01);
  for (const kind of ['bucketed', 'fused'] as const) {
    await (kind === 'fused' ? loadTfjsBackend({ kind: 'cpu' }, 'native') : tf.setBackend('cpu'));
    const vars = shapes.map((s, k) => tf.variable(tf.tensor(init[k], s), true, `adamw-group-${kind}-${k}`));
    const params = vars.map((v, k) => ({ name: `p${k}`, variable: v, decayed: shapes[k].length >= 2, ...(inHead(k) ? { lrGroup: 'head' } : {}) }));
    const opt = kind === 'fused' ? createAdamW(params, options) : new BucketedAdamW(params, options);
    assert.equal(opt instanceof FusedAdamW, kind === 'fused');
    for (let s = 0; s < 2; s++) {
      opt.apply(opt.prepare(grads[s].map((g, k) => tf.tensor(g, shapes[k]))), s + 1, 1, options.lr, { head: 0.1, unused: 5 });
      if (s > 0) continue;
      // Adam's first step is lr * g / (|g| + eps) = lr * sign(g), plus the decay lr * wd * p on matrices.
      for (let k = 0; k < shapes.length; k++) {
        const got = Array.from(await vars[k].data());
        got.forEach((x, i) => {
          const decay = shapes[k].length >= 2 ? lrOf(k) * options.weightDecay * init[k][i] : 0;
          assert.ok(Math.abs(init[k][i] - x - decay - lrOf(k) * Math.sign(grads[0][k][i])) < 1e-5, `${kind} step 1: p${k}[${i}] moved by its group's lr ${lrOf(k)}`);
        });
      }
    }
    for (let k = 0; k < shapes.length; k++) {
      const want = referenceAdamW(init[k], grads.map((g) => g[k]), { ...options, lr: lrOf(k), wd: shapes[k].length >= 2 ? options.weightDecay : 0, clip: [1, 1] });
      const got = Array.from(await vars[k].data());
      got.forEach((x, i) => assert.ok(Math.abs(x - want[i]) < 1e-5, `${kind} p${k}[${i}]: ${x} vs ${want[i]}`));
    }
    opt.dispose();
    tf.dispose(vars);
  }
  await tf.setBackend('cpu');
});

test('a non-finite gradient is found in its bucket and named', async () => {
  await tf.setBackend('cpu');
  const vars = [tf.variable(tf.zeros([2]), true, 'nf-a'), tf.variable(tf.zeros([3]), true, 'nf-b')];
  const opt = new BucketedAdamW(vars.map((v, k) => ({ name: ['a', 'b'][k], variable: v, decayed: false })), { lr: 1 });
  const flat = opt.flatten([tf.tensor([1, 2]), tf.tensor([0, Infinity, 1])]);
  const squares = await opt.sumsOfSquares(flat);
  assert.equal(Number.isFinite(squares[0]), false);
  assert.equal(await opt.nonFiniteParameter(flat, 0), 'b');
  tf.dispose([...flat, ...vars]);
  opt.dispose();
});

test('fused AdamW (native TensorFlow) = the per-parameter reference, with clipping and decay on matrices only; no tensor left behind', async () => {
  await loadTfjsBackend({ kind: 'cpu' }, 'native');
  const shapes: number[][] = [[2, 3], [3], [4, 2], [1]];
  const init = shapes.map((s, k) => Array.from({ length: s.reduce((a, b) => a * b, 1) }, (_, i) => Math.sin(k * 7 + i)));
  const grads = [0, 1, 2].map((s) => shapes.map((sh, k) => Array.from({ length: init[k].length }, (_, i) => Math.cos(s * 3 + k + i * 0.7))));
  const clip = [1, 0.5, 0.25];
  const options = { lr: 0.01, beta1: 0.9, beta2: 0.99, eps: 1e-8, weightDecay: 0.1 };
  const vars = shapes.map((s, k) => tf.variable(tf.tensor(init[k], s), true, `adamw-fused-test-${k}`));
  const params = vars.map((v, k) => ({ name: `p${k}`, variable: v, decayed: shapes[k].length >= 2 }));
  const opt = createAdamW(params, options);
  assert.ok(opt instanceof FusedAdamW, 'the native backend gets the fused kernel');
  let afterFirst = 0;
  for (let s = 0; s < 3; s++) {
    const given = grads[s].map((g, k) => tf.tensor(g, shapes[k]));
    const prepared = opt.prepare(given);
    const squares = await opt.sumsOfSquares(prepared);
    grads[s].forEach((g, k) => assert.ok(Math.abs(squares[k] - g.reduce((a, x) => a + x * x, 0)) < 1e-4, `sum of squares of p${k}`));
    opt.apply(prepared, s + 1, clip[s], options.lr);
    assert.ok(given.every((g) => g.isDisposed), 'apply disposes the gradients');
    if (s === 0) afterFirst = tf.memory().numTensors;
    else assert.equal(tf.memory().numTensors, afterFirst, 'a step leaves no tensor behind (the handles are made on the first step)');
  }
  for (let k = 0; k < shapes.length; k++) {
    const want = referenceAdamW(init[k], grads.map((g) => g[k]), { ...options, wd: shapes[k].length >= 2 ? options.weightDecay : 0, clip });
    const got = Array.from(await vars[k].data());
    got.forEach((x, i) => assert.ok(Math.abs(x - want[i]) < 1e-5, `p${k}[${i}]: ${x} vs ${want[i]}`));
  }
  const moments = await opt.exportMoments();
  assert.deepEqual(moments.map((m) => m.name), ['p0', 'p1', 'p2', 'p3']);
  // The same moments restored into a bucketed optimizer and back: the two read each other's state.
  const bucketed = new BucketedAdamW(params, options);
  bucketed.importMoments(new Map(moments.map((m) => [m.name, m])));
  const copy = new FusedAdamW(params, options, tf.backend() as never);
  copy.importMoments(new Map((await bucketed.exportMoments()).map((m) => [m.name, m])));
  assert.deepEqual(await copy.exportMoments(), moments, 'moments round-trip');
  const before = tf.memory().numTensors;
  copy.dispose();
  opt.dispose();
  bucketed.dispose();
  assert.ok(tf.memory().numTensors < before, 'dispose frees the resource handles');
  tf.dispose(vars);
  await tf.setBackend('cpu');
  assert.ok(createAdamW(params, options) instanceof BucketedAdamW, 'other backends get the bucketed tfjs ops');
});
