// The transfer queue: every stage meets here, never in the controller. Rollout writes samples
// already scored (ready to train on) or failed, the reference stage fills in reference log-probs, and
// a train step claims a batch, then records the advantages it computed for it.
//
// Exactly-once training rests on three things: a train step's sample set is chosen and recorded
// (train_steps + train_step_samples) in one transaction before the update runs; a retried step gets
// that recorded set back unchanged; and an update is marked applied once, with the policy version it
// produced. Every write is batched into one statement per chunk: the embedded database pays about a
// millisecond per statement, whatever its size.
//
// Over 400 lines because each statement and the validation of the columns it writes belong together:
// the checks mirror the table's constraints, so a bad sample is refused by name before anything is
// written, and the selection, retry and pruning statements share the exactly-once rules above.
import type { Pool } from 'pg';

/** A pool or a checked-out client: anything that runs one statement. */
export type Queryable = Pick<Pool, 'query'>;

export const SAMPLE_STATUSES = ['generated', 'scored', 'consumed', 'failed'] as const;
/**
 * generated: written but not ready to train on (insertSamples' default). scored: its reward is in,
 * ready to train on (what rollout writes). consumed: claimed by a train step (consumed_by_step).
 * failed: its reward function or environment threw; `error` says why, and it is never trained on.
 */
export type SampleStatus = (typeof SAMPLE_STATUSES)[number];

/** A sample's identity within its run; a retried rollout writes the same keys again. */
export interface SampleKey {
  iteration: number;
  groupIndex: number;
  sampleIndex: number;
}

/** A sample as rollout writes it. Per-token arrays cover the response tokens one for one. */
export interface NewSample extends SampleKey {
  promptTokens: ArrayLike<number>;
  responseTokens: ArrayLike<number>;
  /** 1 where the token is the policy's own (trained on), 0 for tool or environment output. */
  lossMask: ArrayLike<number>;
  rolloutLogprobs?: ArrayLike<number> | null;
  refLogprobs?: ArrayLike<number> | null;
  reward?: number | null;
  /** Named reward components, when the reward is a combination. */
  rewards?: Record<string, number> | null;
  advantage?: number | null;
  advantages?: ArrayLike<number> | null;
  /** The oldest policy version that generated any of its tokens: staleness is measured from it. */
  policyVersion: number;
  /** The policy version of each response token, when a sample spans a weight sync. */
  tokenVersions?: ArrayLike<number> | null;
  /** Defaults to 'generated'. */
  status?: Exclude<SampleStatus, 'consumed'>;
  /** Required with status 'failed'. */
  error?: string | null;
  /** The ids ('sha256:<hex>') of the media in the sample's tokens, in placeholder order (the bytes live in the media store). */
  media?: readonly string[] | null;
}

/** A stored sample, numbers as numbers. Log-probs, rewards and advantages are stored as float32 (real). */
export interface SampleRow extends SampleKey {
  runId: string;
  promptTokens: number[];
  responseTokens: number[];
  lossMask: number[];
  rolloutLogprobs: number[] | null;
  refLogprobs: number[] | null;
  reward: number | null;
  rewards: Record<string, number> | null;
  advantage: number | null;
  advantages: number[] | null;
  policyVersion: number;
  tokenVersions: number[] | null;
  status: SampleStatus;
  error: string | null;
  media: string[] | null;
  consumedByStep: number | null;
  createdAt: Date;
  updatedAt: Date;
}

export interface TrainStep {
  runId: string;
  step: number;
  /**
   * selected: its sample set is recorded; applied: the update ran and produced `policyVersion`;
   * skipped: the update was not finite and was dropped (train.on_non_finite "skip"), no version.
   */
  status: 'selected' | 'applied' | 'skipped';
  /** Why a skipped step was skipped. */
  skipReason: string | null;
  sampleCount: number;
  policyVersion: number | null;
  metrics: Record<string, number> | null;
  selectedAt: Date;
  appliedAt: Date | null;
}

/** A conflicting write to a train step (its update applied with another version, a version reused, samples gone). */
export class TrainStepConflictError extends Error {
  override readonly name = 'TrainStepConflictError';
}

// ---------------------------------------------------------------------------------------------
// Rows in and out

interface SampleDbRow {
  run_id: string;
  iteration: number;
  group_index: number;
  sample_index: number;
  prompt_tokens: number[];
  response_tokens: number[];
  loss_mask: number[];
  rollout_logprobs: number[] | null;
  ref_logprobs: number[] | null;
  reward: number | null;
  rewards: Record<string, number> | null;
  advantage: number | null;
  advantages: number[] | null;
  policy_version: number;
  token_versions: number[] | null;
  status: SampleStatus;
  error: string | null;
  media: string[] | null;
  consumed_by_step: number | null;
  created_at: Date;
  updated_at: Date;
}

// Per-token arrays come back as JSON (parsed natively by JSON.parse) rather than Postgres array
// literals (parsed character by character in JS): reading a 1,024-sample train batch is the data
// plane's hot path. Values are identical: real -> JSON prints the shortest exact float4 text.
const SAMPLE_COLUMNS = `run_id, iteration, group_index, sample_index, array_to_json(prompt_tokens) AS prompt_tokens,
  array_to_json(response_tokens) AS response_tokens, array_to_json(loss_mask) AS loss_mask,
  array_to_json(rollout_logprobs) AS rollout_logprobs, array_to_json(ref_logprobs) AS ref_logprobs, reward, rewards,
  advantage, array_to_json(advantages) AS advantages, policy_version, array_to_json(token_versions) AS token_versions,
  status, error, media, consumed_by_step, created_at, updated_at`;

function sampleFromDb(r: SampleDbRow): SampleRow {
  return {
    runId: r.run_id,
    iteration: r.iteration,
    groupIndex: r.group_index,
    sampleIndex: r.sample_index,
    promptTokens: r.prompt_tokens,
    responseTokens: r.response_tokens,
    lossMask: r.loss_mask,
    rolloutLogprobs: r.rollout_logprobs,
    refLogprobs: r.ref_logprobs,
    reward: r.reward,
    rewards: r.rewards,
    advantage: r.advantage,
    advantages: r.advantages,
    policyVersion: r.policy_version,
    tokenVersions: r.token_versions,
    status: r.status,
    error: r.error,
    media: r.media,
    consumedByStep: r.consumed_by_step,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
  };
}

interface TrainStepDbRow {
  run_id: string;
  step: number;
  status: 'selected' | 'applied' | 'skipped';
  sample_count: number;
  policy_version: number | null;
  metrics: Record<string, number> | null;
  skip_reason?: string | null;
  selected_at: Date;
  applied_at: Date | null;
}

function trainStepFromDb(r: TrainStepDbRow): TrainStep {
  return {
    runId: r.run_id,
    step: r.step,
    status: r.status,
    sampleCount: r.sample_count,
    policyVersion: r.policy_version,
    metrics: r.metrics,
    skipReason: r.skip_reason ?? null,
    selectedAt: r.selected_at,
    appliedAt: r.applied_at,
  };
}

function describeKey(k: SampleKey): string {
  return `(iteration ${k.iteration}, group ${k.groupIndex}, index ${k.sampleIndex})`;
}

// Ragged per-sample arrays travel as one text[] of Postgres array literals (cast server-side), so a
// batch of any size is a fixed handful of parameters. Integers as they are; reals as the float32
// they are stored as, to 9 significant digits (enough to name any float32 exactly, so the column
// holds Math.fround(x) as before, from about half the characters String(x) takes, which Postgres parses
// faster too). 'NaN', 'Infinity' and '-Infinity' are valid literals.
function intArrayLiteral(values: ArrayLike<number> | null | undefined): string | null {
  return values == null ? null : `{${Array.prototype.join.call(values, ',')}}`;
}

function realArrayLiteral(values: ArrayLike<number> | null | undefined): string | null {
  if (values == null) return null;
  let literal = '{';
  for (let i = 0; i < values.length; i++) literal += (i ? ',' : '') + realLiteral(values[i]);
  return literal + '}';
}

function realLiteral(x: number): string {
  const f = Math.fround(x);
  // Past float32's range (or NaN, an infinity): as written, for Postgres to accept or refuse. A value
  // too small for float32 is its nearest float32, (-)0, as in memory (training/sample-buffer.ts).
  if (!Number.isFinite(f)) return String(x);
  if (Object.is(f, -0)) return '-0';
  return Number.isInteger(f) ? String(f) : f.toPrecision(9);
}

function keyColumns(keys: readonly SampleKey[]): [number[], number[], number[]] {
  return [keys.map((k) => k.iteration), keys.map((k) => k.groupIndex), keys.map((k) => k.sampleIndex)];
}

function checkNonNegativeInteger(value: number, what: string): void {
  if (!Number.isInteger(value) || value < 0) throw new Error(`${what} must be a non-negative integer, got ${value}`);
}

function checkKeys(keys: readonly SampleKey[], what: string): void {
  const seen = new Set<string>();
  keys.forEach((k, i) => {
    checkNonNegativeInteger(k.iteration, `${what}[${i}].iteration`);
    checkNonNegativeInteger(k.groupIndex, `${what}[${i}].groupIndex`);
    checkNonNegativeInteger(k.sampleIndex, `${what}[${i}].sampleIndex`);
    const id = `${k.iteration}/${k.groupIndex}/${k.sampleIndex}`;
    if (seen.has(id)) throw new Error(`${what}[${i}] ${describeKey(k)} appears twice in one batch; each sample is written once per call`);
    seen.add(id);
  });
}

function checkFinite(value: number | null | undefined, what: string): void {
  if (value != null && !Number.isFinite(value)) throw new Error(`${what} must be a finite number, got ${value}`);
}

function checkPerToken(values: ArrayLike<number> | null | undefined, responseLength: number, what: string): void {
  if (values != null && values.length !== responseLength) {
    throw new Error(`${what} has ${values.length} entries but the response has ${responseLength} tokens: per-token arrays cover the response tokens one for one`);
  }
}

function checkIntegers(values: ArrayLike<number>, what: string): void {
  for (let i = 0; i < values.length; i++) {
    if (!Number.isInteger(values[i])) throw new Error(`${what}[${i}] must be an integer, got ${values[i]}`);
  }
}

function checkNewSample(s: NewSample, where: string): void {
  checkIntegers(s.promptTokens, `${where}.promptTokens`);
  checkIntegers(s.responseTokens, `${where}.responseTokens`);
  const n = s.responseTokens.length;
  checkPerToken(s.lossMask, n, `${where}.lossMask`);
  for (let i = 0; i < s.lossMask.length; i++) {
    if (s.lossMask[i] !== 0 && s.lossMask[i] !== 1) throw new Error(`${where}.lossMask[${i}] must be 0 or 1, got ${s.lossMask[i]}`);
  }
  checkPerToken(s.rolloutLogprobs, n, `${where}.rolloutLogprobs`);
  checkPerToken(s.refLogprobs, n, `${where}.refLogprobs`);
  checkPerToken(s.advantages, n, `${where}.advantages`);
  checkPerToken(s.tokenVersions, n, `${where}.tokenVersions`);
  if (s.tokenVersions != null) checkIntegers(s.tokenVersions, `${where}.tokenVersions`);
  checkNonNegativeInteger(s.policyVersion, `${where}.policyVersion`);
  checkFinite(s.reward, `${where}.reward`);
  checkFinite(s.advantage, `${where}.advantage`);
  const status = s.status ?? 'generated';
  if (!(['generated', 'scored', 'failed'] as const).includes(status)) {
    throw new Error(`${where}.status must be 'generated', 'scored' or 'failed', got ${JSON.stringify(status)} (samples become 'consumed' only through selectTrainBatch)`);
  }
  if (status === 'failed' && !s.error) throw new Error(`${where}.error is required when status is 'failed'`);
  if (s.media != null) {
    if (!Array.isArray(s.media) || s.media.length > MAX_MEDIA_PER_SAMPLE) throw new Error(`${where}.media must be an array of at most ${MAX_MEDIA_PER_SAMPLE} media ids`);
    s.media.forEach((id, i) => {
      if (typeof id !== 'string' || !MEDIA_ID.test(id)) throw new Error(`${where}.media[${i}] is not a media id ('sha256:' and 64 lowercase hex digits, as the media store returns)`);
    });
  }
}

const MEDIA_ID = /^sha256:[0-9a-f]{64}$/;
const MAX_MEDIA_PER_SAMPLE = 256;

/** Splits `items` into runs whose total weight stays within `budget` (a single heavier item goes alone). */
function chunkByWeight<T>(items: readonly T[], weight: (item: T) => number, budget: number): T[][] {
  const out: T[][] = [];
  let current: T[] = [];
  let total = 0;
  for (const item of items) {
    const w = weight(item);
    if (current.length > 0 && total + w > budget) {
      out.push(current);
      current = [];
      total = 0;
    }
    current.push(item);
    total += w;
  }
  if (current.length > 0) out.push(current);
  return out;
}

// About 8 bytes of text per array element: a 1M-element statement is ~8 MB on the wire.
const DEFAULT_ELEMENTS_PER_STATEMENT = 1_000_000;
// Scalars and keys of a row, counted as elements so a batch of tiny samples is still bounded.
const ROW_OVERHEAD_ELEMENTS = 16;

function sampleWeight(s: Omit<NewSample, 'status'>): number {
  return (
    ROW_OVERHEAD_ELEMENTS +
    s.promptTokens.length +
    s.responseTokens.length * 2 +
    (s.rolloutLogprobs?.length ?? 0) +
    (s.refLogprobs?.length ?? 0) +
    (s.advantages?.length ?? 0) +
    (s.tokenVersions?.length ?? 0)
  );
}

// ---------------------------------------------------------------------------------------------
// Writes by rollout, the reference stage and the train step's advantages

export interface InsertSamplesOptions {
  /** Upper bound on array elements per INSERT statement; bounds statement size, not row count. */
  maxElementsPerStatement?: number;
  /** The rollout engine (worker identity) that generated these samples, recorded in `samples.engine`. */
  engine?: string;
}

export interface InsertSamplesResult {
  /** Rows inserted or overwritten. */
  written: number;
  /** Rows left untouched because a train step already consumed that key. */
  skippedConsumed: number;
}

const INSERT_SAMPLES_SQL = `
  INSERT INTO samples AS s (run_id, iteration, group_index, sample_index, prompt_tokens, response_tokens, loss_mask,
                            rollout_logprobs, ref_logprobs, reward, rewards, advantage, advantages, policy_version,
                            token_versions, status, error, media, engine, consumed_by_step)
  SELECT $1::text, u.iteration, u.group_index, u.sample_index, u.prompt_tokens::integer[], u.response_tokens::integer[],
         u.loss_mask::smallint[], u.rollout_logprobs::real[], u.ref_logprobs::real[], u.reward, u.rewards, u.advantage,
         u.advantages::real[], u.policy_version, u.token_versions::integer[], u.status, u.error, u.media, $19::text,
         CASE WHEN u.status = 'consumed' THEN $20::integer END
    FROM unnest($2::integer[], $3::integer[], $4::integer[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[],
                $10::real[], $11::jsonb[], $12::real[], $13::text[], $14::integer[], $15::text[], $16::text[], $17::text[], $18::jsonb[])
         AS u(iteration, group_index, sample_index, prompt_tokens, response_tokens, loss_mask, rollout_logprobs,
              ref_logprobs, reward, rewards, advantage, advantages, policy_version, token_versions, status, error, media)
   -- A key some train step consumed stays consumed, even after its row was pruned.
   WHERE NOT EXISTS (SELECT 1 FROM train_step_samples t
                      WHERE t.run_id = $1 AND t.iteration = u.iteration AND t.group_index = u.group_index
                        AND t.sample_index = u.sample_index)
  ON CONFLICT (run_id, iteration, group_index, sample_index) DO UPDATE SET
    prompt_tokens = EXCLUDED.prompt_tokens, response_tokens = EXCLUDED.response_tokens, loss_mask = EXCLUDED.loss_mask,
    rollout_logprobs = EXCLUDED.rollout_logprobs, ref_logprobs = EXCLUDED.ref_logprobs, reward = EXCLUDED.reward,
    rewards = EXCLUDED.rewards, advantage = EXCLUDED.advantage, advantages = EXCLUDED.advantages,
    policy_version = EXCLUDED.policy_version, token_versions = EXCLUDED.token_versions, status = EXCLUDED.status,
    error = EXCLUDED.error, media = EXCLUDED.media, engine = EXCLUDED.engine, consumed_by_step = EXCLUDED.consumed_by_step,
    updated_at = now()
  WHERE s.consumed_by_step IS NULL`;

/**
 * Writes samples of one run, one INSERT per chunk. Idempotent per key: a retried rollout overwrites
 * its own rows entirely, but a sample a train step has consumed is never touched again.
 */
export async function insertSamples(db: Queryable, runId: string, samples: readonly NewSample[], options: InsertSamplesOptions = {}): Promise<InsertSamplesResult> {
  checkKeys(samples, 'samples');
  samples.forEach((s, i) => checkNewSample(s, `samples[${i}] ${describeKey(s)}`));
  return writeSamples(db, runId, samples, options);
}

/** The INSERT itself; `consumedBy`: rows with status 'consumed' (recordGeneratedStep) are consumed by that step. */
async function writeSamples(db: Queryable, runId: string, samples: ReadonlyArray<Omit<NewSample, 'status'> & { status?: SampleStatus }>, options: InsertSamplesOptions, consumedBy?: number): Promise<InsertSamplesResult> {
  const budget = options.maxElementsPerStatement ?? DEFAULT_ELEMENTS_PER_STATEMENT;
  let written = 0;
  for (const chunk of chunkByWeight(samples, sampleWeight, budget)) {
    const { rowCount } = await db.query(INSERT_SAMPLES_SQL, [
      runId,
      ...keyColumns(chunk),
      chunk.map((s) => intArrayLiteral(s.promptTokens)),
      chunk.map((s) => intArrayLiteral(s.responseTokens)),
      chunk.map((s) => intArrayLiteral(s.lossMask)),
      chunk.map((s) => realArrayLiteral(s.rolloutLogprobs)),
      chunk.map((s) => realArrayLiteral(s.refLogprobs)),
      chunk.map((s) => s.reward ?? null),
      chunk.map((s) => (s.rewards == null ? null : JSON.stringify(s.rewards))),
      chunk.map((s) => s.advantage ?? null),
      chunk.map((s) => realArrayLiteral(s.advantages)),
      chunk.map((s) => s.policyVersion),
      chunk.map((s) => intArrayLiteral(s.tokenVersions)),
      chunk.map((s) => s.status ?? 'generated'),
      chunk.map((s) => s.error ?? null),
      chunk.map((s) => (s.media == null ? null : JSON.stringify(s.media))),
      options.engine ?? null,
      consumedBy ?? null,
    ]);
    written += rowCount ?? 0;
  }
  return { written, skippedConsumed: samples.length - written };
}

export interface SampleFilter {
  iteration?: number | readonly number[];
  status?: SampleStatus | readonly SampleStatus[];
  keys?: readonly SampleKey[];
  consumedByStep?: number;
  /** At most this many rows, in key order. */
  limit?: number;
}

/** Samples of one run matching every given filter, ordered by (iteration, group, index). */
export async function readSamples(db: Queryable, runId: string, filter: SampleFilter = {}): Promise<SampleRow[]> {
  const params: unknown[] = [runId];
  const where = ['run_id = $1'];
  const param = (v: unknown) => `$${params.push(v)}`;
  if (filter.iteration !== undefined) {
    where.push(`iteration = ANY(${param(typeof filter.iteration === 'number' ? [filter.iteration] : filter.iteration)}::integer[])`);
  }
  if (filter.status !== undefined) {
    where.push(`status = ANY(${param(typeof filter.status === 'string' ? [filter.status] : filter.status)}::text[])`);
  }
  if (filter.keys !== undefined) {
    const [it, g, i] = keyColumns(filter.keys);
    where.push(`(iteration, group_index, sample_index) IN (SELECT * FROM unnest(${param(it)}::integer[], ${param(g)}::integer[], ${param(i)}::integer[]))`);
  }
  if (filter.consumedByStep !== undefined) where.push(`consumed_by_step = ${param(filter.consumedByStep)}`);
  let sql = `SELECT ${SAMPLE_COLUMNS} FROM samples WHERE ${where.join(' AND ')} ORDER BY iteration, group_index, sample_index`;
  if (filter.limit !== undefined) {
    checkNonNegativeInteger(filter.limit, 'limit');
    sql += ` LIMIT ${param(filter.limit)}`;
  }
  const { rows } = await db.query<SampleDbRow>(sql, params);
  return rows.map(sampleFromDb);
}

// The reference stage only touches samples still in flight: never a consumed or a failed one.
const IN_FLIGHT = `s.status IN ('generated', 'scored')`;
const KEY_JOIN = 's.run_id = $1 AND s.iteration = u.iteration AND s.group_index = u.group_index AND s.sample_index = u.sample_index';

// A per-token array of the wrong length violates samples_per_token_lengths; name the sample instead.
async function withLengthDiagnosis<T>(db: Queryable, runId: string, field: string, rows: ReadonlyArray<SampleKey & { values: ArrayLike<number> }>, run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (err) {
    if ((err as { code?: string; constraint?: string }).constraint !== 'samples_per_token_lengths') throw err;
    // Inside a caller's (now aborted) transaction this lookup fails too: then the original error stands.
    const lengths = await db
      .query<{ iteration: number; group_index: number; sample_index: number; n: number }>(
        `SELECT iteration, group_index, sample_index, cardinality(response_tokens) AS n FROM samples
          WHERE run_id = $1 AND (iteration, group_index, sample_index) IN (SELECT * FROM unnest($2::integer[], $3::integer[], $4::integer[]))`,
        [runId, ...keyColumns(rows)],
      )
      .then((r) => r.rows, () => []);
    const responseLength = new Map(lengths.map((l) => [`${l.iteration}/${l.group_index}/${l.sample_index}`, l.n]));
    for (const r of rows) {
      const n = responseLength.get(`${r.iteration}/${r.groupIndex}/${r.sampleIndex}`);
      if (n !== undefined && r.values.length !== n) checkPerToken(r.values, n, `${field} of sample ${describeKey(r)}`);
    }
    throw err;
  }
}

export interface ReferenceLogprobsUpdate extends SampleKey {
  refLogprobs: ArrayLike<number>;
}

/** Writes the reference policy's per-token log-probs; returns how many in-flight samples it updated. */
export async function setReferenceLogprobs(db: Queryable, runId: string, updates: readonly ReferenceLogprobsUpdate[]): Promise<number> {
  checkKeys(updates, 'updates');
  return withLengthDiagnosis(db, runId, 'refLogprobs', updates.map((u) => ({ ...u, values: u.refLogprobs })), async () => {
    const { rowCount } = await db.query(
      `UPDATE samples s SET ref_logprobs = u.ref_logprobs::real[], updated_at = now()
         FROM unnest($2::integer[], $3::integer[], $4::integer[], $5::text[]) AS u(iteration, group_index, sample_index, ref_logprobs)
        WHERE ${KEY_JOIN} AND ${IN_FLIGHT}`,
      [runId, ...keyColumns(updates), updates.map((u) => realArrayLiteral(u.refLogprobs))],
    );
    return rowCount ?? 0;
  });
}

/** A judge's verdict on one sample (reward.judge): its reward, or why it failed. */
export type JudgedReward = SampleKey & ({ reward: number; error?: undefined } | { reward?: undefined; error: string });

/**
 * Writes the judge's verdicts on samples awaiting one (status 'generated'): a reward makes the sample
 * 'scored' (the reward the rollout computed kept as rewards.task, the judge's as rewards.judge), an
 * error makes it 'failed'. A retry skips what is written. Returns how many samples it updated.
 */
export async function setJudgedRewards(db: Queryable, runId: string, verdicts: readonly JudgedReward[]): Promise<number> {
  checkKeys(verdicts, 'verdicts');
  verdicts.forEach((v, i) => (v.error === undefined ? checkFinite(v.reward, `verdicts[${i}].reward`) : undefined));
  const { rowCount } = await db.query(
    `UPDATE samples s SET reward = u.reward,
            rewards = CASE WHEN u.error IS NULL THEN COALESCE(s.rewards, '{}'::jsonb) || jsonb_strip_nulls(jsonb_build_object('task', s.reward, 'judge', u.reward)) ELSE s.rewards END,
            status = CASE WHEN u.error IS NULL THEN 'scored' ELSE 'failed' END, error = u.error, updated_at = now()
       FROM unnest($2::integer[], $3::integer[], $4::integer[], $5::real[], $6::text[]) AS u(iteration, group_index, sample_index, reward, error)
      WHERE ${KEY_JOIN} AND s.status = 'generated'`,
    [runId, ...keyColumns(verdicts), verdicts.map((v) => (v.error === undefined ? v.reward : null)), verdicts.map((v) => v.error ?? null)],
  );
  return rowCount ?? 0;
}

export interface AdvantageUpdate extends SampleKey {
  advantage: number;
}

/**
 * Records the advantages a train step computed for its own sample set (rows it consumed), so the
 * transfer queue shows what each sample was trained with. Returns how many rows it updated.
 */
export async function recordStepAdvantages(db: Queryable, runId: string, step: number, updates: readonly AdvantageUpdate[]): Promise<number> {
  checkKeys(updates, 'updates');
  updates.forEach((u, i) => checkFinite(u.advantage, `updates[${i}].advantage`));
  const { rowCount } = await db.query(
    `UPDATE samples s SET advantage = u.advantage, updated_at = now()
       FROM unnest($2::integer[], $3::integer[], $4::integer[], $5::real[]) AS u(iteration, group_index, sample_index, advantage)
      WHERE ${KEY_JOIN} AND s.consumed_by_step = $6`,
    [runId, ...keyColumns(updates), updates.map((u) => u.advantage), step],
  );
  return rowCount ?? 0;
}

// ---------------------------------------------------------------------------------------------
// Train steps: exactly-once consumption

export interface SelectTrainBatchOptions {
  /** Take at most this many samples. */
  size: number;
  /** Record nothing and return null when fewer samples are ready. Default 1. */
  minSize?: number;
  /** Only samples generated by policy versions >= currentPolicyVersion - maxStaleness. */
  maxStaleness?: number;
  currentPolicyVersion?: number;
  /** Only samples whose reference log-probs are written (the KL term needs them). */
  requireRefLogprobs?: boolean;
  /** Only samples of this rollout iteration (a step trains one whole iteration). */
  iteration?: number;
}

export interface TrainBatch {
  step: TrainStep;
  /** Ordered by (iteration, group, index). */
  samples: SampleRow[];
  /** The set's keys, in the same order. */
  keys: SampleKey[];
  /** True when the step had been selected before (a retry): these are the samples recorded then. */
  reused: boolean;
}

/**
 * Chooses and records the sample set of train step `step`, in one transaction, before any update runs.
 * If the step was selected before, returns exactly that set again (whatever the options now say), and
 * its status tells whether the update was already applied. Otherwise claims up to `size` ready samples,
 * oldest iteration first, skipping rows another selector holds, so concurrent steps never overlap.
 * Returns null, recording nothing, when fewer than `minSize` samples are ready.
 */
export async function selectTrainBatch(pool: Pool, runId: string, step: number, options: SelectTrainBatchOptions): Promise<TrainBatch | null> {
  checkNonNegativeInteger(step, 'step');
  const { size, minSize = 1, maxStaleness, currentPolicyVersion, requireRefLogprobs = false, iteration } = options;
  if (iteration !== undefined) checkNonNegativeInteger(iteration, 'iteration');
  if (!Number.isInteger(size) || size < 1) throw new Error(`size must be a positive integer, got ${size}`);
  if (!Number.isInteger(minSize) || minSize < 1 || minSize > size) throw new Error(`minSize must be an integer in [1, size=${size}], got ${minSize}`);
  if ((maxStaleness === undefined) !== (currentPolicyVersion === undefined)) {
    throw new Error('maxStaleness and currentPolicyVersion go together: staleness is measured from the current policy version');
  }
  if (maxStaleness !== undefined) checkNonNegativeInteger(maxStaleness, 'maxStaleness');
  if (currentPolicyVersion !== undefined) checkNonNegativeInteger(currentPolicyVersion, 'currentPolicyVersion');

  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    // Claiming the step row first serializes two selectors of the same step: the second waits here
    // for the first to commit, then finds the row and reads the recorded set.
    const claimed = await client.query<TrainStepDbRow>(
      `INSERT INTO train_steps (run_id, step, status, sample_count) VALUES ($1, $2, 'selected', 0)
       ON CONFLICT (run_id, step) DO NOTHING RETURNING *`,
      [runId, step],
    );
    if (claimed.rowCount === 0) {
      const batch = await recordedBatch(client, runId, step);
      await client.query('COMMIT');
      return batch;
    }
    const params: unknown[] = [runId, step, size];
    const fresh = maxStaleness === undefined ? '' : `AND policy_version >= $${params.push(currentPolicyVersion! - maxStaleness)}`;
    const withRef = requireRefLogprobs ? 'AND ref_logprobs IS NOT NULL' : '';
    const ofIteration = iteration === undefined ? '' : `AND iteration = $${params.push(iteration)}`;
    const { rows } = await client.query<SampleDbRow>(
      // The picked rows are joined back by ctid (a Tid Scan each; they stay locked until the UPDATE):
      // joined on the key, PostgreSQL's estimate for a new run (about one row) chose a nested loop
      // comparing every picked row with every row of the run: 0.3 s for 1,024 samples, growing with
      // the samples the run keeps.
      `WITH picked AS (
         SELECT ctid FROM samples
          WHERE run_id = $1 AND status = 'scored' ${fresh} ${withRef} ${ofIteration}
          ORDER BY iteration, group_index, sample_index
          LIMIT $3
          FOR UPDATE SKIP LOCKED
       ), consumed AS (
         UPDATE samples s SET status = 'consumed', consumed_by_step = $2, updated_at = now()
           FROM picked p
          WHERE s.ctid = p.ctid
         RETURNING s.*
       ), recorded AS (
         INSERT INTO train_step_samples (run_id, step, iteration, group_index, sample_index)
         SELECT $1, $2, iteration, group_index, sample_index FROM consumed
       )
       SELECT ${SAMPLE_COLUMNS} FROM consumed ORDER BY iteration, group_index, sample_index`,
      params,
    );
    if (rows.length < minSize) {
      await client.query('ROLLBACK');
      return null;
    }
    const stepRow = await client.query<TrainStepDbRow>('UPDATE train_steps SET sample_count = $3 WHERE run_id = $1 AND step = $2 RETURNING *', [runId, step, rows.length]);
    await client.query('COMMIT');
    const samples = rows.map(sampleFromDb);
    return { step: trainStepFromDb(stepRow.rows[0]), samples, keys: samples.map(keyOf), reused: false };
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    client.release();
  }
}

async function recordedBatch(db: Queryable, runId: string, step: number): Promise<TrainBatch> {
  const stepRow = await db.query<TrainStepDbRow>('SELECT * FROM train_steps WHERE run_id = $1 AND step = $2', [runId, step]);
  const { rows } = await db.query<SampleDbRow>(
    `SELECT ${SAMPLE_COLUMNS} FROM samples
      WHERE (run_id, iteration, group_index, sample_index) IN
            (SELECT run_id, iteration, group_index, sample_index FROM train_step_samples WHERE run_id = $1 AND step = $2)
      ORDER BY iteration, group_index, sample_index`,
    [runId, step],
  );
  const trainStep = trainStepFromDb(stepRow.rows[0]);
  if (rows.length !== trainStep.sampleCount) {
    throw new TrainStepConflictError(
      `train step ${step} of run ${runId} recorded ${trainStep.sampleCount} samples but only ${rows.length} are still stored (pruned?): ` +
        'the step cannot be replayed; prune only steps that are applied (pruneConsumed does)',
    );
  }
  const samples = rows.map(sampleFromDb);
  return { step: trainStep, samples, keys: samples.map(keyOf), reused: true };
}

/**
 * Placement "colocated": a train step's samples were generated in the trainer's process, which trains
 * on them as they are. Writes them (the trained ones consumed by `step`, with their advantages; the
 * failed ones failed) and records them as the step's set, in one transaction: one INSERT of the rows
 * instead of an INSERT, the claim's UPDATE and the advantages' UPDATE. If the step already has a
 * set (another attempt recorded it), writes nothing and returns that set's keys (`reused`).
 */
export async function recordGeneratedStep(pool: Pool, runId: string, step: number, samples: readonly NewSample[], advantages: ReadonlyArray<SampleKey & { advantage: number }>, options: InsertSamplesOptions = {}): Promise<{ keys: SampleKey[]; reused: boolean }> {
  checkNonNegativeInteger(step, 'step');
  checkKeys(samples, 'samples');
  samples.forEach((s, i) => checkNewSample(s, `samples[${i}] ${describeKey(s)}`));
  advantages.forEach((u, i) => checkFinite(u.advantage, `advantages[${i}].advantage`));
  const trained = new Map(advantages.map((a) => [`${a.iteration}/${a.groupIndex}/${a.sampleIndex}`, a.advantage]));
  const rows = samples.map((s) => {
    const advantage = trained.get(`${s.iteration}/${s.groupIndex}/${s.sampleIndex}`);
    if (advantage === undefined) return s;
    if (s.status !== 'scored') throw new Error(`sample ${describeKey(s)} is trained on but its status is ${s.status}; only scored samples are`);
    return { ...s, status: 'consumed' as const, advantage };
  });
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const claimed = await client.query(
      `INSERT INTO train_steps (run_id, step, status, sample_count) VALUES ($1, $2, 'selected', $3) ON CONFLICT (run_id, step) DO NOTHING RETURNING step`,
      [runId, step, advantages.length],
    );
    if (claimed.rowCount === 0) {
      const batch = await recordedBatch(client, runId, step);
      await client.query('COMMIT');
      return { keys: batch.keys, reused: true };
    }
    const { written } = await writeSamples(client, runId, rows, options, step);
    if (written !== samples.length) {
      throw new TrainStepConflictError(`train step ${step} of run ${runId}: ${samples.length - written} of its ${samples.length} samples were consumed by another step already`);
    }
    const recorded = await client.query(
      `INSERT INTO train_step_samples (run_id, step, iteration, group_index, sample_index)
       SELECT $1, $2, u.iteration, u.group_index, u.sample_index FROM unnest($3::integer[], $4::integer[], $5::integer[]) AS u(iteration, group_index, sample_index)`,
      [runId, step, ...keyColumns(advantages)],
    );
    if (recorded.rowCount !== advantages.length) throw new TrainStepConflictError(`train step ${step} of run ${runId}: its set could not be recorded whole`);
    await client.query('COMMIT');
    return { keys: advantages.map(({ iteration, groupIndex, sampleIndex }) => ({ iteration, groupIndex, sampleIndex })), reused: false };
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    client.release();
  }
}

function keyOf(r: { iteration: number; group_index?: number; sample_index?: number; groupIndex?: number; sampleIndex?: number }): SampleKey {
  return { iteration: r.iteration, groupIndex: (r.groupIndex ?? r.group_index) as number, sampleIndex: (r.sampleIndex ?? r.sample_index) as number };
}

export async function getTrainStep(db: Queryable, runId: string, step: number): Promise<TrainStep | undefined> {
  const { rows } = await db.query<TrainStepDbRow>('SELECT * FROM train_steps WHERE run_id = $1 AND step = $2', [runId, step]);
  return rows[0] && trainStepFromDb(rows[0]);
}

export interface StepApplied {
  /** The policy version this update produced. */
  policyVersion: number;
  metrics?: Record<string, number>;
}

/**
 * Records that step `step` consumed its sample set but its update was dropped (not finite): no
 * policy version. Idempotent; a step already applied cannot be skipped.
 */
export async function markStepSkipped(db: Queryable, runId: string, step: number, reason: string): Promise<TrainStep> {
  checkNonNegativeInteger(step, 'step');
  if (!reason) throw new Error('reason is required: say why the step was skipped');
  const updated = await db.query<TrainStepDbRow>(
    `UPDATE train_steps SET status = 'skipped', skip_reason = $3 WHERE run_id = $1 AND step = $2 AND status = 'selected' RETURNING *`,
    [runId, step, reason],
  );
  if (updated.rows[0]) return trainStepFromDb(updated.rows[0]);
  const existing = await getTrainStep(db, runId, step);
  if (!existing) throw new Error(`train step ${step} of run ${runId} was never selected: call selectTrainBatch first`);
  if (existing.status === 'applied') throw new TrainStepConflictError(`train step ${step} of run ${runId} was already applied (policy version ${existing.policyVersion}); it cannot be skipped`);
  return existing;
}

/**
 * Records that step `step`'s update ran and produced `policyVersion`. Idempotent: a repeat with the
 * same version returns the step as first recorded; a different version, or a version another step
 * already produced, throws TrainStepConflictError (an update is never applied twice).
 */
export async function markStepApplied(db: Queryable, runId: string, step: number, applied: StepApplied): Promise<TrainStep> {
  checkNonNegativeInteger(step, 'step');
  checkNonNegativeInteger(applied.policyVersion, 'policyVersion');
  for (const [name, v] of Object.entries(applied.metrics ?? {})) checkFinite(v, `metrics.${name}`);
  let updated;
  try {
    updated = await db.query<TrainStepDbRow>(
      `UPDATE train_steps SET status = 'applied', policy_version = $3, metrics = $4, applied_at = now()
        WHERE run_id = $1 AND step = $2 AND status = 'selected' RETURNING *`,
      [runId, step, applied.policyVersion, applied.metrics === undefined ? null : JSON.stringify(applied.metrics)],
    );
  } catch (err) {
    if ((err as { code?: string; constraint?: string }).constraint !== 'train_steps_policy_version') throw err;
    const other = await db
      .query<{ step: number }>('SELECT step FROM train_steps WHERE run_id = $1 AND policy_version = $2', [runId, applied.policyVersion])
      .then((r) => `train step ${r.rows[0]?.step}`, () => 'another train step');
    throw new TrainStepConflictError(`policy version ${applied.policyVersion} of run ${runId} was already produced by ${other}; train step ${step} must produce a new version`);
  }
  if (updated.rows[0]) return trainStepFromDb(updated.rows[0]);
  const existing = await getTrainStep(db, runId, step);
  if (!existing) throw new Error(`train step ${step} of run ${runId} was never selected: call selectTrainBatch before applying its update`);
  if (existing.policyVersion !== applied.policyVersion) {
    throw new TrainStepConflictError(
      `train step ${step} of run ${runId} was already applied and produced policy version ${existing.policyVersion}; refusing to record it again as version ${applied.policyVersion} (an update is applied once)`,
    );
  }
  return existing;
}

export interface PruneConsumedOptions {
  /** Keep the consumed samples of this many newest steps (by step number). */
  keepLastSteps: number;
}

/**
 * Deletes consumed samples of applied steps older than the newest `keepLastSteps` steps. Samples
 * of a step not yet applied are always kept (a retry needs them); train_steps and the recorded keys
 * stay, so a pruned sample can never be re-inserted and trained on again. Returns rows deleted.
 */
export async function pruneConsumed(db: Queryable, runId: string, { keepLastSteps }: PruneConsumedOptions): Promise<number> {
  checkNonNegativeInteger(keepLastSteps, 'keepLastSteps');
  const { rowCount } = await db.query(
    `DELETE FROM samples s USING train_steps t
      WHERE s.run_id = $1 AND t.run_id = $1 AND s.consumed_by_step = t.step AND t.status = 'applied'
        AND t.step <= (SELECT max(step) FROM train_steps WHERE run_id = $1) - $2`,
    [runId, keepLastSteps],
  );
  return rowCount ?? 0;
}

export interface QueueStats {
  /** Stored samples by status (pruned ones are gone). */
  byStatus: Record<SampleStatus, number>;
  /** Oldest iteration with a sample still to train on (not consumed, not failed); null when none. */
  oldestUnconsumedIteration: number | null;
  /** Newest policy version that generated a stored sample. */
  newestSamplePolicyVersion: number | null;
  lastSelectedStep: number | null;
  lastAppliedStep: number | null;
  /** The policy version the newest applied update produced. */
  lastAppliedPolicyVersion: number | null;
}

/** One query summarizing a run's queue, for progress reports. */
export async function queueStats(db: Queryable, runId: string): Promise<QueueStats> {
  const { rows } = await db.query<{
    by_status: Partial<Record<SampleStatus, number>>;
    oldest_unconsumed_iteration: number | null;
    newest_sample_policy_version: number | null;
    last_selected_step: number | null;
    last_applied_step: number | null;
    last_applied_policy_version: number | null;
  }>(
    `SELECT
       (SELECT coalesce(jsonb_object_agg(status, n), '{}'::jsonb)
          FROM (SELECT status, count(*) AS n FROM samples WHERE run_id = $1 GROUP BY status) c) AS by_status,
       (SELECT min(iteration) FROM samples WHERE run_id = $1 AND status IN ('generated', 'scored')) AS oldest_unconsumed_iteration,
       (SELECT max(policy_version) FROM samples WHERE run_id = $1) AS newest_sample_policy_version,
       (SELECT max(step) FROM train_steps WHERE run_id = $1) AS last_selected_step,
       (SELECT max(step) FROM train_steps WHERE run_id = $1 AND status = 'applied') AS last_applied_step,
       (SELECT policy_version FROM train_steps WHERE run_id = $1 AND status = 'applied' ORDER BY step DESC LIMIT 1) AS last_applied_policy_version`,
    [runId],
  );
  const r = rows[0];
  const byStatus = Object.fromEntries(SAMPLE_STATUSES.map((s) => [s, r.by_status[s] ?? 0])) as Record<SampleStatus, number>;
  return {
    byStatus,
    oldestUnconsumedIteration: r.oldest_unconsumed_iteration,
    newestSamplePolicyVersion: r.newest_sample_policy_version,
    lastSelectedStep: r.last_selected_step,
    lastAppliedStep: r.last_applied_step,
    lastAppliedPolicyVersion: r.last_applied_policy_version,
  };
}
