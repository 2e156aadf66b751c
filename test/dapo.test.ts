// DAPO's rollout-side rules (engines/rl/dapo.ts, Yu et al. 2025): the overlong penalty against
// eq. 13 with hand-computed values, dynamic sampling's group test and selection, overlong filtering,
// the config's fields and their errors, and rolloutSlice with a scripted engine: zero-signal
// groups are filtered and refilled by extra rounds (capped), shaping and masks land on the samples.
import assert from 'node:assert/strict';
import test from 'node:test';
import { parseRunConfig, RunConfigError } from '../config/run-config';
import { applyOverlong, dapoMetrics, groupHasSignal, looksTruncated, overlongPenalty, selectSignalGroups, sumDapoCounts } from '../engines/rl/dapo';
import type { GeneratedSample, GenerationEngine } from '../engines/rollout';
import { loadTask } from '../envs/registry';
import { rolloutSliceWithStats } from '../rollout/producers';

// R_len(y) = 0 if |y| <= L_max - L_cache; ((L_max - L_cache) - |y|) / L_cache if L_max - L_cache < |y| <= L_max; -1 beyond.
test('overlongPenalty is eq. 13 of DAPO: 0, then a linear ramp over the last L_cache tokens, then -1', () => {
  // L_max = 4, L_cache = 2: free up to 2 tokens.
  assert.equal(overlongPenalty(1, 4, 2), 0);
  assert.equal(overlongPenalty(2, 4, 2), 0);
  assert.equal(overlongPenalty(3, 4, 2), -0.5); // (2 - 3) / 2
  assert.equal(overlongPenalty(4, 4, 2), -1); // (2 - 4) / 2
  assert.equal(overlongPenalty(5, 4, 2), -1);
  // L_max = 20, L_cache = 8: free up to 12 tokens.
  assert.equal(overlongPenalty(12, 20, 8), 0);
  assert.equal(overlongPenalty(13, 20, 8), -0.125); // (12 - 13) / 8
  assert.equal(overlongPenalty(16, 20, 8), -0.5); // (12 - 16) / 8
  assert.equal(overlongPenalty(19, 20, 8), -0.875); // (12 - 19) / 8
  assert.equal(overlongPenalty(20, 20, 8), -1);
  // L_cache = L_max: the ramp starts at the first token.
  assert.equal(overlongPenalty(1, 4, 4), -0.25);
  assert.throws(() => overlongPenalty(3, 4, 5), /cache_tokens must be an integer in \[1, max_new_tokens=4\]; got 5/);
  assert.throws(() => overlongPenalty(3, 4, 0), /cache_tokens/);
});

test('a group has signal when its scored rewards differ; failed samples do not count', () => {
  assert.equal(groupHasSignal([1, 0, 0, 0]), true);
  assert.equal(groupHasSignal([0, 0, 0, 0]), false);
  assert.equal(groupHasSignal([1, 1, 1, 1]), false);
  assert.equal(groupHasSignal([0.5, 0.5, 0.25, 0.5]), true);
  assert.equal(groupHasSignal([1, null, 1, null]), false);
  assert.equal(groupHasSignal([1, null, 0, null]), true);
  assert.equal(groupHasSignal([1, null, null, null]), false);
});

test('selectSignalGroups keeps the first groups with signal; short of them, fills with zero-signal ones', () => {
  const has = (g: string) => g.startsWith('s');
  assert.deepEqual(selectSignalGroups(['z1', 's1', 'z2', 's2', 's3'], 2, has), { kept: ['s1', 's2'], filtered: 2, filledWithoutSignal: 0 });
  // The cap was hit with one signal group: the batch keeps its size with the first zero-signal group.
  assert.deepEqual(selectSignalGroups(['z1', 's1', 'z2', 'z3'], 2, has), { kept: ['z1', 's1'], filtered: 2, filledWithoutSignal: 1 });
  assert.deepEqual(selectSignalGroups(['z1', 'z2'], 2, has), { kept: ['z1', 'z2'], filtered: 0, filledWithoutSignal: 2 });
});

test('applyOverlong adds factor x R_len to the reward and zeroes a truncated response\'s mask', () => {
  const penalty = { cacheTokens: 2, factor: 0.5 };
  // |y| = 3 of L_max 4: R_len = -0.5, x 0.5 = -0.25.
  assert.deepEqual(applyOverlong({ lossMask: [1, 1, 1], reward: 1, truncated: false }, { maxTokens: 4, penalty, filter: true }), { reward: 0.75, lossMask: [1, 1, 1], penalty: -0.25 });
  // |y| = 4, truncated: R_len = -1 x 0.5; the mask is zeroed by the filter.
  assert.deepEqual(applyOverlong({ lossMask: [1, 1, 1, 1], reward: 0, truncated: true }, { maxTokens: 4, penalty, filter: true }), { reward: -0.5, lossMask: [0, 0, 0, 0], penalty: -0.5 });
  // Without the filter the mask stays; without shaping the reward stays; a failed sample stays null.
  assert.deepEqual(applyOverlong({ lossMask: [1, 1, 1, 1], reward: 0, truncated: true }, { maxTokens: 4, filter: false }), { reward: 0, lossMask: [1, 1, 1, 1], penalty: 0 });
  assert.deepEqual(applyOverlong({ lossMask: [1, 1, 1, 1], reward: null, truncated: true }, { maxTokens: 4, penalty, filter: false }), { reward: null, lossMask: [1, 1, 1, 1], penalty: 0 });
  // Environment tokens (mask 0) are not the response's length.
  assert.equal(applyOverlong({ lossMask: [1, 0, 0, 1], reward: 1, truncated: false }, { maxTokens: 4, penalty, filter: false }).penalty, 0);
});

test('looksTruncated: every allowed token used and no stop token at the end', () => {
  assert.equal(looksTruncated([5, 6, 7, 8], 4, 4, [2]), true);
  assert.equal(looksTruncated([5, 6, 7, 2], 4, 4, [2]), false);
  assert.equal(looksTruncated([5, 6], 2, 4, [2]), false);
});

test('slices\' counts add up and become the step\'s dapo_* metrics', () => {
  const a = { groups: 4, filteredGroups: 2, filledGroups: 0, extraRounds: 1, samples: 8, truncated: 3, masked: 3, penaltySum: -2 };
  const b = { groups: 2, filteredGroups: 0, filledGroups: 0, extraRounds: 0, samples: 8, truncated: 1, masked: 1, penaltySum: -1 };
  const sum = sumDapoCounts([a, undefined, b]);
  assert.deepEqual(sum, { groups: 6, filteredGroups: 2, filledGroups: 0, extraRounds: 1, samples: 16, truncated: 4, masked: 4, penaltySum: -3 });
  assert.deepEqual(dapoMetrics(sum), { dapo_groups_generated: 6, dapo_filtered_groups: 2, dapo_filled_groups: 0, dapo_extra_rounds: 1, dapo_truncated_samples: 4, dapo_masked_samples: 4, dapo_overlong_penalty_mean: -3 / 16 });
  assert.equal(sumDapoCounts([undefined]), undefined);
  assert.deepEqual(dapoMetrics(undefined), {});
});

test('algorithm.dapo: defaults, and errors that name the field', () => {
  const c = parseRunConfig({ rollout: { max_new_tokens: 8 }, algorithm: { dapo: { dynamic_sampling: {}, overlong_penalty: { cache_tokens: 4 } } } });
  assert.deepEqual(c.algorithm.dapo, { dynamic_sampling: { max_extra_rounds: 4 }, overlong_penalty: { cache_tokens: 4, factor: 1 }, overlong_filter: false });
  assert.equal(parseRunConfig({}).algorithm.dapo, undefined);
  const refused = (input: unknown, pattern: RegExp) => assert.throws(() => parseRunConfig(input), (err: Error) => err instanceof RunConfigError && pattern.test(err.message));
  refused({ rollout: { max_new_tokens: 4 }, algorithm: { dapo: { overlong_penalty: { cache_tokens: 5 } } } }, /algorithm\.dapo\.overlong_penalty\.cache_tokens: must be <= rollout\.max_new_tokens \(4\)/);
  refused({ algorithm: { dapo: { overlong_penalty: {} } } }, /algorithm\.dapo\.overlong_penalty\.cache_tokens/);
  refused({ algorithm: { dapo: { dynamic_sampling: { max_extra_rounds: 65 } } } }, /algorithm\.dapo\.dynamic_sampling\.max_extra_rounds/);
  refused({ algorithm: { dapo: { dynamic: {} } } }, /algorithm\.dapo/);
});

/**
 * add2 answered by script: call `k` of generate answers per `plan(k, group, index)`: 'right' (the
 * answer then eos), 'wrong' (four 9s, no eos: truncated at max_new_tokens 4).
 */
function scriptedEngine(plan: (call: number, group: number, index: number) => 'right' | 'wrong', groupSize: number) {
  let calls = 0;
  return {
    engine: {
      model: undefined as never,
      policyVersion: 0,
      async generate(contexts: number[][]): Promise<GeneratedSample[]> {
        const call = calls++;
        const task = await loadTask('add2');
        const tok = task.tokenizer();
        return contexts.map((ctx, i) => {
          const [a, b] = tok.decode(ctx.slice(1)).replace('=', '').split('+').map(Number);
          const tokens = plan(call, Math.floor(i / groupSize), i % groupSize) === 'right' ? [...tok.encode(String(a + b)), tok.eosId] : tok.encode('9999');
          return { tokens, logprobs: tokens.map(() => -1), samplingLogprobs: tokens.map(() => -1), finishReason: tokens.at(-1) === tok.eosId ? 'stop' : 'length', policyVersion: 0 };
        });
      },
    } satisfies GenerationEngine,
    calls: () => calls,
  };
}

test('dynamic sampling: zero-signal groups are dropped and refilled by an extra round; shaping and masks land on the samples', async () => {
  const config = parseRunConfig({ algorithm: { group_size: 4, dapo: { dynamic_sampling: { max_extra_rounds: 3 }, overlong_penalty: { cache_tokens: 2, factor: 0.5 }, overlong_filter: true } }, rollout: { prompts_per_step: 4, max_new_tokens: 4 } });
  const task = await loadTask('add2');
  // Round 0: every answer wrong (no signal); round 1: the first sample of each group right.
  const { engine, calls } = scriptedEngine((call, _g, i) => (call >= 1 && i === 0 ? 'right' : 'wrong'), 4);
  const { samples, dapo } = await rolloutSliceWithStats({ config, task, engine }, { iteration: 3, firstGroup: 2, groups: 2 });
  assert.equal(calls(), 2, 'one extra round');
  assert.deepEqual(dapo, { groups: 4, filteredGroups: 2, filledGroups: 0, extraRounds: 1, samples: 8, truncated: 6, masked: 6, penaltySum: dapo!.penaltySum });
  assert.deepEqual(samples.map((s) => [s.iteration, s.groupIndex, s.sampleIndex]), [2, 3].flatMap((g) => [0, 1, 2, 3].map((i) => [3, g, i])), 'the kept groups take the slice\'s keys');
  const eos = task.tokenizer().eosId;
  for (const s of samples) {
    const tokens = Array.from(s.responseTokens);
    const right = tokens.at(-1) === eos;
    const length = tokens.length;
    // Task reward 1 or 0, plus 0.5 x R_len(|y|) with L_max 4, L_cache 2.
    const rLen = length <= 2 ? 0 : length <= 4 ? (2 - length) / 2 : -1;
    assert.equal(s.reward, (right ? 1 : 0) + 0.5 * rLen);
    assert.deepEqual(s.rewards, { task: right ? 1 : 0, overlong_penalty: 0.5 * rLen });
    assert.deepEqual(Array.from(s.lossMask), tokens.map(() => (right ? 1 : 0)), 'truncated (wrong, 4 tokens, no eos) samples are masked');
  }
  assert.ok(samples.filter((s) => s.sampleIndex === 0).every((s) => Array.from(s.responseTokens).at(-1) === eos), 'the right answers come from the extra round');
});

test('dynamic sampling stops at max_extra_rounds and keeps the batch full with zero-signal groups', async () => {
  const config = parseRunConfig({ algorithm: { group_size: 4, dapo: { dynamic_sampling: { max_extra_rounds: 2 } } }, rollout: { prompts_per_step: 2, max_new_tokens: 4 } });
  const { engine, calls } = scriptedEngine(() => 'wrong', 4);
  const { samples, dapo } = await rolloutSliceWithStats({ config, task: await loadTask('add2'), engine }, { iteration: 0, firstGroup: 0, groups: 2 });
  assert.equal(calls(), 3, 'the first round and 2 extra ones');
  assert.equal(samples.length, 8);
  assert.deepEqual(dapo, { groups: 6, filteredGroups: 4, filledGroups: 2, extraRounds: 2, samples: 8, truncated: 8, masked: 0, penaltySum: 0 });
  assert.ok(samples.every((s) => s.reward === 0 && Array.from(s.lossMask).every((m) => m === 1)), 'no shaping, no filtering configured');
});

test('without algorithm.dapo a slice is one round, as before, and reports no counts', async () => {
  const config = parseRunConfig({ algorithm: { group_size: 4 }, rollout: { prompts_per_step: 2, max_new_tokens: 4 } });
  const { engine, calls } = scriptedEngine(() => 'wrong', 4);
  const { samples, dapo } = await rolloutSliceWithStats({ config, task: await loadTask('add2'), engine }, { iteration: 0, firstGroup: 0, groups: 2 });
  assert.equal(calls(), 1);
  assert.equal(samples.length, 8);
  assert.equal(dapo, undefined);
});
