// Audio through the durable loop on real worker processes: GRPO on the audio-tone task (which of
// two tones is higher) from an SFT warm start below 60% raises held-out accuracy clearly in a
// short run. Its own file: the audio warm start takes a few minutes the first time (then cached).
import { after, before, test } from 'node:test';
import { MultimodalStack } from './multimodal-stack';

let stack: MultimodalStack;
before(async () => {
  stack = await MultimodalStack.start(['audio']);
});
after(async () => {
  await stack?.stop();
});

test('GRPO through the workflow on audio: held-out accuracy rises clearly from a warm start below 60%', async () => {
  // Measured in process: 0.53 -> 0.82 in 40 steps.
  await stack.shortRun('audio', 40, 0.15);
});
