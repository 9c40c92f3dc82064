// The job row as picket's statements return it. Every statement that returns jobs selects
// JOB_COLUMNS, so there is one row shape and no mapping code.

/** A job's status; "waiting" is a flow's job whose dependencies have not all resolved (never claimed). */
export type JobStatus = "pending" | "processing" | "waiting" | "completed" | "dead" | "cancelled";

/** bigint ids come back from pg as strings; picket keeps them that way (no precision loss). */
export type JobId = string;

/**
 * An attempt that did not finish, as the job's history records it. `attempt` counts across
 * operator retries (1–3, a retry, then 4–6): it is the row's prior_attempts + attempts when the
 * attempt ended. `at` is ISO 8601 in UTC with milliseconds, as every other time picket prints.
 */
export interface ErrorEntry {
  at: string;
  attempt: number;
  message: string;
  /** Where the handler's error was thrown, its first ERROR_STACK_LIMIT characters; absent when it threw no Error. */
  stack?: string;
  /** The worker that held the attempt (absent in entries written before picket recorded it). */
  worker?: string;
}

/** The operator actions that change a job's course: each is recorded in the job's history. */
export type OperatorAction = "retry" | "cancel" | "run_now";

/** An operator's action, as the job's history records it: what, when, and who when the caller said. */
export interface OperatorEntry {
  at: string;
  operator: OperatorAction;
  /** Who asked: the OS user and host for `picket jobs`, "dashboard" for the dashboard, what a library caller passes. */
  by?: string;
}

/** One entry of a job's history (the `errors` column), oldest first; tell them apart with `"operator" in entry`. */
export type HistoryEntry = ErrorEntry | OperatorEntry;

export interface Job {
  id: JobId;
  type: string;
  payload: unknown;
  status: JobStatus;
  priority: number;
  runAt: Date;
  /** Attempts charged since the job was enqueued or an operator last retried it: max_attempts bounds these. */
  attempts: number;
  /** Attempts charged before the operator's last retry; the attempt number the history shows is priorAttempts + attempts. */
  priorAttempts: number;
  /** null until the job's first claim when it did not set its own: then its task's. */
  maxAttempts: number | null;
  claimToken: string | null;
  lockedBy: string | null;
  lockedAt: Date | null;
  lockUntil: Date | null;
  backoffBaseMs: number;
  backoffMaxMs: number;
  progress: unknown;
  lastError: string | null;
  /** The job's history: each attempt that did not finish and each operator action, the newest ERROR_HISTORY_LIMIT. */
  errors: HistoryEntry[];
  result: unknown;
  key: string | null;
  /** The serial queue the job belongs to, if any. */
  queue: string | null;
  /** The flow the job is part of (enqueueFlow, or children a running job added), and its name there; null outside flows. */
  flowId: JobId | null;
  flowNode: string | null;
  createdAt: Date;
  updatedAt: Date;
  finishedAt: Date | null;
}

/**
 * A job as the claim returns it: what running it needs, and the token every later write is fenced
 * by. Only these columns come back (a claim is the hottest read picket makes, and each timestamp
 * costs a parse and a Date per job); the whole row is one getJob away.
 */
export interface ClaimedJob {
  id: JobId;
  type: string;
  payload: unknown;
  /** This attempt's number: the claim counts it. */
  attempts: number;
  maxAttempts: number;
  createdAt: Date;
  claimToken: string;
  /** The lease the claim granted (lock_until = the moment it was written + this); renewals grant it again. */
  leaseMs: number;
  /** How long the job had been ready to run (since its run_at) when the claim took it, by the server's clock. */
  readyMs: number;
}

/** ClaimedJob's columns for the claim's `RETURNING`, qualified by `alias`; the claim adds leaseMs and readyMs. */
export const claimedColumns = (alias: string): string =>
  ["id", "type", "payload", "attempts", 'max_attempts AS "maxAttempts"', 'created_at AS "createdAt"', 'claim_token AS "claimToken"']
    .map((column) => `${alias}.${column}`)
    .join(", ");

/**
 * ClaimedJob's columns as the claim hands them to the worker, from a relation with claimedColumns:
 * the id as text and the creation time as epoch milliseconds (claimedRow makes the Date). pg's
 * bigint and timestamptz parsers (a regular expression each, a date parse of the text) were 4% of
 * a no-op job's worker CPU.
 */
export const claimedOutput = `id::text AS id, type, payload, attempts, "maxAttempts", (extract(epoch FROM "createdAt") * 1000)::float8 AS "createdAt", "claimToken"`;

/** A claimed row as the claim returns it (claimedOutput) made a ClaimedJob, in place. */
export const claimedRow = (row: ClaimedJob): ClaimedJob => {
  row.createdAt = new Date(row.createdAt as unknown as number);
  return row;
};

/** Column list for `RETURNING` / `SELECT`, aliased to Job's field names; `alias` qualifies it. */
export const jobColumns = (alias: string): string =>
  [
    "id",
    "type",
    "payload",
    "status",
    "priority",
    'run_at AS "runAt"',
    "attempts",
    'prior_attempts AS "priorAttempts"',
    'max_attempts AS "maxAttempts"',
    'claim_token AS "claimToken"',
    'locked_by AS "lockedBy"',
    'locked_at AS "lockedAt"',
    'lock_until AS "lockUntil"',
    'backoff_base_ms AS "backoffBaseMs"',
    'backoff_max_ms AS "backoffMaxMs"',
    "progress",
    'last_error AS "lastError"',
    "errors",
    "result",
    "key",
    "queue",
    'flow_id AS "flowId"',
    'flow_node AS "flowNode"',
    'created_at AS "createdAt"',
    'updated_at AS "updatedAt"',
    'finished_at AS "finishedAt"',
  ]
    .map((column) => `${alias}.${column}`)
    .join(", ");

/** Longest error message kept per entry; handlers can throw megabytes of text. */
export const ERROR_MESSAGE_LIMIT = 2000;

/** Longest stack kept per entry: the frames that say where, not a whole async chain. */
export const ERROR_STACK_LIMIT = 4000;

/** Entries kept in a job's history (attempts and operator actions); the oldest are dropped first. */
export const ERROR_HISTORY_LIMIT = 10;
