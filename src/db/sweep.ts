import { InvalidConfigError } from "./errors.ts";
import type { JobId, JobStatus } from "./job-row.ts";
import type { Queryable, StatementOptions } from "./queryable.ts";
import { DEFAULT_SCHEMA, perSchema } from "./schema-name.ts";
import { runStatement } from "./statement.ts";
import { unfinishedAttemptSet } from "./unfinished-attempt.ts";

export interface SweptJob {
  id: JobId;
  type: string;
  /** pending (retry after the backoff) or dead (attempts spent). */
  status: Extract<JobStatus, "pending" | "dead">;
  attempts: number;
  runAt: Date;
  /** The claim that was lost, for the log. */
  lostToken: string;
  lostBy: string | null;
}

// The reclaim sweep: one bounded statement. A processing row whose lease ran out (lock_until, an
// absolute time written by the claiming worker from its own config, compared with the
// database's clock, never recomputed here) did not finish its attempt, so it gets exactly what a
// handler failure gets: the one backoff, or dead. `lock_until < now()` keeps the column bare so
// the partial sweep index serves it; SKIP LOCKED passes over rows a live owner is writing right
// now, and the UPDATE re-checks the predicate on the row it writes. The sweeping worker names the
// claims it holds and is renewing ($2): it never reclaims those, even when their lease ran out on
// the server while it could not reach it (their outcome is on its way, and the fence decides).
// Invariant 14: the rows are reached through the sweep index and then by `id = ANY` on the
// primary key, never by a join of the table with the stale set (see claim.ts). The lost claim is
// the row's own, read before it is written over: the SET sees it as j's old values, and the
// RETURNING list (which sees the new ones) reads it from a map of the stale rows by id.
const sweepSql = perSchema(
  (schema) => `
  WITH stale AS (
    SELECT s.id, s.claim_token, s.locked_by
    FROM ${schema}.jobs AS s
    WHERE s.status = 'processing' AND s.lock_until < now() AND s.claim_token <> ALL ($2::uuid[])
    ORDER BY s.lock_until
    LIMIT $1
    FOR UPDATE SKIP LOCKED
  ), lost AS (
    SELECT jsonb_object_agg(stale.id::text, jsonb_build_array(stale.claim_token, stale.locked_by)) AS claims FROM stale
  )
  UPDATE ${schema}.jobs AS j
  SET ${unfinishedAttemptSet(
    schema,
    `format('lease expired: claim %s by %s was not renewed after %s', j.claim_token, coalesce(j.locked_by, 'an unknown worker'), j.lock_until)`,
  )}
  WHERE j.id = ANY (ARRAY(SELECT stale.id FROM stale)) AND j.status = 'processing' AND j.lock_until < now() AND j.claim_token <> ALL ($2::uuid[])
  RETURNING j.id, j.type, j.status, j.attempts, j.run_at AS "runAt",
            ((SELECT claims FROM lost) -> j.id::text ->> 0) AS "lostToken", ((SELECT claims FROM lost) -> j.id::text ->> 1) AS "lostBy"`,
);

/**
 * Requeues (or dead-letters) at most `batchSize` processing jobs whose lease expired, except the
 * claims named in `held` (the sweeping worker's own). Returns what it moved, so the caller can
 * log counts and the lost tokens.
 */
export const sweepExpiredClaims = async (
  db: Queryable,
  batchSize: number,
  options: StatementOptions & { held?: readonly string[] } = {},
): Promise<SweptJob[]> => {
  if (!Number.isInteger(batchSize) || batchSize < 1) {
    throw new InvalidConfigError(`picket: sweep batch size must be an integer ≥ 1 (got ${String(batchSize)}).`);
  }
  const schema = options.schema ?? DEFAULT_SCHEMA;
  const { rows } = await runStatement<SweptJob>(
    db,
    { name: `picket_sweep_${schema}`, text: sweepSql(schema), values: [batchSize, options.held ?? []] },
    options,
  );
  return rows;
};
