// The producer registry of rollout/producers.ts: the four built-in producers by name, which one a
// run's config picks, and the errors for an unknown or a duplicate name.
import assert from 'node:assert/strict';
import test from 'node:test';
import { parseRunConfig } from '../config/run-config';
import { loadTask } from '../envs/registry';
import { producer, producerNameFor, producerNames, registerProducer } from '../rollout/producers';

test('the built-in producers are registered by name; an unknown name is refused naming them', () => {
  assert.deepEqual(producerNames().sort(), ['agent', 'episodes', 'generate', 'single-turn']);
  for (const name of producerNames()) assert.equal(typeof producer(name), 'function');
  assert.throws(() => producer('beam'), /^Error: unknown producer "beam": use one of single-turn, episodes, generate, agent$/);
  assert.throws(() => registerProducer({ name: 'agent', create: () => async () => [] }), /a producer named "agent" is already registered/);
});

test("a run's config picks its producer: agent, then generate function, then environment, else single-turn", async () => {
  const add2 = await loadTask('add2');
  const calculator = await loadTask('calculator');
  assert.equal(producerNameFor(parseRunConfig({ task: 'add2' }), add2), 'single-turn');
  assert.equal(producerNameFor(parseRunConfig({ task: 'calculator' }), calculator), 'episodes');
  assert.equal(producerNameFor(parseRunConfig({ task: 'add2', generate: { module: 'gen.js' } }), add2), 'generate');
  assert.equal(producerNameFor(parseRunConfig({ task: 'add2', rollout: { agent: { command: ['node', 'agent.js'] } }, generate: { module: 'gen.js' } }), add2), 'agent');
});

test('an agent run without an agent endpoint fails as before', async () => {
  const config = parseRunConfig({ task: 'add2', rollout: { agent: { command: ['node', 'agent.js'] } } });
  const produce = producer('agent')({ config, task: await loadTask('add2'), engine: undefined as never });
  await assert.rejects(produce(undefined as never, []), /rollout\.agent is set but this rollout has no agent endpoint/);
});
