// Example user reward module (sample scope) for the add2 task, for fault tests: the exact-match
// add2 reward, except that it THROWS on a deterministic ~10% of samples (those whose hash of prompt
// text + response falls in the lowest tenth). The same sample always fails, so a retry does not
// hide the failure. Relax marks each failing sample failed with the error and goes on, as long as a
// step's failures stay within train.failure_budget.
//
// Run config:  "reward": { "module": "examples/rewards/add2-flaky.js" }
//
// A reward module is plain user code (CommonJS here): it needs nothing from Relax. The function
// receives { prompt: { text, answer }, response, task } where `response` is the decoded response
// with special tokens kept: add2's character tokenizer decodes end-of-sequence as "<eos>".
'use strict';

const EOS_TEXT = '<eos>';

/** 1 when the response is exactly the answer's digits followed by eos, else 0 (add2's own reward). */
function exactMatch(prompt, response) {
  const end = response.indexOf(EOS_TEXT);
  if (end < 0) return 0; // never stopped: the policy must learn to emit eos
  return response.slice(0, end) === prompt.answer ? 1 : 0;
}

/** 32-bit FNV-1a of a string. */
function fnv1a(text) {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}

const FAILURE_PERCENT = 10;

module.exports = function add2FlakyReward({ prompt, response }) {
  if (fnv1a(`${prompt.text}|${response}`) % 100 < FAILURE_PERCENT) {
    throw new Error(`flaky reward: simulated failure on ${JSON.stringify(prompt.text)} -> ${JSON.stringify(response)}`);
  }
  return exactMatch(prompt, response);
};
module.exports.exactMatch = exactMatch;
