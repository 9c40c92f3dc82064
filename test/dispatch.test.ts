import { describe, expect, it } from "vitest";
import { enqueueJob, enqueueJobs } from "../src/db/index.ts";
import { defineTask, PermanentError } from "../src/runtime/task.ts";
import { useTestDatabase } from "./support/db.ts";
import { createJobRuntime } from "../src/runtime/job-runtime.ts";
import { observeJob } from "./support/job-run.ts";
import { claimed, row } from "./support/factory.ts";
import { captureLogs, startWorker } from "./support/worker.ts";

const db = useTestDatabase();

describe("dispatch", () => {
  it("starts a job of a second task within one poll interval despite a 1,000-job backlog of the first", async () => {
    const pollIntervalMs = 1_000;
    // The flood keeps every slot busy: each job takes 100 ms and a thousand wait behind it.
    const flood = defineTask({ name: "flood", handler: () => new Promise((r) => setTimeout(r, 100)) });
    const other = defineTask({ name: "other", handler: async () => "ran" });
    await enqueueJobs(db.pool, Array.from({ length: 1000 }, () => ({ type: "flood", priority: 1000 })));
    const { outcomes } = await startWorker({ connectionString: db.url, tasks: [flood, other], concurrency: 4, pollIntervalMs, listen: false });
    // The worker is saturated with the flood; now the other task's job arrives.
    await expect.poll(() => outcomes.length, { timeout: 5_000 }).toBeGreaterThan(20);
    const enqueuedAt = Date.now();
    const job = await enqueueJob(db.pool, { type: "other" });
    await expect.poll(() => outcomes.find((o) => o.id === job.id), { timeout: 5_000, interval: 20 }).toMatchObject({ outcome: "completed" });
    const { rows } = await db.pool.query("SELECT locked_at FROM picket.jobs WHERE id = $1", [job.id]);
    // One poll interval, plus room for a loaded machine to run the claim itself.
    expect(rows[0].locked_at.getTime() - enqueuedAt).toBeLessThanOrEqual(pollIntervalMs + 500);
  });

  it("runs no more than a task's concurrency and the worker's limit at once", async () => {
    let now = 0;
    let peak = 0;
    const limited = defineTask({
      name: "limited",
      concurrency: 2,
      handler: async () => {
        peak = Math.max(peak, ++now);
        await new Promise((r) => setTimeout(r, 50));
        now--;
      },
    });
    await enqueueJobs(db.pool, Array.from({ length: 12 }, () => ({ type: "limited" })));
    const { outcomes } = await startWorker({ connectionString: db.url, tasks: [limited], concurrency: 8 });
    await expect.poll(() => outcomes.length, { timeout: 10_000 }).toBe(12);
    expect(peak).toBe(2);
  });

  it("picks up a new job at once through NOTIFY, without waiting for the poll interval", async () => {
    const task = defineTask({ name: "notified", handler: async () => "ok" });
    const { outcomes, logs } = await startWorker({ connectionString: db.url, tasks: [task], pollIntervalMs: 60_000 });
    await expect.poll(() => logs.some((l) => l.msg === "listening for new jobs"), { timeout: 5_000 }).toBe(true);
    const job = await enqueueJob(db.pool, { type: "notified" });
    await expect.poll(() => outcomes.find((o) => o.id === job.id), { timeout: 3_000 }).toMatchObject({ outcome: "completed" });
  });
});

describe("jobs that can never succeed end dead with a clear error, never retried forever", () => {
  it("a job with no handler in this worker", async () => {
    // A supervisor claims only the types it has handlers for, so this path is reached through the
    // job runtime directly: a claimed job handed over without a task.
    const [job] = await claimed(db.pool, "unknown-task", 1, { spec: { maxAttempts: 5 } });
    const { logger } = captureLogs();
    const runtime = createJobRuntime({ db: db.pool, statements: { schema: "picket" }, logger, logPayloads: false, taskFor: () => undefined, leaseLost: () => undefined, cancelled: () => undefined, stepRecorded: () => undefined, handlerSettled: () => undefined, leaseProvable: () => true, leaseConfirmed: () => undefined });
    const { run, done } = observeJob(runtime, job!, true);
    run.start();
    expect(await done).toMatchObject({ outcome: "dead", error: { kind: "no_handler" } });
    expect(await row(db.pool, job!.id)).toMatchObject({
      status: "dead",
      attempts: 1,
      last_error: 'no_handler: no handler is registered for task "unknown-task" in this worker',
    });
  });

  it("a payload that fails the task's schema", async () => {
    const schema = {
      "~standard": {
        version: 1 as const,
        vendor: "test",
        validate: (value: unknown) =>
          typeof value === "object" && value !== null && typeof (value as { email?: unknown }).email === "string"
            ? { value }
            : { issues: [{ message: "Expected a string", path: ["email"] }] },
      },
    };
    const task = defineTask({ name: "typed", schema, handler: async () => "ran" });
    const job = await enqueueJob(db.pool, { type: "typed", payload: { email: 42 }, maxAttempts: 5 });
    const { outcomes } = await startWorker({ connectionString: db.url, tasks: [task] });
    await expect.poll(() => outcomes.find((o) => o.id === job.id), { timeout: 5_000 }).toMatchObject({ outcome: "dead" });
    expect(await row(db.pool, job.id)).toMatchObject({
      status: "dead",
      attempts: 1,
      last_error: "invalid_payload: payload does not match the task's schema: Expected a string at email",
    });
  });

  it("a handler that throws a PermanentError", async () => {
    const task = defineTask({
      name: "poison",
      handler: async () => {
        throw new PermanentError("customer 7 does not exist");
      },
    });
    const job = await enqueueJob(db.pool, { type: "poison", maxAttempts: 5 });
    const { outcomes } = await startWorker({ connectionString: db.url, tasks: [task] });
    await expect.poll(() => outcomes.find((o) => o.id === job.id), { timeout: 5_000 }).toMatchObject({ outcome: "dead" });
    expect(await row(db.pool, job.id)).toMatchObject({ status: "dead", attempts: 1, last_error: "permanent: customer 7 does not exist" });
  });

  it("a handler whose Effect fails with a permanent error, or retries while attempts remain", async () => {
    const { Effect } = await import("effect");
    let calls = 0;
    const task = defineTask({
      name: "effectful",
      backoff: { baseMs: 0, maxMs: 0 },
      handler: () => (++calls < 3 ? Effect.fail(new Error(`try ${calls}`)) : Effect.fail(new PermanentError("give up"))),
    });
    const job = await enqueueJob(db.pool, { type: "effectful", maxAttempts: 10 });
    const { outcomes } = await startWorker({ connectionString: db.url, tasks: [task] });
    await expect.poll(() => outcomes.filter((o) => o.id === job.id).map((o) => o.outcome), { timeout: 5_000 }).toEqual(["retried", "retried", "dead"]);
    const after = await row(db.pool, job.id);
    expect(after).toMatchObject({ status: "dead", attempts: 3, last_error: "permanent: give up" });
    expect(after.errors.map((e: { message: string }) => e.message)).toEqual(["error: try 1", "error: try 2", "permanent: give up"]);
  });
});
