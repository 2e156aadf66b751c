// The advantage estimators' math (engines/rl/advantages.ts) against hand-computed numbers.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  drGrpoAdvantages,
  grpoAdvantages,
  reinforcePlusPlusAdvantages,
  rlooAdvantages,
} from '../engines/rl/advantages';

function assertClose(actual: ArrayLike<number>, expected: readonly number[], tol = 1e-6): void {
  assert.equal(actual.length, expected.length, `length ${actual.length} != ${expected.length}`);
  for (let i = 0; i < expected.length; i++) {
    assert.ok(Math.abs(actual[i] - expected[i]) <= tol, `index ${i}: ${actual[i]} != ${expected[i]} (tol ${tol})`);
  }
}

// Two groups of 4 used throughout:
//   group A = [1, 0, 0, 1]: mean 0.5, deviations +-0.5, sum of squares 1
//   group B = [1, 1, 1, 0]: mean 0.75, deviations [.25, .25, .25, -.75], sum of squares 3*.0625 + .5625 = 0.75
const REWARDS = [1, 0, 0, 1, 1, 1, 1, 0];

test('grpoAdvantages uses the sample std (n - 1) by default', () => {
  // A: var = 1/3, std = 0.5773503, A = +-0.5/0.5773503 = +-0.8660254
  // B: var = 0.75/3 = 0.25, std = 0.5, A = [0.5, 0.5, 0.5, -1.5]
  assertClose(grpoAdvantages(REWARDS, 4, { eps: 0 }), [0.8660254, -0.8660254, -0.8660254, 0.8660254, 0.5, 0.5, 0.5, -1.5]);
  // default eps 1e-6 only perturbs the 6th decimal: 0.5 / (0.5 + 1e-6) = 0.499999
  assertClose(grpoAdvantages(REWARDS, 4), [0.8660254, -0.8660254, -0.8660254, 0.8660254, 0.5, 0.5, 0.5, -1.5], 1e-5);
});

test('grpoAdvantages with the population std divides by n', () => {
  // A: var = 1/4, std = 0.5, A = +-1
  // B: var = 0.75/4 = 0.1875, std = 0.4330127, A = [0.25/0.4330127 = 0.5773503 (x3), -0.75/0.4330127 = -1.7320508]
  assertClose(grpoAdvantages(REWARDS, 4, { eps: 0, std: 'population' }), [1, -1, -1, 1, 0.5773503, 0.5773503, 0.5773503, -1.7320508]);
});

test('a group with equal rewards gets zero advantage (no division blow-up)', () => {
  // mean 1, every deviation 0, std 0: 0 / (0 + 1e-6) = 0
  assertClose(grpoAdvantages([1, 1, 1, 1, 0, 1, 0, 1], 4), [0, 0, 0, 0, -0.8660254, 0.8660254, -0.8660254, 0.8660254], 1e-5);
});

test('drGrpoAdvantages only subtracts the group mean', () => {
  // A: r - 0.5; B: r - 0.75
  assertClose(drGrpoAdvantages(REWARDS, 4), [0.5, -0.5, -0.5, 0.5, 0.25, 0.25, 0.25, -0.75]);
  assert.deepEqual(drGrpoAdvantages(REWARDS, 4), grpoAdvantages(REWARDS, 4, { normalizeStd: false }));
});

test('rlooAdvantages subtracts the mean of the other k - 1 rewards', () => {
  // A: 1 - (0+0+1)/3 = 2/3; 0 - (1+0+1)/3 = -2/3
  // B: 1 - (1+1+0)/3 = 1/3; 0 - (1+1+1)/3 = -1
  assertClose(rlooAdvantages(REWARDS, 4), [2 / 3, -2 / 3, -2 / 3, 2 / 3, 1 / 3, 1 / 3, 1 / 3, -1]);
  // identity: RLOO = k/(k-1) * (r - group mean): 4/3 * 0.25 = 1/3
  assertClose(rlooAdvantages(REWARDS, 4), drGrpoAdvantages(REWARDS, 4).map((a) => (a * 4) / 3));
});

test('reinforcePlusPlusAdvantages normalizes over the whole batch', () => {
  // [1,2,3,4]: mean 2.5, deviations [-1.5,-.5,.5,1.5], sum sq 5, sample var 5/3, std 1.2909944
  // A = [-1.5, -0.5, 0.5, 1.5] / 1.2909944 = [-1.1618950, -0.3872983, 0.3872983, 1.1618950]
  assertClose(reinforcePlusPlusAdvantages([1, 2, 3, 4], { eps: 0 }), [-1.161895, -0.3872983, 0.3872983, 1.161895]);
});

test('rewards that do not fill whole groups are rejected with both numbers', () => {
  assert.throws(() => grpoAdvantages([1, 0, 1, 0, 1], 2), /5 entries, not a multiple of groupSize 2/);
  assert.throws(() => rlooAdvantages([1, 0, 1], 2), /3 entries, not a multiple of groupSize 2/);
  assert.throws(() => grpoAdvantages([1, 0], 1), /groupSize is 1/);
});

test('a non-finite reward is rejected naming its index', () => {
  assert.throws(() => grpoAdvantages([1, 0, Number.NaN, 1], 2), /reward at index 2 is NaN/);
  assert.throws(() => rlooAdvantages([1, Number.POSITIVE_INFINITY], 2), /reward at index 1 is Infinity/);
  assert.throws(() => reinforcePlusPlusAdvantages([0, 1, 2, Number.NaN]), /reward at index 3/);
});

