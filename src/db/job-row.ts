// The job row as picket's statements return it. Every statement that returns jobs selects
// JOB_COLUMNS, so there is one row shape and no mapping code.

export type JobStatus = "pending" | "processing" | "completed" | "dead" | "cancelled";

/** bigint ids come back from pg as strings; picket keeps them that way (no precision loss). */
export type JobId = string;

export interface ErrorEntry {
  at: string;
  attempt: number;
  message: string;
}

export interface Job {
  id: JobId;
  type: string;
  payload: unknown;
  status: JobStatus;
  priority: number;
  runAt: Date;
  attempts: number;
  maxAttempts: number;
  claimToken: string | null;
  lockedBy: string | null;
  lockedAt: Date | null;
  lockUntil: Date | null;
  backoffBaseMs: number;
  backoffMaxMs: number;
  progress: unknown;
  lastError: string | null;
  errors: ErrorEntry[];
  result: unknown;
  key: string | null;
  createdAt: Date;
  updatedAt: Date;
  finishedAt: Date | null;
}

/** A job as the claim returns it: processing, with the token every later write is fenced by. */
export interface ClaimedJob extends Job {
  status: "processing";
  claimToken: string;
  lockUntil: Date;
  /** The lease the claim granted (lock_until = the moment it was written + this); renewals grant it again. */
  leaseMs: number;
}

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
    'created_at AS "createdAt"',
    'updated_at AS "updatedAt"',
    'finished_at AS "finishedAt"',
  ]
    .map((column) => `${alias}.${column}`)
    .join(", ");

/** Longest error message kept per entry; handlers can throw megabytes of text. */
export const ERROR_MESSAGE_LIMIT = 2000;

/** Entries kept in a job's error history; the oldest are dropped first. */
export const ERROR_HISTORY_LIMIT = 10;
