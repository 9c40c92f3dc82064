// The cluster-wide limits the dashboard shows: each live worker's heartbeat says which it claims
// under, and limitsInUse puts each beside what is in use (the task's processing jobs, the starts
// in its rate window) as the slow claim counts them.
import { afterEach, describe, expect, it } from "vitest";
import { beat, enqueueJobs, limitsInUse, type WorkerBeat } from "../src/db/index.ts";
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
