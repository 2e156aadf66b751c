// Device selection: parsing cpu / cuda:N and pinning a worker process to one GPU.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { deviceLabel, parseDevice, pinProcessToDevice } from '../engines/device';
import { instanceTaskQueue, roleTaskQueue } from '../config/task-queues';

test('parses cpu and cuda:N', () => {
  assert.deepEqual(parseDevice('cpu'), { kind: 'cpu' });
  assert.deepEqual(parseDevice('cuda:0'), { kind: 'cuda', index: 0 });
  assert.deepEqual(parseDevice('cuda:7'), { kind: 'cuda', index: 7 });
  assert.equal(deviceLabel(parseDevice('cuda:3')), 'cuda:3');
});

test('rejects other device names with the expected form', () => {
  for (const bad of ['gpu', 'cuda', 'cuda:', 'cuda:x', 'cuda:-1', 'tpu:0', '']) {
    assert.throws(() => parseDevice(bad), /--device: expected "cpu" or "cuda:N"/, bad);
  }
});

test('pinning a cuda device exposes only that GPU; cpu hides all GPUs', () => {
  const env: NodeJS.ProcessEnv = { CUDA_VISIBLE_DEVICES: '0,1,2,3' };
  pinProcessToDevice({ kind: 'cuda', index: 2 }, env);
  assert.equal(env.CUDA_VISIBLE_DEVICES, '2');
  pinProcessToDevice({ kind: 'cpu' }, env);
  assert.equal(env.CUDA_VISIBLE_DEVICES, '');
});

test('role and instance queues are distinct per role and per instance', () => {
  assert.equal(roleTaskQueue('rollout'), 'relax-rollout');
  assert.notEqual(instanceTaskQueue('train', 'a'), instanceTaskQueue('train', 'b'));
  assert.ok(instanceTaskQueue('train', 'a').startsWith(`${roleTaskQueue('train')}@`));
});
