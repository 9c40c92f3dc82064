// The supervisor's background work seen from outside: retention deletes in batches until nothing
// is left, the sweep logs what it moved and whose claims were lost, LISTEN works through a
// caller's own pool, and stats() reports what runs.
import pg from "pg";
import { describe, expect, it } from "vitest";
import { claimJobs, enqueueFlow, enqueueJob, enqueueJobs, getFlow } from "../src/db/index.ts";
import { defineTask } from "../src/runtime/task.ts";
import { useTestDatabase } from "./support/db.ts";
import { expireLease, row, want } from "./support/factory.ts";
import { startWorker } from "./support/worker.ts";

const db = useTestDatabase();

describe("background work", () => {
  it("retention deletes old finished jobs batch after batch in one run, logs the count, and keeps the rest", async () => {
    await db.pool.query(`INSERT INTO picket.jobs (type, status, finished_at) SELECT 'old', 'completed', now() - interval '2 days' FROM generate_series(1, 5)`);
    // A completed flow as old, and a running one: the first goes whole, the second stays.
    const old = await enqueueFlow(db.pool, { name: "bg-old", jobs: [{ name: "a", type: "bg-flow" }, { name: "b", type: "bg-flow", dependsOn: ["a"] }] });
    await db.pool.query("UPDATE picket.jobs SET status = 'completed', finished_at = now() - interval '2 days' WHERE flow_id = $1", [old.flow.id]);
    await db.pool.query("UPDATE picket.flows SET finished_at = now() - interval '2 days' WHERE id = $1", [old.flow.id]);
    const running = await enqueueFlow(db.pool, { name: "bg-running", jobs: [{ name: "a", type: "bg-flow-later", runAt: new Date(Date.now() + 3_600_000) }] });
    const { rows: [recent] } = await db.pool.query(`INSERT INTO picket.jobs (type, status, finished_at) VALUES ('recent', 'completed', now()) RETURNING id`);
    const noop = defineTask({ name: "bg-noop", handler: async () => undefined });
    const { logs } = await startWorker({ connectionString: db.url, tasks: [noop], retention: { olderThanMs: 86_400_000, batchSize: 2, intervalMs: 60_000 } });
    await expect.poll(() => logs.find((l) => l.msg === "retention deleted old finished jobs"), { timeout: 5_000 }).toMatchObject({ deleted: 5, flows: 1 });
    expect(await getFlow(db.pool, old.flow.id)).toBeNull();
    expect((await getFlow(db.pool, running.flow.id))?.status).toBe("running");
    const { rows } = await db.pool.query("SELECT type FROM picket.jobs WHERE status = 'completed'");
    expect(rows.map((r) => r.type)).toEqual(["recent"]);
    expect(await row(db.pool, recent.id)).toBeDefined();
    expect(logs.filter((l) => l.msg === "retention deleted old finished jobs")).toHaveLength(1);
  });

  it("logs nothing for a retention run that deleted nothing", async () => {
    const noop = defineTask({ name: "bg-quiet", handler: async () => undefined });
    const { logs, supervisor } = await startWorker({ connectionString: db.url, tasks: [noop], retention: { olderThanMs: 86_400_000, intervalMs: 1_000 } });
    await expect.poll(() => supervisor.stats().lastPollAt, { timeout: 5_000 }).not.toBeNull();
    await new Promise((r) => setTimeout(r, 200));
    expect(logs.filter((l) => String(l.msg).startsWith("retention"))).toEqual([]);
  });

  it("the sweep logs what it requeued, what went dead, and each lost claim's token and worker", async () => {
    // Two requeued and one dead: counts that differ, so each is told from the other.
    await enqueueJobs(db.pool, [{ type: "bg-lost", maxAttempts: 1 }, { type: "bg-lost", maxAttempts: 3 }, { type: "bg-lost", maxAttempts: 3 }]);
    const lost = await claimJobs(db.pool, "gone-worker", [want("bg-lost", { limit: 3 })]);
    for (const job of lost) await expireLease(db.pool, job.id);
    const other = defineTask({ name: "bg-other", handler: async () => undefined });
    const { logs } = await startWorker({ connectionString: db.url, tasks: [other] });
    await expect.poll(() => logs.find((l) => l.msg === "sweep reclaimed jobs whose lease expired"), { timeout: 5_000 }).toBeDefined();
    const swept = logs.find((l) => l.msg === "sweep reclaimed jobs whose lease expired")!;
    expect(swept).toMatchObject({ level: 30, requeued: 2, dead: 1 });
    expect(swept.lost).toEqual(
      expect.arrayContaining(lost.map((job) => ({ job_id: job.id, claim_token: job.claimToken, locked_by: "gone-worker" }))),
    );
    expect(swept.lost).toHaveLength(3);
  });

  const fieldByField = () => {
    const url = new URL(db.url);
    return new pg.Pool({
      host: url.hostname,
      port: Number(url.port),
      user: decodeURIComponent(url.username),
      password: decodeURIComponent(url.password),
      database: url.pathname.slice(1),
    });
  };
  it.each([
    ["configured field by field", fieldByField],
    ["made from a connection string", () => new pg.Pool({ connectionString: db.url })],
  ])("listens through a caller's pool %s, and wakes only for its own task types", async (_how, makePool) => {
    const pool = makePool();
    try {
      const mine = defineTask({ name: "bg-mine", handler: async () => "ok" });
      // A minute between polls: only a NOTIFY can start these jobs within the test.
      const { supervisor, outcomes, logs } = await startWorker({ pool, tasks: [mine], pollIntervalMs: 60_000 });
      await expect.poll(() => supervisor.stats().lastPollAt, { timeout: 5_000 }).not.toBeNull();
      await expect.poll(() => logs.some((l) => l.msg === "listening for new jobs"), { timeout: 5_000 }).toBe(true);
      const before = supervisor.stats().lastPollAt!.getTime();
      await enqueueJob(db.pool, { type: "bg-not-mine" });
      await new Promise((r) => setTimeout(r, 300));
      expect(supervisor.stats().lastPollAt!.getTime()).toBe(before);
      const job = await enqueueJob(db.pool, { type: "bg-mine" });
      await expect.poll(() => outcomes.find((o) => o.id === job.id), { timeout: 5_000 }).toMatchObject({ outcome: "completed" });
      await supervisor.stop();
    } finally {
      await pool.end();
    }
  });

  it("reports running jobs by task, outcomes, the last poll and the drain in stats()", async () => {
    let release: () => void = () => undefined;
    const gate = new Promise<void>((r) => (release = r));
    const held = defineTask({ name: "bg-held", handler: () => gate });
    const quick = defineTask({ name: "bg-quick", handler: async () => "ok" });
    await enqueueJobs(db.pool, [{ type: "bg-held" }, { type: "bg-held" }, { type: "bg-quick" }]);
    const { supervisor } = await startWorker({ connectionString: db.url, tasks: [held, quick] });
    await expect.poll(() => supervisor.stats().outcomes.completed, { timeout: 5_000 }).toBe(1);
    await expect.poll(() => supervisor.stats().running, { timeout: 5_000 }).toBe(2);
    const stats = supervisor.stats();
    expect(stats).toEqual({
      running: 2,
      waiting: 0,
      runningByTask: { "bg-held": 2 },
      outcomes: { completed: 1, retried: 0, dead: 0, released: 0, fenced: 0, abandoned: 0, cancelled: 0, refused: 0 },
      lastPollAt: expect.any(Date),
      draining: false,
    });
    // A copy: the caller cannot change the worker's counters.
    stats.outcomes.completed = 99;
    expect(supervisor.stats().outcomes.completed).toBe(1);
    const stopped = supervisor.stop();
    expect(supervisor.stats().draining).toBe(true);
    release();
    await stopped;
    expect(supervisor.stats()).toMatchObject({ running: 0, runningByTask: {}, outcomes: { completed: 3 } });
  });

  it("logs its lifecycle: started with its tasks, draining, the deadline, stopped with its outcomes; starts once only", async () => {
    const held = defineTask({ name: "bg-life", handler: () => new Promise(() => undefined) });
    const idle = defineTask({ name: "bg-idle", handler: async () => undefined });
    const job = await enqueueJob(db.pool, { type: "bg-life" });
    const { supervisor, logs } = await startWorker({ connectionString: db.url, tasks: [held, idle], concurrency: 3, drainTimeoutMs: 100, workerId: "w-life" });
    expect(logs.find((l) => l.msg === "worker started")).toMatchObject({ level: 30, worker_id: "w-life", tasks: ["bg-life", "bg-idle"], concurrency: 3 });
    expect(() => supervisor.start()).toThrow("picket: this supervisor was already started; create a new one to start again.");
    await expect.poll(() => supervisor.stats().running, { timeout: 5_000 }).toBe(1);
    await supervisor.stop();
    expect(logs.find((l) => l.msg === "draining: claiming stopped, waiting for running jobs")).toMatchObject({ level: 30, running: 1 });
    expect(logs.find((l) => l.msg === "drain deadline reached: interrupting and releasing running jobs")).toMatchObject({ level: 40, running: 1 });
    expect(logs.find((l) => l.msg === "worker stopped")).toMatchObject({ level: 30, outcomes: { released: 1, completed: 0 } });
    expect(await row(db.pool, job.id)).toMatchObject({ status: "pending", attempts: 0 });
  });
});
