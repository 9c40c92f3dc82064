import { describe, expect, it } from "vitest";
import { claimJobs, enqueueJobs } from "../src/db/index.ts";
import { useTestDatabase } from "./support/db.ts";
import { row, want } from "./support/factory.ts";

const db = useTestDatabase();

describe("claim", () => {
  it("gives two concurrent workers disjoint jobs and, together, all of them", async () => {
    const type = "race";
    await enqueueJobs(db.pool, Array.from({ length: 1000 }, (_, i) => ({ type, payload: { i } })));
    const [a, b] = await Promise.all([db.connect(), db.connect()]);
    const drain = async (client: typeof a, worker: string) => {
      const ids: string[] = [];
      for (;;) {
        const jobs = await claimJobs(client, worker, [want(type, { limit: 7 })]);
        if (jobs.length === 0) return ids;
        ids.push(...jobs.map((j) => j.id));
      }
    };
    const [byA, byB] = await Promise.all([drain(a, "a"), drain(b, "b")]);
    const all = [...byA, ...byB];
    expect(new Set(all).size).toBe(all.length);
    expect(all).toHaveLength(1000);
    // Both really competed; otherwise the test proves nothing about concurrency.
    expect(byA.length).toBeGreaterThan(0);
    expect(byB.length).toBeGreaterThan(0);
    const { rows } = await db.pool.query(
      `SELECT count(*)::int AS n, count(DISTINCT claim_token)::int AS tokens FROM picket.jobs WHERE type = $1 AND status = 'processing' AND attempts = 1`,
      [type],
    );
    expect(rows[0]).toEqual({ n: 1000, tokens: 1000 });
  });

  it("writes a fresh token, the worker, its lease and the attempt, in the claiming worker's terms", async () => {
    const [job] = await enqueueJobs(db.pool, [{ type: "lease" }]);
    const before = Date.now();
    const [claimedJob] = await claimJobs(db.pool, "worker-long", [
      want("lease", { limit: 1, leaseMs: 120_000, backoffBaseMs: 42, backoffMaxMs: 4242 }),
    ]);
    expect(claimedJob!.id).toBe(job!.id);
    expect(claimedJob!.claimToken).toMatch(/^[0-9a-f-]{36}$/);
    expect(claimedJob!.attempts).toBe(1);
    // The claim returns the lease it granted; lock_until is that lease from the moment the row was
    // written, which is no earlier than the statement's start (locked_at).
    expect(claimedJob!.leaseMs).toBe(120_000);
    const written = await row(db.pool, job!.id);
    expect(written).toMatchObject({ status: "processing", claim_token: claimedJob!.claimToken, locked_by: "worker-long", attempts: 1 });
    expect(written.backoff_base_ms).toBe(42);
    expect(written.backoff_max_ms).toBe(4242);
    const leaseMs = written.lock_until.getTime() - written.locked_at.getTime();
    expect(leaseMs).toBeGreaterThanOrEqual(120_000);
    expect(leaseMs).toBeLessThan(121_000);
    expect(written.locked_at.getTime()).toBeGreaterThan(before - 5_000);
  });

  it("returns only what running the job needs", async () => {
    const [job] = await enqueueJobs(db.pool, [{ type: "narrow", payload: { n: 1 }, maxAttempts: 7 }]);
    const [claimedJob] = await claimJobs(db.pool, "w", [want("narrow", { limit: 1, leaseMs: 30_000 })]);
    expect(claimedJob).toEqual({
      id: job!.id,
      type: "narrow",
      payload: { n: 1 },
      attempts: 1,
      maxAttempts: 7,
      createdAt: job!.createdAt,
      claimToken: expect.stringMatching(/^[0-9a-f-]{36}$/),
      leaseMs: 30_000,
      readyMs: expect.any(Number),
    });
  });

  it("says how long each job had been ready when claimed, by the server's clock", async () => {
    const [late] = await enqueueJobs(db.pool, [{ type: "waited" }]);
    await db.pool.query("UPDATE picket.jobs SET run_at = now() - interval '5 seconds' WHERE id = $1", [late!.id]);
    const [claimedJob] = await claimJobs(db.pool, "w", [want("waited", { limit: 1 })]);
    // At least the 5 s it waited; the generous upper bound only allows for a loaded machine.
    expect(claimedJob!.readyMs).toBeGreaterThanOrEqual(5_000);
    expect(claimedJob!.readyMs).toBeLessThan(15_000);
  });

  it("takes each type up to its own limit, so a deep backlog cannot starve another type", async () => {
    await enqueueJobs(db.pool, Array.from({ length: 500 }, () => ({ type: "flood", priority: 1000 })));
    await enqueueJobs(db.pool, [{ type: "trickle", priority: -1000 }]);
    const jobs = await claimJobs(db.pool, "w", [want("flood", { limit: 3 }), want("trickle", { limit: 3 })]);
    expect(jobs.filter((j) => j.type === "flood")).toHaveLength(3);
    expect(jobs.filter((j) => j.type === "trickle")).toHaveLength(1);
  });

  it("claims ready jobs only, highest priority first, then oldest run_at", async () => {
    await enqueueJobs(db.pool, [
      { type: "order", payload: "late", delayMs: 60_000 },
      { type: "order", payload: "low", priority: -5 },
      { type: "order", payload: "high", priority: 5 },
      { type: "order", payload: "mid-old", runAt: new Date(Date.now() - 60_000) },
      { type: "order", payload: "mid-new" },
    ]);
    const first = await claimJobs(db.pool, "w", [want("order", { limit: 1 })]);
    const rest = await claimJobs(db.pool, "w", [want("order", { limit: 10 })]);
    expect(first.map((j) => j.payload)).toEqual(["high"]);
    expect(rest.map((j) => j.payload).sort()).toEqual(["low", "mid-new", "mid-old"]);
    const second = await claimJobs(db.pool, "w", [want("order", { limit: 1 })]);
    expect(second).toEqual([]);
  });

  it("refuses a nonsensical limit or lease with a clear error", async () => {
    await expect(claimJobs(db.pool, "w", [want("x", { leaseMs: 0 })])).rejects.toThrow(/leaseMs must be an integer/);
    await expect(claimJobs(db.pool, "w", [want("x", { limit: -1 })])).rejects.toThrow(/limit must be an integer/);
  });
});
