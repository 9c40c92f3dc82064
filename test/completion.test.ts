// Completion by default deletes the completed job's row (keepCompleted: false): the cheapest
// write a completion can make. What must still hold: the fence (test/fence.test.ts runs every loss
// against both completions), one recorded outcome per claim, a row with a dedupe key kept for
// "window" enqueues, a job's steps going with it, a busy row left alone, a cancel seen, and the
// dashboard's completion rate coming from the workers.
import { describe, expect, it } from "vitest";
import { beat, cancelJob, claimJobs, completeJobs, enqueueJob, enqueueJobs, jobSteps, queueStats, recordStep, sweepExpiredClaims } from "../src/db/index.ts";
import { formatStats } from "../src/cli/stats.ts";
import { defineTask, PermanentError } from "../src/runtime/task.ts";
import { useTestDatabase } from "./support/db.ts";
import { claimed, expireLease, row, want } from "./support/factory.ts";
import { startWorker } from "./support/worker.ts";

const db = useTestDatabase();

describe("completion deletes a completed job's row unless completed jobs are kept", () => {
  it("deletes keyless rows with their steps, keeps a keyed row completed with its result, in one batch", async () => {
    const [plain, keyed, stepped] = await claimed(db.pool, "delete-batch", 3);
    await db.pool.query("UPDATE picket.jobs SET key = 'delete-batch-key' WHERE id = $1", [keyed!.id]);
    const claimOf = (job: typeof plain) => ({ id: job!.id, token: job!.claimToken });
    expect(await recordStep(db.pool, claimOf(stepped), { name: "charge", result: { ok: 1 }, attempt: 1 })).toEqual({ outcome: "recorded" });

    const results = await completeJobs(db.pool, [plain, keyed, stepped].map((job) => ({ ...claimOf(job), result: { id: job!.id } })));
    expect(results).toEqual([plain, keyed, stepped].map((job) => ({ id: job!.id, outcome: "applied", status: "completed" })));
    expect(await row(db.pool, plain!.id)).toBeUndefined();
    expect(await row(db.pool, stepped!.id)).toBeUndefined();
    expect(await jobSteps(db.pool, stepped!.id)).toEqual([]);
    expect(await row(db.pool, keyed!.id)).toMatchObject({ status: "completed", result: { id: keyed!.id }, key: "delete-batch-key", lock_until: null });
    // One outcome per claim: the same claim's completion again finds nothing to write.
    expect(await completeJobs(db.pool, [plain, keyed].map(claimOf))).toEqual([
      { id: plain!.id, outcome: "fenced" },
      { id: keyed!.id, outcome: "fenced" },
    ]);
  });

  it("never deletes a row under a lost claim: the job reclaimed by another worker stays theirs", async () => {
    const [job] = await claimed(db.pool, "delete-stale", 1, { spec: { maxAttempts: 5 } });
    await expireLease(db.pool, job!.id);
    await sweepExpiredClaims(db.pool, 100);
    await db.pool.query("UPDATE picket.jobs SET run_at = now() WHERE id = $1", [job!.id]);
    const [again] = await claimJobs(db.pool, "thief", [want("delete-stale", { limit: 1 })]);
    expect(again?.id).toBe(job!.id);
    expect(await completeJobs(db.pool, [{ id: job!.id, token: job!.claimToken }])).toEqual([{ id: job!.id, outcome: "fenced" }]);
    expect(await row(db.pool, job!.id)).toMatchObject({ status: "processing", claim_token: again!.claimToken, locked_by: "thief" });
  });

  it("reports a row another session holds busy and leaves it; completes it once the lock is gone", async () => {
    const [job] = await claimed(db.pool, "delete-busy");
    // (A dedicated connection, closed after the file.)
    const operator = await db.connect();
    await operator.query("BEGIN");
    await operator.query("SELECT 1 FROM picket.jobs WHERE id = $1 FOR UPDATE", [job!.id]);
    expect(await completeJobs(db.pool, [{ id: job!.id, token: job!.claimToken }])).toEqual([{ id: job!.id, outcome: "busy" }]);
    expect(await row(db.pool, job!.id)).toMatchObject({ status: "processing" });
    await operator.query("COMMIT");
    expect(await completeJobs(db.pool, [{ id: job!.id, token: job!.claimToken }])).toEqual([{ id: job!.id, outcome: "applied", status: "completed" }]);
    expect(await row(db.pool, job!.id)).toBeUndefined();
  });

  it("reports a claim cancelled meanwhile as cancelled, and keeps the cancelled row", async () => {
    const [job] = await claimed(db.pool, "delete-cancelled");
    expect(await cancelJob(db.pool, job!.id)).toMatchObject({ outcome: "applied" });
    expect(await completeJobs(db.pool, [{ id: job!.id, token: job!.claimToken }])).toEqual([{ id: job!.id, outcome: "cancelled" }]);
    expect(await row(db.pool, job!.id)).toMatchObject({ status: "cancelled" });
  });

  it("a worker at its defaults deletes completed jobs, keeps dead and keyed ones, and reports its completion rate", async () => {
    const type = "delete-worker";
    const tasks = [
      // Each job takes a moment, so the run spans several heartbeats.
      defineTask({ name: type, handler: async () => new Promise((resolve) => setTimeout(() => resolve({ ok: true }), 30)) }),
      defineTask({ name: `${type}-poison`, handler: async () => Promise.reject(new PermanentError("bad input")) }),
    ];
    const plain = await enqueueJobs(db.pool, Array.from({ length: 20 }, (_, i) => ({ type, payload: { i } })));
    const keyed = await enqueueJob(db.pool, { type, key: "delete-worker-report" });
    const poison = await enqueueJob(db.pool, { type: `${type}-poison` });
    // keepCompleted undefined: the supervisor's own default, not the test helper's.
    const { supervisor, outcomes } = await startWorker({ connectionString: db.url, tasks, keepCompleted: undefined, concurrency: 1, heartbeatIntervalMs: 100, workerId: "delete-worker" });
    // While it runs, its heartbeat carries its completions per second.
    await expect
      .poll(async () => (await db.pool.query("SELECT completed_per_s FROM picket.workers WHERE id = 'delete-worker'")).rows[0]?.completed_per_s?.[type] ?? 0, {
        timeout: 10_000,
        interval: 20,
      })
      .toBeGreaterThan(0);
    await expect.poll(() => outcomes.length, { timeout: 20_000 }).toBe(22);
    expect(outcomes.filter((o) => o.outcome === "completed")).toHaveLength(21);

    const { rows } = await db.pool.query("SELECT id, status FROM picket.jobs WHERE type LIKE 'delete-worker%' ORDER BY id");
    expect(rows).toEqual([
      { id: keyed.id, status: "completed" },
      { id: poison.id, status: "dead" },
    ]);
    expect(plain).toHaveLength(20);
    // A "window" enqueue with the key still finds the job that did the work.
    expect(await enqueueJob(db.pool, { type, key: "delete-worker-report", dedupe: { windowMs: 60_000 } })).toMatchObject({ id: keyed.id, status: "completed" });
    await supervisor.stop();
  });

  it("picket stats sums the live workers' completion rates by task, leaving out a silent worker's", async () => {
    const beatOf = (id: string, rates: Record<string, number>) => ({
      id, host: "test", pid: 1, version: "0", startedAt: new Date(), concurrency: 1, state: "running.polling",
      jobs: [], running: 0, waiting: 0, tasks: Object.keys(rates), completedPerSecond: rates,
    });
    await beat(db.pool, beatOf("rates-a", { "rates-mail": 2.5, "rates-report": 1 }));
    await beat(db.pool, beatOf("rates-b", { "rates-mail": 0.5 }));
    await beat(db.pool, beatOf("rates-gone", { "rates-mail": 100 }));
    await db.pool.query("UPDATE picket.workers SET last_beat = now() - interval '1 minute' WHERE id = 'rates-gone'");
    const stats = await queueStats(db.pool);
    await db.pool.query("DELETE FROM picket.workers WHERE id LIKE 'rates-%'");
    expect(stats.completedPerSecond.filter((r) => r.type.startsWith("rates-"))).toEqual([
      { type: "rates-mail", perSecond: 3 },
      { type: "rates-report", perSecond: 1 },
    ]);
    expect(formatStats(stats)).toMatch(/completed per second by live workers: .*rates-mail 3\.0, rates-report 1\.0/);
  });
});
