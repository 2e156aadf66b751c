// Images through the durable loop on real worker processes: GRPO on the vision-colour task from an
// SFT warm start below 60% raises held-out accuracy clearly in a short run; samples in Postgres
// reference their media by id and the bytes sit in the run's media store; and with large media
// (~0.8 MB noise images) every activity's input and result in the workflow history stays a few
// hundred bytes: media never pass through Temporal. (Audio: test/multimodal-audio-run.test.ts.)
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, test } from 'node:test';
import type { RunConfigInput } from '../config/run-config';
import { MediaStore } from '../engines/media/store';
import { uniqueId } from './helpers';
import { MultimodalStack } from './multimodal-stack';

let stack: MultimodalStack;
before(async () => {
  stack = await MultimodalStack.start(['vision']);
});
after(async () => {
  await stack?.stop();
});

test('GRPO through the workflow on images: held-out accuracy rises clearly from a warm start below 60%', async () => {
  // Measured: 0.56 -> 0.705 in 40 steps (the same computation as in process).
  const { id, checkpoints } = await stack.shortRun('vision', 40, 0.08);
  // Samples reference their image by id; the bytes are in the run's media store.
  const media = await stack.sampleMedia(id);
  assert.ok(media.length > 0 && media.every((m) => m.length === 1), 'every sample references its one image');
  const store = new MediaStore(path.join(checkpoints, 'media'));
  for (const m of media.slice(0, 20)) assert.ok(await store.has(m[0]), `${m[0]} is in the media store`);
  const largest = await stack.largestActivityPayload(id);
  assert.ok(largest < 4096, `activity payloads stay small (largest ${largest} bytes)`);
});

test('with ~0.8 MB images, activity inputs and results in the history stay small: media never pass through Temporal', async () => {
  const id = uniqueId('bigmedia');
  const checkpoints = path.join(stack.home, 'checkpoints', id);
  const config: RunConfigInput = {
    task: path.resolve(__dirname, '..', '..', 'test', 'fixtures', 'big-media-task.js'),
    run_id: id,
    model: { d_model: 16, n_layers: 1, n_heads: 2, d_ff: 32 },
    algorithm: { group_size: 2 },
    rollout: { prompts_per_step: 4, max_new_tokens: 2 },
    train: { steps: 2, eval_every: 2, lr: 1e-3 },
    checkpoint: { dir: checkpoints },
  };
  const result = await stack.runToEnd(id, config);
  assert.equal(result.steps, 2);
  const media = await stack.sampleMedia(id);
  assert.equal(media.length, 2 * 4 * 2);
  const { bytes } = await new MediaStore(path.join(checkpoints, 'media')).get(media[0][0]);
  assert.ok(bytes.length > 700_000, `the stored image is ${bytes.length} bytes`);
  const largest = await stack.largestActivityPayload(id);
  assert.ok(largest < 4096, `the largest activity payload is ${largest} bytes, with ${bytes.length}-byte images`);
});
