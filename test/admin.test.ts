import { describe, expect, it } from "vitest";
import { deadLetterJobs, deleteFinishedJobs, enqueueJob, retryDeadJob } from "../src/db/index.ts";
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
