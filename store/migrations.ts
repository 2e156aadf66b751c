// The data plane's schema. Migrations are append-only: never edit one that has shipped, add a new one.
// Applied on start by every process that connects; idempotent and safe to race (advisory lock).
import type { Pool } from 'pg';

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: 'runs, samples, checkpoints, metrics, run events',
    sql: `
      CREATE TABLE runs (
        run_id       text PRIMARY KEY,
        workflow_id  text NOT NULL,
        kind         text NOT NULL,
        config       jsonb NOT NULL,
        status       text NOT NULL DEFAULT 'running',
        created_at   timestamptz NOT NULL DEFAULT now(),
        updated_at   timestamptz NOT NULL DEFAULT now()
      );

      -- The transfer queue: one row per sample (a whole trajectory), written by rollout and read by
      -- reference, advantage and train. Keyed so a retried rollout overwrites instead of duplicating.
      CREATE TABLE samples (
        run_id           text NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
        iteration        integer NOT NULL,
        group_index      integer NOT NULL,
        sample_index     integer NOT NULL,
        prompt_tokens    integer[] NOT NULL,
        response_tokens  integer[] NOT NULL,
        loss_mask        smallint[] NOT NULL,
        rollout_logprobs real[],
        ref_logprobs     real[],
        reward           real,
        rewards          jsonb,
        advantage        real,
        advantages       real[],
        policy_version   integer NOT NULL,
        token_versions   integer[],
        status           text NOT NULL DEFAULT 'generated',
        error            text,
        consumed_by_step integer,
        created_at       timestamptz NOT NULL DEFAULT now(),
        updated_at       timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (run_id, iteration, group_index, sample_index)
      );
      CREATE INDEX samples_status ON samples (run_id, status);

      CREATE TABLE checkpoints (
        run_id          text NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
        policy_version  integer NOT NULL,
        path            text NOT NULL,
        sha256          text NOT NULL,
        step            integer NOT NULL,
        created_at      timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (run_id, policy_version)
      );

      CREATE TABLE metrics (
        run_id      text NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
        step        integer NOT NULL,
        name        text NOT NULL,
        value       double precision NOT NULL,
        created_at  timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (run_id, step, name)
      );

      CREATE TABLE run_events (
        id          bigserial PRIMARY KEY,
        run_id      text NOT NULL,
        kind        text NOT NULL,
        role        text,
        task_queue  text,
        worker      text,
        detail      jsonb NOT NULL DEFAULT '{}'::jsonb,
        created_at  timestamptz NOT NULL DEFAULT now()
      );
      CREATE INDEX run_events_run ON run_events (run_id, id);
    `,
  },
  {
    version: 2,
    name: 'train steps with their recorded sample sets; failed samples; transfer-queue indexes',
    sql: `
      -- 'failed': a reward function or environment threw; the sample keeps its error and is never trained on.
      ALTER TABLE samples ADD CONSTRAINT samples_status_known
        CHECK (status IN ('generated', 'scored', 'consumed', 'failed'));
      ALTER TABLE samples ADD CONSTRAINT samples_failed_has_error
        CHECK (status <> 'failed' OR error IS NOT NULL);
      ALTER TABLE samples ADD CONSTRAINT samples_consumed_by_a_step
        CHECK ((status = 'consumed') = (consumed_by_step IS NOT NULL));
      -- Per-token arrays cover the response tokens one for one.
      ALTER TABLE samples ADD CONSTRAINT samples_per_token_lengths CHECK (
        cardinality(loss_mask) = cardinality(response_tokens)
        AND (rollout_logprobs IS NULL OR cardinality(rollout_logprobs) = cardinality(response_tokens))
        AND (ref_logprobs IS NULL OR cardinality(ref_logprobs) = cardinality(response_tokens))
        AND (advantages IS NULL OR cardinality(advantages) = cardinality(response_tokens))
        AND (token_versions IS NULL OR cardinality(token_versions) = cardinality(response_tokens)));

      -- Selecting a train batch scans ready samples of a run oldest iteration first; this index covers
      -- (run_id, status) too, so it replaces migration 1's.
      DROP INDEX samples_status;
      CREATE INDEX samples_queue ON samples (run_id, status, iteration, group_index, sample_index);
      CREATE INDEX samples_consumed ON samples (run_id, consumed_by_step) WHERE consumed_by_step IS NOT NULL;

      -- One row per train step, written when its sample set is chosen (before the update) and marked
      -- applied once the update produced its policy version: the idempotency key of an update is (run, step).
      CREATE TABLE train_steps (
        run_id          text NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
        step            integer NOT NULL,
        status          text NOT NULL DEFAULT 'selected' CHECK (status IN ('selected', 'applied')),
        sample_count    integer NOT NULL,
        policy_version  integer,
        metrics         jsonb,
        selected_at     timestamptz NOT NULL DEFAULT now(),
        applied_at      timestamptz,
        PRIMARY KEY (run_id, step),
        CHECK ((status = 'applied') = (policy_version IS NOT NULL AND applied_at IS NOT NULL))
      );
      -- Every update produces a new policy version: two steps can never claim the same one.
      CREATE UNIQUE INDEX train_steps_policy_version ON train_steps (run_id, policy_version) WHERE policy_version IS NOT NULL;

      -- The sample set of each step, kept after its samples are pruned. A sample key appears at most
      -- once per run, so no sample is ever trained on twice, even if a late rollout retry re-inserts it.
      CREATE TABLE train_step_samples (
        run_id        text NOT NULL,
        step          integer NOT NULL,
        iteration     integer NOT NULL,
        group_index   integer NOT NULL,
        sample_index  integer NOT NULL,
        PRIMARY KEY (run_id, iteration, group_index, sample_index),
        FOREIGN KEY (run_id, step) REFERENCES train_steps (run_id, step) ON DELETE CASCADE
      );
      CREATE INDEX train_step_samples_step ON train_step_samples (run_id, step);
    `,
  },
  {
    version: 3,
    name: 'checkpoint retention: pruned versions keep their row',
    sql: `
      -- Set when checkpoint retention deleted the version's files (store/checkpoint-registry.ts
      -- pruneCheckpoints). The row stays: lineage remains readable and a reader asking for the
      -- version is told it was pruned instead of finding files missing. NULL: the files are trusted.
      ALTER TABLE checkpoints ADD COLUMN pruned_at timestamptz;
    `,
  },
  {
    version: 4,
    name: 'train steps can be skipped (a non-finite update under train.on_non_finite = "skip")',
    sql: `
      -- skipped: the step's sample set was recorded and consumed, its update was not finite, so no
      -- version was published; the run went on from the same policy version.
      ALTER TABLE train_steps DROP CONSTRAINT train_steps_status_check;
      ALTER TABLE train_steps ADD CONSTRAINT train_steps_status_check CHECK (status IN ('selected', 'applied', 'skipped'));
      ALTER TABLE train_steps ADD COLUMN skip_reason text;
      ALTER TABLE train_steps ADD CONSTRAINT train_steps_skipped_check CHECK ((status = 'skipped') = (skip_reason IS NOT NULL));
    `,
  },
  {
    version: 5,
    name: 'stage spans: when each stage of a run was busy, on which worker',
    sql: `
      -- One row per completed stage activity (rollout generate, reference, train step, evaluation):
      -- the run's timeline (relax trace) and each role's busy and idle time come from here.
      CREATE TABLE stage_spans (
        id              bigserial PRIMARY KEY,
        run_id          text NOT NULL,
        role            text NOT NULL,
        stage           text NOT NULL,
        worker          text NOT NULL,
        step            integer,
        iteration       integer,
        policy_version  integer,
        started_at      timestamptz NOT NULL,
        ended_at        timestamptz NOT NULL,
        detail          jsonb NOT NULL DEFAULT '{}'::jsonb
      );
      CREATE INDEX stage_spans_run ON stage_spans (run_id, role, started_at);
    `,
  },
  {
    version: 6,
    name: 'samples reference their media by id',
    sql: `
      -- The ids ('sha256:<hex>') of the images and audio clips in a sample's tokens, in placeholder
      -- order, as a JSON array; the bytes live in the run's media store (engines/media/store.ts).
      -- NULL: a text-only sample.
      ALTER TABLE samples ADD COLUMN media jsonb;
    `,
  },
  {
    version: 7,
    name: 'runs started by a schedule',
    sql: `
      -- The Temporal Schedule that started the run (its id) and when it meant the run to start; NULL
      -- for a run started otherwise. checkpoint.init_from "schedule:<name>@latest" finds the
      -- schedule's most recent completed run through the index (training/policy-versions.ts).
      ALTER TABLE runs ADD COLUMN schedule_id text;
      ALTER TABLE runs ADD COLUMN scheduled_at timestamptz;
      CREATE INDEX runs_schedule ON runs (schedule_id, status, scheduled_at) WHERE schedule_id IS NOT NULL;
    `,
  },
  {
    version: 8,
    name: 'rollout engines; samples record the engine that produced them',
    sql: `
      -- Rollout capacity: one row per engine a capacity provider started or registered (a local
      -- rollout worker process today), kept after it is removed. The control API lists it
      -- (GET /rollout/engines); scaling operations (workflows/rollout-scaling.ts) change it.
      CREATE TABLE rollout_engines (
        engine_id    text PRIMARY KEY,
        kind         text NOT NULL,
        host         text NOT NULL,
        pid          integer,
        identity     text,
        url          text,
        state        text NOT NULL,
        initial      boolean NOT NULL DEFAULT false,
        detail       jsonb NOT NULL DEFAULT '{}'::jsonb,
        created_at   timestamptz NOT NULL DEFAULT now(),
        updated_at   timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT rollout_engines_state_known CHECK (state IN ('starting', 'active', 'draining', 'removed', 'failed'))
      );
      -- The identity of the rollout worker (its Temporal identity) that generated the sample; NULL
      -- for samples written before this column existed or by code that does not say.
      ALTER TABLE samples ADD COLUMN engine text;
    `,
  },
  {
    version: 9,
    name: "the transfer queue's references checked once per statement, not once per row",
    sql: `
      -- A foreign key checks each inserted row on its own: a lookup and a row lock on the parent per
      -- row. A train step writes about a thousand samples and as many set rows at a time, and those
      -- checks were about a third of that write's cost (PGlite: 82 -> 56 ms for 1,024 samples and
      -- their set). The same rules, checked once per statement over the rows it inserted; deleting
      -- a run or a train step still deletes what referenced it. Nothing updates these key columns.
      ALTER TABLE samples DROP CONSTRAINT samples_run_id_fkey;
      ALTER TABLE train_step_samples DROP CONSTRAINT train_step_samples_run_id_step_fkey;

      CREATE OR REPLACE FUNCTION relax_samples_of_known_runs() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF EXISTS (SELECT 1 FROM (SELECT DISTINCT run_id FROM added) a WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.run_id = a.run_id)) THEN
          RAISE foreign_key_violation USING MESSAGE = 'insert into samples: its run_id is not in runs (register the run first)';
        END IF;
        RETURN NULL;
      END $$;
      CREATE TRIGGER samples_of_known_runs AFTER INSERT ON samples
        REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION relax_samples_of_known_runs();

      CREATE OR REPLACE FUNCTION relax_sets_of_known_steps() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF EXISTS (SELECT 1 FROM (SELECT DISTINCT run_id, step FROM added) a
                    WHERE NOT EXISTS (SELECT 1 FROM train_steps t WHERE t.run_id = a.run_id AND t.step = a.step)) THEN
          RAISE foreign_key_violation USING MESSAGE = 'insert into train_step_samples: its (run_id, step) is not in train_steps (record the step first)';
        END IF;
        RETURN NULL;
      END $$;
      CREATE TRIGGER train_step_samples_of_known_steps AFTER INSERT ON train_step_samples
        REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION relax_sets_of_known_steps();

      CREATE OR REPLACE FUNCTION relax_delete_samples_of_runs() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        DELETE FROM samples s USING removed r WHERE s.run_id = r.run_id;
        RETURN NULL;
      END $$;
      CREATE TRIGGER runs_delete_samples AFTER DELETE ON runs
        REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION relax_delete_samples_of_runs();

      CREATE OR REPLACE FUNCTION relax_delete_sets_of_steps() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        DELETE FROM train_step_samples k USING removed r WHERE k.run_id = r.run_id AND k.step = r.step;
        RETURN NULL;
      END $$;
      CREATE TRIGGER train_steps_delete_sets AFTER DELETE ON train_steps
        REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION relax_delete_sets_of_steps();
    `,
  },
  {
    version: 10,
    name: 'sampled evaluations (pass@k, maj@k, mean@k) of policy versions',
    sql: `
      -- One row per (run, version, dataset, k, temperature, prompts, seed): a retried evaluation overwrites its row.
      CREATE TABLE evaluations (
        run_id          text NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
        policy_version  integer NOT NULL,
        dataset         text NOT NULL,
        k               integer NOT NULL,
        temperature     double precision NOT NULL,
        prompts         integer NOT NULL,
        seed            integer NOT NULL,
        step            integer NOT NULL,
        pass_at_1       double precision NOT NULL,
        pass_at_k       double precision NOT NULL,
        maj_at_k        double precision NOT NULL,
        mean_at_k       double precision NOT NULL,
        workflow_id     text,
        created_at      timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (run_id, policy_version, dataset, k, temperature, prompts, seed)
      );
    `,
  },
];

// An arbitrary constant shared by every Relax process: serializes concurrent migrators.
const MIGRATION_LOCK_KEY = 7_261_991;

/** Applies every pending migration in order; returns the versions it applied (empty when up to date). */
export async function migrate(pool: Pool): Promise<number[]> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK_KEY]);
    await client.query(`
      CREATE TABLE IF NOT EXISTS schema_migrations (
        version     integer PRIMARY KEY,
        name        text NOT NULL,
        applied_at  timestamptz NOT NULL DEFAULT now()
      )`);
    const { rows } = await client.query<{ version: number }>('SELECT version FROM schema_migrations');
    const done = new Set(rows.map((r) => r.version));
    const applied: number[] = [];
    for (const m of MIGRATIONS) {
      if (done.has(m.version)) continue;
      await client.query(m.sql);
      await client.query('INSERT INTO schema_migrations (version, name) VALUES ($1, $2)', [m.version, m.name]);
      applied.push(m.version);
    }
    await client.query('COMMIT');
    return applied;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    client.release();
  }
}

/** The newest migration version the database has, or 0 when none. */
export async function schemaVersion(pool: Pool): Promise<number> {
  const exists = await pool.query<{ t: string | null }>(`SELECT to_regclass('schema_migrations')::text AS t`);
  if (!exists.rows[0]?.t) return 0;
  const { rows } = await pool.query<{ v: number | null }>('SELECT max(version) AS v FROM schema_migrations');
  return rows[0]?.v ?? 0;
}

export const LATEST_SCHEMA_VERSION = MIGRATIONS[MIGRATIONS.length - 1].version;
