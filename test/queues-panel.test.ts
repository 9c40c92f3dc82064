// What the dashboard's queue panels show beyond the rows' counts, from the live workers'
// heartbeats: each cluster-wide limit beside what is in use of it (the task's processing jobs, the
// starts in its rate window, as the slow claim counts them), and each named queue's completions and
// failed attempts per second.
import { afterEach, describe, expect, it } from "vitest";
import { beat, dashboardSnapshot, enqueueJobs, limitsInUse, queueRates, type WorkerBeat } from "../src/db/index.ts";
import { defineTask } from "../src/runtime/task.ts";
import { useTestDatabase } from "./support/db.ts";
import { startWorker, stopStartedWorkers } from "./support/worker.ts";

const db = useTestDatabase();
afterEach(stopStartedWorkers);

const beatOf = (id: string, limits: WorkerBeat["limits"]): WorkerBeat => ({
  id, host: "h", pid: 1, version: "test", startedAt: new Date(), concurrency: 1, state: "running", jobs: [], running: 0, waiting: 0, tasks: Object.keys(limits ?? {}), completedPerSecond: {}, limits,
});

describe("limits in use", () => {
  it("are the limits a running worker claims under, with its held jobs and its starts in the window", async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const limited = defineTask({ name: "liu.limited", clusterConcurrency: 2, rateLimit: { max: 3, windowMs: 60_000 }, handler: () => gate });
    const free = defineTask({ name: "liu.free", handler: () => gate });
    await enqueueJobs(db.pool, [{ type: "liu.limited" }, { type: "liu.limited" }, { type: "liu.limited" }, { type: "liu.free" }]);
    await startWorker({ connectionString: db.url, tasks: [limited, free], heartbeatIntervalMs: 100, concurrency: 10, workerId: "liu-worker" });
    try {
      // Two of three run (the cluster limit), two starts logged; the unlimited task has no entry.
      await expect
        .poll(async () => (await limitsInUse(db.pool)).filter((l) => l.type.startsWith("liu.")), { timeout: 10_000 })
        .toEqual([{ type: "liu.limited", clusterConcurrency: 2, running: 2, rateLimit: { max: 3, windowMs: 60_000 }, startsInWindow: 2 }]);
    } finally {
      release();
    }
  });

  it("take the limits of the worker that beat last, leave out silent workers, and count only the window's starts", async () => {
    await beat(db.pool, beatOf("liu-old", { "liu.shared": { clusterConcurrency: 1 } }));
    await db.pool.query("UPDATE picket.workers SET last_beat = now() - interval '5 seconds' WHERE id = 'liu-old'");
    await beat(db.pool, beatOf("liu-new", { "liu.shared": { rateLimit: { max: 5, windowMs: 1_000 } } }));
    await beat(db.pool, beatOf("liu-silent", { "liu.gone": { clusterConcurrency: 4 } }));
    await db.pool.query("UPDATE picket.workers SET last_beat = now() - interval '1 minute' WHERE id = 'liu-silent'");
    await db.pool.query("INSERT INTO picket.job_starts (type, started_at) VALUES ('liu.shared', now() - interval '10 seconds'), ('liu.shared', clock_timestamp())");
    expect((await limitsInUse(db.pool)).filter((l) => l.type.startsWith("liu."))).toEqual([
      { type: "liu.shared", clusterConcurrency: null, running: 0, rateLimit: { max: 5, windowMs: 1_000 }, startsInWindow: 1 },
    ]);
    // A worker counts as live for as long as the caller says.
    expect((await limitsInUse(db.pool, { liveWithinMs: 120_000 })).map((l) => l.type).filter((t) => t.startsWith("liu."))).toEqual(["liu.gone", "liu.shared"]);
  });
});

describe("a queue's rates", () => {
  it("sum the live workers' reports, and show a queue whose jobs all finished while it finishes them", async () => {
    await beat(db.pool, { ...beatOf("qr-a", {}), queueRates: { "qr.mail": { completed: 2, failed: 0.5 }, "qr.done": { completed: 1, failed: 0 } } });
    await beat(db.pool, { ...beatOf("qr-b", {}), queueRates: { "qr.mail": { completed: 1.5, failed: 0 } } });
    await beat(db.pool, { ...beatOf("qr-silent", {}), queueRates: { "qr.mail": { completed: 100, failed: 100 } } });
    await db.pool.query("UPDATE picket.workers SET last_beat = now() - interval '1 minute' WHERE id = 'qr-silent'");
    expect((await queueRates(db.pool)).filter((r) => r.queue.startsWith("qr."))).toEqual([
      { queue: "qr.done", completed: 1, failed: 0 },
      { queue: "qr.mail", completed: 3.5, failed: 0.5 },
    ]);
    await enqueueJobs(db.pool, [{ type: "qr.send", queue: "qr.mail" }]);
    const queues = (await dashboardSnapshot(db.pool)).queues.filter((q) => q.name.startsWith("qr."));
    expect(queues).toEqual([
      { name: "qr.done", ready: 0, scheduled: 0, processing: 0, oldestReadyAt: null, head: null, paused: null, completedPerSecond: 1, failedPerSecond: 0 },
      expect.objectContaining({ name: "qr.mail", ready: 1, completedPerSecond: 3.5, failedPerSecond: 0.5 }),
    ]);
  });

  it("are counted by a running worker for the queue its jobs name", async () => {
    const sent = defineTask({ name: "qr.sent", handler: async () => "ok" });
    const flaky = defineTask({ name: "qr.flaky", maxAttempts: 5, backoff: { baseMs: 10, maxMs: 10 }, handler: async (_p, ctx) => { if (ctx.job.attempt === 1) throw new Error("once"); } });
    await enqueueJobs(db.pool, [{ type: "qr.sent", queue: "qr.run" }, { type: "qr.flaky", queue: "qr.run" }, { type: "qr.sent" }]);
    // A beat a second: each report stands a second, long enough to be read.
    await startWorker({ connectionString: db.url, tasks: [sent, flaky], heartbeatIntervalMs: 1_000, queues: { "qr.run": { concurrency: 2 } } });
    const seen = { completed: 0, failed: 0 };
    await expect
      .poll(async () => {
        const rate = (await queueRates(db.pool)).find((r) => r.queue === "qr.run");
        seen.completed = Math.max(seen.completed, rate?.completed ?? 0);
        seen.failed = Math.max(seen.failed, rate?.failed ?? 0);
        return seen.completed > 0 && seen.failed > 0;
      }, { timeout: 15_000, interval: 50 })
      .toBe(true);
    // The job without a queue is counted for no queue.
    expect((await queueRates(db.pool)).map((r) => r.queue).filter((q) => q.startsWith("qr.") && q !== "qr.run" && q !== "qr.mail" && q !== "qr.done")).toEqual([]);
  });
});
