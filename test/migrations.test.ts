// Database migrations: idempotent, serialized, and they create the schema the data plane uses.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { createPool } from '../store/db';
import { LATEST_SCHEMA_VERSION, MIGRATIONS, migrate, schemaVersion } from '../store/migrations';
import { freshDatabase, type TestDatabase } from './helpers';

let db: TestDatabase;
before(async () => {
  db = await freshDatabase();
});
after(async () => {
  await db.close();
});

test('migrations are applied once and re-running them changes nothing', async () => {
  // freshDatabase() already migrated: a second and third run apply nothing.
  assert.deepEqual(await migrate(db.pool), []);
  assert.deepEqual(await migrate(db.pool), []);
  assert.equal(await schemaVersion(db.pool), LATEST_SCHEMA_VERSION);
  const { rows } = await db.pool.query<{ n: string }>('SELECT count(*) AS n FROM schema_migrations');
  assert.equal(Number(rows[0].n), MIGRATIONS.length);
});

test('every data-plane table exists', async () => {
  const { rows } = await db.pool.query<{ t: string }>(
    `SELECT table_name AS t FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY 1`,
  );
  const tables = rows.map((r) => r.t);
  for (const t of ['runs', 'samples', 'checkpoints', 'metrics', 'run_events', 'train_steps', 'train_step_samples', 'stage_spans', 'schema_migrations']) {
    assert.ok(tables.includes(t), `missing table ${t}; have ${tables.join(', ')}`);
  }
});

test('concurrent migrators do not collide', async () => {
  const pools = [createPool({ url: db.url, maxConnections: 1 }), createPool({ url: db.url, maxConnections: 1 })];
  try {
    const results = await Promise.all(pools.map((p) => migrate(p)));
    assert.deepEqual(results, [[], []]);
  } finally {
    await Promise.all(pools.map((p) => p.end()));
  }
});

test('a fresh database reports schema version 0 until migrated', async () => {
  const empty = await freshDatabase();
  try {
    await empty.pool.query('DROP TABLE runs, samples, checkpoints, metrics, run_events, train_steps, train_step_samples, stage_spans, rollout_engines, schema_migrations CASCADE');
    assert.equal(await schemaVersion(empty.pool), 0);
    assert.deepEqual(await migrate(empty.pool), MIGRATIONS.map((m) => m.version));
    assert.equal(await schemaVersion(empty.pool), LATEST_SCHEMA_VERSION);
  } finally {
    await empty.close();
  }
});

test('a sample is unique per (run, iteration, group, index), so retried writes cannot duplicate it', async () => {
  await db.pool.query(`INSERT INTO runs (run_id, workflow_id, kind, config) VALUES ('r1', 'w1', 'test', '{}')`);
  const insert = `INSERT INTO samples (run_id, iteration, group_index, sample_index, prompt_tokens, response_tokens, loss_mask, policy_version)
                  VALUES ('r1', 0, 0, 0, '{1,2}', '{3}', '{1}', 0)`;
  await db.pool.query(insert);
  await assert.rejects(db.pool.query(insert), /duplicate key/);
});
