import { InvalidConfigError } from "./errors.ts";
import type { JobId, JobStatus } from "./job-row.ts";
import type { Queryable, StatementOptions } from "./queryable.ts";
import { DEFAULT_SCHEMA, perSchema } from "./schema-name.ts";
import { runStatement } from "./statement.ts";
import { storableJson } from "./storable-json.ts";
import { errorSet, unfinishedAttemptSet } from "./unfinished-attempt.ts";

/** The claim a write is made under: the job and the token its claim was given. */
export interface Claim {
  id: JobId;
  token: string;
}

/**
 * What a fenced write did to one job.
 * - "applied": written under the live claim.
 * - "fenced": the claim was lost (reclaimed, finished, released or cancelled meanwhile): nothing
 *   was written and the caller must not act as owner.
 * - "cancelled": the claim was lost to a cancel (cancelJob): the row is cancelled under this very
 *   token. Nothing was written; the worker stops the job as cancelled rather than as stolen.
 * - "busy": another session holds the row locked (an operator's query, a migration), so nothing
 *   was written; the claim was still ours when the statement began. Try again later.
 */
export type FencedResult =
  | { id: JobId; outcome: "applied"; status: JobStatus; runAt: Date; lockUntil: Date | null }
  | { id: JobId; outcome: "fenced" }
  | { id: JobId; outcome: "cancelled" }
  | { id: JobId; outcome: "busy" };

// THE FENCE. Every write after a claim matches the row by id, the claim's token, and
// status = 'processing', and by nothing else; `c` is the batch of claims the write is made under.
export const fence = (row: string): string => `${row}.id = c.id AND ${row}.claim_token = c.token AND ${row}.status = 'processing'`;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** A per-claim value bound as an extra array column of the batch. */
interface Column<T> {
  name: string;
  sqlType: string;
  value: (item: T) => unknown;
}

/** Error text as it can be stored: never empty, without NUL characters. */
const errorText = (error: unknown): string => {
  const text = typeof error === "string" ? error : String(error ?? "");
  return text.replaceAll("\u0000", "") || "unknown error";
};

/**
 * Builds a fenced batch write: one UPDATE for any number of claims, whose SET may read the
 * row (j) and the claim's own values (c.<column>). Returns, per claim in input order, whether it
 * applied.
 *
 * The rows are locked first, in id order and skipping rows another session has locked, and only
 * the rows locked are written: a batch never waits on a row lock, so one row held by an operator
 * cannot hold up the other claims in the batch, and two batches cannot deadlock. A skipped row is
 * reported busy when the statement's snapshot shows the claim live, fenced when it shows it lost
 * (a lost claim never comes back: tokens are not reused). A locked row the fence refused is reported
 * cancelled when it was cancelled under this claim: the lock returns the row's newest version, so
 * a cancel that committed while the statement ran is seen (cancelJob keeps the token on the row).
 */
const fencedWrite = <T extends Claim>(
  statement: string,
  columns: Column<T>[],
  set: (schema: string) => string,
  value: (item: T) => T = (item) => item,
) => {
  const sql = perSchema((schema) => {
    const params = columns.map((col, i) => `$${i + 3}::${col.sqlType}[]`);
    const names = columns.map((col) => `, ${col.name}`).join("");
    // The claims drive every join (the unnest first, each row found by primary key): a plan that
    // matched the batch against the rows another way compared every row with every claim (a
    // generic plan did, at 3x the cost per job).
    return `
  WITH locked AS (
    SELECT c.*, l.status AS row_status, l.claim_token AS row_token
    FROM unnest($1::bigint[], $2::uuid[]${params.map((p) => `, ${p}`).join("")}) AS c(id, token${names})
    JOIN ${schema}.jobs AS l ON l.id = c.id
    ORDER BY l.id
    FOR UPDATE OF l SKIP LOCKED
  ), written AS (
    UPDATE ${schema}.jobs AS j SET ${set(schema)}
    FROM locked AS c
    WHERE ${fence("j")}
    RETURNING j.id, c.token, j.status, j.run_at AS "runAt", j.lock_until AS "lockUntil"
  )
  SELECT id, token, status, "runAt", "lockUntil" FROM written
  UNION ALL
  SELECT c.id, c.token, 'cancelled', NULL, NULL FROM locked AS c
  WHERE c.row_status = 'cancelled' AND c.row_token = c.token
  UNION ALL
  SELECT c.id, c.token, NULL, NULL, NULL FROM unnest($1::bigint[], $2::uuid[]) AS c(id, token)
  WHERE NOT EXISTS (SELECT 1 FROM locked WHERE locked.id = c.id)
    AND EXISTS (SELECT 1 FROM ${schema}.jobs AS s WHERE ${fence("s")})`;
  });
  return async (db: Queryable, items: readonly T[], options: StatementOptions = {}): Promise<FencedResult[]> => {
    if (items.length === 0) return [];
    const bound = items.map(value);
    const schema = options.schema ?? DEFAULT_SCHEMA;
    const { rows } = await runStatement<{ id: JobId; token: string; status: JobStatus | null; runAt: Date; lockUntil: Date | null }>(
      db,
      {
        name: `picket_${statement}_${schema}`,
        text: sql(schema),
        values: [
          bound.map((item) => (/^[1-9][0-9]{0,18}$/.test(String(item.id)) ? String(item.id) : "0")),
          // A missing or malformed token binds NULL, which the fence never matches: such a write
          // reports fenced instead of applying unfenced or failing the whole batch.
          bound.map((item) => (typeof item.token === "string" && UUID.test(item.token) ? item.token : null)),
          ...columns.map((col) => bound.map(col.value)),
        ],
      },
      options,
    );
    // Matched by id and token: a stale claim batched with the live one must not read as applied.
    const found = new Map(rows.map((row) => [`${row.id}/${row.token}`, row]));
    return items.map((item): FencedResult => {
      const row = found.get(`${item.id}/${item.token}`);
      if (row === undefined) return { id: item.id, outcome: "fenced" };
      if (row.status === null) return { id: item.id, outcome: "busy" };
      // (A written row is never cancelled: the fence matched it processing.)
      if (row.status === "cancelled") return { id: item.id, outcome: "cancelled" };
      return { id: item.id, outcome: "applied", status: row.status, runAt: row.runAt, lockUntil: row.lockUntil };
    });
  };
};

/** Each item's JSON value checked and serialised once, before any row is touched. */
const withJson =
  <K extends string>(key: K, what: string) =>
  <T extends Claim & { [P in K]?: unknown }>(item: T): T => ({ ...item, [key]: storableJson(item[key], what) });

/** Completed, with the handler's result (any JSON value) if it returned one. */
export const completeJobs = fencedWrite<Claim & { result?: unknown }>(
  "complete",
  [{ name: "result", sqlType: "jsonb", value: (item) => item.result }],
  () => `status = 'completed', result = c.result, finished_at = now(), lock_until = NULL, updated_at = now()`,
  withJson("result", "job's result"),
);

/** A failure as a fenced write records it: the message, and where it was thrown when known. */
type Failure = Claim & { error: string; stack?: string };
const failureColumns: Column<Failure>[] = [
  { name: "error", sqlType: "text", value: (item) => errorText(item.error) },
  { name: "stack", sqlType: "text", value: (item) => (typeof item.stack === "string" && item.stack !== "" ? item.stack.replaceAll("\u0000", "") : null) },
];

/** A failed attempt: pending again after the backoff, or dead when the attempts are spent. */
export const failJobs = fencedWrite<Failure>("fail", failureColumns, (schema) => unfinishedAttemptSet(schema, "c.error", "c.stack"));

/** A permanent failure: dead now, whatever attempts remain. */
export const deadLetterJobs = fencedWrite<Failure>(
  "dead_letter",
  failureColumns,
  (schema) => `status = 'dead', finished_at = now(), lock_until = NULL, ${errorSet(schema, "c.error", "c.stack")}, updated_at = now()`,
);

/** A lease to grant again: a positive integer of milliseconds, checked before any row is touched. */
const checkLease = <T extends Claim & { leaseMs: number }>(item: T): T => {
  if (!Number.isInteger(item.leaseMs) || item.leaseMs < 1 || item.leaseMs > 2_147_483_647) {
    throw new InvalidConfigError(`picket: lease renewal for job ${item.id}: leaseMs must be an integer from 1 to 2147483647 (got ${String(item.leaseMs)}).`);
  }
  return item;
};

/**
 * Progress telemetry (any JSON value) for a running job. Written under the live claim, it renews
 * the claim's lease too (as renewLeases does): a job that writes progress often holds its row
 * often, and its renewals would find the row busy.
 */
export const reportProgress = fencedWrite<Claim & { progress: unknown; leaseMs: number }>(
  "progress",
  [
    { name: "progress", sqlType: "jsonb", value: (item) => item.progress },
    { name: "lease_ms", sqlType: "int", value: (item) => item.leaseMs },
  ],
  () => `progress = c.progress, lock_until = clock_timestamp() + c.lease_ms * interval '1 millisecond', updated_at = now()`,
  (item) => withJson("progress", "progress value")(checkLease(item)),
);

/**
 * Extends the leases of many running jobs in one statement; each claim names its own lease. A
 * renewal grants a full lease from the moment it is written (clock_timestamp(), not the
 * statement's start: a renewal that waited would otherwise write a deadline already past), and
 * reports that deadline as lockUntil. A claim reported fenced was lost, and its handler must be
 * interrupted; one reported busy was not renewed this time.
 */
export const renewLeases = fencedWrite<Claim & { leaseMs: number }>(
  "renew",
  [{ name: "lease_ms", sqlType: "int", value: (item) => item.leaseMs }],
  () => `lock_until = clock_timestamp() + c.lease_ms * interval '1 millisecond', updated_at = now()`,
  checkLease,
);

/**
 * Gives jobs back without charging the attempt (a shutdown is not the job's failure): pending
 * and ready at once.
 */
export const releaseJobs = fencedWrite<Claim>(
  "release",
  [],
  () =>
    `status = 'pending', attempts = greatest(j.attempts - 1, 0), run_at = now(), claim_token = NULL, locked_by = NULL, ` +
    `locked_at = NULL, lock_until = NULL, updated_at = now()`,
);
