// How a worker decides when to run the slow claim (claimLimited) beside the fast one: never more
// than once per poll interval when no queue or limit is in use; at once when a NOTIFY announces a
// queued job, or when a queued job it ran has ended (its queue has room again).
import { describe, expect, it } from "vitest";
import { enqueueJob, enqueueJobs } from "../src/db/index.ts";
import { defineTask } from "../src/runtime/task.ts";
import { interceptedPool, useTestDatabase } from "./support/db.ts";
import { startWorker } from "./support/worker.ts";

const db = useTestDatabase();

describe("the slow claim, from the worker's side", () => {
  it("without queued jobs or limited tasks, claims take the fast path: at most one slow claim per poll interval", async () => {
    const statements = { fast: 0, slow: 0 };
    const { pool, end } = interceptedPool(db.url, (statement, forward) => {
      if (statement.text.includes("claim_limited(")) statements.slow++;
      else if (statement.text.includes("LATERAL") && statement.text.includes("WITH wanted")) statements.fast++;
      return forward();
    });
    try {
      const task = defineTask({ name: "plain", handler: async () => undefined });
      await enqueueJobs(db.pool, Array.from({ length: 400 }, () => ({ type: "plain" })));
      const startedAt = performance.now();
      const { supervisor, outcomes } = await startWorker({ pool, tasks: [task], pollIntervalMs: 1_000, prefetch: 5, concurrency: 2 });
      await expect.poll(() => outcomes.length, { timeout: 30_000 }).toBe(400);
      await supervisor.stop();
      const elapsedMs = performance.now() - startedAt;
      // Many fast claims (a batch of a few jobs each), and slow ones only as the interval allows.
      expect(statements.fast).toBeGreaterThan(40);
      expect(statements.slow).toBeLessThanOrEqual(Math.ceil(elapsedMs / 1_000) + 1);
    } finally {
      await end();
    }
  });

  it("with a limited task but none of its jobs about, claims take the fast path; a limited job enqueued runs at once", async () => {
    // Every worker with a limited task used to run the slow claim, serialised on one advisory lock
    // per schema, at every poll while the task had a free slot: with many workers, that lock was
    // held by one of them nearly all the time (bench/workers.ts).
    const statements = { fast: 0, slow: 0 };
    const { pool, end } = interceptedPool(db.url, (statement, forward) => {
      if (statement.text.includes("claim_limited(")) statements.slow++;
      else if (statement.text.includes("LATERAL") && statement.text.includes("WITH wanted")) statements.fast++;
      return forward();
    });
    try {
      const plain = defineTask({ name: "plain-beside", handler: async () => undefined });
      const ran: string[] = [];
      const limited = defineTask({ name: "limited-beside", clusterConcurrency: 2, handler: async (_p, ctx) => void ran.push(ctx.job.id) });
      await enqueueJobs(db.pool, Array.from({ length: 400 }, () => ({ type: "plain-beside" })));
      const startedAt = performance.now();
      const { supervisor, outcomes } = await startWorker({ pool, tasks: [plain, limited], pollIntervalMs: 30_000, prefetch: 5, concurrency: 2 });
      await expect.poll(() => outcomes.length, { timeout: 30_000 }).toBe(400);
      expect(statements.fast).toBeGreaterThan(40);
      // The start's slow claim, and none after it: the poll interval (30 s) has not passed.
      expect(statements.slow).toBeLessThanOrEqual(Math.ceil((performance.now() - startedAt) / 30_000) + 1);
      const job = await enqueueJob(db.pool, { type: "limited-beside" });
      await expect.poll(() => ran, { timeout: 5_000 }).toContain(job.id);
      await supervisor.stop();
    } finally {
      await end();
    }
  });

  it("does not wait behind another session's slow claim: plain jobs run meanwhile, the queued one once the lock is free", async () => {
    const ran: string[] = [];
    const plain = defineTask({ name: "plain-unblocked", handler: async (_p, ctx) => void ran.push(ctx.job.id) });
    const { supervisor, outcomes } = await startWorker({ connectionString: db.url, tasks: [plain], pollIntervalMs: 4_000 });
    // The start's slow claim has run; now another session holds the slow claim's lock, as a slow
    // claim of another worker would, for longer than the worker's poll interval.
    await new Promise((resolve) => setTimeout(resolve, 300));
    const holder = await db.pool.connect();
    try {
      await holder.query("BEGIN");
      await holder.query("SELECT pg_advisory_xact_lock(hashtextextended('picket.claim_limited:picket', 0))");
      const queued = await enqueueJob(db.pool, { type: "plain-unblocked", queue: "unblocked-serial" });
      const jobs = await enqueueJobs(db.pool, Array.from({ length: 50 }, () => ({ type: "plain-unblocked" })));
      // The NOTIFY marks queued work due: the slow claim finds the lock held and the plain jobs run.
      // (Within the poll interval: once it has passed without a slow claim, the worker waits its turn.)
      await expect.poll(() => jobs.every((job) => ran.includes(job.id)), { timeout: 3_000 }).toBe(true);
      expect(ran).not.toContain(queued.id);
      await holder.query("COMMIT");
      await expect.poll(() => ran, { timeout: 8_000 }).toContain(queued.id);
      expect(outcomes.filter((o) => o.outcome !== "completed")).toEqual([]);
    } finally {
      await holder.query("ROLLBACK").catch(() => undefined);
      holder.release();
      await supervisor.stop();
    }
  });

  it("a queued job enqueued to an idle worker runs at once (the NOTIFY says it is queued), not at the next probe", async () => {
    const ran: string[] = [];
    const task = defineTask({ name: "announced", handler: async (_p, ctx) => void ran.push(ctx.job.id) });
    const { supervisor } = await startWorker({ connectionString: db.url, tasks: [task], pollIntervalMs: 30_000 });
    // Let the start's first poll (which probes for queued work) pass.
    await new Promise((resolve) => setTimeout(resolve, 500));
    const job = await enqueueJob(db.pool, { type: "announced", queue: "announced-q" });
    await expect.poll(() => ran, { timeout: 5_000 }).toEqual([job.id]);
    await supervisor.stop();
  });

  it("a serial queue's jobs follow each other without waiting for a poll interval", async () => {
    const ran: string[] = [];
    const task = defineTask({ name: "chain", handler: async (_p, ctx) => void ran.push(ctx.job.id) });
    const jobs = await enqueueJobs(db.pool, Array.from({ length: 5 }, (_, i) => ({ type: "chain", queue: "chain-q", payload: { i } })));
    const { supervisor } = await startWorker({ connectionString: db.url, tasks: [task], pollIntervalMs: 30_000 });
    await expect.poll(() => ran.length, { timeout: 8_000 }).toBe(5);
    expect(ran).toEqual(jobs.map((j) => j.id));
    await supervisor.stop();
  });

  it("two supervisors in this process share one serial queue: never two of its jobs at once", async () => {
    let running = 0;
    let peak = 0;
    const task = defineTask({
      name: "shared",
      handler: async () => {
        peak = Math.max(peak, ++running);
        await new Promise((resolve) => setTimeout(resolve, 20));
        running--;
      },
    });
    await enqueueJobs(db.pool, Array.from({ length: 20 }, () => ({ type: "shared", queue: "shared-q" })));
    const a = await startWorker({ connectionString: db.url, tasks: [task], concurrency: 5 });
    const b = await startWorker({ connectionString: db.url, tasks: [task], concurrency: 5 });
    await expect.poll(() => a.outcomes.length + b.outcomes.length, { timeout: 20_000 }).toBe(20);
    await Promise.all([a.supervisor.stop(), b.supervisor.stop()]);
    expect(peak).toBe(1);
  });
});
