// Example user reward module for timeout tests: a reward function that never answers.
//
//   "reward": { "module": "examples/rewards/add2-slow.js", "timeout_ms": 50 }
//       the default export returns a promise that never settles: every sample fails with
//       "reward function timed out after 50 ms".
//   "reward": { "module": "examples/rewards/add2-slow.js", "export": "slow", "timeout_ms": 50 }
//       answers (add2's exact-match reward) after SLOW_MS = 1000 ms: too late for any timeout below
//       that, in time for larger ones.
//
// Neither keeps the process alive: the never-settling promise holds no timer, and the slow one's
// timer is unref()'d. A well-behaved slow reward also stops its work when `signal` aborts (Relax
// aborts it at the timeout); `slow` does.
'use strict';

const EOS_TEXT = '<eos>'; // how add2's character tokenizer decodes end-of-sequence
const SLOW_MS = 1000;

function exactMatch(prompt, response) {
  const end = response.indexOf(EOS_TEXT);
  if (end < 0) return 0;
  return response.slice(0, end) === prompt.answer ? 1 : 0;
}

/** Never resolves. */
module.exports = function add2NeverReward() {
  return new Promise(() => {});
};

/** Resolves with the exact-match reward after SLOW_MS, or rejects as soon as `signal` aborts. */
module.exports.slow = function add2SlowReward({ prompt, response, signal }) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => resolve(exactMatch(prompt, response)), SLOW_MS);
    timer.unref();
    if (signal) {
      signal.addEventListener('abort', () => {
        clearTimeout(timer);
        reject(signal.reason ?? new Error('aborted'));
      }, { once: true });
    }
  });
};
module.exports.SLOW_MS = SLOW_MS;
