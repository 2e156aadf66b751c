// pass@k, maj@k and mean@k (engines/rl/pass-at-k.ts) against the formulas written out here: the
// unbiased estimator 1 - C(n-c, k)/C(n, k) (Chen et al. 2021) at hand-computed values, a brute-force
// count over every k-subset for small n, a large n where the binomials overflow, and the votes.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { majAtK, majorityAnswer, meanAtK, passAtK, PassAtKError } from '../engines/rl/pass-at-k';

function assertNear(actual: number, expected: number, tol = 1e-12): void {
  assert.ok(Math.abs(actual - expected) <= tol, `${actual} != ${expected}`);
}

/** C(n, k) by the multiplicative formula (exact for the small n used here). */
function binomial(n: number, k: number): number {
  if (k < 0 || k > n) return 0;
  let r = 1;
  for (let i = 1; i <= k; i++) r = (r * (n - k + i)) / i;
  return r;
}

/** Every k-subset of 0..n-1. */
function* subsets(n: number, k: number, from = 0, chosen: number[] = []): Generator<number[]> {
  if (chosen.length === k) return yield chosen;
  for (let i = from; i < n; i++) yield* subsets(n, k, i + 1, [...chosen, i]);
}

test('pass@k at hand-computed values of 1 - C(n-c, k)/C(n, k)', () => {
  // n=4, c=1, k=1: 1 - C(3,1)/C(4,1) = 1 - 3/4 = 0.25 (pass@1 is c/n)
  assertNear(passAtK(4, 1, 1), 0.25);
  // n=4, c=1, k=2: 1 - C(3,2)/C(4,2) = 1 - 3/6 = 0.5
  assertNear(passAtK(4, 1, 2), 0.5);
  // n=5, c=2, k=2: 1 - C(3,2)/C(5,2) = 1 - 3/10 = 0.7
  assertNear(passAtK(5, 2, 2), 0.7);
  // n=10, c=3, k=5: 1 - C(7,5)/C(10,5) = 1 - 21/252 = 0.9166...
  assertNear(passAtK(10, 3, 5), 1 - 21 / 252);
  // n - c < k: every k-subset holds a correct sample
  assert.equal(passAtK(4, 2, 3), 1);
  assert.equal(passAtK(8, 1, 8), 1, 'pass@n is 1 as soon as one sample is correct');
  assert.equal(passAtK(8, 0, 8), 0);
  assert.equal(passAtK(8, 0, 1), 0);
});

test('pass@k equals the share of k-subsets with a correct sample, for every n <= 7, c, k', () => {
  for (let n = 1; n <= 7; n++) {
    for (let c = 0; c <= n; c++) {
      for (let k = 1; k <= n; k++) {
        // samples 0..c-1 are the correct ones
        let hit = 0;
        let all = 0;
        for (const s of subsets(n, k)) {
          all++;
          if (s.some((i) => i < c)) hit++;
        }
        assert.equal(all, binomial(n, k));
        assertNear(passAtK(n, c, k), hit / all);
        assertNear(passAtK(n, c, k), 1 - binomial(n - c, k) / binomial(n, k));
      }
    }
  }
});

test('pass@k stays finite and monotone in k where the binomials overflow', () => {
  // C(2000, 1000) overflows a double; the product form does not.
  let last = 0;
  for (const k of [1, 10, 100, 1000]) {
    const p = passAtK(2000, 3, k);
    assert.ok(Number.isFinite(p) && p >= last && p <= 1, `pass@${k} = ${p}`);
    last = p;
  }
  // 1 - (1997/2000)(1998/2000)... for k=1: c/n = 3/2000
  assertNear(passAtK(2000, 3, 1), 3 / 2000);
});

test('pass@k refuses counts that do not fit, naming them', () => {
  assert.throws(() => passAtK(4, 5, 1), (e: Error) => e instanceof PassAtKError && /^c \(correct samples\)/.test(e.message));
  assert.throws(() => passAtK(4, 1, 5), { message: /^k must be an integer in \[1, n=4\]/ });
  assert.throws(() => passAtK(0, 0, 1), { message: /^n \(samples per prompt\)/ });
  assert.throws(() => passAtK(4, 1, 1.5), { message: /^k must be an integer/ });
});

test('maj@k scores the most frequent answer; a tie goes to the answer that appears first', () => {
  assert.equal(majorityAnswer(['5', '7', '7', '5']), '5');
  assert.equal(majorityAnswer(['1', '2', '2']), '2');
  assert.equal(majorityAnswer([]), undefined);
  // "41" and "42" have 2 votes each: "41" appears first and wins, and it is wrong
  assert.equal(majAtK(['41', '42', '41', '42'], [false, true, false, true]), 0);
  assert.equal(majAtK(['42', '41', '42', '40'], [true, false, true, false]), 1);
  // one correct sample out of four: pass@4 is 1, maj@4 is 0
  assert.equal(majAtK(['1', '1', '42', '1'], [false, false, true, false]), 0);
  assert.equal(passAtK(4, 1, 4), 1);
  assert.throws(() => majAtK(['a'], [true, false]), /one entry per sample/);
});

test('mean@k is the mean reward of the samples', () => {
  assertNear(meanAtK([1, 0, 0.5, 0.5]), 0.5);
  assertNear(meanAtK([0.25]), 0.25);
  assert.throws(() => meanAtK([]), /at least one sample/);
});
