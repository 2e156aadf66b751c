// The KL estimators on plain numbers (k1, k2, k3 against hand values) and reward shaping with them.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { klEstimate, klPenaltyRewards } from '../engines/rl/kl';

const LN2 = Math.log(2);
const HALF = Math.log(0.5);
const QUARTER = Math.log(0.25);

function assertNear(actual: number, expected: number, tol = 1e-6): void {
  assert.ok(Math.abs(actual - expected) <= tol, `${actual} != ${expected}`);
}

test('k1, k2, k3 at hand-computed log-ratios', () => {
  // policy 0.5, reference 0.25: d = ref - logp = -ln 2 = -0.6931472
  //   k1 = ln 2 = 0.6931472; k2 = (ln 2)^2 / 2 = 0.2402265; k3 = e^-ln2 + ln2 - 1 = 0.5 + 0.6931472 - 1 = 0.1931472
  assertNear(klEstimate(HALF, QUARTER, 'k1'), LN2);
  assertNear(klEstimate(HALF, QUARTER, 'k2'), 0.2402265);
  assertNear(klEstimate(HALF, QUARTER, 'k3'), 0.1931472);
  // policy 0.25, reference 0.5: d = +ln 2
  //   k1 = -0.6931472 (negative: k1 is unbiased but not pointwise >= 0); k2 = 0.2402265; k3 = 2 - 0.6931472 - 1 = 0.3068528
  assertNear(klEstimate(QUARTER, HALF, 'k1'), -LN2);
  assertNear(klEstimate(QUARTER, HALF, 'k2'), 0.2402265);
  assertNear(klEstimate(QUARTER, HALF, 'k3'), 0.3068528);
  assert.equal(klEstimate(-1.3, -1.3, 'k3'), 0);
});

test('k3 is never negative and stays finite for far-apart log-probs', () => {
  for (let d = -60; d <= 60; d += 0.37) assert.ok(klEstimate(0, d, 'k3') >= 0, `k3 < 0 at d=${d}`);
  // clamped at d = 20: e^20 - 20 - 1
  assertNear(klEstimate(0, 800, 'k3'), Math.exp(20) - 21, 1e-3);
});

test('klPenaltyRewards subtracts coef * summed KL over each response', () => {
  // response 0: tokens (0.5 vs 0.25) and (0.25 vs 0.5): k3 = 0.1931472 + 0.3068528 = 0.5 -> 1 - 0.1 * 0.5 = 0.95
  // response 1: one token (0.25 vs 0.5): k3 = 0.3068528 -> 0 - 0.03068528
  const shaped = klPenaltyRewards([1, 0], [[HALF, QUARTER], [QUARTER]], [[QUARTER, HALF], [HALF]], 0.1, 'k3');
  assertNear(shaped[0], 0.95);
  assertNear(shaped[1], -0.03068528);
});

