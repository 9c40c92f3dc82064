import { attemptErrorSet } from "./job-history.ts";
import { DEFAULT_MAX_ATTEMPTS } from "./job-spec.ts";

// A row's attempts limit. NULL ("the task's") is filled by every claim of this version; a row claimed
// by an older worker during a rolling deploy keeps it, and gets the old table default.
const MAX = `coalesce(j.max_attempts, ${DEFAULT_MAX_ATTEMPTS})`;

/**
 * The SET list for "this attempt did not finish", shared by a handler failure (failJobs) and a
 * lost worker (the sweep): pending again after the one backoff, computed from the row's own
 * attempts and spacing, or dead when the attempts are spent. The error is appended to the
 * bounded history, never written over it. `error` and `stack` are SQL expressions for the message
 * and the stack (none for a lost worker).
 */
export const unfinishedAttemptSet = (schema: string, error: string, stack = "NULL"): string => `
  status = CASE WHEN j.attempts >= ${MAX} THEN 'dead' ELSE 'pending' END,
  run_at = CASE WHEN j.attempts >= ${MAX} THEN j.run_at
                ELSE now() + ${schema}.backoff(j.attempts, j.backoff_base_ms, j.backoff_max_ms) END,
  finished_at = CASE WHEN j.attempts >= ${MAX} THEN now() END,
  claim_token = CASE WHEN j.attempts >= ${MAX} THEN j.claim_token END,
  locked_by = CASE WHEN j.attempts >= ${MAX} THEN j.locked_by END,
  locked_at = CASE WHEN j.attempts >= ${MAX} THEN j.locked_at END,
  lock_until = NULL,
  ${attemptErrorSet(schema, error, stack)},
  updated_at = now()`;
