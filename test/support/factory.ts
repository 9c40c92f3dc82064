// Rows with consistent defaults, for tests that need a job in a given state.
import type { Queryable } from "../../src/db/index.ts";
import { claimJobs, enqueueJobs, type ClaimedJob, type ClaimWant, type JobSpec } from "../../src/db/index.ts";

export const want = (type: string, overrides: Partial<ClaimWant> = {}): ClaimWant => ({
  type,
  limit: 100,
  leaseMs: 60_000,
  backoffBaseMs: 1_000,
  backoffMaxMs: 3_600_000,
  ...overrides,
});

/** Enqueues `count` jobs of `type` and claims them all. */
export const claimed = async (
  db: Queryable,
  type: string,
  count = 1,
  overrides: { spec?: Partial<JobSpec>; want?: Partial<ClaimWant>; worker?: string } = {},
): Promise<ClaimedJob[]> => {
  await enqueueJobs(db, Array.from({ length: count }, (_, i) => ({ type, payload: { i }, ...overrides.spec })));
  return claimJobs(db, overrides.worker ?? "worker-a", [want(type, { limit: count, ...overrides.want })]);
};

/** Puts a processing row's lease in the past, as if its worker stopped renewing. */
export const expireLease = async (db: Queryable, id: string, agoMs = 1_000): Promise<void> => {
  await db.query({
    text: `UPDATE picket.jobs SET lock_until = now() - $2::int * interval '1 millisecond' WHERE id = $1`,
    values: [id, agoMs],
  });
};

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export const row = async (db: Queryable, id: string): Promise<any> =>
  (await db.query({ text: "SELECT * FROM picket.jobs WHERE id = $1", values: [id] })).rows[0];
