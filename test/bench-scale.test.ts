// relax bench scale's arithmetic: the time a step spends inside its activities is the union of
// their spans (parallel rollout slices overlap), so control-plane time is the rest of the step.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { unionLength } from '../bench/scale';

test('unionLength merges overlapping and touching spans and adds disjoint ones', () => {
  assert.equal(unionLength([]), 0);
  assert.equal(unionLength([{ start: 0, end: 10 }]), 10);
  assert.equal(unionLength([{ start: 0, end: 10 }, { start: 5, end: 12 }, { start: 2, end: 3 }]), 12);
  assert.equal(unionLength([{ start: 20, end: 25 }, { start: 0, end: 10 }, { start: 10, end: 15 }]), 20);
});
