// Example user reward module with GROUP scope for the add2 task: called once per prompt with all of
// its responses (the GRPO group), returns one reward per response, in order.
//
//   "reward": { "module": "examples/rewards/add2-group.js", "scope": "group" }
//
// Rule: an exact answer (the sum's digits, then eos) scores 1. When NO response of the group is
// exact, GRPO would see an all-zero group (zero advantage, nothing learned), so the responses whose
// number is closest to the answer get a small partial credit, CLOSEST_BONUS (0.1). A response that
// is not a number followed by eos scores 0. Only a group-scope function can do this: the bonus
// depends on the other responses.
//
// `response` is decoded with special tokens kept: add2's character tokenizer decodes
// end-of-sequence as "<eos>".
'use strict';

const EOS_TEXT = '<eos>';
const CLOSEST_BONUS = 0.1;

/** The number a response states (digits, then eos), or null when it is not one. */
function statedNumber(response) {
  const end = response.indexOf(EOS_TEXT);
  if (end < 0) return null;
  const digits = response.slice(0, end);
  return /^[0-9]{1,6}$/.test(digits) ? { digits, value: Number(digits) } : null;
}

module.exports = function add2GroupReward({ prompt, responses }) {
  const stated = responses.map(statedNumber);
  const exact = stated.map((s) => (s !== null && s.digits === prompt.answer ? 1 : 0));
  if (exact.some((r) => r === 1)) return exact;
  const answer = Number(prompt.answer);
  const distances = stated.map((s) => (s === null ? Infinity : Math.abs(s.value - answer)));
  const best = Math.min(...distances);
  return distances.map((d) => (d !== Infinity && d === best ? CLOSEST_BONUS : 0));
};
module.exports.CLOSEST_BONUS = CLOSEST_BONUS;
