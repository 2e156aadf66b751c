#!/usr/bin/env node
// An external agent program for the add2 task: one episode = one run of this script. Relax starts it
// (rollout/agent-rollout.ts) with the endpoint and a session; it asks the policy for the sum through
// the OpenAI completions API, scores the answer itself (the agent is the environment: it computes
// a + b, no reference answer is handed to it) and prints its reward as a JSON line on stdout.
//
//   RELAX_BASE_URL    the endpoint's /v1 base URL
//   RELAX_SESSION_ID  sent with every call (x-relax-session header), so the endpoint records the
//                     tokens this episode caused as one training sample
//   RELAX_MODEL       the model to ask (the run id: its newest policy version)
//   RELAX_PROMPT      the episode's prompt, e.g. "17+25="
//
// Output: {"reward": 1} when the completion is exactly the digits of a + b and the policy stopped
// there (end-of-sequence: finish_reason "stop"), else {"reward": 0}; extra fields are for humans.
// Plain CommonJS with only the official `openai` client, so it runs as `node add2-agent.js`.
'use strict';

const { OpenAI } = require('openai');

/** Up to three digits of the sum, then end-of-sequence (add2's default rollout.max_new_tokens). */
const MAX_TOKENS = 4;

function env(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: this agent is started by Relax (rollout/agent-rollout.ts), which sets it`);
  return value;
}

async function main() {
  const prompt = env('RELAX_PROMPT');
  const match = /^(\d+)\+(\d+)=$/.exec(prompt);
  if (!match) throw new Error(`RELAX_PROMPT is ${JSON.stringify(prompt)}: expected an add2 prompt like "17+25="`);
  const expected = String(Number(match[1]) + Number(match[2]));

  const client = new OpenAI({
    baseURL: env('RELAX_BASE_URL'),
    apiKey: process.env.OPENAI_API_KEY || 'unused', // the Relax endpoint does not check keys
    defaultHeaders: { 'x-relax-session': env('RELAX_SESSION_ID') },
    maxRetries: 0, // a retried call would add a second, unrelated call to the session
  });
  const completion = await client.completions.create({
    model: env('RELAX_MODEL'),
    prompt,
    max_tokens: MAX_TOKENS,
    temperature: 1, // sample: GRPO needs different answers within a group
    logprobs: 0,
  });
  const choice = completion.choices[0];
  const reward = choice.finish_reason === 'stop' && choice.text === expected ? 1 : 0;
  const logprob = (choice.logprobs?.token_logprobs ?? []).reduce((a, b) => a + b, 0);
  console.log(JSON.stringify({ reward, answer: choice.text, finish_reason: choice.finish_reason, logprob }));
}

main().catch((err) => {
  console.error(`add2-agent: ${err && err.stack ? err.stack : err}`);
  process.exit(1);
});
