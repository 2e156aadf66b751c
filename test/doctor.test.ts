// relax doctor: passes against a running stack, names each missing service with a fix.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { freePort } from '../workers/ports';
import { freshDatabase, sharedTemporalAddress, spawnRelax, type TestDatabase } from './helpers';

let db: TestDatabase;
before(async () => {
  db = await freshDatabase();
});
after(async () => {
  await db.close();
});

async function doctor(env: NodeJS.ProcessEnv): Promise<{ code: number | null; text: string }> {
  const p = spawnRelax(['doctor'], { RELAX_HOME: '/nonexistent-relax-home', ...env });
  const code = await p.exited;
  return { code, text: p.output.join('\n') };
}

test('doctor passes when Temporal and a migrated database are reachable', async () => {
  const { code, text } = await doctor({ TEMPORAL_ADDRESS: sharedTemporalAddress(), DATABASE_URL: db.url });
  assert.equal(code, 0, text);
  for (const name of ['temporal binary', 'temporal server', 'postgres', 'tfjs backend', 'onnx runtime']) {
    assert.match(text, new RegExp(`^ok\\s+${name}\\s`, 'm'), `${name} row:\n${text}`);
  }
  assert.match(text, /^ok\s+temporal server\s+127\.0\.0\.1:\d+, plaintext, namespace default/m, 'which connection security is in use');
  assert.match(text, /postgres .*schema v\d+/);
  assert.match(text, /tfjs backend\s+(wasm|tensorflow)/);
});

test('doctor fails with a how-to-fix line for each missing service', async () => {
  const closed = await freePort();
  const { code, text } = await doctor({
    TEMPORAL_ADDRESS: `127.0.0.1:${closed}`,
    DATABASE_URL: `postgres://postgres:postgres@127.0.0.1:${closed}/postgres`,
  });
  assert.equal(code, 1, text);
  assert.match(text, /^FAIL\s+temporal server/m);
  assert.match(text, /^FAIL\s+postgres/m);
  assert.match(text, /fix temporal server: start the stack with `relax dev`/);
  assert.match(text, /fix postgres: /);
  assert.match(text, /^ok\s+tfjs backend/m, 'local engine checks still run');
});

test('doctor names the Temporal TLS setting it cannot use: the variable and the file', async () => {
  const { code, text } = await doctor({ TEMPORAL_ADDRESS: sharedTemporalAddress(), DATABASE_URL: db.url, TEMPORAL_TLS_CA: '/nonexistent/ca.pem' });
  assert.equal(code, 1, text);
  assert.match(text, /^FAIL\s+temporal server\s+TEMPORAL_TLS_CA=\/nonexistent\/ca\.pem: cannot read the file \(ENOENT\): fix the path, or unset TEMPORAL_TLS_CA/m);
  assert.match(text, /fix temporal server: .*docs\/security\.md/);
  // TLS against the plaintext dev server fails with what was tried named.
  const tls = await doctor({ TEMPORAL_ADDRESS: sharedTemporalAddress(), DATABASE_URL: db.url, TEMPORAL_TLS: '1' });
  assert.equal(tls.code, 1, tls.text);
  assert.match(tls.text, /^FAIL\s+temporal server\s+127\.0\.0\.1:\d+, TLS \(system roots\): /m);
});

test('doctor names an unmigrated database', async () => {
  await db.pool.query('DROP TABLE schema_migrations');
  const { code, text } = await doctor({ TEMPORAL_ADDRESS: sharedTemporalAddress(), DATABASE_URL: db.url });
  assert.equal(code, 1, text);
  assert.match(text, /^FAIL\s+postgres\s+reachable, but schema version 0 < \d+: not migrated/m);
});

test('doctor --model names a model path it cannot use, with what model.from may be', async () => {
  const p = spawnRelax(['doctor', '--model', '/nonexistent/model-dir'], { RELAX_HOME: '/nonexistent-relax-home', TEMPORAL_ADDRESS: sharedTemporalAddress(), DATABASE_URL: db.url });
  const code = await p.exited;
  const text = p.output.join('\n');
  assert.equal(code, 1, text);
  assert.match(text, /^FAIL\s+model\s+model source "\/nonexistent\/model-dir" is not found; model\.from may be a Hugging Face model directory/m);
  assert.match(text, /fix model: give model\.from a Hugging Face directory/);
});
