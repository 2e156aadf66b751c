// The embedded database requires its password (SCRAM-SHA-256): the right one connects, a wrong or
// missing one is refused with PostgreSQL's error; a data directory keeps its password in a 0600 file.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { Client } from 'pg';
import { PASSWORD_FILE, startEmbeddedPostgres, type EmbeddedPostgres } from '../store/embedded';

let db: EmbeddedPostgres;
before(async () => {
  db = await startEmbeddedPostgres();
});
after(async () => {
  await db.stop();
});

function withPassword(url: string, password: string | undefined): string {
  const u = new URL(url);
  u.password = password ?? '';
  return u.toString();
}

async function query(url: string, sql = 'SELECT 1 AS one'): Promise<unknown[]> {
  const client = new Client({ connectionString: url, connectionTimeoutMillis: 5_000 });
  await client.connect();
  try {
    return (await client.query(sql)).rows;
  } finally {
    await client.end();
  }
}

test('the URL it hands out (with its password) connects and queries', async () => {
  assert.match(db.url, /^postgres:\/\/postgres:[^@]{20,}@127\.0\.0\.1:\d+\/postgres/);
  assert.deepEqual(await query(db.url), [{ one: 1 }]);
  // Several connections at once, as a stack's workers hold them.
  const results = await Promise.all(Array.from({ length: 6 }, (_, i) => query(db.url, `SELECT ${i}::int AS n`)));
  assert.deepEqual(results.map((r) => (r[0] as { n: number }).n), [0, 1, 2, 3, 4, 5]);
});

test('a wrong password is refused with "password authentication failed for user ..."', async () => {
  await assert.rejects(query(withPassword(db.url, 'not-the-password')), (err: Error & { code?: string }) => {
    assert.equal(err.message, 'password authentication failed for user "postgres"');
    assert.equal(err.code, '28P01');
    return true;
  });
  const other = new URL(withPassword(db.url, 'guess'));
  other.username = 'relax';
  await assert.rejects(query(other.toString()), /password authentication failed for user "relax"/);
  // The server is still serving the right password after the refusals.
  assert.deepEqual(await query(db.url), [{ one: 1 }]);
});

test('no password is refused', async () => {
  const u = new URL(db.url);
  u.password = '';
  await assert.rejects(query(u.toString()), /password must be a (non-empty )?string/);
});

test('a data directory keeps its generated password in a 0600 file across restarts; a given password is used as given', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'relax-embedded-auth-'));
  try {
    const first = await startEmbeddedPostgres({ dataDir: path.join(dir, 'pglite') });
    const file = path.join(dir, 'pglite', PASSWORD_FILE);
    assert.equal(first.passwordFile, file);
    assert.equal(fs.statSync(file).mode & 0o777, 0o600);
    const password = fs.readFileSync(file, 'utf8').trim();
    assert.equal(decodeURIComponent(new URL(first.url).password), password);
    await query(first.url, 'CREATE TABLE kept (n int)');
    await first.stop();

    const second = await startEmbeddedPostgres({ dataDir: path.join(dir, 'pglite') });
    assert.equal(decodeURIComponent(new URL(second.url).password), password, 'same password after a restart');
    assert.deepEqual(await query(second.url, 'SELECT count(*)::int AS n FROM kept'), [{ n: 0 }]);
    await second.stop();

    const given = await startEmbeddedPostgres({ password: 'p@ss w/rd' });
    try {
      assert.deepEqual(await query(given.url), [{ one: 1 }]);
      await assert.rejects(query(withPassword(given.url, 'p@ss')), /password authentication failed/);
    } finally {
      await given.stop();
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
