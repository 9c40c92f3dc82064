// The worker's local buffer: jobs claimed ahead of a free slot while handlers free slots quickly,
// never more handlers than the concurrency, none claimed ahead for long handlers or with
// prefetch 0, and the drain gives buffered jobs back unrun and uncharged.
import pg from "pg";
import { describe, expect, it } from "vitest";
import { enqueueJobs } from "../src/db/index.ts";
import { defineTask } from "../src/runtime/task.ts";
import type { Supervisor } from "../src/runtime/supervisor.ts";
import { useTestDatabase } from "./support/db.ts";
import { startWorker } from "./support/worker.ts";

const db = useTestDatabase();

/**
 * A task whose handler waits a moment (one event-loop turn, or a query's round trip), counting the
 * handlers running at once and the jobs it ran, in the order they started.
 */
const quickTask = (name: string, options: { concurrency?: number; wait?: () => Promise<unknown> } = {}) => {
  const seen = { inFlight: 0, maxInFlight: 0, ran: new Set<string>(), order: [] as number[] };
  const task = defineTask({
    name,
    ...(options.concurrency !== undefined ? { concurrency: options.concurrency } : {}),
    handler: async (_payload: unknown, { job }) => {
      seen.ran.add(job.id);
      seen.order.push(Number(job.id));
      seen.maxInFlight = Math.max(seen.maxInFlight, ++seen.inFlight);
      try {
        await (options.wait ?? (() => new Promise((resolve) => setImmediate(resolve))))();
      } finally {
        seen.inFlight--;
      }
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
    // Oldest claim first: jobs enqueued together start in the order they were claimed.
    expect(seen.order).toEqual([...seen.order].sort((a, b) => a - b));
  });

  it("holds the concurrency when a handler's slot is handed to a job whose machine has not started yet", async () => {
    // Handlers that wait on the database end while the claims' machines are still being started:
    // a freed slot then goes to a waiting job before its machine runs (its START is queued).
    const side = new pg.Pool({ connectionString: db.url, max: 4 });
    try {
      const { task, seen } = quickTask("io-bound", { wait: () => side.query("SELECT 1") });
      await enqueueJobs(db.pool, Array.from({ length: 3_000 }, () => ({ type: "io-bound" })));
      const { supervisor, outcomes } = await startWorker({ connectionString: db.url, tasks: [task], concurrency: 4, prefetch: 4 });
      await expect.poll(() => outcomes.length, { timeout: 90_000 }).toBe(3_000);
      await supervisor.stop();
      expect(seen.maxInFlight).toBeLessThanOrEqual(4);
      expect(outcomes.every((o) => o.outcome === "completed")).toBe(true);
    } finally {
      await side.end();
    }
  });

  it("holds a task's own concurrency with jobs of that task waiting in the buffer", async () => {
    const capped = quickTask("capped", { concurrency: 3 });
    const other = quickTask("uncapped");
    await enqueueJobs(db.pool, Array.from({ length: 3_000 }, (_, i) => ({ type: i % 2 === 0 ? "capped" : "uncapped" })));
    const { supervisor, outcomes } = await startWorker({ connectionString: db.url, tasks: [capped.task, other.task], concurrency: 8, prefetch: 8 });
    const waiting = trackWaiting(supervisor);
    await expect.poll(() => outcomes.length, { timeout: 90_000 }).toBe(3_000);
    await supervisor.stop();
    expect(capped.seen.maxInFlight).toBeLessThanOrEqual(3);
    expect(capped.seen.maxInFlight + other.seen.maxInFlight).toBeGreaterThan(3);
    expect(waiting.max).toBeLessThanOrEqual(8);
  });

  it("claims no job of a task at its own limit while other tasks' quick handlers free slots", async () => {
    // The quick task keeps slots turning over; the capped one may run one slow job at a time, and
    // its other jobs must stay in the table rather than wait in this worker behind it.
    // 300 ms: far longer than a few claim round trips, even on a loaded machine. Eight of them:
    // each claim of one, while the quick jobs keep the worker's slots full, is a chance for the
    // next to be claimed to wait behind it.
    let slowEnded = 0;
    let slowFinished = 0;
    const slow = defineTask({ name: "slow-capped", concurrency: 1, handler: () => new Promise<void>((resolve) => setTimeout(() => (slowEnded++, resolve()), 300)) });
    const quick = quickTask("busy");
    await enqueueJobs(db.pool, [
      ...Array.from({ length: 8 }, () => ({ type: "slow-capped" })),
      ...Array.from({ length: 3_000 }, () => ({ type: "busy" })),
    ]);
    const { supervisor, outcomes } = await startWorker({ connectionString: db.url, tasks: [slow, quick.task], concurrency: 4, prefetch: 4 });
    // The capped task's jobs in the worker that are not writing an outcome: the one running, and
    // any claimed ahead to wait behind it. Outcomes being written do not count: a loaded machine
    // may take longer than a run to write one, and the slot is free while it does.
    let maxSlowNotWriting = 0;
    const look = () => (maxSlowNotWriting = Math.max(maxSlowNotWriting, (supervisor.stats().runningByTask["slow-capped"] ?? 0) - (slowEnded - slowFinished)));
    const sample = setInterval(look, 1);
    supervisor.onJobFinished(({ job }) => {
      look();
      if (job.type === "slow-capped") slowFinished++;
    });
    await expect.poll(() => outcomes.length, { timeout: 60_000 }).toBe(3_008);
    clearInterval(sample);
    await supervisor.stop();
    expect(slowEnded).toBe(8);
    expect(maxSlowNotWriting).toBe(1);
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
    // The buffer takes a job ahead once two slots free within four claim round trips: with runs of
    // 3 s that needs round trips of about 380 ms. Runs of 1.5 s (190 ms) took one ahead in a
    // fresh-clone suite run beside a Stryker run; runs of 400 ms (50 ms) under the suite and
    // Stryker at once.
    const slow = defineTask({ name: "slow", handler: (p: { ms: number }) => new Promise((resolve) => setTimeout(resolve, p.ms)) });
    await enqueueJobs(db.pool, Array.from({ length: 6 }, (_, i) => ({ type: "slow", payload: { ms: 3_000 + 300 * i } })));
    const { supervisor, outcomes } = await startWorker({ connectionString: db.url, tasks: [slow], concurrency: 2, prefetch: 10 });
    let maxProcessing = 0;
    while (outcomes.length < 6) {
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
    const times = new Map<string, { waitMs: number; runMs: number; durationMs: number }>();
    supervisor.onJobFinished(({ job, waitMs, runMs, durationMs }) => {
      times.set(job.id, { waitMs, runMs, durationMs });
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
      // Its whole time was a wait for a slot: it never ran.
      expect(times.get(id)).toMatchObject({ runMs: 0, waitMs: expect.any(Number) });
      expect(rows.find((r) => r.id === id)).toMatchObject({ status: "pending", attempts: 0, claim_token: null });
    }
    // Nothing left claimed, nothing run twice, every job either done or back in the queue.
    expect(rows.filter((r) => r.status === "processing")).toEqual([]);
    expect(rows.filter((r) => r.status === "completed").length).toBe(seen.ran.size);
    expect(rows.filter((r) => r.status === "pending").length).toBe(3_000 - seen.ran.size);
  });
});

describe("what onJobFinished says of a job's time", () => {
  it("tells the handler's run apart from the wait for a slot: a 150 ms handler runs about 150 ms, its wait counted apart", async () => {
    const task = defineTask({ name: "timed", concurrency: 1, handler: () => new Promise((resolve) => setTimeout(resolve, 150)) });
    await enqueueJobs(db.pool, [{ type: "timed" }, { type: "timed" }]);
    const { supervisor } = await startWorker({ connectionString: db.url, tasks: [task], concurrency: 1 });
    const times: { waitMs: number; runMs: number; durationMs: number }[] = [];
    supervisor.onJobFinished(({ waitMs, runMs, durationMs }) => times.push({ waitMs, runMs, durationMs }));
    await expect.poll(() => times.length, { timeout: 10_000 }).toBe(2);
    for (const { waitMs, runMs, durationMs } of times) {
      expect(runMs).toBeGreaterThanOrEqual(145);
      expect(runMs).toBeLessThan(2_000);
      expect(waitMs).toBeGreaterThanOrEqual(0);
      // The whole time holds both, and the outcome's write after them.
      expect(durationMs).toBeGreaterThanOrEqual(runMs + waitMs - 2);
    }
  });
});

describe("leases of jobs waiting for a slot", () => {
  const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

  /**
   * One slot and a buffer: quick jobs, then one that runs five leases long, then quick ones again.
   * Jobs claimed ahead of it wait behind it for far longer than their lease.
   */
  const behindALongJob = async (name: string) => {
    const runs = new Map<string, number>();
    const long = { running: false };
    const task = defineTask({
      name,
      leaseMs: 300,
      handler: async (p: { ms: number }, { job }) => {
        runs.set(job.id, (runs.get(job.id) ?? 0) + 1);
        if (p.ms === 0) return new Promise((resolve) => setImmediate(resolve));
        long.running = true;
        await sleep(p.ms);
        long.running = false;
      },
    });
    await enqueueJobs(db.pool, Array.from({ length: 300 }, () => ({ type: name, payload: { ms: 0 } })));
    await enqueueJobs(db.pool, [{ type: name, payload: { ms: 1_500 } }]);
    await enqueueJobs(db.pool, Array.from({ length: 300 }, () => ({ type: name, payload: { ms: 0 } })));
    const worker = await startWorker({ connectionString: db.url, tasks: [task], concurrency: 1, prefetch: 4 });
    return { runs, long, ...worker };
  };

  it("renews a waiting job's lease: nothing is reclaimed or run twice while it waits behind a long handler", async () => {
    const { runs, long, supervisor, outcomes } = await behindALongJob("renewed");
    let waitingBehindLong = 0;
    while (outcomes.length < 601) {
      if (long.running) waitingBehindLong = Math.max(waitingBehindLong, supervisor.stats().waiting);
      await sleep(10);
    }
    await supervisor.stop();
    expect(waitingBehindLong).toBeGreaterThan(0);
    expect(outcomes.filter((o) => o.outcome !== "completed")).toEqual([]);
    expect([...runs.values()].filter((n) => n > 1)).toEqual([]);
  });

  it("fences a waiting job whose claim was taken at the next renewal, and never runs it under that claim", async () => {
    const { runs, long, supervisor, outcomes } = await behindALongJob("stolen");
    await expect.poll(() => long.running && supervisor.stats().waiting > 0, { timeout: 20_000, interval: 5 }).toBe(true);
    // The newest claim of a quick job is one still waiting behind the long one.
    const { rows } = await db.pool.query<{ id: string }>(
      `UPDATE picket.jobs SET claim_token = gen_random_uuid()
        WHERE id = (SELECT id FROM picket.jobs WHERE type = 'stolen' AND status = 'processing' AND (payload->>'ms')::int = 0 ORDER BY id DESC LIMIT 1)
        RETURNING id::text`,
    );
    const stolen = rows[0]!.id;
    await expect.poll(() => outcomes.find((o) => o.id === stolen)?.outcome, { timeout: 10_000 }).toBe("fenced");
    expect(runs.get(stolen) ?? 0).toBe(0);
    supervisor.force();
    await supervisor.stop();
  });
});
