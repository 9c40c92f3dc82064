// Deterministic interleavings on two connections: one transaction is held open at a chosen
// point while the other statement runs, then released.
import { describe, expect, it } from "vitest";
import { claimJobs, completeJobs, renewLeases, sweepExpiredClaims } from "../src/db/index.ts";
import { useTestDatabase } from "./support/db.ts";
import { claimed, expireLease, row, want } from "./support/factory.ts";

const db = useTestDatabase();

describe("the sweep against concurrent owners", () => {
  for (const keepCompleted of [true, false]) {
    it(`never overwrites a completion that commits while the sweep runs (completed row ${keepCompleted ? "kept" : "deleted"})`, async () => {
      const [owner, sweeper] = await Promise.all([db.connect(), db.connect()]);
      // The sweep must not wait on the owner either: a blocked sweep would stall every worker.
      await sweeper.query("SET statement_timeout = '5s'");
      const [job] = await claimed(owner, "race-complete");
      await expireLease(owner, job!.id);

      await owner.query("BEGIN");
      const [done] = await completeJobs(owner, [{ id: job!.id, token: job!.claimToken, result: "mine" }], { keepCompleted });
      expect(done!.outcome).toBe("applied");
      // The completion holds the row, uncommitted; the sweep sees a stale lease in its snapshot.
      const during = await sweepExpiredClaims(sweeper, 100);
      await owner.query("COMMIT");
      const after = await sweepExpiredClaims(sweeper, 100);

      expect(during).toEqual([]);
      expect(after).toEqual([]);
      if (keepCompleted) expect(await row(owner, job!.id)).toMatchObject({ status: "completed", result: "mine" });
      else expect(await row(owner, job!.id)).toBeUndefined();
    });
  }

  it("never reverts a renewal that commits while the sweep runs", async () => {
    const [owner, sweeper] = await Promise.all([db.connect(), db.connect()]);
    await sweeper.query("SET statement_timeout = '5s'");
    const [job] = await claimed(owner, "race-renew");
    await expireLease(owner, job!.id);

    await owner.query("BEGIN");
    await renewLeases(owner, [{ id: job!.id, token: job!.claimToken, leaseMs: 60_000 }]);
    expect(await sweepExpiredClaims(sweeper, 100)).toEqual([]);
    await owner.query("COMMIT");
    expect(await sweepExpiredClaims(sweeper, 100)).toEqual([]);
    expect(await row(owner, job!.id)).toMatchObject({ status: "processing", claim_token: job!.claimToken });
  });

  it("never reverts a claim made after the sweep requeued the row", async () => {
    const [sweeper, claimer] = await Promise.all([db.connect(), db.connect()]);
    await claimer.query("SET statement_timeout = '5s'");
    const [job] = await claimed(sweeper, "race-claim", 1, { want: { backoffBaseMs: 0, backoffMaxMs: 0 } });
    await expireLease(sweeper, job!.id);

    await sweeper.query("BEGIN");
    const swept = await sweepExpiredClaims(sweeper, 100);
    expect(swept.map((s) => s.id)).toEqual([job!.id]);
    // Uncommitted requeue: the claimer neither sees it nor waits for it.
    expect(await claimJobs(claimer, "w2", [want("race-claim", { limit: 1 })])).toEqual([]);
    await sweeper.query("COMMIT");
    const [again] = await claimJobs(claimer, "w2", [want("race-claim", { limit: 1 })]);
    expect(again!.id).toBe(job!.id);
    // A later sweep (the same worker, next interval) leaves the fresh claim alone.
    expect(await sweepExpiredClaims(sweeper, 100)).toEqual([]);
    expect(await row(sweeper, job!.id)).toMatchObject({ status: "processing", claim_token: again!.claimToken, locked_by: "w2" });
  });

  it("claims nothing the sweep is requeueing and nothing another claim holds", async () => {
    const [a, b] = await Promise.all([db.connect(), db.connect()]);
    await b.query("SET statement_timeout = '5s'");
    await claimed(a, "race-hold", 0);
    const { rows } = await a.query("INSERT INTO picket.jobs (type) SELECT 'race-hold' FROM generate_series(1, 4) RETURNING id");
    await a.query("BEGIN");
    const mine = await claimJobs(a, "a", [want("race-hold", { limit: 2 })]);
    const theirs = await claimJobs(b, "b", [want("race-hold", { limit: 10 })]);
    await a.query("COMMIT");
    expect(mine).toHaveLength(2);
    expect(theirs).toHaveLength(2);
    expect(new Set([...mine, ...theirs].map((j) => j.id))).toEqual(new Set(rows.map((r) => r.id)));
  });
});
