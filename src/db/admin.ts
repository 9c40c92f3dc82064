import { type Job, type JobId, type JobStatus, jobColumns } from "./job-row.ts";
import { checkOperatorName, operatorSet, withReadableHistory } from "./job-history.ts";
import { isUniqueViolation } from "./errors.ts";
import { APPLIER_TASK } from "./job-spec.ts";
import type { Queryable, StatementOptions } from "./queryable.ts";
import { CANCEL_PREFIX, notifyChannel } from "./notify.ts";
import { runStatement } from "./statement.ts";
import { DEFAULT_SCHEMA, perSchema } from "./schema-name.ts";

/** What an admin action did: applied, or why not. */
export type AdminResult =
  | { outcome: "applied"; job: Job }
  | { outcome: "not_found" }
  | { outcome: "wrong_status"; status: JobStatus }
  /** Retrying would make a second live job with the key: `heldBy` is the live job that has it. */
  | { outcome: "key_taken"; key: string; heldBy: JobId; heldByStatus: JobStatus }
  /** A flow's job is deleted with its flow (retention), never alone: its dependents read it, and the flow counts it. */
  | { outcome: "in_flow"; flowId: JobId }
  /** A job that applies the events of a live workflow is not cancelled or deleted alone (an event would wait for good). */
  | { outcome: "applies_workflow"; workflowId: JobId };

/** Options of an admin action: the statement's, and who asked (recorded in the job's history). */
export type AdminOptions = StatementOptions & { by?: string };

// Admin writes name the status they act on: retry is for dead jobs, cancel for live ones. Each
// records itself in the job's history, with who asked ($2, NULL when not said).
// A retry gives the job its whole max_attempts again (attempts = 0) and keeps counting the attempt
// number across runs: the run's attempts move to prior_attempts.
const retryDeadSql = perSchema(
  (schema) => `
  UPDATE ${schema}.jobs AS j
  SET status = 'pending', prior_attempts = j.prior_attempts + j.attempts, attempts = 0, run_at = now(), finished_at = NULL,
      claim_token = NULL, locked_by = NULL, locked_at = NULL, lock_until = NULL, ${operatorSet(schema, "retry", "$2::text")}, updated_at = now()
  WHERE j.id = ANY ($1::bigint[]) AND j.status = 'dead'
  RETURNING ${jobColumns("j")}`,
);

// Cancel takes a live job, pending or processing, to cancelled in one statement that locks the
// row first: a cancel and a worker's fenced completion (both wait for the row lock and re-check
// the status on its newest version) leave exactly one of the two outcomes. The claim token stays on
// a cancelled row, so the claiming worker's later writes are fenced and report "cancelled". A
// processing job's worker is told at once (the NOTIFY goes out at commit, naming the job and its
// claim); without LISTEN it learns at its next lease renewal.
// A waiting job (a flow's, its dependencies not all resolved) is live too. The flow trigger
// (migration 0017) cancels what depends on a cancelled job, in the same statement.
/** The statuses a cancel takes: the refusal of a live workflow's applier reads the same list. */
const LIVE: readonly JobStatus[] = ["pending", "processing", "waiting"];
const cancelMatching = (schema: string, which: string) => `
  WITH target AS (
    SELECT t.id, t.status AS was FROM ${schema}.jobs AS t
    WHERE ${which} AND t.status IN (${LIVE.map((status) => `'${status}'`).join(", ")})
    -- In id order: two cancels of overlapping batches lock their rows in one order, never a deadlock.
    ORDER BY t.id
    FOR UPDATE
  ), cancelled AS (
    UPDATE ${schema}.jobs AS j
    SET status = 'cancelled', finished_at = now(), lock_until = NULL, ${operatorSet(schema, "cancel", "$2::text")}, updated_at = now()
    FROM target
    WHERE j.id = target.id
    RETURNING j.*, target.was
  )
  SELECT ${jobColumns("c")} FROM cancelled AS c
  LEFT JOIN LATERAL (SELECT pg_notify('${notifyChannel(schema)}', '${CANCEL_PREFIX}' || c.id || ':' || c.claim_token) WHERE c.was = 'processing') AS told ON true`;
/**
 * Whether job `j` applies the events of a workflow still live (APPLIER_TASK): an operator's cancel
 * of it, or delete of it dead, is refused, since the event or timer it was made for would wait for
 * good (a dead one is retried instead). Once the workflow has ended, its appliers are anyone's to
 * cancel. The id is read only when it is one: a user's own job of that name and another payload
 * is not matched. A scalar subquery, not EXISTS: the planner may make an EXISTS a hashed subplan
 * that reads every live workflow (it did, on analyzed tables), a plan the statistics choose
 * (invariant 14); the scalar subquery is one primary-key lookup per job.
 */
export const appliesLiveWorkflow = (schema: string, j: string): string => `(${j}.type = '${APPLIER_TASK}' AND coalesce((
    SELECT lw.status IN ('starting', 'running') FROM ${schema}.workflows AS lw
    WHERE lw.id = CASE WHEN ${j}.payload->>'workflow' ~ '^[1-9][0-9]{0,17}$' THEN (${j}.payload->>'workflow')::bigint END), false))`;
const cancelSql = perSchema((schema) => cancelMatching(schema, `t.id = ANY ($1::bigint[]) AND NOT ${appliesLiveWorkflow(schema, "t")}`));
/** Cancel every live job of flow $1 (who asked: $2). */
export const cancelFlowSql = perSchema((schema) => cancelMatching(schema, "t.flow_id = $1::bigint"));
/** Cancel every live task job of workflow instance $1 (who asked: $2). */
export const cancelWorkflowJobsSql = perSchema((schema) => cancelMatching(schema, "t.workflow_id = $1::bigint"));

// Run now: a pending job waiting for its run_at (delayed, or a retry's backoff) is due at once.
// A pending job already due stays as it is (the write still records who asked).
const runNowSql = perSchema(
  (schema) => `
  UPDATE ${schema}.jobs AS j
  SET run_at = least(j.run_at, now()), ${operatorSet(schema, "run_now", "$2::text")}, updated_at = now()
  WHERE j.id = ANY ($1::bigint[]) AND j.status = 'pending'
  RETURNING ${jobColumns("j")}`,
);

// Delete takes only a finished job (its steps go with it, ON DELETE CASCADE): a live job is
// cancelled first, so that its worker is told and its history says so. Who asked is not stored:
// the row is gone; the caller logs it. A flow's job goes only with its flow (a dependent waiting
// on it over a "wait" edge would wait for good; the flow would count a job that is gone).
const deleteFinishedSql = perSchema(
  (schema) => `
  DELETE FROM ${schema}.jobs AS j
  WHERE j.id = ANY ($1::bigint[]) AND j.status IN ('completed', 'dead', 'cancelled') AND j.flow_id IS NULL
    AND NOT (j.status = 'dead' AND ${appliesLiveWorkflow(schema, "j")})
  RETURNING ${jobColumns("j")}`,
);

// The workflow job $1 applies the events of, while it is live (what cancel and delete leave).
const appliedWorkflowSql = perSchema((schema) => `SELECT j.payload->>'workflow' AS workflow FROM ${schema}.jobs AS j WHERE j.id = $1::bigint AND ${appliesLiveWorkflow(schema, "j")}`);

const getJobSql = perSchema((schema) => `SELECT ${jobColumns("j")} FROM ${schema}.jobs AS j WHERE j.id = $1::bigint`);

// The live job holding the dedupe key of job $1 (served by the unique index on live keys).
const keyHolderSql = perSchema(
  (schema) => `
  SELECT h.id, h.key, h.status FROM ${schema}.jobs AS j
  JOIN ${schema}.jobs AS h ON h.key = j.key AND h.status IN ('pending', 'processing') AND h.id <> j.id
  WHERE j.id = $1::bigint`,
);

/** Whether `text` is a job id as the table can hold it: a positive bigint, in decimal. */
export const isJobId = (text: string): boolean => /^[1-9][0-9]{0,18}$/.test(text) && BigInt(text) <= 9_223_372_036_854_775_807n;

const checkId = (id: JobId | number): string => {
  const text = String(id);
  if (!isJobId(text)) {
    throw new RangeError(`picket: job id must be a positive integer (got ${JSON.stringify(text)}).`);
  }
  return text;
};

/**
 * The admin statements by action. Each takes $1, an array of job ids (one job's, or a bulk
 * action's batch: src/db/bulk.ts) and, when it records who asked, $2; each returns the rows it
 * changed.
 */
export const ADMIN_STATEMENTS = {
  retry: { sql: retryDeadSql, recordsWho: true },
  cancel: { sql: cancelSql, recordsWho: true },
  "run-now": { sql: runNowSql, recordsWho: true },
  delete: { sql: deleteFinishedSql, recordsWho: false },
} as const;
export type AdminAction = keyof typeof ADMIN_STATEMENTS;

/** An admin statement on one job, its outcome told apart: applied, not found, the wrong status, a key taken. */
const adminWrite = ({ sql, recordsWho }: (typeof ADMIN_STATEMENTS)[AdminAction]) =>
  async (db: Queryable, id: JobId | number, options: AdminOptions = {}): Promise<AdminResult> => {
    const schema = options.schema ?? DEFAULT_SCHEMA;
    const jobId = checkId(id);
    const by = checkOperatorName(options.by);
    let rows: Job[];
    try {
      ({ rows } = await runStatement<Job>(db, { text: sql(schema), values: recordsWho ? [[jobId], by] : [[jobId]] }, options));
    } catch (error) {
      // Making the job live again collided with the live job that holds its dedupe key.
      if (!isUniqueViolation(error)) throw error;
      // (Inside a caller's transaction the failed UPDATE aborted it: the holder cannot be read there.)
      const holder = (
        await runStatement<{ id: JobId; key: string; status: JobStatus }>(db, { text: keyHolderSql(schema), values: [jobId] }, options).catch(() => null)
      )?.rows[0];
      if (holder === undefined) throw error;
      return { outcome: "key_taken", key: holder.key, heldBy: holder.id, heldByStatus: holder.status };
    }
    if (rows[0] !== undefined) return { outcome: "applied", job: withReadableHistory(rows[0]) };
    const current = await getJob(db, jobId, options);
    if (current === null) return { outcome: "not_found" };
    if (sql === deleteFinishedSql && current.flowId !== null) return { outcome: "in_flow", flowId: current.flowId };
    // Left by cancel (while live) or delete (dead) as applying a live workflow's events.
    if (current.type === APPLIER_TASK && (sql === cancelSql ? LIVE.includes(current.status) : sql === deleteFinishedSql && current.status === "dead")) {
      const { rows: [applied] } = await runStatement<{ workflow: JobId }>(db, { text: appliedWorkflowSql(schema), values: [jobId] }, options);
      if (applied !== undefined) return { outcome: "applies_workflow", workflowId: applied.workflow };
    }
    return { outcome: "wrong_status", status: current.status };
  };

/**
 * A dead job gets a fresh set of attempts and is ready at once; its history is kept, gains a
 * "retry" entry naming `by`, and its next attempts are numbered on from the last one.
 */
export const retryDeadJob = adminWrite(ADMIN_STATEMENTS.retry);

/**
 * A live job is cancelled: a pending one never runs; a processing one's handler is interrupted by
 * its worker (at once with LISTEN, at its next lease renewal without) and nothing it does after is
 * recorded. A job that finished first reports wrong_status with the status it finished with. The
 * job's history gains a "cancel" entry naming `by`.
 */
export const cancelJob = adminWrite(ADMIN_STATEMENTS.cancel);

/**
 * A pending job waiting for its run time (delayed, or backing off after a failure) is due at once.
 * Its history gains a "run_now" entry naming `by`. Any other status: wrong_status.
 */
export const runJobNow = adminWrite(ADMIN_STATEMENTS["run-now"]);

/**
 * A finished job (completed, dead or cancelled) is deleted with its recorded steps. A live job
 * is refused (wrong_status): cancel it first.
 */
export const deleteFinishedJob = adminWrite(ADMIN_STATEMENTS.delete);

export const getJob = async (db: Queryable, id: JobId | number, options: StatementOptions = {}): Promise<Job | null> => {
  const { rows } = await runStatement<Job>(db, { text: getJobSql(options.schema ?? DEFAULT_SCHEMA), values: [checkId(id)] }, options);
  return rows[0] === undefined ? null : withReadableHistory(rows[0]);
};
