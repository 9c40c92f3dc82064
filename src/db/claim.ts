import { randomUUID } from "node:crypto";
import { InvalidConfigError } from "./errors.ts";
import { DEFAULT_MAX_ATTEMPTS, MAX_ATTEMPTS } from "./job-spec.ts";
import { type ClaimedJob, claimedColumns, claimedOutput, claimedRow } from "./job-row.ts";
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
// FOR UPDATE SKIP LOCKED lets concurrent workers claim disjoint rows without waiting (a candidate
// locked but not dealt is only held until the statement commits). The UPDATE re-checks status so
// the statement that writes is the one that decides. Attempts are counted here, at claim, and a
// job that did not set its own max_attempts gets the claiming worker's task's (0007). Jobs that
// name a queue are never taken here (`q.queue IS NULL`, which jobs_claim_idx's predicate
// matches), nor are the types of limited tasks (the worker leaves them out of `wants`): both go
// through claimLimited. A paused task (0012) is left out of the wanted types. The lease runs from
// the moment the row is written (clock_timestamp()), as a renewal's does.
//
// Invariant 14: the plan never depends on statistics. The rows are reached only through the
// LATERAL probe of the claim index and `j.id = ANY (...)` on the primary key; nothing joins the
// written table to the picked set, because every join method the planner may choose for such a
// join was chosen on some table (on a never-analyzed table the generic plan was a nested loop that
// rescanned the picked set per row: 159,600 rows filtered for a 400-row claim, 32 of its 35 ms).
// So each row's values come from the row itself: its type's settings by the type's position in
// $1 (a handful of types), and its token from the claim's seed and its id (md5(seed || id), a
// fresh unguessable value per claim of a job). Because the worker draws the seed, it can give
// back the jobs of a claim whose reply never reached it (giveBackUnreturnedClaims). The rows come
// back in the order they were dealt. (picket's own pool plans with enable_seqscan off, see pool.ts:
// a plan made while the table was still empty would otherwise read the whole table at every claim.)
/**
 * The token a claim drawn with `seed` gives the job `id`, as SQL: unique per claim of a job (the
 * seed is a fresh random UUID per claim statement, the id unique within it).
 */
export const claimTokenSql = (seed: string, id: string): string => `md5(${seed}::uuid::text || ':' || ${id}::text)::uuid`;

const at = (array: string, type: string) => `(${array})[array_position($1::text[], ${type})]`;
const claimSql = perSchema(
  (schema) => `
  WITH wanted AS (
    SELECT * FROM unnest($1::text[], $2::int[]) WITH ORDINALITY AS w(type, lim, ord)
    WHERE NOT EXISTS (SELECT FROM ${schema}.paused AS paused WHERE paused.kind = 'task' AND paused.name = w.type)
  ), candidates AS (
    SELECT p.id, w.ord, row_number() OVER (PARTITION BY w.ord ORDER BY p.priority DESC, p.run_at, p.id) AS turn
    FROM wanted AS w
    CROSS JOIN LATERAL (
      SELECT q.id, q.priority, q.run_at FROM ${schema}.jobs AS q
      WHERE q.status = 'pending' AND q.queue IS NULL AND q.type = w.type AND q.run_at <= now()
      ORDER BY q.priority DESC, q.run_at, q.id
      LIMIT w.lim
      FOR UPDATE SKIP LOCKED
    ) AS p
  ), claimed AS (
    UPDATE ${schema}.jobs AS j
    SET status = 'processing',
        claim_token = ${claimTokenSql("$8", "j.id")},
        locked_by = $6::text,
        locked_at = now(),
        lock_until = clock_timestamp() + ${at("$3::int[]", "j.type")} * interval '1 millisecond',
        backoff_base_ms = ${at("$4::int[]", "j.type")},
        backoff_max_ms = ${at("$5::int[]", "j.type")},
        max_attempts = coalesce(j.max_attempts, ${at("$9::int[]", "j.type")}),
        attempts = j.attempts + 1,
        progress = NULL,
        updated_at = now()
    WHERE j.id = ANY (ARRAY(SELECT c.id FROM candidates AS c ORDER BY c.turn, c.ord LIMIT $7)) AND j.status = 'pending'
    RETURNING ${claimedColumns("j")}, ${at("$3::int[]", "j.type")} AS "leaseMs",
              (extract(epoch FROM now() - j.run_at) * 1000)::float8 AS "readyMs", j.priority, j.run_at
  )
  SELECT ${claimedOutput}, "leaseMs", "readyMs" FROM claimed
  ORDER BY row_number() OVER (PARTITION BY type ORDER BY priority DESC, run_at, id), array_position($1::text[], type)`,
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
    if (!Number.isInteger(value) || value < 1 || value > MAX_ATTEMPTS) {
      throw new InvalidConfigError(`picket: claim for "${want.type}": maxAttempts must be an integer from 1 to ${MAX_ATTEMPTS} (got ${String(value)}).`);
    }
  }
};

/** A claim's seed: a fresh random UUID, from which the claim derives each job's token (claimTokenSql). */
export const drawClaimSeed = (): string => randomUUID();

/** The tokens the slow claim (claimLimited) may give out, at most `total`: fresh random UUIDs, one per job. */
export const drawClaimTokens = (total: number): string[] => Array.from({ length: total }, () => randomUUID());

/**
 * Claims ready jobs for `workerId` in one statement: at most `want.limit` of each wanted type and
 * at most `total` in all (default: the sum of the limits), dealt fairly across types and returned
 * in that order. Returned jobs are processing, carry a fresh claim token, and have attempts already
 * counted. `seed` (drawClaimSeed(), by default drawn here) is what the tokens are made from: a
 * caller that keeps it can give back the jobs of a claim whose reply it never got.
 */
export const claimJobs = async (
  db: Queryable,
  workerId: string,
  wants: readonly ClaimWant[],
  options: StatementOptions & { total?: number; seed?: string } = {},
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
        options.seed ?? drawClaimSeed(),
        wants.map((w) => w.maxAttempts ?? DEFAULT_MAX_ATTEMPTS),
      ],
    },
    options,
  );
  for (const row of rows) claimedRow(row);
  return rows;
};

/** The claims whose reply never reached the worker: the fast claim's seeds, the slow claim's tokens. */
export interface UnreturnedClaims {
  workerId: string;
  seeds: readonly string[];
  tokens: readonly string[];
}

// Jobs claimed by a statement whose reply never reached the worker (its connection was lost, or
// it outlived its bound and was cancelled too late): processing under tokens the worker made but
// never held. They ran nowhere, so they go back as the drain's release does: pending at once, the
// attempt not charged. Found among the rows that hold a lease (the sweep's index) and that this
// worker claimed, by token: drawn by the slow claim ($1), or made from a fast claim's seed ($2).
const giveBackSql = perSchema(
  (schema) => `
  UPDATE ${schema}.jobs AS j
  SET status = 'pending', attempts = greatest(j.attempts - 1, 0), run_at = now(), claim_token = NULL, locked_by = NULL,
      locked_at = NULL, lock_until = NULL, updated_at = now()
  WHERE j.lock_until IS NOT NULL AND j.status = 'processing' AND j.locked_by = $3::text
    AND (j.claim_token = ANY ($1::uuid[])
         OR EXISTS (SELECT 1 FROM unnest($2::uuid[]) AS s(seed) WHERE j.claim_token = ${claimTokenSql("s.seed", "j.id")}))
  RETURNING j.id`,
);

/** Gives back, unrun and uncharged, the jobs of claims whose reply never came (see giveBackSql); returns their ids. */
export const giveBackUnreturnedClaims = async (db: Queryable, claims: UnreturnedClaims, options: StatementOptions = {}): Promise<string[]> => {
  if (claims.seeds.length === 0 && claims.tokens.length === 0) return [];
  const { rows } = await runStatement<{ id: string }>(
    db,
    { text: giveBackSql(options.schema ?? DEFAULT_SCHEMA), values: [claims.tokens, claims.seeds, claims.workerId] },
    options,
  );
  return rows.map((row) => row.id);
};
