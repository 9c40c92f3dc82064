import { describe, expect, it } from "vitest";
import { enqueueJob, sweepExpiredClaims } from "../src/db/index.ts";
import { defineTask } from "../src/runtime/task.ts";
import { useTestDatabase } from "./support/db.ts";
import { row } from "./support/factory.ts";
import { startWorker } from "./support/worker.ts";

const db = useTestDatabase();

describe("bookkeeping is not the work", () => {
  it("logs a failing sweep and keeps claiming", async () => {
    const task = defineTask({ name: "during-broken-sweep", handler: async () => "ok" });
    // The sweep calls the backoff function; without it every sweep fails.
    await db.pool.query("ALTER FUNCTION picket.backoff(integer, integer, integer) RENAME TO backoff_away");
    try {
      const { outcomes, logs } = await startWorker({ connectionString: db.url, tasks: [task], sweepIntervalMs: 50 });
      await expect.poll(() => logs.filter((l) => l.loop === "sweep" && l.level === 50).length, { timeout: 5_000 }).toBeGreaterThan(1);
      // The line carries PostgreSQL's own error, not a wrapper's: its message, code and stack.
      expect(logs.find((l) => l.loop === "sweep")).toMatchObject({
        msg: "sweep failed; it will run again",
        err: { message: expect.stringMatching(/^function picket\.backoff\(integer, integer, integer\) does not exist/), code: "42883", stack: expect.stringContaining("does not exist") },
      });
      const job = await enqueueJob(db.pool, { type: "during-broken-sweep" });
      await expect.poll(() => outcomes.find((o) => o.id === job.id), { timeout: 5_000 }).toMatchObject({ outcome: "completed" });
    } finally {
      await db.pool.query("ALTER FUNCTION picket.backoff_away(integer, integer, integer) RENAME TO backoff");
    }
  });

  it("leaves a job whose completion write fails to the sweep, without charging it as a handler failure", async () => {
    let runs = 0;
    const task = defineTask({ name: "unrecordable", leaseMs: 60_000, handler: async () => (runs++, "done") });
    await db.pool.query(`
      CREATE FUNCTION picket.refuse_completion() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'completion refused by test'; END $$;
      CREATE TRIGGER refuse_completion BEFORE UPDATE ON picket.jobs
        FOR EACH ROW WHEN (NEW.status = 'completed' AND NEW.type = 'unrecordable') EXECUTE FUNCTION picket.refuse_completion();`);
    try {
      const job = await enqueueJob(db.pool, { type: "unrecordable" });
      // The worker's own sweep is kept out of the way: it would race the test's sweep below for
      // the expired row (the job is no longer the worker's once its outcome was given up).
      const { outcomes, logs } = await startWorker({ connectionString: db.url, tasks: [task], sweepIntervalMs: 600_000 });
      // Its listeners hear why the outcome could not be written.
      await expect.poll(() => outcomes.find((o) => o.id === job.id), { timeout: 5_000 }).toMatchObject({ outcome: "abandoned", error: "completion refused by test" });
      expect(runs).toBe(1);
      const stuck = await row(db.pool, job.id);
      // Not a handler failure: no error recorded, no retry scheduled, still this worker's claim.
      expect(stuck).toMatchObject({ status: "processing", attempts: 1, last_error: null, errors: [] });
      expect(logs).toContainEqual(
        expect.objectContaining({
          level: 50,
          job_id: job.id,
          task: "unrecordable",
          attempt: 1,
          claim_token: expect.any(String),
          intended: "completed",
          write_error: "completion refused by test",
          msg: `could not record the outcome (completed) of job ${job.id}: completion refused by test; it stays processing and the sweep takes it back after its lease`,
        }),
      );
      // After the lease, the sweep takes it back, charging the attempt like any lost one.
      await db.pool.query("UPDATE picket.jobs SET lock_until = now() - interval '1 second' WHERE id = $1", [job.id]);
      expect((await sweepExpiredClaims(db.pool, 10)).map((s) => s.id)).toEqual([job.id]);
    } finally {
      await db.pool.query("DROP TRIGGER refuse_completion ON picket.jobs; DROP FUNCTION picket.refuse_completion()");
    }
  });

  it("lets a job complete when its progress writes fail", async () => {
    const task = defineTask({
      name: "noisy",
      handler: async (_p, { reportProgress }) => {
        await reportProgress({ step: 1 });
        await reportProgress({ step: 2 });
        return "done anyway";
      },
    });
    await db.pool.query(`
      CREATE FUNCTION picket.refuse_progress() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'progress refused by test'; END $$;
      CREATE TRIGGER refuse_progress BEFORE UPDATE ON picket.jobs
        FOR EACH ROW WHEN (NEW.progress IS DISTINCT FROM OLD.progress AND NEW.type = 'noisy') EXECUTE FUNCTION picket.refuse_progress();`);
    try {
      const job = await enqueueJob(db.pool, { type: "noisy" });
      const { outcomes, logs } = await startWorker({ connectionString: db.url, tasks: [task] });
      await expect.poll(() => outcomes.find((o) => o.id === job.id), { timeout: 5_000 }).toMatchObject({ outcome: "completed" });
      expect(await row(db.pool, job.id)).toMatchObject({ status: "completed", result: "done anyway", progress: null });
      expect(logs.filter((l) => l.job_id === job.id && /progress write failed/.test(l.msg))).toHaveLength(2);
    } finally {
      await db.pool.query("DROP TRIGGER refuse_progress ON picket.jobs; DROP FUNCTION picket.refuse_progress()");
    }
  });

  it("writes progress once a row held by another session for a moment is free, and drops it without holding the handler when the row stays held", async () => {
    let step: (n: number) => void = () => undefined;
    const steps: number[] = [];
    const task = defineTask({
      name: "progress-busy",
      handler: async (_p, { reportProgress }) => {
        for (const n of [1, 2]) {
          await new Promise<void>((resolve) => (step = (m) => m === n && resolve()));
          const started = Date.now();
          await reportProgress({ step: n });
          steps.push(Date.now() - started);
        }
        return "done";
      },
    });
    const job = await enqueueJob(db.pool, { type: "progress-busy" });
    const { outcomes } = await startWorker({ connectionString: db.url, tasks: [task] });
    await expect.poll(async () => (await row(db.pool, job.id)).status, { timeout: 5_000 }).toBe("processing");
    const holder = await db.connect();
    // Held for 100 ms: the write waits it out and lands.
    await holder.query("BEGIN");
    await holder.query("SELECT 1 FROM picket.jobs WHERE id = $1 FOR UPDATE", [job.id]);
    step(1);
    await new Promise((r) => setTimeout(r, 100));
    await holder.query("COMMIT");
    await expect.poll(() => steps.length, { timeout: 5_000 }).toBe(1);
    expect(await row(db.pool, job.id)).toMatchObject({ progress: { step: 1 } });
    // Held for good: the handler goes on after a few tries, the value dropped.
    await holder.query("BEGIN");
    await holder.query("SELECT 1 FROM picket.jobs WHERE id = $1 FOR UPDATE", [job.id]);
    step(2);
    await expect.poll(() => steps.length, { timeout: 5_000 }).toBe(2);
    expect(steps[1]).toBeLessThan(2_000);
    await holder.query("COMMIT");
    await expect.poll(() => outcomes.find((o) => o.id === job.id), { timeout: 5_000 }).toMatchObject({ outcome: "completed" });
    expect(await row(db.pool, job.id)).toMatchObject({ status: "completed", progress: { step: 1 } });
  });

  it("records progress on the row while the job runs", async () => {
    let release: () => void = () => undefined;
    const task = defineTask({
      name: "progressing",
      handler: async (_p, { reportProgress }) => {
        await reportProgress({ pct: 40 });
        await new Promise<void>((resolve) => (release = resolve));
      },
    });
    const job = await enqueueJob(db.pool, { type: "progressing" });
    const { outcomes } = await startWorker({ connectionString: db.url, tasks: [task] });
    await expect.poll(async () => (await row(db.pool, job.id)).progress, { timeout: 5_000 }).toEqual({ pct: 40 });
    release();
    await expect.poll(() => outcomes.length, { timeout: 5_000 }).toBe(1);
  });
});
