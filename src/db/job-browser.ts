// Browsing jobs by state, a page at a time, as the dashboard's jobs view does: filters by task,
// queue, worker, key and a payload or error substring, a time range, newest or oldest first.
//
// Every page is one statement that reads its state's index in its time order (migration 0013,
// and 0001's finished-at and 0002's lease indexes), starting after the previous page's last row
// (keyset: time, then id). The filters are applied to what that scan reads, and the scan reads at
// most SCAN_BUDGET rows: a filter that matches rarely gives a short page and a cursor to go on
// from ("searched back to …"), never a walk through a million rows. So a page's cost has a bound
// that does not grow with the table, and its plan does not depend on statistics.
import { InvalidJobError } from "./errors.ts";
import type { JobId, JobStatus } from "./job-row.ts";
import type { Queryable, StatementOptions } from "./queryable.ts";
import { DEFAULT_SCHEMA, perSchema } from "./schema-name.ts";
import { runStatement } from "./statement.ts";

/** What an operator browses: pending jobs split by why they wait, the running ones, and each end. */
export const BROWSE_STATES = ["ready", "scheduled", "retrying", "waiting", "running", "dead", "completed", "cancelled"] as const;
export type BrowseState = (typeof BROWSE_STATES)[number];

export interface BrowseFilter {
  state: BrowseState;
  /** The task (job type). */
  task?: string;
  queue?: string;
  /** The worker holding the job (running jobs: locked_by). */
  worker?: string;
  /** The job's dedupe key, exactly. */
  key?: string;
  /** A substring of the payload's JSON text or of the last error, any case. */
  text?: string;
  /** The state's time (run at, claimed at, finished at) from this instant... */
  from?: Date;
  /** ...to before this one. */
  to?: Date;
  /** "newest" (latest time first) or "oldest"; default: each state's own (ready and scheduled: oldest; the others: newest). */
  order?: "newest" | "oldest";
  /** The page after this cursor (a page's `next`). */
  after?: string;
  /** Rows per page; default 50, at most MAX_BROWSE_PAGE. */
  limit?: number;
}

/** One job as the browser lists it: enough to pick it out; its page (getJob) has the rest. */
export interface BrowsedJob {
  id: JobId;
  type: string;
  status: JobStatus;
  queue: string | null;
  key: string | null;
  priority: number;
  attempts: number;
  maxAttempts: number | null;
  lockedBy: string | null;
  /** The first 200 characters of the last error. */
  lastError: string | null;
  /** The first 200 characters of the progress the handler last wrote, as JSON text. */
  progress: string | null;
  runAt: Date;
  createdAt: Date;
  finishedAt: Date | null;
  /** The state's time: run at (pending), claimed at (running), finished at (the others). */
  at: Date;
}

export interface BrowsePage {
  jobs: BrowsedJob[];
  /** The cursor of the next page (`after`), or null at the end. */
  next: string | null;
  /**
   * Set when the scan's budget ran out before the page was full: the time the scan reached. The
   * rows before it were all looked at; `next` goes on from there.
   */
  searchedTo: Date | null;
}

export const MAX_BROWSE_PAGE = 200;
/** Rows one page's scan reads at most, whatever the filters: its cost's bound. */
export const SCAN_BUDGET = 5_000;

export interface StateQuery {
  /** The index predicate: the state's rows, as its index is partial on. */
  where: string;
  /** The state's time column. */
  time: string;
  /** Rows of the index that are not of the state (pending split by attempts). */
  also?: string;
  defaultOrder: "newest" | "oldest";
}

// Each state's rows and time, chosen so that its index serves both: jobs_pending_browse_idx
// (run_at, id) for the pending three, jobs_sweep_idx for running (the rows are as many as the
// workers' slots), jobs_dead/cancelled_browse_idx and jobs_finished_idx (finished_at) for the ends.
export const STATES: Record<BrowseState, StateQuery> = {
  ready: { where: "j.status = 'pending' AND j.run_at <= now()", time: "j.run_at", defaultOrder: "oldest" },
  scheduled: { where: "j.status = 'pending' AND j.run_at > now()", time: "j.run_at", also: "j.attempts = 0", defaultOrder: "oldest" },
  retrying: { where: "j.status = 'pending' AND j.run_at > now()", time: "j.run_at", also: "j.attempts > 0", defaultOrder: "oldest" },
  // A flow's jobs whose dependencies have not all resolved (jobs_waiting_browse_idx, migration 0017).
  waiting: { where: "j.status = 'waiting'", time: "j.created_at", defaultOrder: "oldest" },
  running: { where: "j.lock_until IS NOT NULL AND j.status = 'processing'", time: "j.locked_at", defaultOrder: "newest" },
  dead: { where: "j.status = 'dead'", time: "j.finished_at", defaultOrder: "newest" },
  completed: { where: "j.status = 'completed'", time: "j.finished_at", defaultOrder: "newest" },
  cancelled: { where: "j.status = 'cancelled'", time: "j.finished_at", defaultOrder: "newest" },
};

const browsedColumns = `j.id, j.type, j.status, j.queue, j.key, j.priority, j.attempts, j.max_attempts AS "maxAttempts", j.locked_by AS "lockedBy",
             left(j.last_error, 200) AS "lastError", left(j.progress::text, 200) AS progress, j.run_at AS "runAt", j.created_at AS "createdAt",
             j.finished_at AS "finishedAt"`;

// $1 after-time, $2 after-id (NULL: from the start; the sentinels keep the comparison an index
// bound rather than an OR the planner cannot use), $3 from, $4 to, $5 budget, $6 task, $7 queue,
// $8 worker, $9 key, $10 text pattern, $11 page size.
const browseSql = perSchema((schema) => {
  const statements = {} as Record<string, string>;
  for (const [state, q] of Object.entries(STATES)) {
    for (const order of ["newest", "oldest"] as const) {
      const [dir, cmp, startAt, startId] = order === "newest" ? ["DESC", "<", "'infinity'", "9223372036854775807"] : ["ASC", ">", "'-infinity'", "0"];
      const hit = [
        q.also ?? "true",
        "($6::text IS NULL OR j.type = $6::text)",
        "($7::text IS NULL OR j.queue = $7::text)",
        "($8::text IS NULL OR j.locked_by = $8::text)",
        "($9::text IS NULL OR j.key = $9::text)",
        "($10::text IS NULL OR j.payload::text ILIKE $10::text OR j.last_error ILIKE $10::text)",
      ].join(" AND ");
      // Rows are pulled from the index scan only as the page needs them: a page without filters
      // reads its 50 rows, not its budget. The scan's row number says when the budget ran out
      // (the row numbered $5, kept as the page's edge even when it does not match).
      statements[`${state}:${order}`] = `
  SELECT * FROM (
    SELECT scanned.*, row_number() OVER () AS n FROM (
      SELECT ${browsedColumns}, ${q.time} AS at, ${hit} AS hit,
             -- The cursor's time to the microsecond (a Date keeps milliseconds: rows between would be skipped).
             to_char(${q.time} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS "cursorAt"
      FROM ${schema}.jobs AS j
      WHERE ${q.where}
        AND (${q.time}, j.id) ${cmp} (coalesce($1::timestamptz, ${startAt}), coalesce($2::bigint, ${startId}))
        AND ${q.time} >= coalesce($3::timestamptz, '-infinity') AND ${q.time} < coalesce($4::timestamptz, 'infinity')
      ORDER BY ${q.time} ${dir}, j.id ${dir}
      LIMIT $5::int
    ) AS scanned
  ) AS numbered
  WHERE hit OR n = $5::int
  LIMIT $11::int`;
    }
  }
  return statements;
});

const cursorOf = (row: { cursorAt: string; id: JobId }): string => `${row.cursorAt}_${row.id}`;

const parseCursor = (cursor: string): [string, string] => {
  const match = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z)_([1-9]\d{0,18})$/.exec(cursor);
  if (match === null || Number.isNaN(Date.parse(match[1]!))) {
    throw new InvalidJobError(`picket: a browse cursor is the "next" of a page, like 2026-01-02T03:04:05.678901Z_42 (got ${JSON.stringify(cursor.slice(0, 60))}).`);
  }
  return [match[1]!, match[2]!];
};

const optionalText = (name: string, value: unknown): string | null => {
  if (value === undefined || value === "") return null;
  if (typeof value !== "string" || value.length > 200 || value.includes("\u0000")) {
    throw new InvalidJobError(`picket: browse filter ${name} must be text of at most 200 characters without NUL (got ${JSON.stringify(String(value).slice(0, 40))}).`);
  }
  return value;
};

const optionalTime = (name: string, value: unknown): Date | null => {
  if (value === undefined) return null;
  if (!(value instanceof Date) || Number.isNaN(value.getTime())) throw new InvalidJobError(`picket: browse filter ${name} must be a valid Date (got ${String(value)}).`);
  return value;
};

/** One page of the jobs in a state, filtered, in the state's time order. */
export const browseJobs = async (db: Queryable, filter: BrowseFilter, options: StatementOptions = {}): Promise<BrowsePage> => {
  const state = STATES[filter.state];
  if (!BROWSE_STATES.includes(filter.state) || state === undefined) {
    throw new InvalidJobError(`picket: browse state must be one of ${BROWSE_STATES.join(", ")} (got ${JSON.stringify(filter.state)}).`);
  }
  const order = filter.order ?? state.defaultOrder;
  if (order !== "newest" && order !== "oldest") throw new InvalidJobError(`picket: browse order must be "newest" or "oldest" (got ${JSON.stringify(order)}).`);
  const limit = filter.limit ?? 50;
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_BROWSE_PAGE) {
    throw new InvalidJobError(`picket: browse limit must be an integer from 1 to ${MAX_BROWSE_PAGE} (got ${String(filter.limit)}).`);
  }
  const [afterAt, afterId] = filter.after === undefined ? [null, null] : parseCursor(filter.after);
  const text = optionalText("text", filter.text);
  // ILIKE's own characters in the substring are matched as themselves.
  const pattern = text === null ? null : `%${text.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
  const { rows } = await runStatement<BrowsedJob & { hit: boolean; n: string; cursorAt: string }>(
    db,
    {
      text: browseSql(options.schema ?? DEFAULT_SCHEMA)[`${filter.state}:${order}`]!,
      values: [
        afterAt,
        afterId,
        optionalTime("from", filter.from),
        optionalTime("to", filter.to),
        SCAN_BUDGET,
        optionalText("task", filter.task),
        optionalText("queue", filter.queue),
        optionalText("worker", filter.worker),
        optionalText("key", filter.key),
        pattern,
        limit,
      ],
    },
    options,
  );
  const page = rows.filter((row) => row.hit);
  const jobs = page.map(({ hit: _hit, n: _n, cursorAt: _cursorAt, ...job }) => job);
  const last = page.at(-1);
  if (page.length === limit && last !== undefined) return { jobs, next: cursorOf(last), searchedTo: null };
  // The page is short: either the state has no more rows, or the scan's budget ran out first (its
  // last row, the edge, came back though it did not match).
  const edge = rows.at(-1);
  if (edge !== undefined && Number(edge.n) === SCAN_BUDGET) return { jobs, next: cursorOf(edge), searchedTo: edge.at };
  return { jobs, next: null, searchedTo: null };
};

// A worker's jobs, newest claim first: every running row is read (jobs_sweep_idx; as many as the
// workers' slots) and the worker's kept, with no budget: a worker's page shows all it holds.
const heldBySql = perSchema(
  (schema) => `
  SELECT ${browsedColumns}, j.locked_at AS at FROM ${schema}.jobs AS j
  WHERE j.lock_until IS NOT NULL AND j.status = 'processing' AND j.locked_by = $1
  ORDER BY j.locked_at DESC, j.id DESC LIMIT $2::int`,
);

/** The jobs a worker holds now (at most `limit`, default 1000), newest claim first. */
export const jobsHeldBy = async (db: Queryable, workerId: string, options: StatementOptions & { limit?: number } = {}): Promise<BrowsedJob[]> =>
  (await runStatement<BrowsedJob>(db, { text: heldBySql(options.schema ?? DEFAULT_SCHEMA), values: [workerId, options.limit ?? 1_000] }, options)).rows;
