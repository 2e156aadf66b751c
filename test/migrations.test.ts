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
  for (const t of ['runs', 'samples', 'checkpoints', 'metrics', 'run_events', 'train_steps', 'train_step_samples', 'stage_spans', 'evaluations', 'schema_migrations']) {
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
    await empty.pool.query('DROP TABLE runs, samples, checkpoints, metrics, run_events, train_steps, train_step_samples, stage_spans, rollout_engines, evaluations, schema_migrations CASCADE');
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

test("the transfer queue's references hold, checked per statement: unknown runs and steps are refused, deletes cascade", async () => {
  const { rows: fks } = await db.pool.query<{ n: string }>(
    `SELECT count(*) AS n FROM pg_constraint WHERE contype = 'f' AND conrelid IN ('samples'::regclass, 'train_step_samples'::regclass)`,
  );
  assert.equal(Number(fks[0].n), 0, 'no per-row foreign key is left on samples or train_step_samples');
  const sample = (run: string, index: number) =>
    `INSERT INTO samples (run_id, iteration, group_index, sample_index, prompt_tokens, response_tokens, loss_mask, policy_version)
     VALUES ('${run}', 0, 0, ${index}, '{1}', '{2}', '{1}', 0)`;
  await assert.rejects(db.pool.query(sample('no-such-run', 0)), (err: { code?: string; message: string }) => err.code === '23503' && /run_id is not in runs/.test(err.message));
  await db.pool.query(`INSERT INTO runs (run_id, workflow_id, kind, config) VALUES ('fk', 'w', 'test', '{}')`);
  await db.pool.query(sample('fk', 0));
  await db.pool.query(sample('fk', 1));
  const set = `INSERT INTO train_step_samples (run_id, step, iteration, group_index, sample_index) VALUES ('fk', 1, 0, 0, 0), ('fk', 1, 0, 0, 1)`;
  await assert.rejects(db.pool.query(set), (err: { code?: string; message: string }) => err.code === '23503' && /not in train_steps/.test(err.message));
  await db.pool.query(`INSERT INTO train_steps (run_id, step, sample_count) VALUES ('fk', 1, 2)`);
  await db.pool.query(set);
  const count = async (table: string) => Number((await db.pool.query<{ n: string }>(`SELECT count(*) AS n FROM ${table} WHERE run_id = 'fk'`)).rows[0].n);
  assert.deepEqual([await count('samples'), await count('train_step_samples')], [2, 2]);
  await db.pool.query(`DELETE FROM runs WHERE run_id = 'fk'`);
  assert.deepEqual([await count('samples'), await count('train_steps'), await count('train_step_samples')], [0, 0, 0]);
});

test("a pool's sessions carry the statement, lock and idle-transaction bounds on PostgreSQL (the embedded PGlite ignores them)", async () => {
  const pool = createPool({ url: db.url, maxConnections: 1 });
  try {
    const shown = async (name: string) => (await pool.query<Record<string, string>>(`SHOW ${name}`)).rows[0][name];
    const settings = { statement_timeout: await shown('statement_timeout'), lock_timeout: await shown('lock_timeout'), idle_in_transaction_session_timeout: await shown('idle_in_transaction_session_timeout') };
    const embedded = !process.env.DATABASE_URL;
    assert.deepEqual(settings, embedded ? { statement_timeout: '0', lock_timeout: '0', idle_in_transaction_session_timeout: '0' } : { statement_timeout: '10min', lock_timeout: '2min', idle_in_transaction_session_timeout: '10min' });
  } finally {
    await pool.end();
  }
});
