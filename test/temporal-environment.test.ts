// Where a client and the workers find their share of Temporal, without a server: the temporal CLI's
// config profiles (a temp TOML file read by @temporalio/envconfig) in the order explicit options >
// TEMPORAL_* variables > profile > a running `relax dev` > localhost, and the task-queue prefix
// (RELAX_TASK_QUEUE_PREFIX) that lets two deployments share a namespace, the stack services'
// workflow ids (health manager, autoscaler, scaling operations) included.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { resolveAddresses } from '../client/addresses';
import { taskQueuePrefix, workerDeploymentSettings } from '../config/environment';
import { capacityTaskQueue, HEALTH_MANAGER_WORKFLOW_ID, instanceTaskQueue, roleTaskQueue, ROLLOUT_AUTOSCALER_WORKFLOW_ID, ROLLOUT_SCALING_WORKFLOW_ID, serviceWorkflowId, taskQueuePrefixOf, withTaskQueuePrefix } from '../config/task-queues';
import { RelaxRollout } from '../client/scaling';
import type { RunDatabase } from '../client/database';
import type { Client } from '@temporalio/client';
import { clientConnectionOptions, TemporalConnectionConfigError } from '../security/temporal-connection';

let dir: string;
let configFile: string;
let caFile: string;

before(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-temporal-env-'));
  caFile = path.join(dir, 'ca.pem');
  fs.writeFileSync(caFile, 'CA BYTES');
  configFile = path.join(dir, 'temporal.toml');
  fs.writeFileSync(
    configFile,
    [
      '[profile.default]',
      'namespace = "from-default-profile"',
      '',
      '[profile.cloud]',
      'address = "cloud.example:7233"',
      'namespace = "team-a.acct"',
      'api_key = "profile-secret"',
      '[profile.cloud.tls]',
      'server_name = "cloud.example"',
      `server_ca_cert_path = ${JSON.stringify(caFile)}`,
      '',
      '[profile.local]',
      'address = "127.0.0.1:9999"',
      '[profile.local.tls]',
      'disabled = true',
      '',
      '[profile.keyonly]',
      'api_key = "k"',
    ].join('\n'),
  );
});
after(() => fs.rmSync(dir, { recursive: true, force: true }));

/** An environment with only what the test names: no real HOME config file, no real stack.json. */
function envWith(extra: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return { HOME: dir, XDG_CONFIG_HOME: path.join(dir, 'xdg'), RELAX_HOME: path.join(dir, 'home'), ...extra };
}

test('a TEMPORAL_PROFILE of TEMPORAL_CONFIG_FILE gives the address, namespace, TLS and API key; TEMPORAL_* variables win over it', () => {
  const r = resolveAddresses(envWith({ TEMPORAL_CONFIG_FILE: configFile, TEMPORAL_PROFILE: 'cloud' }));
  assert.equal(r.temporalAddress, 'cloud.example:7233');
  assert.equal(r.namespace, 'team-a.acct');
  assert.match(r.addressSource, /^profile cloud of TEMPORAL_CONFIG_FILE=/);
  const security = clientConnectionOptions(envWith({}), r.profileSecurity);
  assert.equal(security.apiKey, 'profile-secret');
  assert.ok(security.tls, 'TLS on');
  assert.equal(security.tls.serverNameOverride, 'cloud.example');
  assert.equal(security.tls.serverRootCACertificate?.toString(), 'CA BYTES');
  assert.match(security.summary, /^TLS \(profile cloud of .*\), API key \(from profile cloud/);
  assert.doesNotMatch(security.summary, /profile-secret/);

  const overridden = resolveAddresses(envWith({ TEMPORAL_CONFIG_FILE: configFile, TEMPORAL_PROFILE: 'cloud', TEMPORAL_ADDRESS: 'env:1', TEMPORAL_NAMESPACE: 'env-ns' }));
  assert.deepEqual([overridden.temporalAddress, overridden.namespace, overridden.addressSource], ['env:1', 'env-ns', 'TEMPORAL_ADDRESS']);
  // Any TEMPORAL_TLS* / TEMPORAL_API_KEY* variable takes TLS and the key over from the profile.
  assert.deepEqual(clientConnectionOptions({ TEMPORAL_TLS: '0' }, r.profileSecurity), { tls: false, summary: 'plaintext' });
  // A profile that turns TLS off is plaintext.
  const local = resolveAddresses(envWith({ TEMPORAL_CONFIG_FILE: configFile, TEMPORAL_PROFILE: 'local' }));
  assert.equal(local.temporalAddress, '127.0.0.1:9999');
  assert.equal(clientConnectionOptions({}, local.profileSecurity).tls, false);
});

test("the default profile of the CLI's default file; a running relax dev's address only when the profile has none, and never with the profile's TLS", () => {
  const xdg = path.join(dir, 'xdg');
  fs.mkdirSync(path.join(xdg, 'temporalio'), { recursive: true });
  fs.copyFileSync(configFile, path.join(xdg, 'temporalio', 'temporal.toml'));
  const home = path.join(dir, 'home');
  fs.mkdirSync(home, { recursive: true });
  fs.writeFileSync(path.join(home, 'stack.json'), JSON.stringify({ temporalAddress: '127.0.0.1:7777', databaseUrl: 'postgres://stack', pid: 1 }));
  try {
    const r = resolveAddresses(envWith({}));
    assert.deepEqual([r.temporalAddress, r.namespace, r.databaseUrl], ['127.0.0.1:7777', 'from-default-profile', 'postgres://stack']);
    assert.match(r.addressSource, /^relax dev/);
    const keyOnly = resolveAddresses(envWith({ TEMPORAL_PROFILE: 'keyonly' }));
    assert.deepEqual([keyOnly.temporalAddress, keyOnly.profileSecurity], ['127.0.0.1:7777', undefined], "relax dev's plaintext server never gets a profile's API key");
    const cloud = resolveAddresses(envWith({ TEMPORAL_PROFILE: 'cloud' }));
    assert.equal(cloud.temporalAddress, 'cloud.example:7233', 'a profile with an address wins over relax dev');
    assert.ok(cloud.profileSecurity);
    // With neither a profile nor a stack: localhost and "default".
    fs.rmSync(path.join(home, 'stack.json'));
    const bare = resolveAddresses(envWith({ XDG_CONFIG_HOME: path.join(dir, 'nowhere') }));
    assert.deepEqual([bare.temporalAddress, bare.namespace, bare.addressSource, bare.profileSecurity], ['127.0.0.1:7233', 'default', 'default', undefined]);
  } finally {
    fs.rmSync(xdg, { recursive: true, force: true });
  }
});

test('a missing TEMPORAL_CONFIG_FILE or TEMPORAL_PROFILE is an error naming the variable', () => {
  const isConfigError = (pattern: RegExp) => (err: Error) => err instanceof TemporalConnectionConfigError && pattern.test(err.message);
  assert.throws(() => resolveAddresses(envWith({ TEMPORAL_CONFIG_FILE: path.join(dir, 'absent.toml') })), isConfigError(/TEMPORAL_CONFIG_FILE=.*absent\.toml: no such file/));
  assert.throws(() => resolveAddresses(envWith({ TEMPORAL_CONFIG_FILE: configFile, TEMPORAL_PROFILE: 'staging' })), isConfigError(/TEMPORAL_PROFILE=staging .*'staging' not found/));
});

test('task queues, their prefix and the worker deployment name follow RELAX_TASK_QUEUE_PREFIX; workflow code recovers the prefix from its own queue', () => {
  assert.equal(taskQueuePrefix({}), 'relax');
  assert.equal(roleTaskQueue('control'), 'relax-control', 'the default names are unchanged (recorded histories replay)');
  const prefix = taskQueuePrefix({ RELAX_TASK_QUEUE_PREFIX: 'team-a' });
  assert.equal(roleTaskQueue('rollout', prefix), 'team-a-rollout');
  assert.equal(instanceTaskQueue('train', 'host:cpu:1', prefix), 'team-a-train@host:cpu:1');
  assert.equal(capacityTaskQueue(prefix), 'team-a-capacity');
  for (const q of [roleTaskQueue('control', prefix), instanceTaskQueue('rollout', 'h:x', prefix), capacityTaskQueue(prefix)]) assert.equal(taskQueuePrefixOf(q), 'team-a', q);
  assert.equal(taskQueuePrefixOf('some-other-queue'), 'relax');
  assert.equal(withTaskQueuePrefix(capacityTaskQueue(), 'team-a'), 'team-a-capacity');
  assert.throws(() => taskQueuePrefix({ RELAX_TASK_QUEUE_PREFIX: 'team a/b' }), /RELAX_TASK_QUEUE_PREFIX=team a\/b is not a valid task queue prefix/);
  assert.equal(workerDeploymentSettings({ RELAX_TASK_QUEUE_PREFIX: 'team-a' }).deploymentName, 'team-a');
  assert.equal(workerDeploymentSettings({ RELAX_TASK_QUEUE_PREFIX: 'team-a', RELAX_DEPLOYMENT_NAME: 'd' }).deploymentName, 'd');
});

/** A Temporal client that records what the scaling client starts, signals and queries, and always has a capacity provider. */
function recordingClient(): { client: Client; calls: string[] } {
  const calls: string[] = [];
  const handle = (id: string) => ({
    describe: async () => ({ status: { name: 'RUNNING' }, type: 'healthManager', runId: 'r1' }),
    query: async (name: string) => (calls.push(`query ${name} ${id}`), {}),
    signal: async (name: string) => void calls.push(`signal ${name} ${id}`),
  });
  const client = {
    options: { namespace: 'default' },
    workflowService: { describeTaskQueue: async (r: { taskQueue: { name: string } }) => (calls.push(`poll ${r.taskQueue.name}`), { pollers: [{}] }) },
    workflow: {
      start: async (type: string, o: { workflowId: string; taskQueue: string }) => (calls.push(`start ${type} ${o.workflowId} on ${o.taskQueue}`), { workflowId: o.workflowId, firstExecutionRunId: 'r1' }),
      getHandle: handle,
    },
  };
  return { client: client as unknown as Client, calls };
}

test('the stack services\' workflow ids take the prefix: relax-* by default (recorded histories replay), <prefix>-* under RELAX_TASK_QUEUE_PREFIX', async () => {
  assert.deepEqual([ROLLOUT_SCALING_WORKFLOW_ID, ROLLOUT_AUTOSCALER_WORKFLOW_ID, HEALTH_MANAGER_WORKFLOW_ID], ['relax-rollout-scaling', 'relax-rollout-autoscaler', 'relax-health-manager']);
  assert.equal(serviceWorkflowId('health-manager', 'team-a'), 'team-a-health-manager');
  const saved = process.env.RELAX_TASK_QUEUE_PREFIX;
  process.env.RELAX_TASK_QUEUE_PREFIX = 'team-a';
  try {
    const { client, calls } = recordingClient();
    const rollout = new RelaxRollout(client, {} as RunDatabase);
    await rollout.startHealthManager({});
    await rollout.startAutoscaler({ min_engines: 1, max_engines: 2 });
    await rollout.scaleOut({ num_replicas: 2 });
    await rollout.healthManager();
    await rollout.stopAutoscaler();
    assert.deepEqual(calls.filter((c) => !c.startsWith('poll ')), [
      'start healthManager team-a-health-manager on team-a-control',
      'start rolloutAutoscaler team-a-rollout-autoscaler on team-a-control',
      'start rolloutScaleOut team-a-rollout-scaling on team-a-control',
      'query healthStatus team-a-health-manager',
      'query autoscalerStatus team-a-rollout-autoscaler',
      'signal stopAutoscaler team-a-rollout-autoscaler',
    ]);
    assert.ok(calls.filter((c) => c.startsWith('poll ')).every((c) => c === 'poll team-a-capacity'), calls.join('\n'));
  } finally {
    if (saved === undefined) delete process.env.RELAX_TASK_QUEUE_PREFIX;
    else process.env.RELAX_TASK_QUEUE_PREFIX = saved;
  }
});
