import { InvalidConfigError } from "./errors.ts";
import type { JobId, JobStatus } from "./job-row.ts";
import type { Queryable, SchemaOption } from "./queryable.ts";
import { DEFAULT_SCHEMA, perSchema } from "./schema-name.ts";
import { errorSet, unfinishedAttemptSet } from "./unfinished-attempt.ts";

/** The claim a write is made under: the job and the token its claim was given. */
export interface Claim {
  id: JobId;
  token: string;
}

/**
 * What a fenced write did to one job. "fenced" means the claim was lost (reclaimed, finished,
 * released or cancelled meanwhile): nothing was written and the caller must not act as owner.
 */
export type FencedResult =
  | { id: JobId; outcome: "applied"; status: JobStatus; runAt: Date; lockUntil: Date | null }
  | { id: JobId; outcome: "fenced" };

// THE FENCE. Every write after a claim matches the row by id, the claim's token, and
// status = 'processing', and by nothing else; `c` is the batch of claims the write is made under.
const fence = (): string => "j.id = c.id AND j.claim_token = c.token AND j.status = 'processing'";

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** A per-claim value bound as an extra array column of the batch. */
interface Column<T> {
  name: string;
  sqlType: string;
  value: (item: T) => unknown;
}

/**
 * JSON text for a value the runtime must record whatever it is (a handler's result, progress):
 * bigints become strings and NUL characters (which jsonb cannot hold) are dropped, so one odd
 * value never makes a finished job unrecordable. A value JSON cannot express at all (a cycle) is
 * recorded as a note saying so.
 */
export const recordableJson = (value: unknown): string | null => {
  if (value === undefined) return null;
  try {
    return JSON.stringify(value, (_key, v: unknown) =>
      typeof v === "bigint" ? v.toString() : typeof v === "string" ? v.replaceAll("\u0000", "") : v,
    ) ?? null;
  } catch (error) {
    return JSON.stringify({ unrecordable: `value could not be stored as JSON: ${(error as Error).message}` });
  }
};

/** Error text as it can be stored: never empty, without NUL characters. */
const errorText = (error: unknown): string => {
  const text = typeof error === "string" ? error : String(error ?? "");
  return text.replaceAll("\u0000", "") || "unknown error";
};

/**
 * Builds a fenced batch write: one UPDATE for any number of claims, whose SET may read the
 * row (j) and the claim's own values (c.<column>). Returns, per claim in input order, whether it
 * applied.
 */
const fencedWrite = <T extends Claim>(
  statement: string,
  columns: Column<T>[],
  set: (schema: string) => string,
  check: (item: T) => void = () => undefined,
) => {
  const sql = perSchema((schema) => {
    const params = columns.map((col, i) => `$${i + 3}::${col.sqlType}[]`);
    const names = columns.map((col) => `, ${col.name}`).join("");
    return `
  UPDATE ${schema}.jobs AS j SET ${set(schema)}
  FROM unnest($1::bigint[], $2::uuid[]${params.map((p) => `, ${p}`).join("")}) AS c(id, token${names})
  WHERE ${fence()}
  RETURNING j.id, c.token, j.status, j.run_at AS "runAt", j.lock_until AS "lockUntil"`;
  });
  return async (db: Queryable, items: readonly T[], options: SchemaOption = {}): Promise<FencedResult[]> => {
    if (items.length === 0) return [];
    items.forEach(check);
    const schema = options.schema ?? DEFAULT_SCHEMA;
    const { rows } = await db.query<{ id: JobId; token: string; status: JobStatus; runAt: Date; lockUntil: Date | null }>({
      name: `picket_${statement}_${schema}`,
      text: sql(schema),
      values: [
        items.map((item) => (/^[1-9][0-9]{0,18}$/.test(String(item.id)) ? String(item.id) : "0")),
        // A missing or malformed token binds NULL, which the fence never matches: such a write
        // reports fenced instead of applying unfenced or failing the whole batch.
        items.map((item) => (typeof item.token === "string" && UUID.test(item.token) ? item.token : null)),
        ...columns.map((col) => items.map(col.value)),
      ],
    });
    // Matched by id and token: a stale claim batched with the live one must not read as applied.
    const applied = new Map(rows.map((row) => [`${row.id}/${row.token}`, row]));
    return items.map((item): FencedResult => {
      const row = applied.get(`${item.id}/${item.token}`);
      return row === undefined
        ? { id: item.id, outcome: "fenced" }
        : { id: item.id, outcome: "applied", status: row.status, runAt: row.runAt, lockUntil: row.lockUntil };
    });
  };
};


/** Completed, with the handler's result (any JSON value) if it returned one. */
export const completeJobs = fencedWrite<Claim & { result?: unknown }>(
  "complete",
  [{ name: "result", sqlType: "jsonb", value: (item) => recordableJson(item.result) }],
  () => `status = 'completed', result = c.result, finished_at = now(), lock_until = NULL, updated_at = now()`,
);

/** A failed attempt: pending again after the backoff, or dead when the attempts are spent. */
export const failJobs = fencedWrite<Claim & { error: string }>(
  "fail",
  [{ name: "error", sqlType: "text", value: (item) => errorText(item.error) }],
  (schema) => unfinishedAttemptSet(schema, "c.error"),
);

/** A permanent failure: dead now, whatever attempts remain. */
export const deadLetterJobs = fencedWrite<Claim & { error: string }>(
  "dead_letter",
  [{ name: "error", sqlType: "text", value: (item) => errorText(item.error) }],
  (schema) => `status = 'dead', finished_at = now(), lock_until = NULL, ${errorSet(schema, "c.error")}, updated_at = now()`,
);

/** Progress telemetry (any JSON value) for a running job. */
export const reportProgress = fencedWrite<Claim & { progress: unknown }>(
  "progress",
  [{ name: "progress", sqlType: "jsonb", value: (item) => recordableJson(item.progress) }],
  () => `progress = c.progress, updated_at = now()`,
);

/**
 * Extends the leases of many running jobs in one statement; each claim names its own lease.
 * A claim reported fenced was lost, and its handler must be interrupted.
 */
export const renewLeases = fencedWrite<Claim & { leaseMs: number }>(
  "renew",
  [{ name: "lease_ms", sqlType: "int", value: (item) => item.leaseMs }],
  () => `lock_until = now() + c.lease_ms * interval '1 millisecond', updated_at = now()`,
  (item) => {
    if (!Number.isInteger(item.leaseMs) || item.leaseMs < 1 || item.leaseMs > 2_147_483_647) {
      throw new InvalidConfigError(`picket: lease renewal for job ${item.id}: leaseMs must be an integer from 1 to 2147483647 (got ${String(item.leaseMs)}).`);
    }
  },
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
