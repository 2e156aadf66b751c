// Example user reward module for the add2 task, the smallest one: 1 for the exact answer (the sum's
// digits, then eos), else 0. The same as add2's built-in reward, as a module.
//
//   "reward": { "module": "examples/rewards/add2-exact.js" }
//
// It runs in a sandbox thread of the rollout worker (docs/environments.md); `relax bench sandbox`
// measures what that costs against calling it in-process.
'use strict';

const EOS_TEXT = '<eos>'; // how add2's character tokenizer decodes end-of-sequence

module.exports = function add2Exact({ prompt, response }) {
  const end = response.indexOf(EOS_TEXT);
  return end >= 0 && response.slice(0, end) === prompt.answer ? 1 : 0;
};
