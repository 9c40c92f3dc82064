// Statements only the testing kit (src/testing) runs: time travel for due jobs, and the jobs a
// piece of code enqueued. They never run in a worker; they live here because all SQL does.
import { type Job, jobColumns } from "./job-row.ts";
import type { Queryable, StatementOptions } from "./queryable.ts";
import { DEFAULT_SCHEMA, perSchema } from "./schema-name.ts";
import { runStatement } from "./statement.ts";

// Time travel moves the jobs, not the clock: every pending job of the given types that would be
// due within $2 ms of the database clock has its run_at moved back by $2 ms, so it is due now and
// keeps its order relative to the others (claims order by run_at). Jobs further out stay where
// they are, and so stay out of this run.
const advanceSql = perSchema(
  (schema) => `
  UPDATE ${schema}.jobs AS j
  SET run_at = j.run_at - $2::bigint * interval '1 millisecond'
  WHERE j.status = 'pending' AND j.type = ANY ($1::text[])
    AND j.run_at > now() AND j.run_at <= now() + $2::bigint * interval '1 millisecond'
  RETURNING j.id`,
);

/** Moves the pending jobs of `types` due within `ms` of now (the database's clock) to be due now. */
export const advancePendingJobs = async (db: Queryable, types: readonly string[], ms: number, options: StatementOptions = {}): Promise<number> => {
  const schema = options.schema ?? DEFAULT_SCHEMA;
  const { rowCount } = await runStatement(db, { text: advanceSql(schema), values: [types, ms] }, options);
  return rowCount ?? 0;
};

const jobsOfTypeSql = perSchema(
  (schema) => `
  SELECT ${jobColumns("j")} FROM ${schema}.jobs AS j
  WHERE ($1::text IS NULL OR j.type = $1::text) AND ($2::text[] IS NULL OR j.status = ANY ($2::text[]))
  ORDER BY j.id
  LIMIT $3::int`,
);

/** Jobs of `type` (every type when null) in `statuses` (any when null), oldest first, at most `limit`. */
export const listJobsOfType = async (
  db: Queryable,
  type: string | null,
  statuses: readonly string[] | null,
  limit: number,
  options: StatementOptions = {},
): Promise<Job[]> => {
  const schema = options.schema ?? DEFAULT_SCHEMA;
  return (await runStatement<Job>(db, { text: jobsOfTypeSql(schema), values: [type, statuses, limit] }, options)).rows;
};

// checkTask's faults. A claim whose worker is gone: its lease is put in the past, so the sweep
// takes it back as it would after a crash.
const expireClaimSql = perSchema(
  (schema) => `UPDATE ${schema}.jobs AS j SET lock_until = now() - interval '1 second' WHERE j.id = $1::bigint AND j.status = 'processing'`,
);

/** Puts a processing job's lease in the past (its worker stopped renewing). */
export const expireClaim = async (db: Queryable, id: string, options: StatementOptions = {}): Promise<void> => {
  await runStatement(db, { text: expireClaimSql(options.schema ?? DEFAULT_SCHEMA), values: [id] }, options);
};

const makeDueSql = perSchema((schema) => `UPDATE ${schema}.jobs AS j SET run_at = now() WHERE j.id = $1::bigint AND j.status = 'pending'`);

/** A pending job's retry backoff skipped: it is due now. */
export const makeDue = async (db: Queryable, id: string, options: StatementOptions = {}): Promise<void> => {
  await runStatement(db, { text: makeDueSql(options.schema ?? DEFAULT_SCHEMA), values: [id] }, options);
};

export interface StepRecord {
  name: string;
  attempt: number;
  claimToken: string;
}

const stepRecordsSql = perSchema(
  (schema) => `SELECT s.name, s.attempt, s.claim_token AS "claimToken" FROM ${schema}.job_steps AS s WHERE s.job_id = $1::bigint ORDER BY s.created_at, s.name`,
);

/** The steps recorded for a job, with the claim that recorded each. */
export const stepRecords = async (db: Queryable, id: string, options: StatementOptions = {}): Promise<StepRecord[]> =>
  (await runStatement<StepRecord>(db, { text: stepRecordsSql(options.schema ?? DEFAULT_SCHEMA), values: [id] }, options)).rows;

// A write that fails: a trigger refuses every update of one job's row until it is dropped. The
// job id is a checked integer (it is spliced into the trigger's WHEN, which takes no parameters).
const refuseSql = perSchema(
  (schema) => `
  CREATE OR REPLACE FUNCTION ${schema}.picket_testing_refuse_write() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN RAISE EXCEPTION 'picket/testing: this write is refused on purpose (checkTask: a failing write)'; END $$`,
);

const jobIdOf = (id: string): string => {
  if (!/^[1-9][0-9]{0,18}$/.test(id)) throw new Error(`picket/testing: not a job id: ${JSON.stringify(id)}`);
  return id;
};

/** Makes every update of job `id`'s row fail until allowWrites is called. */
export const refuseWrites = async (db: Queryable, id: string, options: StatementOptions = {}): Promise<void> => {
  const schema = options.schema ?? DEFAULT_SCHEMA;
  const job = jobIdOf(id);
  await runStatement(db, { text: refuseSql(schema) }, options);
  await runStatement(
    db,
    { text: `CREATE TRIGGER picket_testing_refuse_${job} BEFORE UPDATE ON ${schema}.jobs FOR EACH ROW WHEN (OLD.id = ${job}) EXECUTE FUNCTION ${schema}.picket_testing_refuse_write()` },
    options,
  );
};

export const allowWrites = async (db: Queryable, id: string, options: StatementOptions = {}): Promise<void> => {
  const schema = options.schema ?? DEFAULT_SCHEMA;
  await runStatement(db, { text: `DROP TRIGGER IF EXISTS picket_testing_refuse_${jobIdOf(id)} ON ${schema}.jobs` }, options);
};
