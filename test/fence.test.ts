import { describe, expect, it } from "vitest";
import {
  claimJobs,
  completeJobs,
  deadLetterJobs,
  failJobs,
  releaseJobs,
  renewLeases,
  reportProgress,
  sweepExpiredClaims,
  type ClaimedJob,
  type FencedResult,
  type Queryable,
} from "../src/db/index.ts";
import { useTestDatabase } from "./support/db.ts";
import { claimed, expireLease, row, want } from "./support/factory.ts";

const db = useTestDatabase();

// Every write a claim's owner can make, as (db, claim) => result.
const writes: Record<string, (q: Queryable, job: ClaimedJob) => Promise<FencedResult[]>> = {
  // The default completion deletes a keyless row; completeKept keeps it (keepCompleted).
  complete: (q, job) => completeJobs(q, [{ id: job.id, token: job.claimToken, result: { ok: true } }]),
  completeKept: (q, job) => completeJobs(q, [{ id: job.id, token: job.claimToken, result: { ok: true } }], { keepCompleted: true }),
  fail: (q, job) => failJobs(q, [{ id: job.id, token: job.claimToken, error: "boom" }]),
  deadLetter: (q, job) => deadLetterJobs(q, [{ id: job.id, token: job.claimToken, error: "permanent" }]),
  progress: (q, job) => reportProgress(q, [{ id: job.id, token: job.claimToken, progress: { pct: 50 }, leaseMs: 60_000 }]),
  renew: (q, job) => renewLeases(q, [{ id: job.id, token: job.claimToken, leaseMs: 600_000 }]),
  release: (q, job) => releaseJobs(q, [{ id: job.id, token: job.claimToken }]),
};

// Ways a claim can be lost between the claim and its owner's write.
const losses: Record<string, (q: Queryable, job: ClaimedJob) => Promise<void>> = {
  "reclaimed and claimed again": async (q, job) => {
    await expireLease(q, job.id);
    const swept = await sweepExpiredClaims(q, 100);
    expect(swept.map((s) => s.id)).toContain(job.id);
    await q.query({ text: "UPDATE picket.jobs SET run_at = now() WHERE id = $1", values: [job.id] });
    const again = await claimJobs(q, "thief", [want(job.type, { limit: 1 })]);
    expect(again.map((j) => j.id)).toEqual([job.id]);
  },
  "completed (row deleted)": async (q, job) => {
    expect((await completeJobs(q, [{ id: job.id, token: job.claimToken }]))[0]!.outcome).toBe("applied");
  },
  "completed (row kept)": async (q, job) => {
    expect((await completeJobs(q, [{ id: job.id, token: job.claimToken }], { keepCompleted: true }))[0]!.outcome).toBe("applied");
  },
  "dead-lettered": async (q, job) => {
    expect((await deadLetterJobs(q, [{ id: job.id, token: job.claimToken, error: "x" }]))[0]!.outcome).toBe("applied");
  },
  released: async (q, job) => {
    expect((await releaseJobs(q, [{ id: job.id, token: job.claimToken }]))[0]!.outcome).toBe("applied");
  },
};

describe("the fence", () => {
  for (const [writeName, write] of Object.entries(writes)) {
    it(`${writeName} applies with the live token`, async () => {
      const [job] = await claimed(db.pool, `live-${writeName}`);
      const claimedRow = await row(db.pool, job!.id);
      const [result] = await write(db.pool, job!);
      expect(result).toMatchObject({ id: job!.id, outcome: "applied" });
      const after = await row(db.pool, job!.id);
      if (writeName === "complete") expect(after).toBeUndefined();
      else expect(after.updated_at.getTime()).toBeGreaterThanOrEqual(claimedRow.updated_at.getTime());
    });

    for (const [lossName, lose] of Object.entries(losses)) {
      it(`${writeName} with a stale token changes nothing and reports fenced (claim ${lossName})`, async () => {
        const [job] = await claimed(db.pool, `stale-${writeName}`);
        await lose(db.pool, job!);
        const before = await row(db.pool, job!.id);
        const [result] = await write(db.pool, job!);
        expect(result).toEqual({ id: job!.id, outcome: "fenced" });
        expect(await row(db.pool, job!.id)).toEqual(before);
      });
    }
  }

  it("reports per claim in a batch: the live one applies, the stale one is fenced", async () => {
    const [live, stale] = await claimed(db.pool, "batch", 2);
    await releaseJobs(db.pool, [{ id: stale!.id, token: stale!.claimToken }]);
    const results = await renewLeases(db.pool, [
      { id: stale!.id, token: stale!.claimToken, leaseMs: 1000 },
      { id: live!.id, token: live!.claimToken, leaseMs: 1000 },
    ]);
    expect(results.map((r) => [r.id, r.outcome])).toEqual([
      [stale!.id, "fenced"],
      [live!.id, "applied"],
    ]);
  });

  it("reports a stale and a live claim of the same job in one batch each by its own claim, either order", async () => {
    for (const order of ["stale-first", "live-first"] as const) {
      const [first] = await claimed(db.pool, `same-job-${order}`, 1);
      await releaseJobs(db.pool, [{ id: first!.id, token: first!.claimToken }]);
      const [again] = await claimJobs(db.pool, "w2", [want(`same-job-${order}`)]);
      expect(again!.id).toBe(first!.id);
      const stale = { id: first!.id, token: first!.claimToken, result: "stale" };
      const live = { id: again!.id, token: again!.claimToken, result: "live" };
      const results = await completeJobs(db.pool, order === "stale-first" ? [stale, live] : [live, stale], { keepCompleted: true });
      const byToken = Object.fromEntries(results.map((r, i) => [(order === "stale-first" ? [stale, live] : [live, stale])[i]!.token, r.outcome]));
      expect(byToken, order).toEqual({ [stale.token]: "fenced", [live.token]: "applied" });
      expect(await row(db.pool, first!.id), order).toMatchObject({ status: "completed", result: "live", claim_token: again!.claimToken });
    }
  });

  it("never applies a write without a token, or with another claim's token", async () => {
    const [a, b] = await claimed(db.pool, "tokens", 2);
    const missing = await completeJobs(db.pool, [{ id: a!.id, token: undefined as unknown as string }]);
    const garbage = await completeJobs(db.pool, [{ id: a!.id, token: "not-a-uuid" }]);
    const crossed = await completeJobs(db.pool, [{ id: a!.id, token: b!.claimToken }]);
    expect([missing[0]!.outcome, garbage[0]!.outcome, crossed[0]!.outcome]).toEqual(["fenced", "fenced", "fenced"]);
    expect((await row(db.pool, a!.id)).status).toBe("processing");
  });

  it("records what each applied write means on the row", async () => {
    const [c, f, d, p, r, n, gone] = await claimed(db.pool, "effects", 7, { spec: { maxAttempts: 3 } });
    await completeJobs(db.pool, [{ id: c!.id, token: c!.claimToken, result: { sent: 3 } }], { keepCompleted: true });
    await completeJobs(db.pool, [{ id: gone!.id, token: gone!.claimToken, result: { sent: 3 } }]);
    expect(await row(db.pool, gone!.id)).toBeUndefined();
    await failJobs(db.pool, [{ id: f!.id, token: f!.claimToken, error: "flaky" }]);
    await deadLetterJobs(db.pool, [{ id: d!.id, token: d!.claimToken, error: "bad input" }]);
    await reportProgress(db.pool, [{ id: p!.id, token: p!.claimToken, progress: { done: 7 }, leaseMs: 60_000 }]);
    await releaseJobs(db.pool, [{ id: r!.id, token: r!.claimToken }]);
    const renewed = await renewLeases(db.pool, [{ id: n!.id, token: n!.claimToken, leaseMs: 900_000 }]);

    const completed = await row(db.pool, c!.id);
    expect(completed).toMatchObject({ status: "completed", result: { sent: 3 }, lock_until: null });
    expect(completed.finished_at).not.toBeNull();

    const failed = await row(db.pool, f!.id);
    expect(failed).toMatchObject({ status: "pending", attempts: 1, last_error: "flaky", claim_token: null, lock_until: null });
    expect(failed.errors).toEqual([expect.objectContaining({ attempt: 1, message: "flaky" })]);
    expect(failed.run_at.getTime()).toBeGreaterThan(Date.now() + 200);

    const dead = await row(db.pool, d!.id);
    expect(dead).toMatchObject({ status: "dead", attempts: 1, last_error: "bad input" });
    expect(dead.finished_at).not.toBeNull();

    expect((await row(db.pool, p!.id)).progress).toEqual({ done: 7 });

    const released = await row(db.pool, r!.id);
    expect(released).toMatchObject({ status: "pending", attempts: 0, claim_token: null, lock_until: null });
    expect(released.run_at.getTime()).toBeLessThanOrEqual(Date.now() + 1000);

    const lease = renewed[0]!.outcome === "applied" ? (await row(db.pool, renewed[0]!.id)).lock_until.getTime() - Date.now() : 0;
    expect(lease).toBeGreaterThan(800_000);
  });

  it("dead-letters a failure on the last attempt instead of retrying", async () => {
    const [job] = await claimed(db.pool, "last", 1, { spec: { maxAttempts: 1 } });
    const [result] = await failJobs(db.pool, [{ id: job!.id, token: job!.claimToken, error: "final" }]);
    expect(result).toMatchObject({ outcome: "applied", status: "dead" });
    expect(await row(db.pool, job!.id)).toMatchObject({ status: "dead", claim_token: job!.claimToken });
  });
});
