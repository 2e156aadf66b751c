// Example user reward module (sample scope): a judge model scores each response. The judge is any
// OpenAI-compatible endpoint: a Relax policy served by `relax serve` (or startOpenAIServer), or an
// external service, given by URL.
//
// Run config:  "reward": { "module": "examples/rewards/judge.js", "timeout_ms": 30000 }
// Environment of the rollout workers:
//   RELAX_JUDGE_BASE_URL   the judge's /v1 base URL (required), e.g. http://127.0.0.1:8000/v1
//   RELAX_JUDGE_MODEL      the judge's model name (required)
//   RELAX_JUDGE_API_KEY    sent as the bearer key (default "unused": Relax's endpoint checks none)
//   RELAX_JUDGE_API        "chat" (default: /v1/chat/completions) or "completions" (/v1/completions)
//   RELAX_JUDGE_TEMPLATE   the judge's prompt, with {prompt} and {response} replaced (default: an
//                          English instruction asking for one digit). A tiny character-level judge
//                          needs a template in its own alphabet, e.g. "{prompt}{response}".
//
// Convention: the judge is asked greedily (temperature 0) for a couple of tokens; its reply must
// START with a digit d (leading spaces ignored), and the reward is d / 9, in [0, 1]. A reply that
// does not start with a digit throws, so Relax marks that sample failed with the reply in the error
// (it is never guessed into a number). The response is cut at its first "<eos>" (add2's character
// tokenizer decodes end-of-sequence as "<eos>"; the judge sees the text only). The call is
// aborted when Relax's per-call timeout (reward.timeout_ms) fires.
'use strict';

const { OpenAI } = require('openai');

const EOS_TEXT = '<eos>';
const DEFAULT_TEMPLATE =
  'Rate how well the response answers the prompt, from 0 (wrong or useless) to 9 (perfect). ' +
  'Reply with the single digit only.\n\nPrompt: {prompt}\nResponse: {response}\nRating:';

function required(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: the judge reward needs the judge endpoint (RELAX_JUDGE_BASE_URL, e.g. http://127.0.0.1:8000/v1) and model (RELAX_JUDGE_MODEL) in the rollout worker's environment`);
  return value;
}

/** The judge's reply to a reward in [0, 1]: its first non-space character must be a digit. */
function replyToReward(reply) {
  const match = /^\s*(\d)/.exec(reply);
  if (!match) throw new Error(`the judge replied ${JSON.stringify(reply)}, which does not start with a digit 0-9; make the judge answer with one digit (see examples/rewards/judge.js)`);
  return Number(match[1]) / 9;
}

let cached;
/** One client per (URL, key), reused across calls. */
function client() {
  const baseURL = required('RELAX_JUDGE_BASE_URL');
  const apiKey = process.env.RELAX_JUDGE_API_KEY || 'unused';
  if (!cached || cached.baseURL !== baseURL || cached.apiKey !== apiKey) {
    // No retries: Relax's timeout is per call, and a retry would spend it twice.
    cached = { baseURL, apiKey, openai: new OpenAI({ baseURL, apiKey, maxRetries: 0 }) };
  }
  return cached.openai;
}

async function ask(judgePrompt, signal) {
  const model = required('RELAX_JUDGE_MODEL');
  const api = process.env.RELAX_JUDGE_API || 'chat';
  const common = { model, max_tokens: 2, temperature: 0 };
  if (api === 'completions') {
    const completion = await client().completions.create({ ...common, prompt: judgePrompt }, { signal });
    return completion.choices[0].text;
  }
  if (api !== 'chat') throw new Error(`RELAX_JUDGE_API is ${JSON.stringify(api)}: use "chat" or "completions"`);
  const completion = await client().chat.completions.create({ ...common, messages: [{ role: 'user', content: judgePrompt }] }, { signal });
  return completion.choices[0].message.content || '';
}

module.exports = async function judgeReward({ prompt, response, signal }) {
  const end = response.indexOf(EOS_TEXT);
  const text = end >= 0 ? response.slice(0, end) : response;
  const template = process.env.RELAX_JUDGE_TEMPLATE || DEFAULT_TEMPLATE;
  // One pass, so a prompt that itself contains "{response}" is not substituted into.
  const judgePrompt = template.replace(/\{(prompt|response)\}/g, (_, key) => (key === 'prompt' ? prompt.text : text));
  return replyToReward(await ask(judgePrompt, signal));
};
module.exports.replyToReward = replyToReward;
