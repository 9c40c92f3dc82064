// The worker's local buffer: jobs claimed ahead of a free slot while handlers free slots quickly,
// never more handlers than the concurrency, none claimed ahead for long handlers or with
// prefetch 0, and the drain gives buffered jobs back unrun and uncharged.
import { describe, expect, it } from "vitest";
import { enqueueJobs } from "../src/db/index.ts";
import { defineTask } from "../src/runtime/task.ts";
import type { Supervisor } from "../src/runtime/supervisor.ts";
import { useTestDatabase } from "./support/db.ts";
import { startWorker } from "./support/worker.ts";

const db = useTestDatabase();

/** A task whose handler yields once, counting the handlers running at once and the jobs it ran. */
const quickTask = (name: string) => {
  const seen = { inFlight: 0, maxInFlight: 0, ran: new Set<string>() };
  const task = defineTask({
    name,
    handler: async (_payload: unknown, { job }) => {
      seen.ran.add(job.id);
      seen.maxInFlight = Math.max(seen.maxInFlight, ++seen.inFlight);
      await new Promise((resolve) => setImmediate(resolve));
      seen.inFlight--;
    },
  });
  return { task, seen };
};

/** The most jobs the supervisor held waiting for a slot, sampled at every outcome. */
const trackWaiting = (supervisor: Supervisor) => {
  const sampled = { max: 0 };
  supervisor.onJobFinished(() => {
    sampled.max = Math.max(sampled.max, supervisor.stats().waiting);
  });
  return sampled;
};

const statuses = async (type: string) =>
  (await db.pool.query<{ id: string; status: string; attempts: number; claim_token: string | null }>(
    "SELECT id::text, status, attempts, claim_token FROM picket.jobs WHERE type = $1",
    [type],
  )).rows;

describe("local buffer", () => {
  it("claims ahead of free slots while handlers free them quickly, and never runs more handlers than the concurrency", async () => {
    const { task, seen } = quickTask("quick");
    await enqueueJobs(db.pool, Array.from({ length: 2_000 }, () => ({ type: "quick" })));
    const { supervisor, outcomes } = await startWorker({ connectionString: db.url, tasks: [task], concurrency: 4, prefetch: 4 });
    const waiting = trackWaiting(supervisor);
    await expect.poll(() => outcomes.length, { timeout: 60_000 }).toBe(2_000);
    await supervisor.stop();
    expect(new Set(outcomes.map((o) => o.id)).size).toBe(2_000);
    expect(outcomes.every((o) => o.outcome === "completed")).toBe(true);
    expect(seen.maxInFlight).toBeLessThanOrEqual(4);
    expect(waiting.max).toBeGreaterThan(0);
    expect(waiting.max).toBeLessThanOrEqual(4);
  });

  it("with prefetch 0, claims only into free slots", async () => {
    const { task, seen } = quickTask("unbuffered");
    await enqueueJobs(db.pool, Array.from({ length: 1_000 }, () => ({ type: "unbuffered" })));
    const { supervisor, outcomes } = await startWorker({ connectionString: db.url, tasks: [task], concurrency: 4, prefetch: 0 });
    const waiting = trackWaiting(supervisor);
    await expect.poll(() => outcomes.length, { timeout: 60_000 }).toBe(1_000);
    await supervisor.stop();
    expect(seen.ran.size).toBe(1_000);
    expect(waiting.max).toBe(0);
  });

  it("claims nothing ahead for a task whose handlers run long: its jobs stay in the table for other workers", async () => {
    // Long next to any claim's round trip: a job claimed ahead would wait a whole handler run. The
    // runs differ in length, so slots free one at a time, each after the last outcome was written.
    const slow = defineTask({ name: "slow", handler: (p: { ms: number }) => new Promise((resolve) => setTimeout(resolve, p.ms)) });
    await enqueueJobs(db.pool, Array.from({ length: 8 }, (_, i) => ({ type: "slow", payload: { ms: 200 + 70 * i } })));
    const { supervisor, outcomes } = await startWorker({ connectionString: db.url, tasks: [slow], concurrency: 2, prefetch: 10 });
    let maxProcessing = 0;
    while (outcomes.length < 8) {
      const processing = (await statuses("slow")).filter((r) => r.status === "processing").length;
      maxProcessing = Math.max(maxProcessing, processing);
      expect(supervisor.stats().waiting).toBe(0);
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    await supervisor.stop();
    // Two handlers run; a third row may be processing only while a finished job's outcome is written.
    expect(maxProcessing).toBeLessThanOrEqual(4);
    expect(outcomes.every((o) => o.outcome === "completed")).toBe(true);
  });

  it("stop() gives jobs waiting for a slot back at once: pending, never run, their attempt not charged", async () => {
    const { task, seen } = quickTask("drained");
    await enqueueJobs(db.pool, Array.from({ length: 3_000 }, () => ({ type: "drained" })));
    // A drain deadline the test would time out on: waiting jobs must not wait for it.
    const { supervisor, outcomes, logs } = await startWorker({ connectionString: db.url, tasks: [task], concurrency: 4, prefetch: 4, drainTimeoutMs: 120_000 });
    let stopping: Promise<void> | undefined;
    supervisor.onJobFinished(() => {
      if (stopping === undefined && supervisor.stats().waiting > 0) stopping = supervisor.stop();
    });
    await expect.poll(() => stopping !== undefined, { timeout: 60_000 }).toBe(true);
    await stopping;
    expect(logs.map((l) => l.msg).filter((msg) => msg.includes("drain deadline"))).toEqual([]);
    expect(supervisor.stats()).toMatchObject({ running: 0, waiting: 0 });
    const rows = await statuses("drained");
    const released = outcomes.filter((o) => o.outcome === "released").map((o) => o.id);
    expect(released.length).toBeGreaterThan(0);
    for (const id of released) {
      expect(seen.ran.has(id), `job ${id} was released, yet its handler ran`).toBe(false);
      expect(rows.find((r) => r.id === id)).toMatchObject({ status: "pending", attempts: 0, claim_token: null });
    }
    // Nothing left claimed, nothing run twice, every job either done or back in the queue.
    expect(rows.filter((r) => r.status === "processing")).toEqual([]);
    expect(rows.filter((r) => r.status === "completed").length).toBe(seen.ran.size);
    expect(rows.filter((r) => r.status === "pending").length).toBe(3_000 - seen.ran.size);
  });
});
