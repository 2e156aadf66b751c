// The multi-host deployment files cannot run here (no Docker engine), so this checks them against
// the code they must agree with: the compose file parses, uses the current Temporal server image with
// its matching admin-tools (not the deprecated auto-setup), publishes every port on loopback only,
// makes every Relax service wait for the namespace and search-attribute setup, and scales rollout as
// one service; the setup script creates exactly the search attributes runs set; the server's dynamic
// config has what the dev server of `relax dev` is started with.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { parse } from 'yaml';
import { RELAX_SEARCH_ATTRIBUTES } from '../workflows/definitions';
import { DYNAMIC_CONFIG } from '../workers/temporal-server';

const root = path.resolve(__dirname, '..', '..');
const read = (p: string) => fs.readFileSync(path.join(root, p), 'utf8');

interface Service {
  image?: string;
  command?: string[];
  ports?: string[];
  depends_on?: Record<string, { condition: string }>;
  environment?: Record<string, string> | string[];
  profiles?: string[];
  build?: unknown;
}

test('docker-compose.yml: temporalio/server with matching admin-tools, loopback ports, workers after the setup', () => {
  const compose = parse(read('docker-compose.yml'), { merge: true }) as { services: Record<string, Service>; secrets: Record<string, { file: string }> };
  const services = compose.services;
  const images = Object.values(services).map((s) => s.image ?? '');
  assert.ok(!images.some((i) => i.includes('auto-setup')), 'no deprecated auto-setup image');
  const server = services.temporal.image!;
  assert.match(server, /^temporalio\/server:/);
  const tag = (image: string) => image.split(':').slice(1).join(':');
  for (const name of ['temporal-schema', 'temporal-setup']) {
    assert.match(services[name].image!, /^temporalio\/admin-tools:/);
    assert.equal(tag(services[name].image!), tag(server), `${name} uses the server's release`);
  }
  assert.deepEqual(services.temporal.depends_on, { 'temporal-schema': { condition: 'service_completed_successfully' } });
  for (const [name, s] of Object.entries(services)) {
    for (const port of s.ports ?? []) assert.match(port, /^127\.0\.0\.1:/, `${name} publishes ${port} on loopback only`);
    if (name.startsWith('relax-') && name !== 'relax-postgresql') {
      assert.deepEqual(s.depends_on?.['temporal-setup'], { condition: 'service_completed_successfully' }, `${name} waits for the search attributes`);
      assert.equal(s.command?.[0], 'node');
    }
  }
  assert.deepEqual(services['relax-rollout'].command, ['node', 'bin/relax.js', 'worker', '--role', 'rollout', '--device', 'cpu']);
  assert.deepEqual(services['relax-api'].command?.slice(2, 3), ['api']);
  for (const gpu of ['relax-train-gpu', 'relax-rollout-gpu']) {
    assert.deepEqual(services[gpu].profiles, ['gpu']);
    assert.ok(services[gpu].command?.includes('cuda:0'));
    assert.deepEqual(services[gpu].build, { context: '.', dockerfile: 'Dockerfile.gpu' });
  }
  assert.match(read('Dockerfile.gpu'), /npm run setup -- --cuda/);
  assert.match(read('Dockerfile.gpu'), /^FROM nvidia\/cuda:/m);
  assert.equal(compose.secrets['relax-api-token'].file, './deploy/api-token');
  assert.match(read('.gitignore'), /^deploy\/api-token$/m, 'the token file is never committed');
});

test('the setup script creates exactly the search attributes runs set; the dynamic config matches the dev server', () => {
  const script = read('deploy/temporal/setup-namespace.sh');
  const listed = /for attr in ([^;]+);/.exec(script)?.[1].trim().split(/\s+/) ?? [];
  assert.deepEqual(Object.fromEntries(listed.map((a) => a.split(':'))), { ...RELAX_SEARCH_ATTRIBUTES });
  const dynamic = parse(read('deploy/temporal/dynamicconfig.yaml')) as Record<string, Array<{ value: unknown }>>;
  for (const [key, value] of Object.entries(DYNAMIC_CONFIG)) assert.equal(String(dynamic[key]?.[0]?.value), value, `${key} as relax dev sets it`);
});
