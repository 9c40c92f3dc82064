// The dashboard's history, kept in the database (migration 0015): the worker's tally between two
// heartbeats, the minute rows the heartbeats add it to (and prune after 25 hours), the depth sampled
// once a minute, and the buckets of an hour and of a day read back for the charts.
import { describe, expect, it } from "vitest";
import { enqueueJob, enqueueJobs, jobHistory, recordHistory, type TaskTally } from "../src/db/index.ts";
import { JobTally } from "../src/runtime/job-tally.ts";
import { defineTask } from "../src/runtime/task.ts";
import { schemasFor, useTestDatabase } from "./support/db.ts";
import { startWorker } from "./support/worker.ts";

const db = useTestDatabase();

const freshSchema = schemasFor(db, "history");
const tally = (type: string, counts: Partial<TaskTally>): TaskTally => ({ type, completed: 0, failed: 0, dead: 0, started: 0, pickupMs: 0, ...counts });

describe("a worker's tally", () => {
  it("counts starts with their pickup delays, completions, failed attempts and deaths by task, and starts again at each take", () => {
    const t = new JobTally(0);
    t.started("a", 120);
    t.started("a", -5); // a clock step: no negative delay
    t.ended("a", "completed", null);
    t.ended("a", "retried", "q1");
    t.ended("a", "dead", null);
    t.ended("a", "released", "q1");
    t.ended("b", "completed", "q1");
    t.ended("b", "cancelled", "q2");
    t.ended("b", "fenced", "q2");
    t.ended("c", "dead", "q3");
    t.ended("c", "completed", "q3");
    t.ended("c", "completed", "q3");
    const taken = t.take(2_000);
    expect(taken.tallies).toEqual([
      tally("a", { completed: 1, failed: 2, dead: 1, started: 2, pickupMs: 120 }),
      tally("b", { completed: 1 }),
      tally("c", { completed: 2, failed: 1, dead: 1 }),
    ]);
    expect(taken.completedPerSecond).toEqual({ a: 0.5, b: 0.5, c: 1 });
    // Per named queue: completions and failed attempts (a release, a cancel or a fence is neither).
    expect(taken.queueRates).toEqual({ q1: { completed: 0.5, failed: 0.5 }, q3: { completed: 1, failed: 0.5 } });
    expect(t.take(3_000)).toEqual({ tallies: [], completedPerSecond: {}, queueRates: {} });
  });
});

describe("the history the heartbeats keep", () => {
  it("adds every worker's tallies to the minute's row, and deletes the minutes past 25 hours", async () => {
    const schema = await freshSchema();
    await db.pool.query(`INSERT INTO ${schema}.job_stats (minute, type, completed) VALUES (now() - interval '26 hours', 'old', 5), (now() - interval '24 hours', 'kept', 5)`);
    await recordHistory(db.pool, [tally("mail", { completed: 3, started: 3, pickupMs: 30 })], { schema });
    await recordHistory(db.pool, [tally("mail", { completed: 2, failed: 1, started: 3, pickupMs: 60 }), tally("bill", { dead: 1, failed: 1 })], { schema });
    // Summed by task (the two beats may fall either side of a minute's turn), and dated this minute or the last.
    const { rows } = await db.pool.query(`
      SELECT type, sum(completed)::int AS completed, sum(failed)::int AS failed, sum(dead)::int AS dead, sum(started)::int AS started, sum(pickup_ms) AS pickup_ms,
             bool_and(minute >= date_trunc('minute', now()) - interval '1 minute') AS now
      FROM ${schema}.job_stats GROUP BY type ORDER BY type`);
    expect(rows).toEqual([
      { type: "bill", completed: 0, failed: 1, dead: 1, started: 0, pickup_ms: 0, now: true },
      { type: "kept", completed: 5, failed: 0, dead: 0, started: 0, pickup_ms: 0, now: false },
      { type: "mail", completed: 5, failed: 1, dead: 0, started: 6, pickup_ms: 90, now: true },
    ]);
  });

  it("samples each task's live jobs by state once a minute, whichever heartbeat comes first", async () => {
    const schema = await freshSchema();
    await enqueueJobs(db.pool, [{ type: "d" }, { type: "d" }, { type: "d", delayMs: 3_600_000 }], { schema });
    await db.pool.query(`INSERT INTO ${schema}.jobs (type, status, run_at, attempts) VALUES ('d', 'pending', now() + interval '1 minute', 2)`);
    await recordHistory(db.pool, [], { schema });
    // More jobs, and another heartbeat within the minute: the sample stays the minute's first.
    await enqueueJob(db.pool, { type: "d" }, { schema });
    await recordHistory(db.pool, [], { schema });
    // The first minute's sample (a minute's turn between the two beats gives the second a row of its own).
    const { rows } = await db.pool.query(`SELECT type, ready, scheduled, retrying, processing FROM ${schema}.job_depth ORDER BY minute`);
    expect(rows[0]).toEqual({ type: "d", ready: 2, scheduled: 1, retrying: 1, processing: 0 });
    // Once sampled, a heartbeat does not count the live rows again this minute: the count's scan is never run.
    let statement: { text: string; values?: unknown[] } | undefined;
    await recordHistory({ query: async (config: { text: string; values?: unknown[] }) => ((statement = config), { rows: [] }) } as never, [], { schema });
    const client = await db.pool.connect();
    await client.query("BEGIN");
    try {
      const { rows: explained } = await client.query({ text: `EXPLAIN (ANALYZE, FORMAT JSON) ${statement!.text}`, values: statement!.values });
      const nodes = (plan: { Plans?: unknown[] }): Array<Record<string, unknown>> => [plan as Record<string, unknown>, ...((plan.Plans ?? []) as Array<{ Plans?: unknown[] }>).flatMap(nodes)];
      const jobScans = nodes(explained[0]["QUERY PLAN"][0].Plan).filter((n) => n["Relation Name"] === "jobs");
      expect(jobScans.length).toBeGreaterThan(0);
      expect(jobScans.map((n) => n["Actual Loops"])).toEqual(jobScans.map(() => 0));
    } finally {
      await client.query("ROLLBACK");
      client.release();
    }
    await db.pool.query(`UPDATE ${schema}.job_depth SET minute = minute - interval '26 hours'`);
    await recordHistory(db.pool, [], { schema });
    expect((await db.pool.query(`SELECT ready FROM ${schema}.job_depth ORDER BY minute`)).rows).toEqual([{ ready: 3 }]);
  });
});

describe("the history read back", () => {
  it("gives an hour a minute a bucket and a day a quarter hour a bucket, each task's counts, mean pickup and last depth in its bucket", async () => {
    const schema = await freshSchema();
    await db.pool.query(`
      INSERT INTO ${schema}.job_stats (minute, type, completed, failed, dead, started, pickup_ms) VALUES
        (date_trunc('minute', now()), 'mail', 4, 1, 0, 5, 500),
        (date_trunc('minute', now()) - interval '10 minutes', 'mail', 2, 0, 0, 2, 40),
        (date_trunc('minute', now()) - interval '3 hours', 'mail', 7, 0, 0, 0, 0)`);
    await db.pool.query(`
      INSERT INTO ${schema}.job_depth (minute, type, ready, scheduled, retrying, processing) VALUES
        (date_trunc('minute', now()) - interval '1 minute', 'mail', 9, 0, 0, 0),
        (date_trunc('minute', now()), 'mail', 3, 0, 0, 0)`);
    const hour = await jobHistory(db.pool, "hour", { schema });
    expect(hour.buckets).toHaveLength(60);
    expect(hour.bucketSeconds).toBe(60);
    expect(hour.buckets.at(-1)!.getTime()).toBeLessThanOrEqual(Date.now());
    expect(hour.buckets[1]!.getTime() - hour.buckets[0]!.getTime()).toBe(60_000);
    const [mail] = hour.tasks;
    expect(mail!.type).toBe("mail");
    expect(mail!.completed.at(-1)).toBe(4);
    expect(mail!.failed.at(-1)).toBe(1);
    expect(mail!.pickupMs.at(-1)).toBe(100);
    expect(mail!.ready.at(-1)).toBe(3);
    expect(mail!.ready.at(-2)).toBe(9);
    expect(mail!.completed.at(-11)).toBe(2);
    expect(mail!.pickupMs.at(-11)).toBe(20);
    // Three hours ago is outside the hour.
    expect(mail!.completed.reduce((a, b) => a + b, 0)).toBe(6);
    const day = await jobHistory(db.pool, "day", { schema });
    expect(day.buckets).toHaveLength(96);
    expect(day.bucketSeconds).toBe(900);
    expect(day.tasks[0]!.completed.reduce((a, b) => a + b, 0)).toBe(13);
    // The last quarter hour holds the minute's 4 and, unless it began since, the 2 of ten minutes ago.
    expect([4, 6]).toContain(day.tasks[0]!.completed.at(-1));
  });

  it("is written by a running worker's heartbeats: its completions and pickup delays", async () => {
    const task = defineTask({ name: "history-worker", handler: async () => undefined });
    const { supervisor, outcomes } = await startWorker({ connectionString: db.url, tasks: [task], heartbeatIntervalMs: 100 });
    try {
      await enqueueJobs(db.pool, Array.from({ length: 5 }, () => ({ type: "history-worker" })));
      await expect.poll(() => outcomes.length, { timeout: 10_000 }).toBe(5);
      await expect
        .poll(async () => (await db.pool.query("SELECT coalesce(sum(completed), 0)::int AS n, coalesce(sum(started), 0)::int AS s FROM picket.job_stats WHERE type = 'history-worker'")).rows[0], { timeout: 10_000 })
        .toEqual({ n: 5, s: 5 });
    } finally {
      await supervisor.stop();
    }
  });
});
