// The whole server misbehaving, on a PostgreSQL of this file's own: stopped while handlers finish
// (scenario 3 of the lease review), paused with SIGSTOP for longer than a lease, its backends
// killed with pg_terminate_backend. Work done is never lost, a worker stops running what it cannot
// prove it still holds, /health tells the truth, and stop() ends whatever the server does.
import { describe, expect, it } from "vitest";
import { enqueueJobs } from "../src/db/index.ts";
import { defineTask } from "../src/runtime/task.ts";
import { row } from "./support/factory.ts";
import { withApplicationName } from "./support/db.ts";
import { useOwnServer } from "./support/own-server.ts";
import { startWorker } from "./support/worker.ts";

const server = useOwnServer();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const jobRow = (id: string) => row(server.pool, id);

describe("the server goes away", () => {
  it("keeps each finished handler's outcome through a stop of several leases, and writes it once the server is back", async () => {
    let finish: () => void = () => undefined;
    const finished = new Promise<void>((r) => (finish = r));
    let runs = 0;
    const task = defineTask({ name: "outage", leaseMs: 1_000, handler: async () => (runs++, await finished, "done") });
    // One attempt each: any attempt charged would leave a job dead.
    const jobs = await enqueueJobs(server.pool, Array.from({ length: 20 }, () => ({ type: "outage", maxAttempts: 1 })));
    const { supervisor, outcomes } = await startWorker({ connectionString: server.url, tasks: [task], concurrency: 20, statementTimeoutMs: 1_000 });
    await expect.poll(() => runs, { timeout: 5_000 }).toBe(20);
    await server.stop();
    finish(); // every handler succeeds while the server is down
    await sleep(5_000); // five leases
    expect(outcomes).toEqual([]);
    expect(supervisor.stats().running).toBe(20);
    await server.start();
    await expect.poll(() => outcomes.length, { timeout: 15_000 }).toBe(20);
    expect(outcomes.map((o) => o.outcome)).toEqual(Array(20).fill("completed"));
    for (const job of jobs) expect(await jobRow(job.id)).toMatchObject({ status: "completed", attempts: 1, result: "done", errors: [] });
    expect(runs).toBe(20);
  }, 60_000);

  it("when paused: ends its statements at their bound, stops handlers whose lease it cannot prove, answers /health 503 with the reasons, and stop() ends", async () => {
    const stoppedAt: number[] = [];
    const task = defineTask({
      name: "paused",
      leaseMs: 1_000,
      timeoutMs: 60_000,
      handler: (_p, { signal }) =>
        new Promise((_resolve, reject) =>
          signal.addEventListener("abort", () => {
            stoppedAt.push(Date.now());
            reject(new Error("interrupted"));
          }),
        ),
    });
    const jobs = await enqueueJobs(server.pool, Array.from({ length: 3 }, () => ({ type: "paused" })));
    const { supervisor, outcomes, logs } = await startWorker({ connectionString: server.url, tasks: [task], statementTimeoutMs: 1_000, drainTimeoutMs: 300 });
    await expect.poll(() => supervisor.stats().running, { timeout: 5_000 }).toBe(3);
    await sleep(300);
    await server.pause();
    const pausedAt = Date.now();
    try {
      // Each handler stops within a lease of the pause (its lease was last confirmed before it).
      await expect.poll(() => stoppedAt.length, { timeout: 5_000 }).toBe(3);
      for (const at of stoppedAt) expect(at - pausedAt).toBeLessThan(1_000);
      const health = await supervisor.health();
      expect(health).toMatchObject({
        healthy: false,
        checks: {
          database: { ok: false, reason: "the database does not answer: no answer to SELECT 1 on a new connection within 2000 ms" },
          leases: { ok: false, reason: expect.stringMatching(/^the leases of 3 claim\(s\) have not been renewed for longer than a lease/) },
        },
      });
      expect(logs.some((l) => l.loop === "lease renewal" && /did not finish within 1000 ms/.test(String((l.err as { message?: string })?.message)))).toBe(true);
      const stopAt = Date.now();
      await supervisor.stop();
      // The drain's deadline plus about 1.3 s (README), with room for a loaded machine (2.45 s seen in CI).
      expect(Date.now() - stopAt).toBeLessThan(300 + 3_000);
      expect(outcomes.map((o) => o.outcome)).toEqual(["abandoned", "abandoned", "abandoned"]);
    } finally {
      await server.resume();
    }
    // Nothing was written for them by their handlers' outcome: the sweep of any worker takes them
    // back after their lease. (A statement this worker sent while the server was paused may run
    // when it resumes: the server reads a statement already in its socket before it learns the
    // client is gone. That is the sweep, or the fenced failure write of the lease the worker could
    // not confirm, which still held: either way the row is pending again, its one attempt charged,
    // never completed by the handler. Seen on a loaded machine: the failure write.)
    for (const job of jobs) {
      const after = await jobRow(job.id);
      expect(after.attempts).toBe(1);
      if (after.status !== "processing") expect(after).toMatchObject({ status: "pending", last_error: expect.stringMatching(/^(lease expired: claim |lease_expired: the lease was not confirmed)/) });
    }
  }, 30_000);

  it("completes every job once while its connections are killed (pg_terminate_backend) again and again", async () => {
    const task = defineTask({ name: "terminated", leaseMs: 5_000, handler: async (_p, { job }) => `ran ${job.id}` });
    const jobs = await enqueueJobs(server.pool, Array.from({ length: 300 }, () => ({ type: "terminated", maxAttempts: 1 })));
    const { outcomes } = await startWorker({ connectionString: withApplicationName(server.url, "terminated-worker"), tasks: [task], concurrency: 5 });
    let kills = 0;
    const until = Date.now() + 3_000;
    while (Date.now() < until && outcomes.length < 300) {
      const { rowCount } = await server.pool.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'terminated-worker'");
      kills += rowCount ?? 0;
      await sleep(50);
    }
    expect(kills).toBeGreaterThan(0);
    await expect.poll(async () => (await server.pool.query("SELECT count(*)::int AS n FROM picket.jobs WHERE type = 'terminated' AND status = 'completed'")).rows[0].n, { timeout: 20_000 }).toBe(300);
    for (const job of jobs.slice(0, 20)) expect(await jobRow(job.id)).toMatchObject({ status: "completed", attempts: 1, result: `ran ${job.id}` });
    // No outcome was given up or charged: a write cut off with its connection was tried again.
    expect(outcomes.filter((o) => o.outcome === "abandoned" || o.outcome === "retried" || o.outcome === "dead")).toEqual([]);
  }, 60_000);
});
