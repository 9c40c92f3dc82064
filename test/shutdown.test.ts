import { describe, expect, it } from "vitest";
import { enqueueJob, enqueueJobs } from "../src/db/index.ts";
import { defineTask } from "../src/runtime/task.ts";
import { useTestDatabase } from "./support/db.ts";
import { row } from "./support/factory.ts";
import { startWorker } from "./support/worker.ts";

const db = useTestDatabase();

describe("shutdown drains once", () => {
  it("gives three concurrent stop() calls one drain; an in-flight poll finishes first; nothing is claimed after", async () => {
    const task = defineTask({ name: "drained", handler: async () => new Promise((r) => setTimeout(() => r("ok"), 300)) });
    await enqueueJobs(db.pool, [{ type: "drained" }, { type: "drained" }]);
    // Hold the table so the first claim blocks mid-statement: that poll is in flight when stop() comes.
    const blocker = await db.connect();
    await blocker.query("BEGIN");
    await blocker.query("LOCK TABLE picket.jobs IN EXCLUSIVE MODE");
    const { supervisor, outcomes, logs } = await startWorker({ connectionString: db.url, tasks: [task], pollIntervalMs: 20 });
    // Until the worker's claim waits on the lock (a fixed pause raced a loaded machine's start-up:
    // stop() came before any claim, and nothing ran).
    const claimWaiting = async () =>
      (await db.pool.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%WITH wanted AS%'")).rows[0].n;
    await expect.poll(claimWaiting, { timeout: 10_000 }).toBeGreaterThan(0);
    const stopCalledAt = new Date();
    const stops = [supervisor.stop(), supervisor.stop(), supervisor.stop()];
    expect(stops[1]).toBe(stops[0]);
    expect(stops[2]).toBe(stops[0]);
    let settled = false;
    void Promise.all(stops).then(() => (settled = true));
    await new Promise((r) => setTimeout(r, 200));
    expect(settled).toBe(false); // the blocked poll is awaited, not raced
    await blocker.query("COMMIT");
    await Promise.all(stops);
    expect(logs.filter((l) => /^draining/.test(l.msg))).toHaveLength(1);
    expect(logs.filter((l) => l.msg === "worker stopped")).toHaveLength(1);
    // Jobs enqueued after the lock are claimed by nobody after stop(); any claim predates it.
    await enqueueJob(db.pool, { type: "drained" });
    await new Promise((r) => setTimeout(r, 200));
    const { rows } = await db.pool.query("SELECT locked_at FROM picket.jobs WHERE locked_at IS NOT NULL");
    for (const { locked_at } of rows) expect(locked_at.getTime()).toBeLessThanOrEqual(stopCalledAt.getTime());
    const { rows: left } = await db.pool.query("SELECT count(*)::int AS n FROM picket.jobs WHERE status = 'processing'");
    expect(left[0].n).toBe(0);
    // The in-flight poll's claims ran to completion inside the drain.
    expect(outcomes.map((o) => o.outcome)).toEqual(["completed", "completed"]);
  });

  it("waits for running jobs within the deadline", async () => {
    const task = defineTask({ name: "finishes", handler: () => new Promise((r) => setTimeout(() => r("finished"), 400)) });
    const job = await enqueueJob(db.pool, { type: "finishes" });
    const { supervisor, outcomes } = await startWorker({ connectionString: db.url, tasks: [task], drainTimeoutMs: 5_000 });
    await expect.poll(async () => (await row(db.pool, job.id)).status, { timeout: 3_000 }).toBe("processing");
    await supervisor.stop();
    expect(outcomes).toEqual([expect.objectContaining({ id: job.id, outcome: "completed" })]);
  });

  it("interrupts and releases a job at the drain deadline, its attempt not charged", async () => {
    let aborted = false;
    const task = defineTask({
      name: "endless",
      timeoutMs: 60_000,
      handler: (_p, { signal }) =>
        new Promise((_resolve, reject) =>
          signal.addEventListener("abort", () => {
            aborted = true;
            reject(new Error("aborted"));
          }),
        ),
    });
    const job = await enqueueJob(db.pool, { type: "endless" });
    const { supervisor, outcomes } = await startWorker({ connectionString: db.url, tasks: [task], drainTimeoutMs: 200 });
    await expect.poll(async () => (await row(db.pool, job.id)).status, { timeout: 3_000 }).toBe("processing");
    const started = Date.now();
    await supervisor.stop();
    expect(Date.now() - started).toBeLessThan(3_000);
    expect(aborted).toBe(true);
    expect(outcomes).toEqual([expect.objectContaining({ id: job.id, outcome: "released" })]);
    const after = await row(db.pool, job.id);
    expect(after).toMatchObject({ status: "pending", attempts: 0, claim_token: null, last_error: null });
    expect(after.run_at.getTime()).toBeLessThanOrEqual(Date.now());
  });

  it("starts no waiting job once stop() is called, though the drain waits for a poll in flight", async () => {
    // stop() during a poll: the drain begins when the poll returns. A slot freed before then must
    // not go to a job waiting in the buffer: that job goes back unrun, as at any drain.
    let openGate!: () => void;
    const gate = new Promise<void>((r) => (openGate = r));
    const ran: string[] = [];
    const task = defineTask<{ role?: "gated" | "follower" }>({
      name: "buffered",
      concurrency: 1,
      handler: async (payload, { job }) => {
        if (payload.role === undefined) return "quick";
        ran.push(`${payload.role} ${job.id}`);
        if (payload.role === "gated") await gate;
        return "ok";
      },
    });
    // A second task keeps the worker polling while "buffered" is at its own limit.
    const other = defineTask({ name: "other", handler: async () => "other" });
    // Quick jobs first: the worker measures the task's turnover and buffers its jobs ahead.
    await enqueueJobs(db.pool, Array.from({ length: 100 }, () => ({ type: "buffered" })));
    const { supervisor, outcomes } = await startWorker({ connectionString: db.url, tasks: [task, other], concurrency: 2, prefetch: 5, pollIntervalMs: 20 });
    await expect.poll(() => outcomes.length, { timeout: 10_000 }).toBe(100);
    const [gated, ...followers] = await enqueueJobs(db.pool, [{ type: "buffered", payload: { role: "gated" } }, ...Array.from({ length: 5 }, () => ({ type: "buffered", payload: { role: "follower" } }))]);
    await expect.poll(() => ran, { timeout: 5_000 }).toEqual([`gated ${gated!.id}`]);
    const buffered = async () => (await db.pool.query("SELECT count(*)::int AS n FROM picket.jobs WHERE status = 'processing'")).rows[0].n - 1;
    await expect.poll(buffered, { timeout: 5_000 }).toBeGreaterThan(0);
    // Hold the table: the next poll blocks mid-statement.
    const blocker = await db.connect();
    await blocker.query("BEGIN");
    await blocker.query("LOCK TABLE picket.jobs IN EXCLUSIVE MODE");
    // The worker's statements waiting on the lock, the claim's and the completion's told by their text.
    const waiting = async (fragment: string) =>
      (await db.pool.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1", [`%${fragment}%`])).rows[0].n;
    let stopping: Promise<void> | undefined;
    try {
      // (Bounds for a loaded machine: 5 s was too short for the completion under two busy CPUs.)
      await expect.poll(() => waiting("WITH wanted AS"), { timeout: 15_000 }).toBe(1);
      stopping = supervisor.stop();
      // The gated job ends and frees its slot while the poll still waits: its completion waits on
      // the lock beside the poll.
      openGate();
      await expect.poll(() => waiting("SET status = 'completed'"), { timeout: 15_000 }).toBeGreaterThan(0);
    } finally {
      // A failure here must not leave the table locked for the tests after it.
      await blocker.query("COMMIT");
    }
    await stopping;
    expect(ran).toEqual([`gated ${gated!.id}`]);
    expect(outcomes.find((o) => o.id === gated!.id)?.outcome).toBe("completed");
    for (const job of followers) expect(await row(db.pool, job.id)).toMatchObject({ status: "pending", attempts: 0 });
  });

  it("force() ends the grace period at once", async () => {
    const task = defineTask({ name: "forced", timeoutMs: 60_000, handler: (_p, { signal }) => new Promise((_r, reject) => signal.addEventListener("abort", () => reject(new Error("x")))) });
    const job = await enqueueJob(db.pool, { type: "forced" });
    const { supervisor } = await startWorker({ connectionString: db.url, tasks: [task], drainTimeoutMs: 60_000 });
    await expect.poll(async () => (await row(db.pool, job.id)).status, { timeout: 3_000 }).toBe("processing");
    const stopping = supervisor.stop();
    supervisor.force();
    await stopping;
    expect(await row(db.pool, job.id)).toMatchObject({ status: "pending", attempts: 0 });
  });
});
