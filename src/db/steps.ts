// Durable steps (migration 0005): the recorded result of each named step of a job, written under
// the job's live claim, read back by every later attempt of the same job.
import type { Claim } from "./fenced.ts";
import { fence } from "./fenced.ts";
import { InvalidJobError } from "./errors.ts";
import type { JobId } from "./job-row.ts";
import type { Queryable, StatementOptions } from "./queryable.ts";
import { DEFAULT_SCHEMA, perSchema } from "./schema-name.ts";
import { runStatement } from "./statement.ts";
import { storableJson, unstorableText } from "./storable-json.ts";

/** One recorded step of a job. */
export interface JobStep {
  name: string;
  /** The step function's result; undefined when it returned undefined. */
  result: unknown;
  /** The attempt, and the claim, that ran the step's function and recorded its result. */
  attempt: number;
  claimToken: string;
  createdAt: Date;
}

/** What recording a step did. */
export type StepWrite =
  /** Written under the live claim. */
  | { outcome: "recorded" }
  /** A step of this name was already recorded for the job: nothing written; the recorded result stands (read it with jobSteps). */
  | { outcome: "exists" }
  /** The claim was lost: nothing written. The run must stop. */
  | { outcome: "fenced" }
  /** The job was cancelled under this claim: nothing written. The run must stop. */
  | { outcome: "cancelled" }
  /** Another session holds the job's row locked, and the claim was live when the statement began: nothing written; try again. */
  | { outcome: "busy" };

export const MAX_STEP_NAME_LENGTH = 200;

/**
 * Checks a step name: 1–200 characters PostgreSQL stores unchanged (a lone surrogate would be
 * stored as U+FFFD, so the step's record would never be found under its name and the step would
 * run again on every retry; NUL is refused).
 */
export const checkStepName = (name: unknown): string => {
  if (typeof name !== "string" || name.length === 0 || name.length > MAX_STEP_NAME_LENGTH) {
    throw new InvalidJobError(`picket: a step name must be a string of 1 to ${MAX_STEP_NAME_LENGTH} characters (got ${typeof name === "string" ? JSON.stringify(name.slice(0, 40)) : String(name)}).`);
  }
  const why = unstorableText(name);
  if (why !== null) throw new InvalidJobError(`picket: step name ${JSON.stringify(name.slice(0, 40))} ${why}; the step did not run.`);
  return name;
};

const stepsSql = perSchema(
  (schema) => `
  SELECT s.name, s.result, s.result IS NULL AS absent, s.attempt, s.claim_token AS "claimToken", s.created_at AS "createdAt"
  FROM ${schema}.job_steps AS s WHERE s.job_id = $1::bigint ORDER BY s.created_at, s.name`,
);

/** The steps recorded for a job, oldest first. */
export const jobSteps = async (db: Queryable, jobId: JobId, options: StatementOptions = {}): Promise<JobStep[]> => {
  const { rows } = await runStatement<JobStep & { absent: boolean }>(db, { text: stepsSql(options.schema ?? DEFAULT_SCHEMA), values: [jobId] }, options);
  return rows.map(({ absent, ...step }) => (absent ? { ...step, result: undefined } : step));
};

// The step is inserted only while the fence holds on the job's row, which is locked (shared) first:
// the sweep's reclaim and a cancel (which update the row) wait for the step to commit, and a step
// written after either finds the fence closed. The lock returns the row's newest version, so a
// cancel or reclaim that committed since the statement's snapshot is seen. A row another session
// holds locked is skipped, never waited for (as every fenced write does): reported busy when the
// snapshot shows the claim live. A step already recorded under the name is kept (ON CONFLICT: at
// most one result per job and name).
const recordSql = perSchema(
  (schema) => `
  WITH c AS (
    SELECT $1::bigint AS id, $2::uuid AS token
  ), locked AS (
    SELECT j.id, j.status, j.claim_token FROM ${schema}.jobs AS j, c WHERE j.id = c.id FOR SHARE OF j SKIP LOCKED
  ), inserted AS (
    INSERT INTO ${schema}.job_steps (job_id, name, result, attempt, claim_token)
    SELECT j.id, $3::text, $4::jsonb, $5::int, c.token FROM locked AS j, c WHERE j.id = c.id AND ${fence("j", "c.token")}
    ON CONFLICT (job_id, name) DO NOTHING
    RETURNING job_id
  )
  SELECT l.status, l.claim_token = c.token AS ours, EXISTS (SELECT 1 FROM inserted) AS written
  FROM locked AS l CROSS JOIN c
  UNION ALL
  SELECT 'busy', true, false FROM c
  WHERE NOT EXISTS (SELECT 1 FROM locked) AND EXISTS (SELECT 1 FROM ${schema}.jobs AS s WHERE s.id = c.id AND ${fence("s", "c.token")})`,
);

/**
 * Records a step's result (any JSON value, or undefined) under the job's claim: a fenced write.
 * Throws an InvalidJobError naming the step when PostgreSQL could not store the result.
 */
export const recordStep = async (
  db: Queryable,
  claim: Claim,
  step: { name: string; result: unknown; attempt: number },
  options: StatementOptions = {},
): Promise<StepWrite> => {
  const name = checkStepName(step.name);
  const json = storableJson(step.result, `result of step "${name}"`);
  const { rows } = await runStatement<{ status: string; ours: boolean; written: boolean }>(
    db,
    { text: recordSql(options.schema ?? DEFAULT_SCHEMA), values: [claim.id, claim.token, name, json, step.attempt] },
    options,
  );
  const row = rows[0];
  if (row?.written) return { outcome: "recorded" };
  if (row?.status === "busy") return { outcome: "busy" };
  if (row?.ours && row.status === "processing") return { outcome: "exists" };
  if (row?.ours && row.status === "cancelled") return { outcome: "cancelled" };
  return { outcome: "fenced" };
};
