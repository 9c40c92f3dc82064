import { InvalidConfigError } from "./errors.ts";
import type { ClaimedJob, JobId, JobStatus } from "./job-row.ts";
import type { Queryable, StatementOptions } from "./queryable.ts";
import { DEFAULT_SCHEMA, perSchema } from "./schema-name.ts";
import { runStatement } from "./statement.ts";
import { storableJson } from "./storable-json.ts";
import { attemptErrorSet } from "./job-history.ts";
import { unfinishedAttemptSet } from "./unfinished-attempt.ts";

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
  | { id: JobId; outcome: "applied"; status: JobStatus }
  | { id: JobId; outcome: "fenced" }
  | { id: JobId; outcome: "cancelled" }
  | { id: JobId; outcome: "busy" };

// THE FENCE. Every write after a claim matches the row by id, the claim's token, and
// status = 'processing', and by nothing else; `token` is the SQL for the token of the claim the
// write is made under, for that row.
export const fence = (row: string, token: string): string => `${row}.claim_token = ${token} AND ${row}.status = 'processing'`;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const ID = /^[1-9][0-9]{0,18}$/;

/**
 * The write itself, as the CTEs that end in one named `written`, returning (id, status) of
 * each row written: `where(locked)` picks the rows of the live claims whose locked row (`c`, with
 * `c.kept`: the row holds a dedupe key, is in a flow or is a workflow's task; `c.waits`: a flow's job with dependencies
 * unresolved, or whose children this very claim added) matches `locked`, the fence included; `returning` is
 * the id, and `col(name)` reads the claim's own value of a column.
 */
type Write = (parts: { schema: string; col: (name: string) => string; where: (locked?: string) => string; returning: string }) => string;

/** The common write: one UPDATE of the claims' rows. */
const update =
  (set: (schema: string, col: (name: string) => string) => string): Write =>
  ({ schema, col, where, returning }) =>
    `written AS (UPDATE ${schema}.jobs AS j SET ${set(schema, col)} WHERE ${where()} RETURNING ${returning}, j.status)`;

/** A per-claim value the write reads: JSON (jsonb), text, or an integer. */
interface Column<T> {
  name: string;
  sqlType: "jsonb" | "text" | "int";
  /** JSON text for jsonb, a string for text, a number for int; null or undefined for SQL NULL. */
  value: (item: T) => string | number | null | undefined;
}

/** Error text as it can be stored: never empty, without NUL characters or lone surrogates. */
const errorText = (error: unknown): string => {
  const text = typeof error === "string" ? error : String(error ?? "");
  return text.replaceAll("\u0000", "").toWellFormed() || "unknown error";
};

/**
 * Builds a fenced batch write: one statement for any number of claims, whose SET may read the row
 * (j) and the claim's own values (`col(name)`). Returns, per claim in input order, what it did.
 *
 * The rows are locked first, in id order and skipping rows another session has locked, and only
 * the rows locked are written: a batch never waits on a row lock, so one row held by an operator
 * cannot hold up the other claims in the batch, and two batches cannot deadlock. A skipped row is
 * reported busy when the statement's snapshot shows the claim live, fenced when it shows it lost
 * (a lost claim never comes back: tokens are not reused). A locked row the fence refused is reported
 * cancelled when it was cancelled under this claim: the lock returns the row's newest version, so
 * a cancel that committed while the statement ran is seen (cancelJob keeps the token on the row).
 *
 * A flow's job also reads its count in `job_waits` (its dependencies not yet resolved, and the claim
 * that last added children) by a LATERAL probe of that table's primary key: LIMIT keeps it a probe
 * per row (as EXISTS, a generic plan hashed the whole table); none for a job in no flow. (Comments
 * stay out of the statement's text: pg_stat_activity shows its first 1,024 bytes, and an operator,
 * or a test, reads which write is waiting from them.)
 *
 * Invariant 14: no plan of it depends on statistics. Each claim's row is locked through a LATERAL
 * probe of the primary key ($1, the ids, in order); the write reaches its rows by `id = ANY` on the
 * primary key; nothing joins the written table to the batch (a generic plan did, with a hash join
 * over the whole table or a nested loop comparing every claim with every row). Each row's token and
 * values come from $2, a JSON object keyed by id, looked up per row in O(log n).
 */
const fencedWrite = <T extends Claim>(
  statement: string,
  columns: Column<T>[],
  write: Write,
  value: (item: T) => T = (item) => item,
) => {
  const claimOf = (row: string) => `($2::jsonb -> ${row}.id::text)`;
  const tokenOf = (row: string) => `(${claimOf(row)} ->> 't')::uuid`;
  const col = (name: string): string => {
    const column = columns.find((c) => c.name === name);
    if (column === undefined) throw new Error(`picket: fenced write ${statement} has no column ${name}`);
    return column.sqlType === "jsonb" ? `(${claimOf("j")} -> '${name}')` : `(${claimOf("j")} ->> '${name}')::${column.sqlType}`;
  };
  const sql = perSchema(
    (schema) => `
  WITH c AS (
    SELECT c.id, c.token, l.id IS NOT NULL AS locked, coalesce(${fence("l", "c.token")}, false) AS live,
           l.status AS row_status, l.claim_token AS row_token, (l.key IS NOT NULL OR l.flow_id IS NOT NULL OR l.workflow_id IS NOT NULL) AS kept,
           coalesce(w.remaining > 0 OR w.added_by = c.token, false) AS waits
    FROM (SELECT c.id, ${tokenOf("c")} AS token FROM unnest($1::bigint[]) AS c(id)) AS c
    LEFT JOIN LATERAL (
      SELECT l.id, l.status, l.claim_token, l.key, l.flow_id, l.workflow_id FROM ${schema}.jobs AS l WHERE l.id = c.id FOR UPDATE SKIP LOCKED
    ) AS l ON true
    LEFT JOIN LATERAL (
      SELECT w.remaining, w.added_by FROM ${schema}.job_waits AS w WHERE w.job_id = l.id AND l.flow_id IS NOT NULL LIMIT 1
    ) AS w ON true
  ), ${write({
    schema,
    col,
    where: (locked = "true") => `j.id = ANY (ARRAY(SELECT c.id FROM c WHERE c.live AND ${locked})) AND ${fence("j", tokenOf("j"))}`,
    returning: "j.id",
  })}
  -- Ids come back as text, which is what JobId is: pg's bigint parser tests each with a regular expression.
  SELECT id::text, status FROM written
  UNION ALL
  SELECT c.id::text, 'cancelled' FROM c WHERE c.locked AND c.row_status = 'cancelled' AND c.row_token = c.token
  UNION ALL
  SELECT c.id::text, NULL FROM c
  WHERE NOT c.locked AND EXISTS (SELECT 1 FROM ${schema}.jobs AS s WHERE s.id = c.id AND ${fence("s", "c.token")})`,
  );
  /**
   * The batch as bound: ids in lock order (as an array literal: pg would quote and escape each
   * element of an array it is given), and the claims' tokens and values keyed by id.
   */
  const bind = (items: readonly T[]): [string, number, string] => {
    const ids: string[] = [];
    const entries: string[] = [];
    for (const item of items) {
      const id = String(item.id);
      // A malformed id or token binds nothing: the fence never matches it, so such a write reports
      // fenced instead of applying unfenced or failing the whole batch.
      if (!ID.test(id) || typeof item.token !== "string" || !UUID.test(item.token)) continue;
      ids.push(id);
      let entry = `"t":"${item.token}"`;
      for (const column of columns) {
        const v = column.value(item);
        if (v === null || v === undefined) continue;
        entry += `,"${column.name}":${column.sqlType === "jsonb" ? v : JSON.stringify(v)}`;
      }
      entries.push(`"${id}":{${entry}}`);
    }
    // Rows are locked in id order (numeric order of the decimal texts), so two batches never wait on each other.
    ids.sort((a, b) => a.length - b.length || (a < b ? -1 : a > b ? 1 : 0));
    return [`{${ids.join(",")}}`, ids.length, `{${entries.join(",")}}`];
  };
  /** One statement for claims of distinct jobs: what it did, by job id. */
  const run = async (db: Queryable, items: readonly T[], options: StatementOptions): Promise<Map<string, { status: JobStatus | null }>> => {
    const [ids, count, claims] = bind(items);
    const found = new Map<string, { status: JobStatus | null }>();
    if (count === 0) return found;
    const schema = options.schema ?? DEFAULT_SCHEMA;
    const { rows } = await runStatement<{ id: JobId; status: JobStatus | null }>(
      db,
      { name: `picket_${statement}_${schema}`, text: sql(schema), values: [ids, claims] },
      options,
    );
    for (const row of rows) found.set(row.id, row);
    return found;
  };
  return async (db: Queryable, items: readonly T[], options: StatementOptions = {}): Promise<FencedResult[]> => {
    if (items.length === 0) return [];
    // One claim per job in a statement (the claims are keyed by id): a second claim of a job (a
    // stale one batched with the live one) waits for a statement of its own. Each claim's row is
    // looked up in its own statement's answer.
    const answers = new Array<Map<string, { status: JobStatus | null }>>(items.length);
    const prepared = items.map(value);
    for (let rest = prepared.map((_, i) => i); rest.length > 0; ) {
      const ids = new Set<string>();
      const round: number[] = [];
      const later: number[] = [];
      for (const i of rest) {
        const id = String(prepared[i]!.id);
        (ids.has(id) ? later : round).push(i);
        ids.add(id);
      }
      const answer = await run(db, round.map((i) => prepared[i]!), options);
      for (const i of round) answers[i] = answer;
      rest = later;
    }
    // A statement holds one claim per job, and every row it returns is of that claim (written under
    // its token, or found cancelled or busy under it): the id says whose it is.
    return items.map((item, i): FencedResult => {
      const row = answers[i]!.get(String(item.id));
      if (row === undefined) return { id: item.id, outcome: "fenced" };
      if (row.status === null) return { id: item.id, outcome: "busy" };
      // (A written row is never cancelled: the fence matched it processing.)
      if (row.status === "cancelled") return { id: item.id, outcome: "cancelled" };
      return { id: item.id, outcome: "applied", status: row.status };
    });
  };
};

/** Each item's JSON value checked and serialised once, before any row is touched. */
const withJson =
  <K extends string>(key: K, what: string) =>
  <T extends Claim & { [P in K]?: unknown }>(item: T): T => ({ ...item, [key]: storableJson(item[key], what) });

const completedSet = (col: (name: string) => string) =>
  `status = 'completed', result = ${col("result")}, finished_at = now(), lock_until = NULL, updated_at = now()`;

/**
 * A flow's job whose run added children (`c.waits`): it goes back to waiting, its result kept, the
 * claim cleared and the attempt not charged (the run did not fail), and runs again once they
 * resolve, at once if they already have (the flow trigger readies it: migration 0017).
 */
const parked = ({ schema, col, where, returning }: Parameters<Write>[0]) =>
  `parked AS (UPDATE ${schema}.jobs AS j SET status = 'waiting', result = ${col("result")}, attempts = greatest(j.attempts - 1, 0), ` +
  `claim_token = NULL, locked_by = NULL, locked_at = NULL, lock_until = NULL, updated_at = now() WHERE ${where("c.waits")} RETURNING ${returning}, j.status)`;

/** Completion that keeps every row: completed, with its result, until retention removes it. */
const completeKeeping = fencedWrite<Claim & { result?: unknown }>(
  "complete",
  [{ name: "result", sqlType: "jsonb", value: (item) => item.result as string | null }],
  (parts) => `
  done AS (UPDATE ${parts.schema}.jobs AS j SET ${completedSet(parts.col)} WHERE ${parts.where("NOT c.waits")} RETURNING ${parts.returning}, j.status),
  ${parked(parts)},
  written AS (SELECT * FROM done UNION ALL SELECT * FROM parked)`,
  withJson("result", "job's result"),
);

/**
 * Completion that deletes the row (the cheapest write there is: no new row version, no new index
 * entries), except a row that holds a dedupe key or is in a flow, which stays completed: a later
 * enqueue with the key in "window" mode dedupes against it (any window, so any keyed row may be
 * read), a flow's dependents read its result, and retention removes it. Whether a row holds a key
 * or is in a flow is read by the lock step (`c.kept`), which holds the row's lock, so neither can
 * move before the write: each row is written by exactly one of the branches. (Read there, not as
 * `j.key IS NOT NULL` in the write: that predicate let a generic plan reach the rows through the
 * live-key index, a scan of every keyed live job per batch.)
 */
const completeDeleting = fencedWrite<Claim & { result?: unknown }>(
  "complete_delete",
  [{ name: "result", sqlType: "jsonb", value: (item) => item.result as string | null }],
  (parts) => `
  kept AS (UPDATE ${parts.schema}.jobs AS j SET ${completedSet(parts.col)} WHERE ${parts.where("c.kept AND NOT c.waits")} RETURNING ${parts.returning}, j.status),
  removed AS (DELETE FROM ${parts.schema}.jobs AS j WHERE ${parts.where("NOT c.kept")} RETURNING ${parts.returning}, 'completed'::text AS status),
  ${parked(parts)},
  written AS (SELECT * FROM removed UNION ALL SELECT * FROM kept UNION ALL SELECT * FROM parked)`,
  withJson("result", "job's result"),
);

/**
 * Completed, with the handler's result (any JSON value) if it returned one. Unless
 * `keepCompleted`, the row is deleted (its result with it) where it holds no dedupe key.
 */
export const completeJobs = (
  db: Queryable,
  items: readonly (Claim & { result?: unknown })[],
  options: StatementOptions & { keepCompleted?: boolean } = {},
): Promise<FencedResult[]> => (options.keepCompleted === true ? completeKeeping : completeDeleting)(db, items, options);

/** A failure as a fenced write records it: the message, and where it was thrown when known. */
type Failure = Claim & { error: string; stack?: string };
const failureColumns: Column<Failure>[] = [
  { name: "error", sqlType: "text", value: (item) => errorText(item.error) },
  { name: "stack", sqlType: "text", value: (item) => (typeof item.stack === "string" && item.stack !== "" ? item.stack.replaceAll("\u0000", "").toWellFormed() : null) },
];

/** A failed attempt: pending again after the backoff, or dead when the attempts are spent. */
export const failJobs = fencedWrite<Failure>("fail", failureColumns, update((schema, col) => unfinishedAttemptSet(schema, col("error"), col("stack"))));

/** A permanent failure: dead now, whatever attempts remain. */
export const deadLetterJobs = fencedWrite<Failure>(
  "dead_letter",
  failureColumns,
  update((schema, col) => `status = 'dead', finished_at = now(), lock_until = NULL, ${attemptErrorSet(schema, col("error"), col("stack"))}, updated_at = now()`),
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
    { name: "progress", sqlType: "jsonb", value: (item) => item.progress as string | null },
    { name: "lease_ms", sqlType: "int", value: (item) => item.leaseMs },
  ],
  update((_, col) => `progress = ${col("progress")}, lock_until = clock_timestamp() + ${col("lease_ms")} * interval '1 millisecond', updated_at = now()`),
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
  update((_, col) => `lock_until = clock_timestamp() + ${col("lease_ms")} * interval '1 millisecond', updated_at = now()`),
  checkLease,
);

/** A claimed job as renewLeases takes it: its claim and its own lease. */
export const leaseOf = (job: ClaimedJob): Claim & { leaseMs: number } => ({ id: job.id, token: job.claimToken, leaseMs: job.leaseMs });

/**
 * Gives jobs back without charging the attempt (a shutdown is not the job's failure): pending
 * and ready at once.
 */
export const releaseJobs = fencedWrite<Claim>(
  "release",
  [],
  update(
    () =>
      `status = 'pending', attempts = greatest(j.attempts - 1, 0), run_at = now(), claim_token = NULL, locked_by = NULL, ` +
      `locked_at = NULL, lock_until = NULL, updated_at = now()`,
  ),
);
