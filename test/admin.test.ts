import { describe, expect, it } from "vitest";
import { cancelJob, completeJobs, deadLetterJobs, deleteFinishedJob, deleteFinishedJobs, enqueueJob, jobSteps, recordStep, retryDeadJob, runJobNow } from "../src/db/index.ts";
import { useTestDatabase } from "./support/db.ts";
import { claimed, row } from "./support/factory.ts";

const db = useTestDatabase();

describe("admin statements", () => {
  it("retries a dead job with fresh attempts, keeps its history and records the retry in it", async () => {
    const [job] = await claimed(db.pool, "admin-dead");
    await deadLetterJobs(db.pool, [{ id: job!.id, token: job!.claimToken, error: "bad" }]);
    const result = await retryDeadJob(db.pool, job!.id);
    expect(result).toMatchObject({ outcome: "applied", job: { status: "pending", attempts: 0, finishedAt: null, lastError: "bad" } });
    expect((await row(db.pool, job!.id)).errors).toEqual([expect.objectContaining({ attempt: 1, message: "bad" }), { at: expect.any(String), operator: "retry" }]);
    expect(await retryDeadJob(db.pool, job!.id)).toEqual({ outcome: "wrong_status", status: "pending" });
  });

  it("runs a waiting job now: a delayed one is due at once, one already due keeps its time, and each records who asked", async () => {
    const later = await enqueueJob(db.pool, { type: "admin-run-now", runAt: new Date(Date.now() + 3_600_000) });
    const result = await runJobNow(db.pool, later.id, { by: "alice" });
    expect(result).toMatchObject({ outcome: "applied", job: { status: "pending" } });
    const { rows } = await db.pool.query("SELECT run_at <= now() AS due, errors FROM picket.jobs WHERE id = $1", [later.id]);
    expect(rows[0]).toEqual({ due: true, errors: [{ at: expect.any(String), operator: "run_now", by: "alice" }] });
    const due = await enqueueJob(db.pool, { type: "admin-run-now", runAt: new Date(Date.now() - 60_000) });
    await runJobNow(db.pool, due.id);
    expect((await row(db.pool, due.id)).run_at.getTime()).toBe(due.runAt.getTime());
    // Running or finished: nothing to bring forward.
    const [running] = await claimed(db.pool, "admin-run-now-claimed");
    expect(await runJobNow(db.pool, running!.id)).toEqual({ outcome: "wrong_status", status: "processing" });
    await cancelJob(db.pool, later.id);
    expect(await runJobNow(db.pool, later.id)).toEqual({ outcome: "wrong_status", status: "cancelled" });
    expect(await runJobNow(db.pool, "9223372036854775807")).toEqual({ outcome: "not_found" });
  });

  it("deletes a finished job with its steps, and refuses a live one", async () => {
    const [done] = await claimed(db.pool, "admin-delete");
    await recordStep(db.pool, { id: done!.id, token: done!.claimToken }, { name: "fetched", result: { rows: 1 }, attempt: 1 });
    await completeJobs(db.pool, [{ id: done!.id, token: done!.claimToken, result: null }], { keepCompleted: true });
    expect(await deleteFinishedJob(db.pool, done!.id)).toMatchObject({ outcome: "applied", job: { id: done!.id, status: "completed" } });
    expect(await row(db.pool, done!.id)).toBeUndefined();
    expect(await jobSteps(db.pool, done!.id)).toEqual([]);
    const pending = await enqueueJob(db.pool, { type: "admin-delete" });
    expect(await deleteFinishedJob(db.pool, pending.id)).toEqual({ outcome: "wrong_status", status: "pending" });
    await cancelJob(db.pool, pending.id);
    expect(await deleteFinishedJob(db.pool, pending.id)).toMatchObject({ outcome: "applied" });
    expect(await deleteFinishedJob(db.pool, pending.id)).toEqual({ outcome: "not_found" });
  });
});

describe("retention", () => {
  it("deletes finished jobs older than the cut-off, in bounded batches, and nothing else", async () => {
    await db.pool.query(`
      INSERT INTO picket.jobs (type, status, finished_at)
      SELECT 'old', 'completed', now() - interval '2 days' FROM generate_series(1, 25)`);
    const { rows: keep } = await db.pool.query(`
      INSERT INTO picket.jobs (type, status, finished_at) VALUES
        ('recent', 'completed', now() - interval '1 hour'),
        ('old-dead', 'dead', now() - interval '2 days')
      RETURNING id`);
    const live = await enqueueJob(db.pool, { type: "pending" });
    const day = 86_400_000;
    expect(await deleteFinishedJobs(db.pool, { olderThanMs: day, batchSize: 10 })).toBe(10);
    expect(await deleteFinishedJobs(db.pool, { olderThanMs: day, batchSize: 10 })).toBe(10);
    expect(await deleteFinishedJobs(db.pool, { olderThanMs: day, batchSize: 10 })).toBe(5);
    expect(await deleteFinishedJobs(db.pool, { olderThanMs: day, batchSize: 10 })).toBe(0);
    for (const { id } of [...keep, live]) expect(await row(db.pool, id)).toBeDefined();
    // Dead jobs go only when asked for: they are what an operator inspects.
    expect(await deleteFinishedJobs(db.pool, { olderThanMs: day, batchSize: 10, statuses: ["dead"] })).toBe(1);
  });
});
