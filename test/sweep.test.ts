import { describe, expect, it } from "vitest";
import { claimJobs, enqueueJobs, failJobs, sweepExpiredClaims, ERROR_HISTORY_LIMIT } from "../src/db/index.ts";
import { useTestDatabase } from "./support/db.ts";
import { claimed, expireLease, row, want } from "./support/factory.ts";

const db = useTestDatabase();

describe("the reclaim sweep", () => {
  it("spaces a lost attempt with exactly the backoff a handler failure gets at the same attempt", async () => {
    const client = await db.connect();
    // Two jobs in the same state (third attempt, same spacing); one fails, the other is lost.
    const [failed, lost] = await claimed(client, "same-backoff", 2, {
      want: { backoffBaseMs: 1_000, backoffMaxMs: 10_000_000 },
    });
    await client.query("UPDATE picket.jobs SET attempts = 3 WHERE id = ANY($1)", [[failed!.id, lost!.id]]);
    await expireLease(client, lost!.id);
    // Same random seed and the same transaction clock for both paths, so one function gives one delay.
    const delayAfter = async (act: () => Promise<unknown>, id: string) => {
      await client.query("BEGIN");
      await client.query("SELECT setseed(0.42)");
      await act();
      const { rows } = await client.query(
        "SELECT extract(epoch FROM run_at - now()) * 1000 AS ms FROM picket.jobs WHERE id = $1",
        [id],
      );
      await client.query("COMMIT");
      return Number(rows[0].ms);
    };
    const byFailure = await delayAfter(() => failJobs(client, [{ id: failed!.id, token: failed!.claimToken, error: "e" }]), failed!.id);
    const bySweep = await delayAfter(() => sweepExpiredClaims(client, 10), lost!.id);
    expect(bySweep).toBeCloseTo(byFailure, 6);
    // attempt 3 with base 1 s: raw 4 s, drawn from [2 s, 4 s].
    expect(bySweep).toBeGreaterThanOrEqual(2_000);
    expect(bySweep).toBeLessThanOrEqual(4_000);
    expect(await row(client, lost!.id)).toMatchObject({ status: "pending", attempts: 3, claim_token: null, lock_until: null });
  });

  it("dead-letters an expired claim whose attempts are spent", async () => {
    const [job] = await claimed(db.pool, "spent", 1, { spec: { maxAttempts: 1 } });
    await expireLease(db.pool, job!.id);
    const swept = await sweepExpiredClaims(db.pool, 10);
    expect(swept).toEqual([expect.objectContaining({ id: job!.id, status: "dead", lostToken: job!.claimToken, lostBy: "worker-a" })]);
    const after = await row(db.pool, job!.id);
    expect(after.status).toBe("dead");
    expect(after.finished_at).not.toBeNull();
    expect(after.last_error).toMatch(/lease expired: claim .* by worker-a/);
  });

  it("appends to the error history without losing the earlier error, and keeps it bounded", async () => {
    const [job] = await claimed(db.pool, "history", 1, { spec: { maxAttempts: 100 }, want: { backoffBaseMs: 0, backoffMaxMs: 0 } });
    await failJobs(db.pool, [{ id: job!.id, token: job!.claimToken, error: "the real cause" }]);
    const [again] = await claimJobs(db.pool, "worker-b", [want("history", { limit: 1, backoffBaseMs: 0, backoffMaxMs: 0 })]);
    await expireLease(db.pool, again!.id);
    await sweepExpiredClaims(db.pool, 10);
    const after = await row(db.pool, job!.id);
    expect(after.errors.map((e: { message: string }) => e.message)).toEqual([
      "the real cause",
      expect.stringMatching(/^lease expired/),
    ]);
    expect(after.errors.map((e: { attempt: number }) => e.attempt)).toEqual([1, 2]);

    for (let i = 0; i < ERROR_HISTORY_LIMIT + 5; i++) {
      const [next] = await claimJobs(db.pool, "w", [want("history", { limit: 1, backoffBaseMs: 0, backoffMaxMs: 0 })]);
      await failJobs(db.pool, [{ id: next!.id, token: next!.claimToken, error: `failure ${i}` }]);
    }
    const bounded = (await row(db.pool, job!.id)).errors;
    expect(bounded).toHaveLength(ERROR_HISTORY_LIMIT);
    expect(bounded.at(-1).message).toBe(`failure ${ERROR_HISTORY_LIMIT + 4}`);
    expect(bounded[0].message).toBe("failure 5");
  });

  it("leaves live claims and rows of every other status alone", async () => {
    const [live] = await claimed(db.pool, "alone-live");
    const [stale] = await claimed(db.pool, "alone-stale");
    await expireLease(db.pool, stale!.id);
    const [done, dead, cancelled, pending] = await enqueueJobs(db.pool, [
      { type: "alone-x" },
      { type: "alone-x" },
      { type: "alone-x" },
      { type: "alone-x" },
    ]);
    // Other statuses, each with a lock_until in the past, so only the status keeps them out. The
    // schema refuses such rows (lease_only_while_processing); the sweep must not rely on that alone.
    await db.pool.query("ALTER TABLE picket.jobs DROP CONSTRAINT lease_only_while_processing");
    try {
      await db.pool.query(
        `UPDATE picket.jobs SET lock_until = now() - interval '1 hour',
           status = CASE id WHEN $1 THEN 'completed' WHEN $2 THEN 'dead' WHEN $3 THEN 'cancelled' ELSE 'pending' END
         WHERE id = ANY($4)`,
        [done!.id, dead!.id, cancelled!.id, [done!.id, dead!.id, cancelled!.id, pending!.id]],
      );
      const before = await Promise.all([live, done, dead, cancelled, pending].map((j) => row(db.pool, j!.id)));
      // A batch of one: the older leases of the other rows must not take the stale claim's place.
      const swept = await sweepExpiredClaims(db.pool, 1);
      expect(swept.map((s) => s.id)).toEqual([stale!.id]);
      const after = await Promise.all([live, done, dead, cancelled, pending].map((j) => row(db.pool, j!.id)));
      expect(after).toEqual(before);
    } finally {
      await db.pool.query("UPDATE picket.jobs SET lock_until = NULL WHERE status <> 'processing'");
      await db.pool.query("ALTER TABLE picket.jobs ADD CONSTRAINT lease_only_while_processing CHECK (lock_until IS NULL OR status = 'processing')");
    }
  });

  it("never reclaims the claims the sweeping worker names as its own, however long expired", async () => {
    const [mine, theirs] = await claimed(db.pool, "held-own", 2);
    await expireLease(db.pool, mine!.id, 60_000);
    await expireLease(db.pool, theirs!.id, 60_000);
    const before = await row(db.pool, mine!.id);
    const swept = await sweepExpiredClaims(db.pool, 10, { held: [mine!.claimToken, "00000000-0000-4000-8000-000000000000"] });
    expect(swept.map((s) => s.id)).toEqual([theirs!.id]);
    expect(await row(db.pool, mine!.id)).toEqual(before);
    // Held by nobody, it is reclaimed like any other.
    expect((await sweepExpiredClaims(db.pool, 10, { held: [] })).map((s) => s.id)).toEqual([mine!.id]);
  });

  it("touches at most its batch size per call, oldest lease first", async () => {
    const jobs = await claimed(db.pool, "bounded", 25);
    for (const [i, job] of jobs.entries()) await expireLease(db.pool, job.id, 10_000 + i * 1000);
    const first = await sweepExpiredClaims(db.pool, 10);
    expect(first).toHaveLength(10);
    expect(first.map((s) => s.id).sort()).toEqual(jobs.slice(15).map((j) => j.id).sort());
    expect(await sweepExpiredClaims(db.pool, 10)).toHaveLength(10);
    expect(await sweepExpiredClaims(db.pool, 10)).toHaveLength(5);
    expect(await sweepExpiredClaims(db.pool, 10)).toHaveLength(0);
  });

  it("never reclaims a long-lease claim, whatever lease the sweeping worker uses", async () => {
    // Worker L claims with a 10-minute lease; worker S (150 ms leases) claims and runs the sweep.
    const [long] = await claimed(db.pool, "mixed-long", 1, { worker: "L", want: { leaseMs: 600_000 } });
    const [short] = await claimed(db.pool, "mixed-short", 1, { worker: "S", want: { leaseMs: 150 } });
    await new Promise((resolve) => setTimeout(resolve, 400));
    const swept = await sweepExpiredClaims(db.pool, 100);
    expect(swept.map((s) => s.id)).toEqual([short!.id]);
    expect(await row(db.pool, long!.id)).toMatchObject({ status: "processing", claim_token: long!.claimToken });
  });
});
