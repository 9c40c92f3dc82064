import { randomUUID } from "node:crypto";
import { InvalidConfigError } from "./errors.ts";
import { DEFAULT_MAX_ATTEMPTS } from "./job-spec.ts";
import { type ClaimedJob, claimedColumns } from "./job-row.ts";
import type { Queryable, StatementOptions } from "./queryable.ts";
import { DEFAULT_SCHEMA, perSchema } from "./schema-name.ts";
import { runStatement } from "./statement.ts";

/** What one worker wants of one task type in this claim, all from that worker's own config. */
export interface ClaimWant {
  type: string;
  /** At most this many jobs of the type (the free slots the worker has for it). */
  limit: number;
  /** lock_until = now() + leaseMs; the lease the worker promises to renew. */
  leaseMs: number;
  /** The task's retry spacing, written on the row so every later path spaces retries alike. */
  backoffBaseMs: number;
  backoffMaxMs: number;
  /**
   * The task's attempts, written on a job that did not set its own (max_attempts NULL) when it is
   * first claimed; default DEFAULT_MAX_ATTEMPTS.
   */
  maxAttempts?: number;
}

// One round trip for every type. Each type's LATERAL subquery takes at most its own limit from
// the partial claim index; the candidates are then dealt round-robin across types (every type's
// first job, then every type's second, ...; ties in the order the types were given) up to the
// worker's free slots, so a deep backlog of one type cannot crowd out another by ordering.
// FOR UPDATE SKIP LOCKED lets concurrent workers claim disjoint rows without waiting (a
// candidate locked but not dealt is only held until the statement commits). The UPDATE re-checks
// status so the statement that writes is the one that decides. A fresh random token fences every
// later write of this claim: the worker draws them ($8, one per job it may get, in the order jobs
// are dealt), so it knows them even when the claim's reply never reaches it, and can give such
// jobs back unrun (giveBackUnreturnedClaims). Attempts are counted here, at claim, and a job that
// did not set its own max_attempts gets the claiming worker's task's (0007). Jobs that name a queue
// are never taken here (`q.queue IS NULL`, which jobs_claim_idx's predicate matches), nor are the
// types of limited tasks (the worker leaves them out of `wants`): both go through claimLimited. The lease runs
// from the moment the row is written (clock_timestamp()), as a renewal's does, and is returned with
// the row. The rows to write are also named as an array (`j.id = ANY (...)`): without it, a plan made without the parameters' values (a
// prepared statement's generic plan) guesses the picked set large and scans the whole table to
// join it; with it, every plan looks the picked ids up by primary key.
const claimSql = perSchema(
  (schema) => `
  WITH wanted AS (
    SELECT * FROM unnest($1::text[], $2::int[], $3::int[], $4::int[], $5::int[], $9::int[]) WITH ORDINALITY
      AS w(type, lim, lease_ms, backoff_base_ms, backoff_max_ms, max_attempts, ord)
  ), candidates AS (
    SELECT p.id, w.ord, w.lease_ms, w.backoff_base_ms, w.backoff_max_ms, w.max_attempts,
           row_number() OVER (PARTITION BY w.ord ORDER BY p.priority DESC, p.run_at, p.id) AS turn
    FROM wanted AS w
    CROSS JOIN LATERAL (
      SELECT q.id, q.priority, q.run_at FROM ${schema}.jobs AS q
      WHERE q.status = 'pending' AND q.queue IS NULL AND q.type = w.type AND q.run_at <= now()
      ORDER BY q.priority DESC, q.run_at, q.id
      LIMIT w.lim
      FOR UPDATE SKIP LOCKED
    ) AS p
  ), picked AS (
    SELECT c.*, row_number() OVER (ORDER BY c.turn, c.ord) AS slot FROM candidates AS c ORDER BY c.turn, c.ord LIMIT $7
  )
  UPDATE ${schema}.jobs AS j
  SET status = 'processing',
      claim_token = ($8::uuid[])[picked.slot],
      locked_by = $6::text,
      locked_at = now(),
      lock_until = clock_timestamp() + picked.lease_ms * interval '1 millisecond',
      backoff_base_ms = picked.backoff_base_ms,
      backoff_max_ms = picked.backoff_max_ms,
      max_attempts = coalesce(j.max_attempts, picked.max_attempts),
      attempts = j.attempts + 1,
      progress = NULL,
      updated_at = now()
  FROM picked
  WHERE j.id = ANY (ARRAY(SELECT id FROM picked)) AND j.id = picked.id AND j.status = 'pending'
  RETURNING ${claimedColumns("j")}, picked.lease_ms AS "leaseMs",
            (extract(epoch FROM now() - j.run_at) * 1000)::float8 AS "readyMs"`,
);

export const checkWant = (want: ClaimWant): void => {
  const positive = (name: keyof ClaimWant, min: number) => {
    const value = want[name];
    if (!Number.isInteger(value) || (value as number) < min || (value as number) > 2_147_483_647) {
      throw new InvalidConfigError(
        `picket: claim for "${want.type}": ${name} must be an integer from ${min} to 2147483647 (got ${String(value)}).`,
      );
    }
  };
  positive("limit", 0);
  positive("leaseMs", 1);
  positive("backoffBaseMs", 0);
  positive("backoffMaxMs", 0);
  if (want.maxAttempts !== undefined) {
    const value = want.maxAttempts;
    if (!Number.isInteger(value) || value < 1 || value > 1_000_000) {
      throw new InvalidConfigError(`picket: claim for "${want.type}": maxAttempts must be an integer from 1 to 1000000 (got ${String(value)}).`);
    }
  }
};

/** The tokens a claim of at most `total` jobs may give out: fresh random UUIDs, one per job. */
export const drawClaimTokens = (total: number): string[] => Array.from({ length: total }, () => randomUUID());

/**
 * Claims ready jobs for `workerId` in one statement: at most `want.limit` of each wanted type and
 * at most `total` in all (default: the sum of the limits), dealt fairly across types. Returned
 * jobs are processing, carry a fresh claim token, and have attempts already counted. `tokens`
 * (drawClaimTokens(total), by default drawn here) are the tokens the claim gives out, in order: a
 * caller that keeps them can give back the jobs of a claim whose reply it never got.
 */
export const claimJobs = async (
  db: Queryable,
  workerId: string,
  wants: readonly ClaimWant[],
  options: StatementOptions & { total?: number; tokens?: readonly string[] } = {},
): Promise<ClaimedJob[]> => {
  wants.forEach(checkWant);
  const types = new Set(wants.map((want) => want.type));
  if (types.size !== wants.length) {
    throw new InvalidConfigError(`picket: claim names a type more than once (${wants.map((w) => w.type).join(", ")}); give each type once.`);
  }
  const total = options.total ?? wants.reduce((sum, want) => sum + want.limit, 0);
  if (!Number.isInteger(total) || total < 0) {
    throw new InvalidConfigError(`picket: claim total must be an integer ≥ 0 (got ${String(options.total)}).`);
  }
  // Nothing wanted, no round trip. (A type offered no slot stays in the statement: LIMIT 0.)
  if (wants.length === 0 || total === 0) return [];
  const tokens = options.tokens ?? drawClaimTokens(total);
  if (tokens.length < total) {
    throw new InvalidConfigError(`picket: a claim of up to ${total} jobs needs as many tokens (got ${tokens.length}); draw them with drawClaimTokens(total).`);
  }
  const schema = options.schema ?? DEFAULT_SCHEMA;
  const { rows } = await runStatement<ClaimedJob>(
    db,
    {
      name: `picket_claim_${schema}`,
      text: claimSql(schema),
      values: [
        wants.map((w) => w.type),
        wants.map((w) => w.limit),
        wants.map((w) => w.leaseMs),
        wants.map((w) => w.backoffBaseMs),
        wants.map((w) => w.backoffMaxMs),
        workerId,
        total,
        tokens,
        wants.map((w) => w.maxAttempts ?? DEFAULT_MAX_ATTEMPTS),
      ],
    },
    options,
  );
  return rows;
};

// Jobs claimed by a statement whose reply never reached the worker (its connection was lost, or
// it outlived its bound and was cancelled too late): processing under tokens the worker drew but
// never held. They ran nowhere, so they go back as the drain's release does: pending at once, the
// attempt not charged. Matched by token among the rows that hold a lease (the sweep's index).
const giveBackSql = perSchema(
  (schema) => `
  UPDATE ${schema}.jobs AS j
  SET status = 'pending', attempts = greatest(j.attempts - 1, 0), run_at = now(), claim_token = NULL, locked_by = NULL,
      locked_at = NULL, lock_until = NULL, updated_at = now()
  WHERE j.lock_until IS NOT NULL AND j.status = 'processing' AND j.claim_token = ANY ($1::uuid[])
  RETURNING j.id`,
);

/** Gives back, unrun and uncharged, the jobs a claim gave out under `tokens` (see giveBackSql); returns their ids. */
export const giveBackUnreturnedClaims = async (db: Queryable, tokens: readonly string[], options: StatementOptions = {}): Promise<string[]> => {
  if (tokens.length === 0) return [];
  const { rows } = await runStatement<{ id: string }>(db, { text: giveBackSql(options.schema ?? DEFAULT_SCHEMA), values: [tokens] }, options);
  return rows.map((row) => row.id);
};
